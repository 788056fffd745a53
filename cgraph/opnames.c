/* opnames.c: the names older strix versions gave ops that have since been renamed or merged into
 * another op, so that saved graphs that name them still load. One row per old name: {old name,
 * op, fix-up of the stored attributes (NULL: the same attributes)}. Append only. */
#include "cgraph_impl.h"

#include <string.h>

/* The batch_norm ops (stats, normalise, backward sums, one-pass dx) are the norm ops with the
 * per-channel axes: lead 0, tail 1, groups c, c the last axis of the node's stored shape (x's
 * shape, or (2,c)). They stored eps in alpha, the recompute copy's mark in ints[0] and the relu
 * flag in ints[1]. */
static void batch_norm_attr(int rank, const int64_t *shape, sx_cg_attr *a)
{
    int64_t copy = a->ints[0], relu = a->ints[1];
    double eps = a->alpha;
    for (int i = 0; i < SX_MAX_RANK; i++)
        a->ints[i] = 0;
    a->norm.eps = eps;
    a->norm.lead = 0;
    a->norm.tail = 1;
    a->norm.groups = rank > 0 ? shape[rank - 1] : 1;
    a->norm.copy = copy;
    a->norm.relu = relu;
}

static const struct {
    const char *old;
    sx_cg_op op;
    void (*fix)(int rank, const int64_t *shape, sx_cg_attr *a);
} aliases[] = {
    /* older files' _bwd names, now _backward as in the tensor kernels' names */
    {"conv2d_bwd_input", SX_OP_CONV2D_BACKWARD_INPUT, NULL},
    {"conv2d_bwd_kernel", SX_OP_CONV2D_BACKWARD_KERNEL, NULL},
    {"maxpool2d_bwd", SX_OP_MAXPOOL2D_BACKWARD, NULL},
    {"avgpool2d_bwd", SX_OP_AVGPOOL2D_BACKWARD, NULL},
    {"softmax_bwd", SX_OP_SOFTMAX_BACKWARD, NULL},
    {"log_softmax_bwd", SX_OP_LOG_SOFTMAX_BACKWARD, NULL},
    {"softmax_xent_bwd", SX_OP_SOFTMAX_XENT_BACKWARD, NULL},
    {"maxpool2d_relu_bwd", SX_OP_MAXPOOL2D_RELU_BACKWARD, NULL},
    /* batch norm, merged into the norm family */
    {"batch_norm_stats", SX_OP_NORM_STATS, batch_norm_attr},
    {"batch_norm", SX_OP_NORM, batch_norm_attr},
    {"batch_norm_sums", SX_OP_NORM_SUMS, batch_norm_attr},
    {"batch_norm_dx", SX_OP_NORM_DX, batch_norm_attr},
};

static int find(const unsigned char *b, size_t len)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strlen(aliases[i].old) == len && memcmp(aliases[i].old, b, len) == 0)
            return (int)i;
    return -1;
}

int cg_op_alias(const unsigned char *b, size_t len)
{
    int i = find(b, len);
    return i >= 0 ? (int)aliases[i].op : -1;
}

void cg_op_alias_attr(const unsigned char *b, size_t len, int rank, const int64_t *shape,
                      sx_cg_attr *a)
{
    int i = find(b, len);
    if (i >= 0 && aliases[i].fix != NULL)
        aliases[i].fix(rank, shape, a);
}
