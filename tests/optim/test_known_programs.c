/* The table of known fused programs (tensor/elementwise/fused_known_progs.h) is generated here,
 * from the optimisers' formulas: every optimiser kind, with the hyper-parameters that change its
 * program (weight decay: an fma in the gradient; dampening: a scaled gradient; clip_norm: the
 * gradient times the clipping scale), is compiled as sx_nn compiles a training step (a dense
 * layer: its weight's gradient is a product, so matmul_update; its bias's a sum, so fused_update),
 * and every update node's program is collected, f32 and f64. The suite fails while the checked-in
 * file differs from what this writes; regenerate it with
 *     build/tests/optim_test_known_programs --write tensor/elementwise/fused_known_progs.h
 * Hyper-parameter values are scalar operands, never instructions: only which terms a formula has
 * changes its program (and a coefficient equal to another, which CSE merges into one operand, or
 * to 0 or 1, which simplification drops: such a program runs interpreted). */
#include "testutil.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sx_nn.h>

#include "tensor_impl.h"

#define MAX_FOUND 128
#define MAX_OPS 16 /* fused_known.c's FK_MAX_OPERANDS */

/* One program, and the variants that make it ("adam (matmul_update)", ...). */
typedef struct found {
    sx_fused_prog prog;
    int n_ops;
    uint64_t scalar; /* bit i: operand i holds one element */
    char who[1024];
    unsigned dtypes; /* bit 0: made in f32, bit 1: in f64 */
    int kernel;
    int8_t perm[MAX_OPS]; /* the kernel's operand c is operand perm[c] */
} found;

typedef struct found_set {
    found f[MAX_FOUND];
    int n;
    /* the kernels: index into f of the first program with each canonical form */
    int kernels[MAX_FOUND];
    int n_kernels;
} found_set;

/* A variant: its suffix and what it sets (0: the kind's default). */
typedef struct variant {
    const char *name;
    double weight_decay, dampening, clip_norm;
} variant;

static const variant variants[] = {
    {"", 0, 0, 0},
    /* not 0.01: in f32 that is also rmsprop's 1 - rho, and CSE would make the two one operand */
    {"+weight_decay", 5e-4, 0, 0},
    {"+dampening", 0, 0.1, 0},
    {"+clip_norm", 0, 0, 1},
};

static bool same_prog(const found *f, const sx_fused_prog *p, int n_ops, uint64_t scalar)
{
    if (f->n_ops != n_ops || f->scalar != scalar || f->prog.n != p->n)
        return false;
    for (int k = 0; k < p->n; k++) {
        const sx_fused_instr *x = &f->prog.ins[k], *y = &p->ins[k];
        if (x->kind != y->kind || x->op != y->op || x->a != y->a || x->b != y->b || x->c != y->c ||
            memcmp(&x->alpha, &y->alpha, sizeof x->alpha) != 0)
            return false;
    }
    return true;
}

/* Sin, cos and tan read vm_exact (vmath.h): the compiled kernels leave them out. */
static bool compilable(const sx_fused_prog *p, int n_ops)
{
    if (n_ops > MAX_OPS)
        return false;
    for (int k = 0; k < p->n; k++) {
        const sx_fused_instr *in = &p->ins[k];
        if (in->kind == SX_FUSED_MAP && (in->op == SX_MAP_SIN || in->op == SX_MAP_COS ||
                                         in->op == SX_MAP_TAN || !isfinite(in->alpha)))
            return false;
    }
    return true;
}

static void add_found(found_set *s, const sx_fused_prog *p, int n_ops, uint64_t scalar,
                      const char *who, unsigned dtype)
{
    if (!compilable(p, n_ops))
        return;
    found *f = NULL;
    for (int i = 0; i < s->n && f == NULL; i++)
        if (same_prog(&s->f[i], p, n_ops, scalar))
            f = &s->f[i];
    if (f == NULL && s->n < MAX_FOUND) {
        f = &s->f[s->n++];
        memset(f, 0, sizeof *f);
        f->prog = *p;
        f->n_ops = n_ops;
        f->scalar = scalar;
    }
    if (f == NULL)
        return;
    f->dtypes |= dtype;
    if (strstr(f->who, who) == NULL) {
        size_t len = strlen(f->who);
        snprintf(f->who + len, sizeof f->who - len, "%s%s", len ? ", " : "", who);
    }
}

