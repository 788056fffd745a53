/* autodiff_basics: Owl's example 02 in strix. With x = ones [2,2] and y = 2,
 *   f(x, y) = sum((x * sin(x + x) + (1 * sqrt x) / 7) * relu y)
 * Reverse mode adds the gradient nodes to the same graph; evaluating them gives df/dx and
 * df/dy = 4 (sin 2 + 1/7) = 4.20861827873129801. */
#include <sx_autodiff.h>

#include <stdio.h>
#include <stdlib.h>

static void check(sx_status s)
{
    if (s != SX_OK) {
        fprintf(stderr, "autodiff_basics: %s\n", sx_last_error());
        exit(1);
    }
}

int main(void)
{
    sx_cg_graph *g = NULL;
    check(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g));
    int64_t s22[2] = {2, 2};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, s22);
    sx_cg_node *y = sx_cg_input(g, "y", SX_F64, 0, NULL);

    sx_cg_node *left = sx_cg_mul(g, x, sx_cg_sin(g, sx_cg_add(g, x, x)));
    sx_cg_node *right =
        sx_cg_div(g, sx_cg_mul(g, sx_cg_scalar(g, 1), sx_cg_sqrt(g, x)), sx_cg_scalar(g, 7));
    sx_cg_node *f =
        sx_cg_sum(g, sx_cg_mul(g, sx_cg_add(g, left, right), sx_cg_relu(g, y)), SX_AXES_ALL, false);
    check(sx_cg_graph_status(g));

    sx_cg_node *wrt[2] = {x, y}, *grads[2];
    check(sx_ad_grad(g, f, 2, wrt, grads));

    sx_tensor *xv = NULL, *yv = NULL;
    check(sx_tensor_ones(SX_F64, 2, s22, &xv));
    check(sx_tensor_scalar(SX_F64, 2.0, &yv));
    check(sx_cg_input_set(g, x, xv, SX_CG_COPY));
    check(sx_cg_input_set(g, y, yv, SX_CG_COPY));
    sx_cg_node *want[3] = {f, grads[0], grads[1]};
    check(sx_cg_eval(g, 3, want));

    printf("f(x, y) = %.17g\n", sx_tensor_get(sx_cg_value(f), 0));
    printf("df/dx = ");
    sx_tensor_print(sx_cg_value(grads[0]), stdout);
    printf("df/dy = %.17f\n", sx_tensor_get(sx_cg_value(grads[1]), 0));
    sx_cg_stats st = sx_cg_graph_stats(g);
    printf("graph: %lld nodes, %lld edges (forward and backward)\n", (long long)st.nodes,
           (long long)st.edges);
    sx_cg_graph_free(g);
    sx_tensor_free(xv);
    sx_tensor_free(yv);
    return 0;
}
