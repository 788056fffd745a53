/* bench_conv.c: a focused benchmark of the three conv2d kernels on one shape (default: the
 * tensor benchmark's [100,14,14,32] * [5,5,32,64], SAME, stride 1, f32), for tuning
 * tensor/conv/conv.c. Each kernel is timed alone, reps times after a warm-up; it prints the median
 * and the minimum of the calling thread's CPU time (one thread: immune to other processes' load)
 * and of the wall time, the median of the process's CPU time over all threads ("proc med": with
 * --threads 2, what exceeds the one-thread CPU time is waste - spinning, imbalance, duplicated
 * work), and the RMS relative difference from the same kernel run with the minimum workspace (which
 * runs the direct kernels where the full one runs Winograd, unless it holds Winograd too: then 0):
 * sqrt(sum (a - b)^2 / sum b^2). The 3x3 shapes of F(4x4, 3x3)'s tuning:
 * --x 32,32,32,64 --k 3,3,64,64 and --x 100,14,14,32 --k 3,3,32,64.
 * Depthwise (tensor/conv/conv_dw.c), mobilenet's: --x 128,28,28,64 --k 3,3,1,64 --groups 64 --pads
 * 1,1,1,1 --stride 2, and --x 128,14,14,128 --k 3,3,1,128 --groups 128 --pads 1,1,1,1.
 * The general parameters (tensor/conv/conv_general.c): --dilation D, --groups G (k's axis 2 is
 * then c/G; depthwise: --groups c --k kh,kw,1,c), --same-lower, --pads t,b,l,r (EXPLICIT), and
 * --transposed (x is the transposed convolution's input, k (kh,kw,c_out/G,c_in)) with
 * --output-padding h,w. Without them the original kernels of tensor/conv/conv.c run, as before.
 *
 *     bench_conv [--threads N] [--reps N] [--f64] [--stride S] [--valid] [--same-lower]
 *                [--pads t,b,l,r] [--dilation D] [--groups G] [--transposed]
 *                [--output-padding h,w] [--min-ws] [--x n,h,w,c] [--k kh,kw,c,f] [fwd] [bwdi]
 *                [bwdk]
 *
 * --min-ws times the kernels with the minimum workspace (banded units; the direct kernels where
 * the full one runs Winograd, unless the minimum holds Winograd too).
 *
 */
#include "sx_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

enum { MAX_REPS = 1001 };

static double clock_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static bool parse4(const char *s, int64_t v[4])
{
    long long a[4];
    if (sscanf(s, "%lld,%lld,%lld,%lld", &a[0], &a[1], &a[2], &a[3]) != 4)
        return false;
    for (int i = 0; i < 4; i++)
        v[i] = a[i];
    return true;
}

/* Kernel kd (0 forward, 1 backward-input, 2 backward-kernel) of conv2d or the transposed
 * convolution, into y, dx or dk. */
static sx_status run_kernel(int kd, bool transposed, const sx_tensor *x, const sx_tensor *k,
                            const sx_tensor *dy, const sx_conv2d_params *p, void *ws, size_t wsb,
                            sx_tensor *y, sx_tensor *dx, sx_tensor *dk)
{
    if (transposed)
        return kd == 0   ? sx_tensor_conv_transpose2d_out(x, k, p, ws, wsb, y)
               : kd == 1 ? sx_tensor_conv_transpose2d_backward_input_out(k, dy, p, ws, wsb, dx)
                         : sx_tensor_conv_transpose2d_backward_kernel_out(x, dy, p, ws, wsb, dk);
    return kd == 0   ? sx_tensor_conv2d_out(x, k, p, ws, wsb, y)
           : kd == 1 ? sx_tensor_conv2d_backward_input_out(k, dy, p, ws, wsb, dx)
                     : sx_tensor_conv2d_backward_kernel_out(x, dy, p, ws, wsb, dk);
}

