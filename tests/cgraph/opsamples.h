/* opsamples.h: one sample generator per row of include/strix/sx_ops.def, shared by the per-op tests
 * of cgraph (lazy = eager = the tensor kernel) and of autodiff (gradients against central finite
 * differences). A generator builds input leaves with values that are valid for its op (positive
 * where a log needs it, away from kinks and ties, well-conditioned or SPD matrices, integral
 * indices) and the node under test; its table row says how many variants (shapes) it has,
 * whether the op is differentiable there, and the finite-difference step and tolerance (f64).
 * The table is generated from sx_ops.def, so a row without a generator does not compile. */
#ifndef SX_TEST_OPSAMPLES_H
#define SX_TEST_OPSAMPLES_H

#include <sx_cgraph.h>

/* How an op is differentiable at the sample points. */
typedef enum {
    OS_SMOOTH,    /* infinitely differentiable there: first and higher-order checks apply */
    OS_PIECEWISE, /* differentiable there (inputs sit away from kinks, ties and branch cuts) but
                     only piecewise smooth (abs, relu, max, maxpool, ...): first order only */
    OS_NONE,      /* not differentiable: integer-valued results (comparisons, sign, floor,
                     argmax, one_hot), random draws, mutation (assign, fused updates),
                     constants, and ops the optimiser makes after differentiation (fused
                     chains); the gradient is zero or absent by convention, and no
                     finite-difference check applies */
} os_diff;

#define OS_MAX_LEAVES 6

/* What one generator call made. `leaf` lists the input and parameter leaves in creation order
 * (constants the op needs are not listed: they are not differentiated). `wrt[i]` says whether
 * finite differences with respect to leaf i are meaningful (false for index tensors, where's
 * condition, the operands of mutating and optimiser-made ops). The node under test may read leaves
 * through helper nodes (cholesky and eigh read (B + B^T) / 2, so that every perturbation of B stays
 * symmetric). */
typedef struct os_sample {
    sx_cg_node *out; /* the node under test */
    int n_leaves;
    sx_cg_node *leaf[OS_MAX_LEAVES];
    bool wrt[OS_MAX_LEAVES];
    uint64_t rng_seed; /* dropout_mask: the seed of the graph generator the mask draws from */
    sx_status status;  /* SX_OK, or why the generator failed */
} os_sample;

/* A generator: builds variant `variant` (0 <= variant < n_variants) of its op in g, leaves of
 * dtype dt with values drawn from rng, and records them in *s (zeroed by the caller). Returns
 * the node under test, or NULL on failure (s->status, or the graph's status). Works the
 * same in a lazy and an eager graph: every input gets its value as soon as it is made. */
typedef sx_cg_node *(*os_gen_fn)(sx_cg_graph *g, sx_dtype dt, sx_rng *rng, int variant,
                                 os_sample *s);

/* The two references test_ops checks a node n of the op against (both written beside the op's
 * sample, independently of its evaluator). x holds the node's input values (for ops that write
 * their inputs, copies taken before the evaluation).
 * os_kernel_fn: the node's result by a direct call of the tensor kernel, into `out` (the node's
 *   shape and dtype); it must equal the node's value bit for bit. s is the sample (dropout_mask
 *   reads its rng_seed). Returns the kernel's status (or an error naming a failed check).
 * os_plain_fn: the node's result by the op's definition, plain loops in double, into want[]
 *   with mag[] bounding the rounding of sums (both zeroed, one element more than the node's
 *   size): the node's value must satisfy |got - want| <= tol (1 + |want| + mag). Where loops
 *   are not the way (linear algebra: its defining identities; a random mask: its values) it
 *   checks the node's value itself and sets *compare = false. Returns SX_OK, or an error naming
 *   the check that failed. */
typedef sx_status (*os_kernel_fn)(const sx_cg_node *n, const os_sample *s,
                                  const sx_tensor *const *x, sx_tensor *out);
typedef sx_status (*os_plain_fn)(const sx_cg_node *n, const sx_tensor *const *x, double *want,
                                 double *mag, bool *compare);

/* One row per op, in sx_ops.def order (os_ops[op].op == op), made from the op's SPEC_<name>
 * (n_variants, diff, fd_step, fd_tol[, REF(kernel, plain)]). Finite differences in f64: the
 * central difference with step fd_step must match an analytic derivative d within
 * |d - fd| <= fd_tol * (1 + |fd|), element by element (for OS_NONE rows both are 0). */
typedef struct os_op {
    sx_cg_op op;
    const char *name; /* the op's name, as sx_cg_op_name */
    os_gen_fn gen;    /* sample_<name> */
    int n_variants;
    os_diff diff;
    double fd_step;
    double fd_tol;
    os_kernel_fn kernel; /* REF(kernel, plain) in SPEC_<name>; NULL when the SPEC_ names none */
    os_plain_fn plain;
} os_op;

extern const os_op os_ops[SX_OP_COUNT];

/* The references of op: its row's, or for the rows of sx_map.def and sx_binary.def (whose SPEC_
 * names none) the element-wise ones (the kernel by the row's map/binary op, the plain value by
 * the row's ref column / the definition). NULL when op has none: test_ops' case
 * every_op_has_its_references fails, naming the op. */
os_kernel_fn os_kernel(sx_cg_op op);
os_plain_fn os_plain(sx_cg_op op);

/* Build variant `variant` of op's sample in g from a generator seeded with `seed`: the same
 * (op, dt, seed, variant) gives the same nodes and values in any graph. Fills *s; returns s->out,
 * or NULL with the reason in s->status (SX_E_ARG for a bad op or variant). */
sx_cg_node *os_build(sx_cg_graph *g, sx_cg_op op, sx_dtype dt, uint64_t seed, int variant,
                     os_sample *s);

/* Give leaf i of a sample a new value (an input by copy, a parameter by sx_cg_leaf_set). */
sx_status os_leaf_set(sx_cg_graph *g, const os_sample *s, int i, const sx_tensor *value);

/* phi = sum_k w[k] * out[k] after evaluating out (w has out's size; NULL means all ones). */
sx_status os_eval_weighted(sx_cg_graph *g, sx_cg_node *out, const double *w, double *phi);

/* The central difference (phi(+h) - phi(-h)) / 2h of phi(t) = sum_k w[k] * out(leaves + t*dir)
 * at t = 0: dir[i] holds leaf i's direction (size of the leaf, in doubles), or NULL to leave
 * leaf i fixed. The leaves get their original values back afterwards (also on failure). */
sx_status os_fd_directional(sx_cg_graph *g, const os_sample *s, sx_cg_node *out,
                            const double *const *dir, const double *w, double h, double *d);

#endif