/* The programs of the update nodes of g. */
static void collect_graph(found_set *s, sx_cg_graph *g, const char *what, unsigned dtype)
{
    for (int64_t i = 0; i < sx_cg_graph_size(g); i++) {
        sx_cg_node *n = sx_cg_graph_node(g, i);
        if (n == NULL)
            continue;
        const sx_cg_op op = sx_cg_node_op(n);
        if (op != SX_OP_FUSED_UPDATE && op != SX_OP_MATMUL_UPDATE)
            continue;
        /* matmul_update: its inputs, then the product (of the update's size) as the last */
        const bool mm = op == SX_OP_MATMUL_UPDATE;
        const int n_ops = mm ? sx_cg_node_n_inputs(n) - 1 : sx_cg_node_n_inputs(n);
        uint64_t scalar = 0;
        for (int k = 0; k < n_ops && k < 64; k++) {
            const bool product = mm && k == n_ops - 1;
            if (!product && sx_cg_node_size(sx_cg_node_input(n, k)) == 1)
                scalar |= (uint64_t)1 << k;
        }
        char who[128];
        snprintf(who, sizeof who, "%s (%s)", what, sx_cg_op_name(op));
        add_found(s, &sx_cg_node_attr(n)->prog, n_ops, scalar, who, dtype);
    }
}

/* A dense layer (5 -> 3, softmax cross-entropy) trained by kind k with variant v. */
static sx_status train_net(sx_optim_kind k, const variant *v, sx_dtype dt, sx_nn_net **net,
                           sx_nn_model **m)
{
    *m = NULL;
    sx_status s = sx_nn_net_new("known", dt, 7, net);
    if (s != SX_OK)
        return s;
    sx_nn_layer *x = sx_nn_input(*net, 1, (int64_t[]){5});
    x = sx_nn_linear(*net, x, 3, SX_ACT_SOFTMAX);
    if ((s = sx_nn_net_status(*net)) != SX_OK)
        return s;
    sx_nn_train_params p = sx_nn_train_params_default();
    p.verbose = 0;
    p.optim = sx_optim_params_default(k);
    if (v->weight_decay != 0)
        p.optim.weight_decay = v->weight_decay;
    p.optim.dampening = v->dampening;
    p.clip_norm = v->clip_norm;
    return sx_nn_compile_train(*net, &p, 4, m);
}

static bool applies(sx_optim_kind k, const variant *v)
{
    return v->dampening == 0 || k == SX_OPTIM_MOMENTUM;
}

/* Every kind and variant in f32 and f64; false (a message on stderr) on a failure. */
static bool collect(found_set *s)
{
    memset(s, 0, sizeof *s);
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < SX_OPTIM_COUNT; k++)
            for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
                if (!applies((sx_optim_kind)k, &variants[v]))
                    continue;
                sx_nn_net *net = NULL;
                sx_nn_model *m = NULL;
                sx_status st =
                    train_net((sx_optim_kind)k, &variants[v], d ? SX_F64 : SX_F32, &net, &m);
                if (st != SX_OK) {
                    fprintf(stderr, "%s%s: %s\n", sx_optim_name((sx_optim_kind)k), variants[v].name,
                            sx_last_error());
                    sx_nn_net_free(net);
                    return false;
                }
                char what[64];
                snprintf(what, sizeof what, "%s%s", sx_optim_name((sx_optim_kind)k),
                         variants[v].name);
                collect_graph(s, sx_nn_model_graph(m), what, d ? 2u : 1u);
                sx_nn_model_free(m);
                sx_nn_net_free(net);
            }
    return true;
}

/* ---------------------------------------------------------------- kernels */

/* p with its operands numbered in the order the program first reads or writes them: programs
 * that differ only in that numbering (an update and its matmul form) get one kernel. */
static void canonical(const found *f, sx_fused_prog *c, uint64_t *scalar, int8_t *perm)
{
    int map[MAX_OPS];
    for (int i = 0; i < MAX_OPS; i++)
        map[i] = -1;
    int next = 0;
    *c = f->prog;
    for (int k = 0; k < c->n; k++) {
        sx_fused_instr *in = &c->ins[k];
        int16_t *s3[3] = {&in->a, &in->b, &in->c};
        const bool store = in->kind == SX_FUSED_STORE;
        for (int j = 0; j < (store ? 2 : sx__fused_sources(in->kind)); j++) {
            if (*s3[j] < 0 || (store && j == 0))
                continue;
            if (map[*s3[j]] < 0) {
                map[*s3[j]] = next;
                perm[next++] = (int8_t)*s3[j];
            }
            *s3[j] = (int16_t)map[*s3[j]];
        }
    }
    for (int i = 0; i < f->n_ops; i++)
        if (map[i] < 0) {
            map[i] = next;
            perm[next++] = (int8_t)i;
        }
    *scalar = 0;
    for (int i = 0; i < f->n_ops; i++)
        if (f->scalar >> perm[i] & 1)
            *scalar |= (uint64_t)1 << i;
}

