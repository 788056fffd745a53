/* A frozen graph evaluates what the request needs and nothing more (sx_cg_eval: "the requested
 * nodes and whatever invalid nodes they need"), planned or not: the data-parallel step
 * asks for the gradients, sums them over the ranks in place, then asks for the updates. */
#include "testutil.h"

#include <sx_cgraph.h>

/* p = 1 (param); a = 2 p (output), u = assign(p, a + 1) (output): asking for a alone must leave
 * p at 1; asking then for u reads the a computed before (modified in place: 10) and gives 11. */
static void check_request(bool plan)
{
    sx_cg_graph *g = NULL;
    cr_assert_eq(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g), SX_OK);
    sx_tensor *one = NULL;
    cr_assert_eq(sx_tensor_full(SX_F64, 0, NULL, 1.0, &one), SX_OK);
    sx_cg_node *p = sx_cg_param(g, "p", one);
    sx_cg_node *a = sx_cg_mul_scalar(g, p, 2.0);
    sx_cg_node *u = sx_cg_assign(g, p, sx_cg_add_scalar(g, a, 1.0));
    cr_assert(p && a && u, "%s", sx_last_error());
    sx_cg_node *outs[2] = {a, u};
    sx_cg_freeze_params fp = sx_cg_freeze_params_default();
    fp.plan_memory = plan;
    cr_assert_eq(sx_cg_freeze_ex(g, 2, outs, &fp, NULL), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_cg_eval(g, 1, &a), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_get(sx_cg_value(a), 0), 2.0);
    cr_assert_eq(sx_tensor_get(sx_cg_value(p), 0), 1.0, "the assign ran without being asked for");
    ((double *)sx_cg_value(a)->data)[0] = 10.0; /* a kept output, changed in place (a sum) */
    cr_assert_eq(sx_cg_eval(g, 2, outs), SX_OK, "%s", sx_last_error());
    cr_assert_eq(sx_tensor_get(sx_cg_value(p), 0), 11.0, "the assign did not read the kept a");
    sx_tensor_free(one);
    sx_cg_graph_free(g);
}

Test(cgraph_frozen_request, bug_planned_eval_ran_every_invalid_node)
{
    check_request(true);
}

Test(cgraph_frozen_request, bug_unplanned_eval_ran_every_invalid_node)
{
    check_request(false);
}
