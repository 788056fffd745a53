/* difftest.h: the differential tester. Random expression graphs drawn from the op
 * table (sx_ops.def) are built as a small program (dt_prog), then instantiated in strix graphs
 * and checked in four families: values agree across evaluation modes (lazy, optimised, frozen,
 * eager, 2 workers, re-evaluation), gradients match central finite differences in f64,
 * optimise-then-differentiate gives the same gradients (or a clear refusal), and
 * Hessian-vector products match finite differences of the gradient on smooth graphs. A failing
 * program is shrunk to a minimal one and printed as C calls.
 *
 * Tolerances, per check:
 *   modes        bit for bit (sx_cgraph.h promises it for the optimiser passes, freezing, the
 *                engine workers, and eager graphs compute with the same kernels); NaN equals NaN
 *   bn-fold      the mode of SX_PASS_BN_FOLD, which changes rounding (the default passes and the
 *                fold, frozen; y and L without gradients): when it folded, every element
 *                within 2e-4 (f32) or 1e-11 (f64) of 1 + max |lazy| over its output; else bit
 *                for bit. Its folds are counted in dt_pass_changed
 *   reference    the unary maps against the C library in f64: exact for neg, abs, sign, relu,
 *                floor, ceil, round (half to even); else 1e-14 (f64) or 4e-7 (f32) relative
 *   grad         central differences of L in f64 at steps h, h/2, h/4 (h = 1e-3 * max(1, |x|));
 *                trusted when the three agree within 1e-3 relative and the one-sided slopes'
 *                gap shrinks with the step (no kink within reach); then
 *                |autodiff - fd(h/4)| <= 1e-4 * (1 + |fd|) + 2 |fd(h/2) - fd(h/4)|. A NaN or
 *                infinite derivative fails wherever the differences are finite, trusted or not.
 *                f32 programs: their gradients within 1e-3 * (1 + max |g|) of the f64 ones
 *   optgrad      the gradients of the optimised graph within 1e-9 relative of the plain ones
 *                (the derivative graph differs); or a refusal with a message
 *   hvp          as grad, on differences of the gradient along v
 * Used by the Criterion suite tests/cgraph/test_diff.c (CI: fixed seeds) and by the long-running
 * fuzz/difftest_long.c (`difftest --seconds N --seed S`); both include difftest.c. */
#ifndef SX_TEST_DIFFTEST_H
#define SX_TEST_DIFFTEST_H

#include <stdio.h>
#include <sx_autodiff.h>
#include <sx_cgraph.h>

#define DT_MAX_NODES 48 /* nodes of one program (leaves included) */
#define DT_MAX_IN 6     /* inputs of one op node (batch_norm_dx has up to 6) */
#define DT_MAX_SIZE 64  /* elements of any node the generator makes */

typedef enum {
    DT_OP,    /* an op applied to earlier nodes */
    DT_INPUT, /* an input leaf (differentiated) */
    DT_PARAM, /* a parameter leaf (differentiated) */
    DT_CONST, /* a constant leaf (not differentiated) */
    DT_INDEX, /* an input holding indices or conditions (not differentiated) */
} dt_kind;

typedef struct dt_node {
    dt_kind kind;
    sx_cg_op op; /* for DT_OP */
    int n_in;
    int in[DT_MAX_IN];
    sx_cg_attr attr;
    uint64_t rng_seed; /* dropout_mask: the seed of its generator */
    int rank;          /* leaves: given; ops: inferred by dt_infer */
    int64_t shape[SX_MAX_RANK];
    double *val; /* leaves: their values (already rounded to the program's dtype) */
} dt_node;

/* A program: nodes in topological order; `out` is the node y; the scalar checked is
 * L = sum(y * w) (w has y's size; NULL means all ones). */
typedef struct dt_prog {
    sx_dtype dt;
    uint64_t seed; /* the generator seed it came from (0 for hand-written programs) */
    int n, out;
    dt_node node[DT_MAX_NODES];
    double *w;
} dt_prog;

/* ---------------------------------------------------------------- programs by hand */

dt_prog *dt_prog_new(sx_dtype dt);
void dt_prog_free(dt_prog *p);
dt_prog *dt_prog_clone(const dt_prog *p);
/* A leaf of kind k with the given values (size of shape). Returns its index. */
int dt_leaf(dt_prog *p, dt_kind k, int rank, const int64_t *shape, const double *v);
/* An op node (attr NULL = sx_cg_attr_default()). Returns its index; it becomes the output. */
int dt_op(dt_prog *p, sx_cg_op op, int n_in, const int *in, const sx_cg_attr *attr);
/* Fill every op node's rank and shape (SX_OK, or why the program does not build). */
sx_status dt_infer(dt_prog *p);