static void assign_kernels(found_set *s)
{
    s->n_kernels = 0;
    for (int i = 0; i < s->n; i++) {
        found *f = &s->f[i];
        sx_fused_prog c;
        uint64_t sc;
        canonical(f, &c, &sc, f->perm);
        f->kernel = -1;
        for (int k = 0; k < s->n_kernels && f->kernel < 0; k++) {
            const found *g = &s->f[s->kernels[k]];
            sx_fused_prog gc;
            uint64_t gsc;
            int8_t gp[MAX_OPS];
            canonical(g, &gc, &gsc, gp);
            found tmp = {.prog = gc, .n_ops = g->n_ops, .scalar = gsc};
            if (same_prog(&tmp, &c, f->n_ops, sc))
                f->kernel = k;
        }
        if (f->kernel < 0) {
            s->kernels[s->n_kernels] = i;
            f->kernel = s->n_kernels++;
        }
    }
}

/* ---------------------------------------------------------------- writing C */

typedef struct text {
    char *s;
    size_t n, cap;
} text;

static void put(text *t, const char *fmt, ...) SX_PRINTF(2, 3);
static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->n + (size_t)need + 1 > t->cap) {
        t->cap = 2 * (t->n + (size_t)need + 1);
        t->s = realloc(t->s, t->cap);
        if (t->s == NULL)
            abort(); /* the generator only: no recovery from a full memory */
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    t->n += (size_t)need;
}

/* "who" as comment lines of at most ~96 columns, each starting with `lead`. */
static void put_who(text *t, const char *lead, const char *who)
{
    const size_t width = 96 - strlen(lead);
    while (*who) {
        size_t len = strlen(who);
        if (len > width) {
            len = width;
            while (len > 0 && who[len] != ' ')
                len--;
            if (len == 0)
                len = width;
        }
        put(t, "%s%.*s\n", lead, (int)len, who);
        who += len;
        while (*who == ' ')
            who++;
    }
}

static void put_source(text *t, int16_t s, uint64_t scalar)
{
    if (s < 0)
        put(t, "r%d", -1 - s);
    else
        put(t, "%c%d", scalar >> s & 1 ? 's' : 'v', s);
}

static void put_instr(text *t, const sx_fused_instr *in, uint64_t scalar)
{
    switch ((sx_fused_kind)in->kind) {
    case SX_FUSED_MAP:
        put(t, "FK_MAP(%s, ", sx_map_name((sx_map_op)in->op));
        put_source(t, in->a, scalar);
        put(t, ", %a)", in->alpha);
        return;
    case SX_FUSED_BINARY:
        put(t, "FK_BINARY(%s, ", sx_binary_name((sx_binary_op)in->op));
        break;
    case SX_FUSED_FMA:
        put(t, "FK_FMA(");
        break;
    case SX_FUSED_WHERE:
        put(t, "FK_WHERE(");
        break;
    case SX_FUSED_STORE:
        return;
    }
    const int16_t s3[3] = {in->a, in->b, in->c};
    for (int j = 0; j < sx__fused_sources(in->kind); j++) {
        put(t, j ? ", " : "");
        put_source(t, s3[j], scalar);
    }
    put(t, ")");
}

/* The kernel of program f (canonical numbering): operands once, then per element its loads,
 * its instructions and its stores (after every load: the program reads old values). */
