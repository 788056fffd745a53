/* opt_impl.h: what the optimiser's files share (never installed): the rewrite primitives of
 * opt_rewrite.c and the fusion passes of opt_fuse.c (opt.c -> opt_fuse.c -> opt_rewrite.c). */
#ifndef SX_OPT_IMPL_H
#define SX_OPT_IMPL_H

#include "cgraph_impl.h"

/* Replace n's inputs (users lists follow). */
sx_status opt_set_inputs(sx_cg_node *n, int k, sx_cg_node *const *ins);
/* Make every reader of old read `to` instead; old is removed, or becomes a view of `to` when it
 * is a requested output. */
sx_status opt_replace(sx_cg_node *old, sx_cg_node *to);
/* Remove n (it must have no users left). */
void opt_kill(sx_cg_node *n);

bool opt_is_const(const sx_cg_node *n);
bool opt_const_all(const sx_cg_node *n, double v);
bool opt_same_shape(const sx_cg_node *a, const sx_cg_node *b);

sx_status opt_pass_elemwise_fusion(sx_cg_graph *g, int64_t *changed);
sx_status opt_pass_gemm_update(sx_cg_graph *g, int64_t *changed);
sx_status opt_pass_bn_fold(sx_cg_graph *g, int64_t *changed);
sx_status opt_pass_bn_recompute(sx_cg_graph *g, int64_t *changed);
sx_status opt_pass_bn_relu(sx_cg_graph *g, int64_t *changed);
sx_status opt_pass_bn_add(sx_cg_graph *g, int64_t *changed);
sx_status opt_pass_conv_epilogue(sx_cg_graph *g, int64_t *changed);

#endif
