/* strix against PyTorch: Conv2d / MaxPool2d / AvgPool2d outputs and the gradients of
 * sum(y * dy) with respect to the input (and the kernel), for stride 2 pad 1, groups, depthwise
 * with a multiplier, dilation, asymmetric pads, SAME_LOWER, ceil_mode and count_include_pad.
 * The reference values are tests/data/torch_conv_pool.txt, made by torch_conv_pool.py beside it
 * (its head says how to regenerate and the file format). Each case runs as a lazy graph
 * (conv2d / pooling node, then sx_ad_vjp with dy as the seed) in f64 (agreement within 1e-10
 * relative to the largest reference value of the tensor) and f32 (1e-5). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sx_autodiff.h>

#define MAX_T 6 /* x, k, y, dy, dx, dk */

typedef struct ref_tensor {
    char name[8];
    int rank;
    int64_t shape[4];
    int64_t size;
    double *v;
} ref_tensor;

typedef struct ref_case {
    char name[64], kind[16];
    int prm[13]; /* the params line */
    int n_t;
    ref_tensor t[MAX_T];
} ref_case;

static const ref_tensor *tensor_of(const ref_case *c, const char *name)
{
    for (int i = 0; i < c->n_t; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    cr_assert_fail("case %s has no tensor %s", c->name, name);
    return NULL;
}

static void case_free(ref_case *c)
{
    for (int i = 0; i < c->n_t; i++)
        free(c->t[i].v);
    c->n_t = 0;
}

/* Read the next case; false at the end of the file. */
static bool case_read(FILE *f, ref_case *c)
{
    char word[64];
    memset(c, 0, sizeof *c);
    while (fscanf(f, "%63s", word) == 1) {
        if (word[0] == '#') { /* a comment line */
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n')
                ;
            continue;
        }
        cr_assert_str_eq(word, "case", "malformed reference file at \"%s\"", word);
        cr_assert_eq(fscanf(f, "%63s %15s params", c->name, c->kind), 2);
        for (int i = 0; i < 13; i++)
            cr_assert_eq(fscanf(f, "%d", &c->prm[i]), 1, "%s: params", c->name);
        int n_t = strcmp(c->kind, "conv") == 0 ? 6 : 4;
        for (int i = 0; i < n_t; i++) {
            ref_tensor *t = &c->t[i];
            cr_assert_eq(fscanf(f, " tensor %7s %d", t->name, &t->rank), 2, "%s", c->name);
            cr_assert(t->rank == 4, "%s: rank %d", c->name, t->rank);
            t->size = 1;
            for (int d = 0; d < t->rank; d++) {
                long long v;
                cr_assert_eq(fscanf(f, "%lld", &v), 1);
                t->shape[d] = v;
                t->size *= v;
            }
            t->v = malloc((size_t)t->size * sizeof *t->v);
            cr_assert_not_null(t->v);
            for (int64_t j = 0; j < t->size; j++)
                cr_assert_eq(fscanf(f, "%lf", &t->v[j]), 1, "%s: %s[%lld]", c->name, t->name,
                             (long long)j);
            c->n_t++;
        }
        return true;
    }
    return false;
}

static sx_cg_node *leaf(sx_cg_graph *g, sx_dtype dt, const ref_tensor *t, bool param)
{
    sx_tensor *v = NULL;
    cr_assert_eq(sx_tensor_from_doubles(dt, t->rank, t->shape, t->v, t->size, &v), SX_OK, "%s",
                 sx_last_error());
    sx_cg_node *n;
    if (param) {
        n = sx_cg_param(g, t->name, v);
    } else {
        n = sx_cg_input(g, t->name, dt, t->rank, t->shape);
        cr_assert_not_null(n, "%s", sx_last_error());
        cr_assert_eq(sx_cg_input_set(g, n, v, SX_CG_COPY), SX_OK, "%s", sx_last_error());
    }
    sx_tensor_free(v);
    cr_assert_not_null(n, "%s", sx_last_error());
    return n;
}

static void expect(const char *what, const ref_case *c, sx_cg_node *n, const ref_tensor *want,
                   double tol)
{
    const sx_tensor *got = sx_cg_value(n);
    cr_assert_not_null(got, "%s %s: %s", c->name, what, sx_last_error());
    cr_assert(sx_shape_equal(got->rank, got->shape, want->rank, want->shape), "%s %s: shape",
              c->name, what);
    double scale = 0;
    for (int64_t i = 0; i < want->size; i++)
        scale = fmax(scale, fabs(want->v[i]));
    for (int64_t i = 0; i < want->size; i++) {
        double g = sx_tensor_get(got, i);
        cr_assert(fabs(g - want->v[i]) <= tol * (1 + scale), "%s %s (%s) [%lld]: %.17g, want %.17g",
                  c->name, what, sx_dtype_name(got->dtype), (long long)i, g, want->v[i]);
    }
}

/* The case's op with `padding` (SX_PAD_EXPLICIT with the file's pads, or another mode that
 * gives the same pads). */
static void run_case(const ref_case *c, sx_dtype dt, sx_padding padding, double tol)
{
    const int *q = c->prm;
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, dt, &g), SX_OK);
    bool conv = strcmp(c->kind, "conv") == 0;
    sx_cg_node *x = leaf(g, dt, tensor_of(c, "x"), true), *k = NULL, *y;
    sx_cg_node *dy = leaf(g, dt, tensor_of(c, "dy"), false);
    if (conv) {
        k = leaf(g, dt, tensor_of(c, "k"), true);
        sx_conv2d_params p = {.stride_h = q[0],
                              .stride_w = q[1],
                              .padding = padding,
                              .dilation_h = q[6],
                              .dilation_w = q[7],
                              .groups = q[8]};
        if (padding == SX_PAD_EXPLICIT)
            p.pad_top = q[2], p.pad_bottom = q[3], p.pad_left = q[4], p.pad_right = q[5];
        y = sx_cg_conv2d(g, x, k, &p);
    } else {
        sx_pool2d_params p = {.kernel_h = q[9],
                              .kernel_w = q[10],
                              .stride_h = q[0],
                              .stride_w = q[1],
                              .padding = padding,
                              .pad_top = q[2],
                              .pad_bottom = q[3],
                              .pad_left = q[4],
                              .pad_right = q[5],
                              .dilation_h = q[6],
                              .dilation_w = q[7],
                              .ceil_mode = q[11],
                              .count_include_pad = q[12]};
        y = strcmp(c->kind, "maxpool") == 0 ? sx_cg_maxpool2d(g, x, &p) : sx_cg_avgpool2d(g, x, &p);
    }
    cr_assert_not_null(y, "%s: %s", c->name, sx_last_error());
    sx_cg_node *wrt[2] = {x, k}, *grads[2] = {NULL, NULL};
    cr_assert_eq(sx_ad_vjp(g, y, dy, conv ? 2 : 1, wrt, grads), SX_OK, "%s: %s", c->name,
                 sx_last_error());
    sx_cg_node *outs[3] = {y, grads[0], grads[1]};
    cr_assert_eq(sx_cg_eval(g, conv ? 3 : 2, outs), SX_OK, "%s: %s", c->name, sx_last_error());
    expect("y", c, y, tensor_of(c, "y"), tol);
    expect("dx", c, grads[0], tensor_of(c, "dx"), tol);
    if (conv)
        expect("dk", c, grads[1], tensor_of(c, "dk"), tol);
    sx_cg_graph_free(g);
}

Test(autodiff_torch, conv_and_pool_match_pytorch)
{
    char path[512];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    cr_assert_not_null(slash, "__FILE__ is %s", file);
    snprintf(path, sizeof path, "%.*s/../data/torch_conv_pool.txt", (int)(slash - file), file);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    ref_case c;
    int cases = 0, same_lower = 0;
    while (case_read(f, &c)) {
        for (int d = 0; d < 2; d++)
            run_case(&c, d ? SX_F64 : SX_F32, SX_PAD_EXPLICIT, d ? 1e-10 : 1e-5);
        if (strstr(c.name, "same_lower") != NULL) { /* the same pads from the mode */
            run_case(&c, SX_F64, SX_PAD_SAME_LOWER, 1e-10);
            same_lower++;
        }
        case_free(&c);
        cases++;
    }
    fclose(f);
    cr_assert_geq(cases, 14, "%d cases read", cases);
    cr_assert_eq(same_lower, 1);
}