static void put_kernel(text *t, int k, const found_set *s)
{
    const found *f = &s->f[s->kernels[k]];
    sx_fused_prog c;
    uint64_t sc;
    int8_t perm[MAX_OPS];
    canonical(f, &c, &sc, perm);
    bool read[MAX_OPS] = {false}, written[MAX_OPS] = {false}, used[SX_FUSED_MAX] = {false};
    for (int j = 0; j < c.n; j++) {
        const sx_fused_instr *in = &c.ins[j];
        const int16_t s3[3] = {in->a, in->b, in->c};
        if (in->kind == SX_FUSED_STORE) {
            written[in->b] = true;
            used[-1 - in->a] = true;
            continue;
        }
        for (int q = 0; q < sx__fused_sources(in->kind); q++)
            if (s3[q] >= 0)
                read[s3[q]] = true;
            else
                used[-1 - s3[q]] = true;
    }
    put(t, "/* kernel %d, of:\n", k);
    for (int i = 0; i < s->n; i++)
        if (s->f[i].kernel == k)
            put_who(t, " * ", s->f[i].who);
    put(t, " */\nstatic void FK_FN(%d)(void *const *o, int64_t i0, int64_t i1)\n{\n", k);
    for (int i = 0; i < f->n_ops; i++)
        if (sc >> i & 1)
            put(t, "    const T s%d = *(const T *)o[%d];\n", i, i);
        else if (written[i])
            put(t, "    T *const x%d = o[%d];\n", i, i);
        else if (read[i])
            put(t, "    const T *const x%d = o[%d];\n", i, i);
    put(t, "    FK_SIMD\n    for (int64_t i = i0; i < i1; i++) {\n");
    for (int i = 0; i < f->n_ops; i++)
        if (read[i] && !(sc >> i & 1))
            put(t, "        const T v%d = x%d[i];\n", i, i);
    for (int j = 0; j < c.n; j++) {
        if (c.ins[j].kind == SX_FUSED_STORE)
            continue;
        put(t, "        const T r%d = ", j);
        put_instr(t, &c.ins[j], sc);
        put(t, ";\n");
        if (!used[j])
            put(t, "        (void)r%d;\n", j);
    }
    for (int j = 0; j < c.n; j++)
        if (c.ins[j].kind == SX_FUSED_STORE)
            put(t, "        x%d[i] = r%d;\n", c.ins[j].b, -1 - c.ins[j].a);
    put(t, "    }\n}\n\n");
}

static const char *kind_name(int kind)
{
    static const char *const names[] = {"SX_FUSED_MAP", "SX_FUSED_BINARY", "SX_FUSED_FMA",
                                        "SX_FUSED_WHERE", "SX_FUSED_STORE"};
    return names[kind];
}

/* "SX_MAP_SQRT", "SX_BINARY_MUL" or "0" */
static void put_op(text *t, const sx_fused_instr *in)
{
    const char *name = in->kind == SX_FUSED_MAP      ? sx_map_name((sx_map_op)in->op)
                       : in->kind == SX_FUSED_BINARY ? sx_binary_name((sx_binary_op)in->op)
                                                     : NULL;
    if (name == NULL) {
        put(t, "0");
        return;
    }
    put(t, "SX_%s_", in->kind == SX_FUSED_MAP ? "MAP" : "BINARY");
    for (const char *c = name; *c; c++)
        put(t, "%c", toupper((unsigned char)*c));
}

static void put_table(text *t, const found_set *s)
{
    for (int i = 0; i < s->n; i++) {
        const found *f = &s->f[i];
        put(t, "static const sx_fused_instr fk_prog_%d[] = {\n", i);
        for (int k = 0; k < f->prog.n; k++) {
            const sx_fused_instr *in = &f->prog.ins[k];
            put(t, "    {%s, ", kind_name(in->kind));
            put_op(t, in);
            put(t, ", %d, %d, %d, %a},\n", in->a, in->b, in->c, in->alpha);
        }
        put(t, "};\n");
    }
    put(t, "\nstatic const fk_entry fk_entries[] = {\n");
    for (int i = 0; i < s->n; i++) {
        const found *f = &s->f[i];
        put(t, "    /* %d, kernel %d:\n", i, f->kernel);
        put_who(t, "     * ", f->who);
        put(t, "     */\n    {\"%.*s\", fk_prog_%d, %d, %d, 0x%llx, %d, {",
            (int)strcspn(f->who, ","), f->who, i, f->prog.n, f->n_ops,
            (unsigned long long)f->scalar, f->kernel);
        for (int c = 0; c < f->n_ops; c++)
            put(t, "%s%d", c ? ", " : "", f->perm[c]);
        put(t, "}},\n");
    }
    put(t, "};\n");
}