/* ---------------------------------------------------------------- generation */

/* A random program of depth 3..8 (or `depth` when 3 <= depth <= 8) and dtype dt from `seed`;
 * the same arguments give the same program. NULL only on out of memory. */
dt_prog *dt_generate(uint64_t seed, sx_dtype dt, int depth);

/* ---------------------------------------------------------------- checks */

typedef enum {
    DT_MODES,   /* y, L and dL/dleaves agree across evaluation modes (bit for bit) */
    DT_GRAD,    /* dL/dleaves (sx_ad_grad) match central finite differences in f64 */
    DT_OPTGRAD, /* optimise, then differentiate: same gradients or a clear refusal */
    DT_HVP,     /* sx_ad_hvp matches finite differences of the gradient (smooth graphs) */
    DT_FAMILY_COUNT
} dt_family;

extern const char *const dt_family_name[DT_FAMILY_COUNT];

typedef struct dt_result {
    bool failed;
    bool skipped;    /* the family does not apply (HVP on a piecewise graph) */
    char check[48];  /* which check failed, e.g. "grad:fd", "modes:optimised" */
    char msg[768];   /* the details */
    int64_t trusted; /* finite-difference elements compared */
    int64_t untrusted;
    int refused; /* optimise-then-differentiate refused (with a message) */
} dt_result;

/* Run one family on a program. */
void dt_check(const dt_prog *p, dt_family f, dt_result *r);

/* Shrink a program that fails check r->check of family f to a smaller one that fails the same
 * check (drops nodes, replaces subtrees by leaves, reduces shapes, rounds values). Returns a
 * new program (the caller frees it) and the result of its check in *r. */
dt_prog *dt_shrink(const dt_prog *p, dt_family f, dt_result *r);

/* Print the program as C calls that rebuild it in a strix graph (with dt_input and friends,
 * below), then the check that fails. */
void dt_print_c(const dt_prog *p, dt_family f, const dt_result *r, FILE *out);

/* Helpers the printed reproducers call: a leaf with these values (an input given its value at
 * once, a parameter, or a constant). */
sx_cg_node *dt_input(sx_cg_graph *g, const char *name, sx_dtype dt, int rank, const int64_t *shape,
                     const double *v);
sx_cg_node *dt_param(sx_cg_graph *g, const char *name, sx_dtype dt, int rank, const int64_t *shape,
                     const double *v);
sx_cg_node *dt_const(sx_cg_graph *g, sx_dtype dt, int rank, const int64_t *shape, const double *v);

/* ---------------------------------------------------------------- the op table */

/* One row per op of sx_ops.def: how the generator composes it, or why it cannot. */
typedef struct dt_rule {
    sx_cg_op op;
    const char *name;
    int weight;           /* how often the generator picks it (0: never, see `excluded`) */
    const char *excluded; /* NULL when covered, else the reason */
} dt_rule;
extern const dt_rule dt_rules[SX_OP_COUNT];

/* How many nodes of each op (leaves by their op) the generator made since the process started. */
extern int64_t dt_op_made[SX_OP_COUNT];
/* What each optimiser pass changed in the optimised modes of the checks run so far (the
 * programs must exercise the passes, e.g. SX_PASS_CONV_EPILOGUE). */
extern int64_t dt_pass_changed[SX_PASS_COUNT];

/* ---------------------------------------------------------------- a campaign */

typedef struct dt_campaign {
    uint64_t seed0; /* programs use seeds seed0, seed0 + 1, ... */
    int64_t count;  /* programs to run (<= 0: until `seconds` pass) */
    double seconds; /* time limit (<= 0: none) */
    int depth;      /* 0 = random 3..8 */
    bool families[DT_FAMILY_COUNT];
    int max_reports; /* shrunk reproducers printed per distinct check (default 1) */
    bool shrink;     /* shrink failures before printing */
    int max_shrinks; /* at most this many shrinks (default 1000); later failures keep their check */
    FILE *log;       /* reproducers and the summary (NULL: stderr) */
    /* results */
    int64_t programs, failures, distinct, trusted, untrusted, refused, skipped;
} dt_campaign;

/* Run programs and checks, print a reproducer for the first failure of each distinct check and
 * a summary (counts per check, with seeds). Returns the number of failing (program, family)
 * pairs. */
int64_t dt_campaign_run(dt_campaign *c);

#endif
