/* bench_idx: time loading MNIST's 60000 training images from the .gz file into an f32 tensor
 * (60000, 28, 28) scaled by 1/255 with sx_ds_idx_read, and the byte loader plus conversion
 * (sx_ds_mnist_load + sx_ds_images_tensor); the peer is bench_idx.py (Python gzip + NumPy).
 *     bench_idx [DIR] [REPEATS]      (DIR defaults to data/mnist; REPEATS to 7)
 * Prints the best and median wall time of each, and the best CPU time (less sensitive to other
 * processes on a busy machine). */
#include <sx_datasets.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *t, double *c, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp);
    qsort(c, (size_t)n, sizeof *c, cmp);
    printf("%-44s wall best %7.1f ms, median %7.1f ms; cpu best %7.1f ms (%d runs)\n", what,
           t[0] * 1e3, t[n / 2] * 1e3, c[0] * 1e3, n);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "data/mnist";
    int repeats = argc > 2 ? atoi(argv[2]) : 7;
    if (repeats < 1 || repeats > 1000)
        repeats = 7;
    char path[4200];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    double *t = malloc((size_t)repeats * sizeof *t), *c = malloc((size_t)repeats * sizeof *c);

    for (int i = 0; i < repeats; i++) {
        sx_tensor *x = NULL;
        double t0 = now(), c0 = cpu();
        if (sx_ds_idx_read(path, SX_F32, SX_DS_PIXEL_SCALE, 0, &x) != SX_OK) {
            fprintf(stderr, "bench_idx: %s\n", sx_last_error());
            return 1;
        }
        t[i] = now() - t0;
        c[i] = cpu() - c0;
        if (x->size != 60000 * 784) {
            fprintf(stderr, "bench_idx: %s holds %lld values\n", path, (long long)x->size);
            return 1;
        }
        sx_tensor_free(x);
    }
    report("sx_ds_idx_read -> f32 (60000,28,28)", t, c, repeats);

    for (int i = 0; i < repeats; i++) {
        sx_ds_images *d = NULL;
        sx_tensor *x = NULL;
        double t0 = now(), c0 = cpu();
        if (sx_ds_mnist_load(dir, SX_DS_TRAIN, 0, &d) != SX_OK ||
            sx_ds_images_tensor(d, SX_F32, SX_DS_PIXEL_SCALE, &x) != SX_OK) {
            fprintf(stderr, "bench_idx: %s\n", sx_last_error());
            return 1;
        }
        t[i] = now() - t0;
        c[i] = cpu() - c0;
        sx_tensor_free(x);
        sx_ds_images_free(d);
    }
    report("sx_ds_mnist_load + images_tensor (+labels)", t, c, repeats);
    free(t);
    free(c);
    return 0;
}