static const char *const header =
    "/* fused_known_progs.h: the known fused programs and their kernels. GENERATED by\n"
    " * tests/optim/test_known_programs.c from the optimisers' formulas (optim/optimizer.c),\n"
    " * compiled as sx_nn compiles a training step, in f32 and f64 (the same programs). Do not "
    "edit:\n"
    " * regenerate with\n"
    " *     build/tests/optim_test_known_programs --write tensor/elementwise/fused_known_progs.h\n"
    " * (the test optim_test_known_programs fails while this file is out of date). Included by\n"
    " * fused_known.c: FK_KERNELS, the kernels in T and SFX (fused_known_tmpl.h, once per dtype\n"
    " * and instruction set), each over its operands in the order its program first uses them;\n"
    " * FK_TABLE, the programs exactly as element-wise fusion makes them (the kernel, and which\n"
    " * operand is the kernel's each). */\n"
    "/* clang-format off */\n";

/* The whole file. */
static void put_file(text *t, const found_set *s)
{
    put(t, "%s#ifdef FK_KERNELS\n\n", header);
    for (int k = 0; k < s->n_kernels; k++)
        put_kernel(t, k, s);
    put(t, "static fk_fn *const FK_KERNEL_LIST[] = {\n");
    for (int k = 0; k < s->n_kernels; k++)
        put(t, "    FK_FN(%d),\n", k);
    put(t, "};\n\n#endif\n#ifdef FK_TABLE\n\n");
    put_table(t, s);
    put(t, "\n#endif\n/* clang-format on */\n");
}

/* The generated file's text (NULL, a message on stderr, on a failure); the caller frees it. */
static char *generate(found_set *s)
{
    if (!collect(s))
        return NULL;
    assign_kernels(s);
    text t = {NULL, 0, 0};
    put_file(&t, s);
    return t.s;
}

static char *checked_in_path(void)
{
    static char path[1024];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    snprintf(path, sizeof path, "%.*s/../../tensor/elementwise/fused_known_progs.h",
             (int)(slash - file), file);
    return path;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    text t = {NULL, 0, 0};
    char buf[4096];
    size_t got;
    put(&t, "%s", "");
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        put(&t, "%.*s", (int)got, buf);
    fclose(f);
    return t.s;
}

/* ---------------------------------------------------------------- tests */

static found_set set;

Test(optim_known_programs, checked_in_table_is_up_to_date)
{
    char *want = generate(&set);
    cr_assert_not_null(want, "generating the table failed");
    char *have = read_all(checked_in_path());
    cr_assert_not_null(have, "cannot read %s", checked_in_path());
    if (strcmp(want, have) != 0) {
        int line = 1;
        for (size_t i = 0; want[i] && want[i] == have[i]; i++)
            line += want[i] == '\n';
        cr_assert_fail("%s is out of date (first difference on line %d): regenerate it with "
                       "`build/tests/optim_test_known_programs --write "
                       "tensor/elementwise/fused_known_progs.h`",
                       checked_in_path(), line);
    }
    free(want);
    free(have);
}

/* f32 and f64 make the same programs: one table for both dtypes. */
Test(optim_known_programs, f32_and_f64_make_the_same_programs)
{
    cr_assert(collect(&set));
    cr_assert_gt(set.n, SX_OPTIM_COUNT);
    for (int i = 0; i < set.n; i++)
        cr_assert_eq(set.f[i].dtypes, 3u, "%s: made in %s only", set.f[i].who,
                     set.f[i].dtypes == 1 ? "f32" : "f64");
}

/* Every program a variant makes is one the library runs compiled, with the operand kinds it was
 * made with. */
Test(optim_known_programs, every_optimiser_program_is_in_the_library)
{
    cr_assert(collect(&set));
    cr_assert_eq(sx__fused_known_count(), set.n);
    for (int i = 0; i < set.n; i++) {
        const int k = sx__fused_known_find(&set.f[i].prog, set.f[i].n_ops, set.f[i].scalar);
        cr_assert_eq(k, i, "%s: entry %d of the library's table, want %d", set.f[i].who, k, i);
    }
}

/* A network trained a few steps by every kind and variant ends with the same bits whether its
 * updates run the compiled kernels or the interpreter. */
