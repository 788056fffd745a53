/* linalg_rules.c: gradient rules of the LAPACKE ops (standard matrix-calculus results).
 * In progress: the autodiff issue's engineer completes and tests these. */
#include "autodiff_impl.h"

#define LINALG_TODO(name)                                                                          \
    sx_status grad_##name(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,         \
                          sx_cg_node **gin)                                                        \
    {                                                                                              \
        (void)g, (void)y, (void)gy, (void)need, (void)gin;                                         \
        return sx_error(SX_E_UNSUPPORTED, "sx_ad_grad: no rule for " #name " yet");                \
    }
LINALG_TODO(inv)
LINALG_TODO(solve)
LINALG_TODO(det)
LINALG_TODO(logdet)
LINALG_TODO(cholesky)
LINALG_TODO(qr_q)
LINALG_TODO(qr_r)
LINALG_TODO(svd_s)
LINALG_TODO(eigh_w)
LINALG_TODO(eigh_v)
