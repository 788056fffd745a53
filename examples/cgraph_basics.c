/* cgraph_basics: Owl's example 01 in strix. Build a lazy graph, give its inputs values,
 * evaluate, read the result; then a broadcasting expression written out as Graphviz DOT
 * (render it with `dot -Tpng cgraph_basics.dot -o cgraph_basics.png`). */
#include <sx_cgraph.h>

#include <stdio.h>
#include <stdlib.h>

static void check(sx_status s)
{
    if (s != SX_OK) {
        fprintf(stderr, "cgraph_basics: %s\n", sx_last_error());
        exit(1);
    }
}

int main(void)
{
    sx_cg_graph *g = NULL;
    check(sx_cg_graph_new(SX_CG_LAZY, SX_F64, &g));

    /* g = x + y with x an input of shape [2,2] and y a scalar input */
    int64_t s22[2] = {2, 2};
    sx_cg_node *x = sx_cg_input(g, "x", SX_F64, 2, s22);
    sx_cg_node *y = sx_cg_input(g, "y", SX_F64, 0, NULL);
    sx_cg_node *sum = sx_cg_add(g, x, y);
    check(sx_cg_graph_status(g)); /* one check for the whole expression */

    sx_tensor *xv = NULL, *yv = NULL;
    check(sx_tensor_ones(SX_F64, 2, s22, &xv));
    check(sx_tensor_scalar(SX_F64, 2.0, &yv));
    check(sx_cg_input_set(g, x, xv, SX_CG_COPY));
    check(sx_cg_input_set(g, y, yv, SX_CG_COPY));
    check(sx_cg_eval(g, 1, &sum)); /* nothing was computed until here */
    printf("x + y = ");
    sx_tensor_print(sx_cg_value(sum), stdout);

    /* sin(a * b) with a [8,4] and b [1,4]: b broadcasts over the rows of a */
    int64_t s84[2] = {8, 4}, s14[2] = {1, 4};
    sx_cg_node *a = sx_cg_input(g, "a", SX_F64, 2, s84);
    sx_cg_node *b = sx_cg_input(g, "b", SX_F64, 2, s14);
    sx_cg_node *z = sx_cg_sin(g, sx_cg_mul(g, a, b));
    check(sx_cg_graph_status(g));
    sx_tensor *av = NULL, *bv = NULL;
    check(sx_tensor_new(SX_F64, 2, s84, &av));
    check(sx_tensor_new(SX_F64, 2, s14, &bv));
    check(sx_tensor_linspace(av, 0, 1));
    check(sx_tensor_arange(bv, 1, 1));
    check(sx_cg_input_set(g, a, av, SX_CG_BORROW)); /* read in place; av must outlive g's use */
    check(sx_cg_input_set(g, b, bv, SX_CG_COPY));
    check(sx_cg_eval(g, 1, &z));
    printf("sin(a * b) = ");
    sx_tensor_print(sx_cg_value(z), stdout);

    check(sx_cg_dot_save(g, "cgraph_basics.dot"));
    sx_cg_stats st = sx_cg_graph_stats(g);
    printf("graph: %lld nodes, %lld edges; written to cgraph_basics.dot\n", (long long)st.nodes,
           (long long)st.edges);

    sx_cg_graph_free(g);
    sx_tensor_free(xv);
    sx_tensor_free(yv);
    sx_tensor_free(av);
    sx_tensor_free(bv);
    return 0;
}