Test(optim_known_programs, training_gives_the_interpreters_bits)
{
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < SX_OPTIM_COUNT; k++)
            for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
                if (!applies((sx_optim_kind)k, &variants[v]))
                    continue;
                const sx_dtype dt = d ? SX_F64 : SX_F32;
                sx_nn_net *net[2] = {NULL, NULL};
                sx_rng rng;
                sx_rng_seed(&rng, 11);
                sx_tensor *x = tu_rand(&rng, dt, 2, (int64_t[]){4, 5}, -2, 2);
                sx_tensor *y = tu_zeros(dt, 2, (int64_t[]){4, 3});
                for (int r = 0; r < 4; r++)
                    sx_tensor_set(y, r * 3 + r % 3, 1);
                for (int compiled = 0; compiled < 2; compiled++) {
                    sx_nn_model *m = NULL;
                    cr_assert_eq(train_net((sx_optim_kind)k, &variants[v], dt, &net[compiled], &m),
                                 SX_OK, "%s", sx_last_error());
                    sx__fused_known_enable(compiled == 1);
                    for (int step = 1; step <= 3; step++)
                        cr_assert_eq(sx_nn_model_step(m, x, y, 0.05, step, NULL, NULL), SX_OK);
                    sx__fused_known_enable(true);
                    sx_nn_model_free(m);
                }
                for (int i = 0; i < sx_nn_net_n_params(net[0]); i++) {
                    sx_nn_param_info pi;
                    cr_assert_eq(sx_nn_net_param_info(net[0], i, &pi), SX_OK);
                    const sx_tensor *a = sx_nn_net_param(net[0], pi.name);
                    const sx_tensor *b = sx_nn_net_param(net[1], pi.name);
                    cr_assert(memcmp(a->data, b->data, (size_t)a->size * sx_dtype_size(dt)) == 0,
                              "%s%s %s: %s differs", sx_optim_name((sx_optim_kind)k),
                              variants[v].name, d ? "f64" : "f32", pi.name);
                }
                sx_tensor_free(x);
                sx_tensor_free(y);
                sx_nn_net_free(net[0]);
                sx_nn_net_free(net[1]);
            }
}

/* The reference network (examples/mnist_train's layers, on 12 x 12 images): every update of its
 * training step, a convolution's, a dense layer's (matmul_update) and a bias's, runs compiled,
 * with every optimiser kind. */
Test(optim_known_programs, the_reference_networks_updates_run_compiled)
{
    for (int k = 0; k < SX_OPTIM_COUNT; k++) {
        sx_nn_net *net = NULL;
        cr_assert_eq(sx_nn_net_new("mnist", SX_F32, 42, &net), SX_OK);
        sx_nn_layer *x = sx_nn_input(net, 3, (int64_t[]){12, 12, 1});
        sx_nn_conv2d_params conv = sx_nn_conv2d_params_default(4, 5, 5);
        conv.conv.padding = SX_PAD_SAME;
        conv.act = SX_ACT_RELU;
        x = sx_nn_conv2d(net, x, &conv);
        sx_nn_pool2d_params pool = sx_nn_pool2d_params_default(2, 2);
        x = sx_nn_max_pool2d(net, x, &pool);
        x = sx_nn_dropout(net, x, 0.1);
        x = sx_nn_fully_connected(net, x, 16, SX_ACT_RELU);
        x = sx_nn_linear(net, x, 10, SX_ACT_SOFTMAX);
        cr_assert_eq(sx_nn_net_status(net), SX_OK, "%s", sx_last_error());
        sx_nn_train_params p = sx_nn_train_params_default();
        p.verbose = 0;
        p.optim = sx_optim_params_default((sx_optim_kind)k);
        sx_nn_model *m = NULL;
        cr_assert_eq(sx_nn_compile_train(net, &p, 8, &m), SX_OK, "%s", sx_last_error());
        memset(&set, 0, sizeof set);
        collect_graph(&set, sx_nn_model_graph(m), sx_optim_name((sx_optim_kind)k), 1);
        int mm = 0;
        for (int i = 0; i < set.n; i++) {
            mm += strstr(set.f[i].who, "matmul_update") != NULL;
            cr_assert_geq(sx__fused_known_find(&set.f[i].prog, set.f[i].n_ops, set.f[i].scalar), 0,
                          "%s: not in the table", set.f[i].who);
        }
        cr_assert_geq(set.n, 1);
        cr_assert_eq(mm, 1, "%s: %d matmul_update programs", sx_optim_name((sx_optim_kind)k), mm);
        sx_nn_model_free(m);
        sx_nn_net_free(net);
    }
}

/* `--write PATH` writes the table to PATH; anything else runs the suite. */
int main(int argc, char *argv[])
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0) {
        char *t = generate(&set);
        FILE *f = t != NULL ? fopen(argv[2], "wb") : NULL;
        const bool ok = f != NULL && fputs(t, f) >= 0;
        if (f != NULL && fclose(f) != 0)
            return 1;
        if (ok)
            printf("%s: %d programs, %d kernels\n", argv[2], set.n, set.n_kernels);
        free(t);
        return ok ? 0 : 1;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