int main(int argc, char **argv)
{
    int nthreads = 1, reps = 21, stride = 1, dilation = 1, groups = 1, pads[4] = {0}, op[2] = {0};
    bool transposed = false;
    sx_dtype dt = SX_F32;
    sx_padding pad = SX_PAD_SAME;
    int64_t xs[4] = {100, 14, 14, 32}, ks[4] = {5, 5, 32, 64};
    bool run[3] = {false, false, false}, any = false, min_ws = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--threads") && i + 1 < argc)
            nthreads = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--stride") && i + 1 < argc)
            stride = atoi(argv[++i]);
        else if (!strcmp(a, "--f64"))
            dt = SX_F64;
        else if (!strcmp(a, "--valid"))
            pad = SX_PAD_VALID;
        else if (!strcmp(a, "--same-lower"))
            pad = SX_PAD_SAME_LOWER;
        else if (!strcmp(a, "--pads") && i + 1 < argc &&
                 sscanf(argv[i + 1], "%d,%d,%d,%d", &pads[0], &pads[1], &pads[2], &pads[3]) == 4)
            pad = SX_PAD_EXPLICIT, i++;
        else if (!strcmp(a, "--dilation") && i + 1 < argc)
            dilation = atoi(argv[++i]);
        else if (!strcmp(a, "--groups") && i + 1 < argc)
            groups = atoi(argv[++i]);
        else if (!strcmp(a, "--transposed"))
            transposed = true;
        else if (!strcmp(a, "--min-ws"))
            min_ws = true;
        else if (!strcmp(a, "--output-padding") && i + 1 < argc &&
                 sscanf(argv[i + 1], "%d,%d", &op[0], &op[1]) == 2)
            i++;
        else if (!strcmp(a, "--x") && i + 1 < argc && parse4(argv[i + 1], xs))
            i++;
        else if (!strcmp(a, "--k") && i + 1 < argc && parse4(argv[i + 1], ks))
            i++;
        else if (!strcmp(a, "fwd"))
            run[0] = any = true;
        else if (!strcmp(a, "bwdi"))
            run[1] = any = true;
        else if (!strcmp(a, "bwdk"))
            run[2] = any = true;
        else {
            fprintf(stderr,
                    "usage: bench_conv [--threads N] [--reps N] [--f64] [--stride S] [--valid] "
                    "[--same-lower] [--pads t,b,l,r] [--dilation D] [--groups G] [--transposed] "
                    "[--output-padding h,w] [--min-ws] [--x n,h,w,c] [--k kh,kw,c,f] [fwd] [bwdi] "
                    "[bwdk]\n");
            return 2;
        }
    }
    if (!any)
        run[0] = run[1] = run[2] = true;
    if (reps < 1)
        reps = 1;
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    CHECK(sx_threads_set(nthreads));

    sx_conv2d_params p = sx_conv2d_params_default();
    p.stride_h = p.stride_w = stride;
    p.padding = pad;
    p.pad_top = pads[0], p.pad_bottom = pads[1], p.pad_left = pads[2], p.pad_right = pads[3];
    p.dilation_h = p.dilation_w = dilation;
    p.groups = groups;
    p.output_padding_h = op[0], p.output_padding_w = op[1];
    sx_tensor *x = NULL, *k = NULL, *y = NULL, *dy = NULL, *dx = NULL, *dk = NULL;
    sx_tensor *y2 = NULL, *dx2 = NULL, *dk2 = NULL;
    int64_t ys[4];
    CHECK(sx_tensor_new(dt, 4, xs, &x));
    CHECK(sx_tensor_new(dt, 4, ks, &k));
    if (transposed)
        CHECK(sx_conv_transpose2d_shape("bench_conv", x, k, &p, ys));
    else
        CHECK(sx_conv2d_shape("bench_conv", x, k, &p, ys));
    CHECK(sx_tensor_new(dt, 4, ys, &y));
    CHECK(sx_tensor_new(dt, 4, ys, &dy));
    CHECK(sx_tensor_new(dt, 4, xs, &dx));
    CHECK(sx_tensor_new(dt, 4, ks, &dk));
    CHECK(sx_tensor_new(dt, 4, ys, &y2));
    CHECK(sx_tensor_new(dt, 4, xs, &dx2));
    CHECK(sx_tensor_new(dt, 4, ks, &dk2));
    sx_rng rng;
    sx_rng_seed(&rng, 3);
    CHECK(sx_tensor_rand_normal(x, &rng, 0, 1));
    CHECK(sx_tensor_rand_normal(k, &rng, 0, 0.1));
    CHECK(sx_tensor_rand_normal(dy, &rng, 0, 1));
    size_t ws_bytes =
        transposed ? sx_conv_transpose2d_workspace(xs, ks, &p) : sx_conv2d_workspace(xs, ks, &p);
    size_t ws_min = transposed ? sx_conv_transpose2d_workspace_min(xs, ks, &p)
                               : sx_conv2d_workspace_min(xs, ks, &p);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    if (ws == NULL)
        return 1;
    /* multiply-adds: per conv2d output element (transposed: per input element) kh * kw * k's
     * axis 2 */
    const int64_t *big = transposed ? xs : ys;
    const double gflop =
        2e-9 * (double)(big[0] * big[1] * big[2] * big[3]) * (double)(ks[0] * ks[1] * ks[2]);
    printf("x (%lld,%lld,%lld,%lld) k (%lld,%lld,%lld,%lld) stride %d %s %s, %d thread(s), "
           "workspace %.2f MB, %.3f GFLOP per kernel, %d reps\n",
           (long long)xs[0], (long long)xs[1], (long long)xs[2], (long long)xs[3], (long long)ks[0],
           (long long)ks[1], (long long)ks[2], (long long)ks[3], stride,
           pad == SX_PAD_SAME         ? "SAME"
           : pad == SX_PAD_VALID      ? "VALID"
           : pad == SX_PAD_SAME_LOWER ? "SAME_LOWER"
                                      : "EXPLICIT",
           sx_dtype_name(dt), nthreads, (double)ws_bytes / 1048576.0, gflop, reps);
    if (dilation != 1 || groups != 1 || transposed)
        printf("dilation %d, groups %d%s\n", dilation, groups, transposed ? ", transposed" : "");
    printf("%-6s %10s %10s %10s %10s %10s %10s %10s\n", "kernel", "cpu med", "cpu min", "wall med",
           "wall min", "GFLOP/s", "rms err", "proc med");
    static const char *const names[3] = {"fwd", "bwdi", "bwdk"};
    static double cpu[MAX_REPS], wall[MAX_REPS], proc[MAX_REPS];
    for (int kd = 0; kd < 3; kd++) {
        if (!run[kd])
            continue;
        for (int r = -2; r < reps; r++) {
            double c0 = clock_of(CLOCK_THREAD_CPUTIME_ID), w0 = clock_of(CLOCK_MONOTONIC);
            double p0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
            CHECK(run_kernel(kd, transposed, x, k, dy, &p, ws, min_ws ? ws_min : ws_bytes, y, dx,
                             dk));
            double c1 = clock_of(CLOCK_THREAD_CPUTIME_ID), w1 = clock_of(CLOCK_MONOTONIC);
            double p1 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
            if (r >= 0) {
                proc[r] = (p1 - p0) * 1e3;
                cpu[r] = (c1 - c0) * 1e3;
                wall[r] = (w1 - w0) * 1e3;
            }
        }
        sx_tensor *a = kd == 0 ? y : kd == 1 ? dx : dk, *b = kd == 0 ? y2 : kd == 1 ? dx2 : dk2;
        CHECK(run_kernel(kd, transposed, x, k, dy, &p, ws, ws_min, y2, dx2, dk2));
        double num = 0, den = 0;
        for (int64_t i = 0; i < a->size; i++) {
            double u = sx_tensor_get(a, i), v = sx_tensor_get(b, i);
            num += (u - v) * (u - v);
            den += v * v;
        }
        qsort(cpu, (size_t)reps, sizeof cpu[0], cmp_double);
        qsort(wall, (size_t)reps, sizeof wall[0], cmp_double);
        qsort(proc, (size_t)reps, sizeof proc[0], cmp_double);
        const double best = nthreads == 1 ? cpu[0] : wall[0];
        printf("%-6s %10.3f %10.3f %10.3f %10.3f %10.1f %10.2e %10.3f\n", names[kd], cpu[reps / 2],
               cpu[0], wall[reps / 2], wall[0], gflop / best * 1e3,
               den > 0 ? sqrt(num / den) : sqrt(num), proc[reps / 2]);
    }
    sx_tensor *all[] = {x, k, y, dy, dx, dk, y2, dx2, dk2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sx_tensor_free(all[i]);
    free(ws);
    return 0;
}
