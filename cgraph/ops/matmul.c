/* ops/matmul.c: matrix products: matmul (with an optional broadcast addend, the GEMM) and dot. */
#ifndef CG_GRAD_RULES /* the ops; their gradient rules, at the end, build apart (ops/rule.h) */
#include "cgraph_impl.h"

#define IN_VALUE(i) (&n->in[i]->value)
#define OUT (&n->value)

/* ---------------------------------------------------------------- constructors */

sx_cg_node *sx_cg_dot(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b)
{
    return cg_op2(g, SX_OP_DOT, a, b, NULL);
}

sx_cg_node *sx_cg_gemm(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, bool trans_a, bool trans_b,
                       double alpha, sx_cg_node *c, double beta)
{
    sx_cg_attr at = sx_cg_attr_default();
    at.trans_a = trans_a;
    at.trans_b = trans_b;
    at.alpha = alpha;
    if (c == NULL)
        return cg_op2(g, SX_OP_MATMUL, a, b, &at);
    at.beta = beta;
    return cg_op3(g, SX_OP_MATMUL, a, b, c, &at);
}

sx_cg_node *sx_cg_matmul(sx_cg_graph *g, sx_cg_node *a, sx_cg_node *b, bool trans_a, bool trans_b)
{
    return sx_cg_gemm(g, a, b, trans_a, trans_b, 1.0, NULL, 0.0);
}

/* ---------------------------------------------------------------- shape rules */

sx_status cg_shape_matmul(sx_cg_node *n)
{
    if (n->n_in != 2 && n->n_in != 3)
        return sx_error(SX_E_ARG, "%s: %d inputs (want 2, or 3 with an addend)", cg_who(n),
                        n->n_in);
    SX_TRY(cg_same_dtypes(n));
    int r;
    int64_t s[SX_MAX_RANK];
    sx_tensor va = cg_probe_view(IN_VALUE(0)), vb = cg_probe_view(IN_VALUE(1));
    SX_TRY(sx_matmul_shape(cg_who(n), &va, &vb, n->attr.trans_a, n->attr.trans_b, &r, s));
    cg_set_shape(n, r, s);
    if (n->n_in == 3) {
        /* the addend broadcasts to the product's shape */
        int rb;
        int64_t sb[SX_MAX_RANK];
        SX_TRY(sx_shape_broadcast(cg_who(n), r, s, IN_VALUE(2)->rank, IN_VALUE(2)->shape, &rb, sb));
        if (!sx_shape_equal(r, s, rb, sb)) {
            char s1[128], s2[128];
            return sx_error(SX_E_SHAPE, "%s: addend of shape %s does not fit the product %s",
                            cg_who(n),
                            sx_shape_str(IN_VALUE(2)->rank, IN_VALUE(2)->shape, s1, sizeof s1),
                            sx_shape_str(r, s, s2, sizeof s2));
        }
    }
    return SX_OK;
}

sx_status cg_shape_dot(sx_cg_node *n)
{
    SX_TRY(cg_same_dtypes(n));
    if (IN_VALUE(0)->size != IN_VALUE(1)->size)
        return sx_error(SX_E_SHAPE, "%s: %lld and %lld elements", cg_who(n),
                        (long long)IN_VALUE(0)->size, (long long)IN_VALUE(1)->size);
    cg_set_shape(n, 0, NULL);
    return SX_OK;
}

/* ---------------------------------------------------------------- evaluators */

/* alpha op(a) op(b) (+ beta c): the product first (the GEMM with beta = 0 rounds alpha times the
 * finished sum), then beta c added element by element over the broadcast (beta c rounded, then
 * the sum): the operations, in the order, of separate matmul, mul and add nodes, so that the
 * gemm-folding pass keeps every bit. Planned over its dying addend (cg_matmul_inplace_ok: alpha
 * = beta = 1, one K block), the GEMM adds c to the product's one sum, rounded once: the same. */
sx_status cg_eval_matmul(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    const bool ta = n->attr.trans_a, tb = n->attr.trans_b;
    if (n->n_in == 3 && IN_VALUE(2)->data == OUT->data) /* planned in place: c is already there */
        return sx_tensor_matmul_out(IN_VALUE(0), IN_VALUE(1), ta, tb, n->attr.alpha, n->attr.beta,
                                    OUT);
    SX_TRY(sx_tensor_matmul_out(IN_VALUE(0), IN_VALUE(1), ta, tb, n->attr.alpha, 0.0, OUT));
    if (n->n_in < 3 || n->attr.beta == 0.0) /* beta = 0 ignores c, NaN too */
        return SX_OK;
    if (n->attr.beta == 1.0)
        return sx_tensor_binary_out(SX_BINARY_ADD, OUT, IN_VALUE(2), OUT);
    float bf = (float)n->attr.beta;
    double bd = n->attr.beta;
    int64_t one = 1;
    sx_tensor beta = sx_tensor_view(OUT->dtype, 0, &one, OUT->dtype == SX_F32 ? (void *)&bf : &bd);
    return sx_tensor_fma_out(IN_VALUE(2), &beta, OUT, OUT);
}

