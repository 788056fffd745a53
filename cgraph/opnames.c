/* opnames.c: the names older strix versions gave ops that have since been renamed, so that saved
 * graphs that name them still load. One row per renamed op: {old name, op}. Append only. */
#include "cgraph_impl.h"

#include <string.h>

static const struct {
    const char *old;
    sx_cg_op op;
} aliases[] = {
    /* older files' _bwd names, now _backward as in the tensor kernels' names */
    {"conv2d_bwd_input", SX_OP_CONV2D_BACKWARD_INPUT},
    {"conv2d_bwd_kernel", SX_OP_CONV2D_BACKWARD_KERNEL},
    {"maxpool2d_bwd", SX_OP_MAXPOOL2D_BACKWARD},
    {"avgpool2d_bwd", SX_OP_AVGPOOL2D_BACKWARD},
    {"softmax_bwd", SX_OP_SOFTMAX_BACKWARD},
    {"log_softmax_bwd", SX_OP_LOG_SOFTMAX_BACKWARD},
    {"softmax_xent_bwd", SX_OP_SOFTMAX_XENT_BACKWARD},
    {"maxpool2d_relu_bwd", SX_OP_MAXPOOL2D_RELU_BACKWARD},
};

int cg_op_alias(const unsigned char *b, size_t len)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strlen(aliases[i].old) == len && memcmp(aliases[i].old, b, len) == 0)
            return (int)aliases[i].op;
    return -1;
}