/* dot takes any two tensors of one size (the shape rule); the kernel takes vectors: flat views. */
sx_status cg_eval_dot(sx_cg_graph *g, sx_cg_node *n)
{
    (void)g;
    int64_t na = IN_VALUE(0)->size, nb = IN_VALUE(1)->size;
    sx_tensor a = sx_tensor_view(IN_VALUE(0)->dtype, 1, &na, IN_VALUE(0)->data);
    sx_tensor b = sx_tensor_view(IN_VALUE(1)->dtype, 1, &nb, IN_VALUE(1)->data);
    return sx_tensor_dot_out(&a, &b, OUT);
}

/* ---------------------------------------------------------------- flop model */

/* alpha op(a) @ op(b): K is a's inner dimension (the addend's beta c is not counted) */
cg_cost cg_eval_matmul_cost(const sx_cg_node *n)
{
    const sx_tensor *a = IN_VALUE(0);
    return cg_cost_gemm((double)OUT->size,
                        n->attr.trans_a ? a->shape[a->rank - 2] : a->shape[a->rank - 1]);
}

cg_cost cg_eval_dot_cost(const sx_cg_node *n)
{
    return cg_cost_per_in(n, 0, 2);
}

#else
/* ---------------------------------------------------------------- gradient rules */

/* With transpose flags so that no transpose is materialised.
 * y is the node, x_i = y's inputs, G = gy is the adjoint of y. */
#include "rule.h"

/* y = alpha op(a) op(b) (+ beta c). With op(a) = A, op(b) = B: dA = alpha G B^T, dB = alpha
 * A^T G, written with transpose flags so no transpose is materialised; batch axes that were
 * broadcast are summed back, and so are the axes over which the addend c was broadcast
 * (dc = beta G summed to c's shape, as for add). */
sx_status grad_matmul(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                      sx_cg_node **gin)
{
    sx_cg_node *a = IN(0), *b = IN(1);
    bool ta = ATTR->trans_a, tb = ATTR->trans_b;
    double alpha = ATTR->alpha;
    if (need[0]) {
        /* da = alpha G B^T (ta = 0) or alpha B G^T (ta = 1) */
        sx_cg_node *d = ta ? sx_cg_gemm(g, b, gy, tb, true, alpha, NULL, 0)
                           : sx_cg_gemm(g, gy, b, false, !tb, alpha, NULL, 0);
        gin[0] = cg_grad_unbroadcast(g, d, a);
    }
    if (need[1]) {
        /* db = alpha A^T G (tb = 0) or alpha G^T A (tb = 1). A matrix b shared by a batch of
         * a's rows (a linear layer on (B, T, C), a tied output layer): the sum over the batch
         * is the product's own sum over a's rows stacked, one GEMM of depth B T instead of B
         * products of depth T summed apart */
        sx_cg_node *fa = a, *fg = gy;
        const int ra = sx_cg_node_rank(a);
        if (!ta && ra > 2 && sx_cg_node_rank(b) == 2) {
            const int64_t *sa = sx_cg_node_shape(a), *sg = sx_cg_node_shape(gy);
            int64_t rows = 1;
            for (int i = 0; i < ra - 1; i++)
                rows *= sa[i];
            const int64_t s2[2] = {rows, sa[ra - 1]}, g2[2] = {rows, sg[ra - 1]};
            fa = sx_cg_reshape(g, a, 2, s2);
            fg = sx_cg_reshape(g, gy, 2, g2);
        }
        sx_cg_node *d = tb ? sx_cg_gemm(g, fg, fa, true, ta, alpha, NULL, 0)
                           : sx_cg_gemm(g, fa, fg, !ta, false, alpha, NULL, 0);
        gin[1] = cg_grad_unbroadcast(g, d, b);
    }
    if (sx_cg_node_n_inputs(y) == 3 && need[2]) /* beta G, summed over c's broadcast axes */
        gin[2] = cg_grad_unbroadcast(g, cg_grad_scale(g, gy, ATTR->beta), IN(2));
    DONE();
}

/* dot(a, b) = sum a b: G b and G a (in each other's shapes) */
sx_status grad_dot(sx_cg_graph *g, sx_cg_node *y, sx_cg_node *gy, const bool *need,
                   sx_cg_node **gin)
{
    sx_cg_node *a = IN(0), *b = IN(1);
    if (need[0])
        gin[0] = sx_cg_mul(g, gy, sx_cg_reshape(g, b, sx_cg_node_rank(a), sx_cg_node_shape(a)));
    if (need[1])
        gin[1] = sx_cg_mul(g, gy, sx_cg_reshape(g, a, sx_cg_node_rank(b), sx_cg_node_shape(b)));
    DONE();
}

#endif
