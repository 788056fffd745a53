/* plan.c: freezing and memory planning, in one place. sx_cg_freeze_ex fixes the evaluation
 * order (order.c), plans the storage and makes every allocation before the graph changes.
 * The memory planner (a pebble game) and its checker. Over the frozen order, the
 * value of each planned node lives in a block from the step that computes it to the step of its
 * last reader (reading through views counts); blocks are placed in one arena by best fit over
 * the ranges released so far, or written over a dying input in place. Planned values are
 * transient: a planned evaluation recomputes a planned node whenever a running node reads it. */
#include "cgraph_impl.h"
/* Uses order.c, exec.c (storage, scratch) and par.c (the frozen parallel layout). */

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_ALIGN 64

static size_t round_block(size_t bytes)
{
    return (bytes + (BLOCK_ALIGN - 1)) & ~(size_t)(BLOCK_ALIGN - 1);
}

static size_t value_bytes(const sx_cg_node *n)
{
    return (size_t)n->value.size * sx_dtype_size(n->value.dtype);
}

/* ---------------------------------------------------------------- free ranges */

/* The released ranges of the arena, each in two treaps: by (size, offset) for best fit and by
 * offset for coalescing with neighbours. Ranges are disjoint and maximal (neighbours are
 * merged), so a range ending at a released block's start is its left neighbour. Every
 * operation is O(log r) expected for r free ranges; the priorities are a fixed hash of the slot,
 * so a plan is deterministic. Slots are never reused: a plan of p blocks makes at most 2p + 1
 * ranges (one per release, one remainder per allocation from a range). */
enum { BY_SIZE = 0, BY_OFFSET = 1 };

typedef struct frange {
    size_t off, size;
    uint32_t pri;
    int32_t ch[2][2]; /* [tree][left/right] */
} frange;

typedef struct fset {
    frange *r;
    int32_t n, cap;
    int32_t root[2];
    size_t end; /* the arena's high-water mark */
} fset;

static bool key_less(const frange *a, const frange *b, int t)
{
    if (t == BY_SIZE && a->size != b->size)
        return a->size < b->size;
    return a->off < b->off;
}

/* Split tree t at x into the nodes before x and the nodes from x on. */
static void tsplit(frange *r, int t, int32_t node, const frange *x, int32_t *lo, int32_t *hi)
{
    if (node < 0) {
        *lo = *hi = -1;
        return;
    }
    if (key_less(&r[node], x, t)) {
        tsplit(r, t, r[node].ch[t][1], x, &r[node].ch[t][1], hi);
        *lo = node;
    } else {
        tsplit(r, t, r[node].ch[t][0], x, lo, &r[node].ch[t][0]);
        *hi = node;
    }
}

/* Join two trees where every key of a precedes every key of b. */
static int32_t tmerge(frange *r, int t, int32_t a, int32_t b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    if (r[a].pri > r[b].pri) {
        r[a].ch[t][1] = tmerge(r, t, r[a].ch[t][1], b);
        return a;
    }
    r[b].ch[t][0] = tmerge(r, t, a, r[b].ch[t][0]);
    return b;
}

static void tinsert(fset *f, int t, int32_t node)
{
    int32_t lo, hi;
    tsplit(f->r, t, f->root[t], &f->r[node], &lo, &hi);
    f->root[t] = tmerge(f->r, t, tmerge(f->r, t, lo, node), hi);
}

static int32_t terase_at(frange *r, int t, int32_t at, int32_t node)
{
    if (at == node)
        return tmerge(r, t, r[at].ch[t][0], r[at].ch[t][1]);
    int side = key_less(&r[node], &r[at], t) ? 0 : 1;
    r[at].ch[t][side] = terase_at(r, t, r[at].ch[t][side], node);
    return at;
}

static void fset_insert(fset *f, size_t off, size_t size)
{
    assert(f->n < f->cap); /* at most one insertion per allocation and per release */
    int32_t k = f->n++;
    uint32_t h = (uint32_t)k * 2654435761u;
    h ^= h >> 15;
    f->r[k] = (frange){off, size, h * 2246822519u, {{-1, -1}, {-1, -1}}};
    tinsert(f, BY_SIZE, k);
    tinsert(f, BY_OFFSET, k);
}

static void fset_erase(fset *f, int32_t k)
{
    f->root[BY_SIZE] = terase_at(f->r, BY_SIZE, f->root[BY_SIZE], k);
    f->root[BY_OFFSET] = terase_at(f->r, BY_OFFSET, f->root[BY_OFFSET], k);
}

/* The smallest range of at least `size` bytes (the lowest offset among equals), or -1. */
static int32_t fset_best_fit(const fset *f, size_t size)
{
    int32_t best = -1;
    for (int32_t x = f->root[BY_SIZE]; x >= 0;) {
        if (f->r[x].size >= size) {
            best = x;
            x = f->r[x].ch[BY_SIZE][0];
        } else {
            x = f->r[x].ch[BY_SIZE][1];
        }
    }
    return best;
}

/* The range with the largest offset below `off` (or at most `off` when `or_equal`), or -1. */
static int32_t fset_before(const fset *f, size_t off)
{
    int32_t best = -1;
    for (int32_t x = f->root[BY_OFFSET]; x >= 0;) {
        if (f->r[x].off < off) {
            best = x;
            x = f->r[x].ch[BY_OFFSET][1];
        } else {
            x = f->r[x].ch[BY_OFFSET][0];
        }
    }
    return best;
}

/* The range with the smallest offset at or above `off`, or -1. */
static int32_t fset_from(const fset *f, size_t off)
{
    int32_t best = -1;
    for (int32_t x = f->root[BY_OFFSET]; x >= 0;) {
        if (f->r[x].off >= off) {
            best = x;
            x = f->r[x].ch[BY_OFFSET][0];
        } else {
            x = f->r[x].ch[BY_OFFSET][1];
        }
    }
    return best;
}

/* Place a block of `size` bytes (a multiple of the alignment): best fit among the free
 * ranges, its start; else at the end of the arena, over the last free range when that one
 * touches the end. */
static size_t fset_alloc(fset *f, size_t size)
{
    int32_t k = fset_best_fit(f, size);
    if (k >= 0) {
        frange r = f->r[k];
        fset_erase(f, k);
        if (r.size > size)
            fset_insert(f, r.off + size, r.size - size);
        return r.off;
    }
    int32_t last = fset_before(f, f->end);
    if (last >= 0 && f->r[last].off + f->r[last].size == f->end) {
        size_t off = f->r[last].off;
        fset_erase(f, last);
        f->end = off + size;
        return off;
    }
    size_t off = f->end;
    f->end += size;
    return off;
}

/* Give a block back, merged with the free ranges that touch it. */
static void fset_release(fset *f, size_t off, size_t size)
{
    int32_t left = fset_before(f, off);
    if (left >= 0 && f->r[left].off + f->r[left].size == off) {
        off = f->r[left].off;
        size += f->r[left].size;
        fset_erase(f, left);
    }
    int32_t right = fset_from(f, off + size);
    if (right >= 0 && f->r[right].off == off + size) {
        size += f->r[right].size;
        fset_erase(f, right);
    }
    fset_insert(f, off, size);
}

/* ---------------------------------------------------------------- planning */

enum { SLOT_KEPT = 0, SLOT_PLANNED = 1, SLOT_VIEW = 2 };

/* The size thresholds tried for keeping small blocks apart: largest block >> shift. */
enum { N_SPLITS = 5 };
static const int split_shift[N_SPLITS] = {1, 2, 3, 4, 6};

/* What planning knows of the node at one position of the order. */
struct plan_slot {
    int64_t root;  /* position of the node whose storage holds this value (itself, but for
                      views: the root of the chain of views) */
    int64_t last;  /* last step reading this storage (directly or through views) */
    int64_t from;  /* planned in place: position of the input whose block it took, else -1 */
    size_t bytes;  /* planned: the block, rounded up to the alignment */
    size_t offset; /* planned: the block's offset in the arena */
    uint8_t kind;  /* SLOT_* */
    uint8_t pool;  /* planned: which part of the arena (see place) */
    bool taken;    /* planned: a reader took its block over in place */
    bool released; /* scratch of a walk: its death was handled */
    bool ws;       /* its kernel scratch is planned: ws_bytes at ws_offset in the arena */
    size_t ws_offset;
};

/* A plan of a frozen order is made before anything in the graph changes, so that freezing can
 * fail cleanly, then committed (which cannot fail). */
typedef struct mem_plan {
    struct plan_slot *slots; /* per position of the order */
    void *arena_raw;         /* the arena allocation (plan_memory), NULL when empty */
    char *arena;             /* its 64-byte aligned start */
    size_t arena_bytes;
    bool place;               /* plan_memory: planned nodes get arena blocks */
    sx_cg_plan_report report; /* all but workspace_bytes and seconds */
} mem_plan;

/* May n be written over its input i when that input dies at n? Element-wise ops over any input
 * of the result's size (the only broadcast operand of that size is one of the result's shape,
 * read element by element before being written); matmul over its addend only, never over a
 * factor that shares the addend's storage, and only when that gives the bits of adding the
 * addend after the product (cg_matmul_inplace_ok); max-pool backward over x when no two windows
 * share a cell (pool_disjoint: each window is read whole before its cells are written) and the
 * upstream gradient is not x's storage too; norm as cg_norm_inplace_ok says. */
/* No two pooling windows share a cell: stride >= kernel on both axes and no dilation (the
 * kernel's own test, sx_tensor_maxpool2d_backward_out; a dilated window spans more cells than
 * its kernel, and the kernel refuses dx = x then). Pads and ceil_mode only clip windows. */
static bool pool_disjoint(const sx_pool2d_params *p)
{
    return p->stride_h >= p->kernel_h && p->stride_w >= p->kernel_w && p->dilation_h <= 1 &&
           p->dilation_w <= 1;
}

static bool inplace_ok(const sx_cg_node *n, int i, const struct plan_slot *s)
{
    unsigned f = sx_cg_ops[n->op].flags;
    const sx_cg_node *x = n->in[i];
    if (x->value.size != n->value.size || x->value.dtype != n->value.dtype)
        return false;
    if (f & SX_OPF_INPLACE)
        return n->op != SX_OP_NORM || cg_norm_inplace_ok(n, i);
    if ((f & SX_OPF_INPLACE_POOL) && i == 0)
        return pool_disjoint(&n->attr.pool) && s[n->in[1]->step].root != s[x->step].root;
    if ((f & SX_OPF_INPLACE_ADDEND) && i == 2 && cg_matmul_inplace_ok(n)) {
        int64_t r = s[x->step].root;
        return s[n->in[0]->step].root != r && s[n->in[1]->step].root != r;
    }
    return false;
}

/* May this node's value go in the arena? Not leaves, views (they have no storage), random draws
 * (recomputing one would draw anew), mutating nodes, empty values. classify() also keeps the
 * requested outputs, the roots of requested views and whatever a mutating node writes. */
static bool plannable(const sx_cg_node *n)
{
    unsigned f = sx_cg_ops[n->op].flags;
    return !(f & (SX_OPF_LEAF | SX_OPF_VIEW | SX_OPF_RANDOM | SX_OPF_MUTATES)) && n->value.size > 0;
}

/* Roots, kinds and lifetimes of the order's nodes (inputs come before their readers). */
static void classify(sx_cg_node *const *order, int64_t len, int n_out, sx_cg_node *const *outs,
                     struct plan_slot *s)
{
    for (int64_t i = 0; i < len; i++) {
        sx_cg_node *x = order[i];
        x->step = i;
        bool view = (sx_cg_ops[x->op].flags & SX_OPF_VIEW) && x->n_in > 0;
        s[i] = (struct plan_slot){
            view ? s[x->in[0]->step].root : i, i, -1, 0, 0, SLOT_KEPT, 0, false, false, false, 0};
        if (view)
            s[i].kind = SLOT_VIEW;
        else if (plannable(x))
            s[i].kind = SLOT_PLANNED;
        if (s[i].kind == SLOT_PLANNED)
            s[i].bytes = round_block(value_bytes(x));
        for (int j = 0; j < x->n_in; j++) {
            int64_t r = s[x->in[j]->step].root;
            if (s[r].last < i)
                s[r].last = i;
        }
        for (int k = 0; k < cg_mutated(x); k++)
            s[s[x->in[k]->step].root].kind = SLOT_KEPT;
    }
    for (int i = 0; i < n_out; i++) {
        int64_t r = s[outs[i]->step].root;
        if (s[r].kind == SLOT_PLANNED)
            s[r].kind = SLOT_KEPT;
    }
}

/* Call BODY with r bound to each planned root that dies at step i and is not handed over in
 * place: the roots of x's inputs whose last reader x is, and x itself when nothing reads it.
 * Each once (a root read twice is marked `released`). */
#define FOR_EACH_DEATH(s, x, i, r, BODY)                                                           \
    do {                                                                                           \
        for (int j_ = -1; j_ < (x)->n_in; j_++) {                                                  \
            int64_t r = j_ < 0 ? (i) : (s)[(x)->in[j_]->step].root;                                \
            if ((s)[r].kind != SLOT_PLANNED || (s)[r].last != (i) || (s)[r].released)              \
                continue;                                                                          \
            (s)[r].released = true;                                                                \
            if (!(s)[r].taken) {                                                                   \
                BODY;                                                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Decide the in-place pairs and measure the naive and peak-live bytes: walk the order, each
 * planned node allocating its block at its step (or taking over a dying input's), each block
 * released after its last reader's step. */
static void simulate(sx_cg_node *const *order, int64_t len, struct plan_slot *s, bool inplace,
                     sx_cg_plan_report *rep)
{
    size_t live = 0;
    for (int64_t i = 0; i < len; i++) {
        sx_cg_node *x = order[i];
        if (s[i].kind == SLOT_PLANNED) {
            rep->naive_bytes += s[i].bytes;
            for (int j = 0; inplace && j < x->n_in && s[i].from < 0; j++) {
                int64_t r = s[x->in[j]->step].root;
                if (s[r].kind == SLOT_PLANNED && s[r].last == i && !s[r].taken &&
                    s[r].bytes == s[i].bytes && inplace_ok(x, j, s)) {
                    s[i].from = r;
                    s[r].taken = true; /* handed over: the block now belongs to x */
                    live -= s[r].bytes;
                    rep->inplace_nodes++;
                }
            }
            live += s[i].bytes;
            if (live > rep->peak_live_bytes)
                rep->peak_live_bytes = live;
        }
        FOR_EACH_DEATH(s, x, i, r, live -= s[r].bytes);
    }
}

/* Place the planned blocks by best fit, blocks of at least `split` bytes in a lower part of
 * the arena and smaller ones in an upper part (split = 0: one part). Segregating sizes keeps
 * small long-lived blocks from pinning the space that large short-lived ones could share.
 * Returns the arena's size; offsets go to s[].offset. O(p log p) for p planned nodes. */
static size_t place(sx_cg_node *const *order, int64_t len, struct plan_slot *s, fset f[2],
                    size_t split)
{
    for (int k = 0; k < 2; k++) {
        f[k].n = 0;
        f[k].root[0] = f[k].root[1] = -1;
        f[k].end = 0;
    }
    for (int64_t i = 0; i < len; i++)
        s[i].released = false;
    for (int64_t i = 0; i < len; i++) {
        sx_cg_node *x = order[i];
        if (s[i].kind == SLOT_PLANNED) {
            s[i].pool = s[i].bytes >= split ? 0 : 1;
            s[i].offset =
                s[i].from >= 0 ? s[s[i].from].offset : fset_alloc(&f[s[i].pool], s[i].bytes);
        }
        FOR_EACH_DEATH(s, x, i, r, fset_release(&f[s[r].pool], s[r].offset, s[r].bytes));
    }
    for (int64_t i = 0; i < len; i++)
        if (s[i].kind == SLOT_PLANNED && s[i].pool == 1)
            s[i].offset += f[0].end;
    return f[0].end + f[1].end;
}

/* ---------------------------------------------------------------- greedy by size */

/* A second placement: the blocks (a planned node with the nodes that take its block over in
 * place after it) by decreasing size, each at the lowest offset where it meets no block placed
 * before whose steps overlap its own (the "greedy by size" planner of TFLite's arena). Best fit
 * in the order of the steps places a large value wherever the order left a hole, which may pin
 * the top of the arena; placing the largest first keeps the arena near the peak of live bytes
 * for CNNs, whose largest values live at different times. O(b^2) for b blocks. */
/* Graphs of more planned nodes keep best fit alone: the placement is quadratic, and a training
 * graph of 15,000 nodes (bench/bench_compile) would spend tens of milliseconds in it. Inference
 * graphs of CNNs plan a few hundred nodes (resnet50: 480, inception_v3: ~700). */
#define PLAN_GREEDY_MAX_BLOCKS 2048

typedef struct gblock {
    int64_t head;  /* the position of its first node */
    int64_t start; /* the step it is written at */
    int64_t end;   /* the step of its last reader (inclusive) */
    size_t bytes, offset;
} gblock;

static int gblock_cmp(const void *a, const void *b)
{
    const gblock *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return (x->head > y->head) - (x->head < y->head);
}

/* The lowest offset for b among the placed blocks (by offset in `by_off`) that overlap its
 * steps. */
static size_t gblock_fit(const gblock *blocks, const int64_t *by_off, int64_t n_placed,
                         const gblock *b)
{
    size_t off = 0;
    for (int64_t k = 0; k < n_placed; k++) {
        const gblock *y = &blocks[by_off[k]];
        if (y->start > b->end || b->start > y->end || y->offset + y->bytes <= off)
            continue;
        if (y->offset >= off + b->bytes)
            break; /* b fits below y, and every later block starts above y */
        off = y->offset + y->bytes;
    }
    return off;
}

/* Place the blocks greedily by size; offsets into s[].offset when the arena is smaller than
 * `than` (then returns its size), else s is left alone and `than` returned. *nomem on a failed
 * allocation (s left alone). */
static size_t place_by_size(int64_t len, struct plan_slot *s, size_t than, bool *nomem)
{
    int64_t n = 0, *block_of = sx_alloc((size_t)(len > 0 ? len : 1) * sizeof *block_of);
    gblock *b = sx_alloc((size_t)(len > 0 ? len : 1) * sizeof *b);
    int64_t *by_off = sx_alloc((size_t)(len > 0 ? len : 1) * sizeof *by_off);
    *nomem = block_of == NULL || b == NULL || by_off == NULL;
    for (int64_t i = 0; !*nomem && i < len; i++) {
        if (s[i].kind != SLOT_PLANNED)
            continue;
        int64_t k = s[i].from >= 0 ? block_of[s[i].from] : n++;
        block_of[i] = k;
        if (s[i].from < 0)
            b[k] = (gblock){i, i, s[i].last, s[i].bytes, 0};
        b[k].end = s[i].last > b[k].end ? s[i].last : b[k].end;
    }
    if (!*nomem)
        qsort(b, (size_t)n, sizeof *b, gblock_cmp);
    size_t arena = 0;
    for (int64_t k = 0; !*nomem && k < n; k++) {
        b[k].offset = gblock_fit(b, by_off, k, &b[k]);
        arena = b[k].offset + b[k].bytes > arena ? b[k].offset + b[k].bytes : arena;
        int64_t at = k; /* keep by_off sorted by offset */
        while (at > 0 && b[by_off[at - 1]].offset > b[k].offset) {
            by_off[at] = by_off[at - 1];
            at--;
        }
        by_off[at] = k;
    }
    if (!*nomem && arena < than) {
        for (int64_t k = 0; k < n; k++)
            block_of[b[k].head] = k; /* heads only: the others follow their head below */
        for (int64_t i = 0; i < len; i++)
            if (s[i].kind == SLOT_PLANNED)
                s[i].offset = s[i].from >= 0 ? s[s[i].from].offset : b[block_of[i]].offset;
    }
    sx_free(block_of);
    sx_free(b);
    sx_free(by_off);
    return *nomem || arena >= than ? than : arena;
}

/* ---------------------------------------------------------------- kernel scratch */

typedef struct span {
    size_t lo, hi;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Place each node's kernel scratch (ws_bytes, rounded to the alignment) in the arena of the
 * placed values: at the lowest offset where it meets no value block live at the node's step
 * (its inputs, its result, everything read later), above the values when no hole holds it. A
 * block lives during its node only, so scratch blocks never meet each other. The lowest offset
 * matters: a kernel writes the start of its scratch (a convolution sizes it for every kernel,
 * dtype and thread count, and uses one of them), and the values have made those pages resident
 * anyway, while untouched pages past them cost nothing. Returns the arena's size (at least
 * `values`); *nomem on a failed allocation (then no scratch is planned). O(w a log a) for w
 * nodes with scratch and a values live at once. */
static size_t place_scratch(sx_cg_node *const *order, int64_t len, struct plan_slot *s,
                            size_t values, bool *nomem)
{
    size_t n = (size_t)(len > 0 ? len : 1);
    int64_t *act = sx_alloc(n * sizeof *act), *at = sx_alloc(n * sizeof *at), n_act = 0;
    span *live = sx_alloc(n * sizeof *live);
    size_t arena = values;
    *nomem = act == NULL || at == NULL || live == NULL;
    for (int64_t i = 0; !*nomem && i < len; i++) {
        sx_cg_node *x = order[i];
        at[i] = -1;
        if (s[i].kind == SLOT_PLANNED) {
            at[i] = n_act;
            act[n_act++] = i;
        }
        if (x->ws_bytes > 0 && !(sx_cg_ops[x->op].flags & SX_OPF_LEAF)) {
            for (int64_t k = 0; k < n_act; k++)
                live[k] = (span){s[act[k]].offset, s[act[k]].offset + s[act[k]].bytes};
            qsort(live, (size_t)n_act, sizeof *live, span_cmp);
            size_t need = round_block(x->ws_bytes), off = 0;
            for (int64_t k = 0; k < n_act && live[k].lo < off + need; k++)
                off = live[k].hi > off ? live[k].hi : off;
            s[i].ws = true;
            s[i].ws_offset = off;
            arena = off + need > arena ? off + need : arena;
        }
        /* the blocks whose last reader x is leave (once: a root read twice is found twice) */
        for (int j = -1; j < x->n_in; j++) {
            int64_t r = j < 0 ? i : s[x->in[j]->step].root;
            if (s[r].kind != SLOT_PLANNED || s[r].last != i || at[r] < 0)
                continue;
            int64_t moved = act[--n_act];
            act[at[r]] = moved;
            at[moved] = at[r];
            at[r] = -1;
        }
    }
    sx_free(act);
    sx_free(at);
    sx_free(live);
    for (int64_t i = 0; *nomem && i < len; i++)
        s[i].ws = false;
    return arena;
}

/* Plan the storage of the `len` nodes of a frozen order for the requested outputs and allocate
 * the arena. Sets each order node's `step`. On failure nothing is left allocated. */
static sx_status plan_make(sx_cg_graph *g, sx_cg_node *const *order, int64_t len, int n_out,
                           sx_cg_node *const *outs, const sx_cg_freeze_params *p, mem_plan *plan)
{
    (void)g;
    memset(plan, 0, sizeof *plan);
    sx_cg_plan_report rep;
    memset(&rep, 0, sizeof rep);
    bool on = p->plan_memory;
    int64_t n_planned = 0;
    size_t largest = 0;
    struct plan_slot *s = sx_alloc((size_t)(len > 0 ? len : 1) * sizeof *s);
    if (s == NULL)
        return SX_E_NOMEM;
    classify(order, len, n_out, outs, s);
    for (int64_t i = 0; i < len; i++)
        if (s[i].kind == SLOT_PLANNED) {
            n_planned++;
            largest = s[i].bytes > largest ? s[i].bytes : largest;
        }
    if (n_planned > INT32_MAX / 2 - 1) {
        sx_free(s);
        return sx_error(SX_E_UNSUPPORTED, "sx_cg_freeze: %lld nodes to plan is too many",
                        (long long)n_planned);
    }
    simulate(order, len, s, on && p->inplace, &rep);

    if (on && n_planned > 0) {
        /* Best fit in one part, then with small blocks apart at a few thresholds: keep the
         * smallest arena (ties: the earliest candidate). */
        fset f[2] = {{NULL, 0, (int32_t)(2 * n_planned + 1), {-1, -1}, 0},
                     {NULL, 0, (int32_t)(2 * n_planned + 1), {-1, -1}, 0}};
        f[0].r = sx_alloc((size_t)f[0].cap * sizeof *f[0].r);
        f[1].r = sx_alloc((size_t)f[1].cap * sizeof *f[1].r);
        if (f[0].r == NULL || f[1].r == NULL) {
            sx_free(f[0].r);
            sx_free(f[1].r);
            sx_free(s);
            return SX_E_NOMEM;
        }
        size_t best = place(order, len, s, f, 0), best_split = 0;
        for (int c = 0; c < N_SPLITS; c++) {
            size_t split = largest >> split_shift[c];
            size_t a = place(order, len, s, f, split);
            if (a < best) {
                best = a;
                best_split = split;
            }
        }
        plan->arena_bytes = place(order, len, s, f, best_split);
        sx_free(f[0].r);
        sx_free(f[1].r);
        bool nomem = false;
        if (n_planned <= PLAN_GREEDY_MAX_BLOCKS)
            plan->arena_bytes = place_by_size(len, s, plan->arena_bytes, &nomem);
        rep.arena_bytes = plan->arena_bytes;
        if (!nomem)
            plan->arena_bytes = place_scratch(order, len, s, plan->arena_bytes, &nomem);
        rep.scratch_bytes = plan->arena_bytes - rep.arena_bytes;
        if (nomem) {
            sx_free(s);
            return SX_E_NOMEM;
        }
        uintptr_t lent = (uintptr_t)p->arena,
                  start = (lent + (BLOCK_ALIGN - 1)) & ~(uintptr_t)(BLOCK_ALIGN - 1);
        if (p->arena != NULL && p->arena_bytes >= start - lent &&
            p->arena_bytes - (start - lent) >= plan->arena_bytes) {
            plan->arena = (char *)start; /* borrowed: arena_raw stays NULL, nothing to free */
            rep.arena_lent = true;
        } else {
            plan->arena_raw = sx_alloc(plan->arena_bytes + BLOCK_ALIGN - 1);
            if (plan->arena_raw == NULL) {
                sx_free(s);
                memset(plan, 0, sizeof *plan);
                return SX_E_NOMEM;
            }
            uintptr_t a = (uintptr_t)plan->arena_raw;
            plan->arena = (char *)((a + (BLOCK_ALIGN - 1)) & ~(uintptr_t)(BLOCK_ALIGN - 1));
        }
    }
    rep.planned_nodes = on ? n_planned : 0;
    plan->slots = s;
    plan->place = on;
    plan->report = rep;
    return SX_OK;
}

void *sx_cg_arena(const sx_cg_graph *g, size_t *bytes)
{
    bool has = g != NULL && g->frozen && g->arena != NULL;
    if (bytes != NULL)
        *bytes = has ? g->arena_bytes : 0;
    return has ? g->arena : NULL;
}

/* Does the plan place the node at position i in the arena? (Such nodes need no own storage.) */
static bool plan_planned(const mem_plan *plan, int64_t i)
{
    return plan->place && plan->slots[i].kind == SLOT_PLANNED;
}

/* Install the plan: the graph takes the arena, planned nodes drop any own buffer and point into
 * it, views are re-pointed. The plan is emptied. */
static void plan_commit(sx_cg_graph *g, sx_cg_node *const *order, int64_t len, mem_plan *plan)
{
    struct plan_slot *s = plan->slots;
    g->arena_raw = plan->arena_raw;
    g->arena = plan->arena;
    g->arena_bytes = plan->arena_bytes;
    g->n_planned = 0;
    for (int64_t i = 0; i < len; i++) {
        sx_cg_node *x = order[i];
        x->step = i;
        x->planned = plan_planned(plan, i);
        x->transient = plan->place && s[s[i].root].kind == SLOT_PLANNED;
        x->plan_need = false;
        x->plan_from = NULL;
        if (x->planned) {
            /* a value computed before freezing is dropped: transient values are recomputed
             * when read */
            sx_free(x->own);
            x->own = NULL;
            x->plan_offset = s[i].offset;
            x->value.data = g->arena + s[i].offset;
            x->plan_from = s[i].from >= 0 ? order[s[i].from] : NULL;
            g->n_planned++;
        } else if (s[i].kind == SLOT_VIEW && x->value.data != NULL) {
            x->value.data = x->in[0]->value.data; /* its input may have moved */
        }
    }
    /* Views outside the order, evaluated before freezing, may point at a buffer just dropped:
     * they lose their value (the frozen graph cannot evaluate them anyway). In creation order,
     * so that chains of views follow. Members are the nodes marked by this freeze. */
    for (int64_t i = 0; plan->place && i < g->n_nodes; i++) {
        sx_cg_node *x = g->nodes[i];
        if (x->dead || x->mark == g->epoch || !(sx_cg_ops[x->op].flags & SX_OPF_VIEW) ||
            x->n_in == 0 || x->value.data == NULL)
            continue;
        const sx_cg_node *in = x->in[0];
        if (in->planned || (in->mark != g->epoch && (sx_cg_ops[in->op].flags & SX_OPF_VIEW) &&
                            in->value.data == NULL)) {
            x->value.data = NULL;
            cg_invalidate(g, x);
        }
    }
    sx_free(s);
    memset(plan, 0, sizeof *plan);
}

/* Free a plan that was not committed. */
static void plan_discard(mem_plan *plan)
{
    sx_free(plan->slots);
    sx_free(plan->arena_raw);
    memset(plan, 0, sizeof *plan);
}

/* ---------------------------------------------------------------- planned evaluation */

sx_status cg_plan_select(sx_cg_graph *g, int n, sx_cg_node *const *nodes)
{
    for (int i = 0; i < n; i++)
        if (nodes[i]->transient)
            return sx_error(SX_E_STATE,
                            "sx_cg_eval: node %lld (%s) shares planned storage that later nodes "
                            "reuse: freeze with it among the outputs to read it",
                            (long long)nodes[i]->id, sx_cg_op_name(nodes[i]->op));
    /* Backwards from the request (only what it needs runs, as sx_cg_eval promises: the
     * data-parallel step asks for the gradients first, then for the updates): a kept node runs
     * when it is invalid; a transient node when a running node reads it (its block may hold
     * another node's value by now). plan_need ends as "runs". */
    for (int i = 0; i < n; i++)
        nodes[i]->plan_need = !nodes[i]->valid;
    for (int64_t i = g->n_order - 1; i >= 0; i--) {
        sx_cg_node *x = g->order[i];
        if (!x->plan_need)
            continue;
        for (int j = 0; j < x->n_in; j++) {
            sx_cg_node *in = x->in[j];
            in->plan_need = in->plan_need || in->transient || !in->valid;
        }
    }
    return SX_OK;
}

/* The planned block of x (at step i) against the blocks of `active`, live when it starts. */
static sx_status check_block(const sx_cg_graph *g, const sx_cg_node *x, int64_t i,
                             const int64_t *active, int64_t n_active, const int64_t *last)
{
    size_t x0 = x->plan_offset, x1 = x0 + value_bytes(x);
    for (int64_t a = 0; a < n_active; a++) {
        const sx_cg_node *y = g->order[active[a]];
        size_t y0 = y->plan_offset, y1 = y0 + value_bytes(y);
        if (x0 >= y1 || y0 >= x1)
            continue;
        if (x->plan_from == y && last[active[a]] == i && x0 == y0 && x1 == y1)
            continue; /* the planner's in-place pair: y dies where x is written */
        return sx_error(SX_E_STATE,
                        "sx_cg_plan_check: nodes %lld (%s, steps %lld..%lld) and %lld (%s, steps "
                        "%lld..%lld) share arena bytes [%zu, %zu)",
                        (long long)y->id, sx_cg_op_name(y->op), (long long)active[a],
                        (long long)last[active[a]], (long long)x->id, sx_cg_op_name(x->op),
                        (long long)i, (long long)last[i], x0 > y0 ? x0 : y0, x1 < y1 ? x1 : y1);
    }
    return SX_OK;
}

/* The scratch block of x (at step i): inside the arena, aligned, and apart from every block of
 * `active`, live at step i (x's inputs, x's own block, what later nodes read). */
static sx_status check_scratch(const sx_cg_graph *g, const sx_cg_node *x, int64_t i,
                               const int64_t *active, int64_t n_active, const int64_t *last)
{
    size_t x0 = x->ws_offset, x1 = x0 + x->ws_bytes;
    if (x0 % BLOCK_ALIGN != 0 || x1 < x0 || x1 > g->arena_bytes)
        return sx_error(SX_E_STATE,
                        "sx_cg_plan_check: node %lld (%s) has scratch at offset %zu of %zu bytes "
                        "outside an arena of %zu bytes, or misaligned",
                        (long long)x->id, sx_cg_op_name(x->op), x0, x->ws_bytes, g->arena_bytes);
    for (int64_t a = 0; a < n_active; a++) {
        const sx_cg_node *y = g->order[active[a]];
        size_t y0 = y->plan_offset, y1 = y0 + value_bytes(y);
        if (x0 >= y1 || y0 >= x1)
            continue;
        return sx_error(SX_E_STATE,
                        "sx_cg_plan_check: the scratch of node %lld (%s, step %lld) and the value "
                        "of node %lld (%s, steps %lld..%lld) share arena bytes [%zu, %zu)",
                        (long long)x->id, sx_cg_op_name(x->op), (long long)i, (long long)y->id,
                        sx_cg_op_name(y->op), (long long)active[a], (long long)last[active[a]],
                        x0 > y0 ? x0 : y0, x1 < y1 ? x1 : y1);
    }
    return SX_OK;
}

sx_status sx_cg_plan_check(const sx_cg_graph *g)
{
    const char *who = "sx_cg_plan_check";
    if (g == NULL)
        return sx_error(SX_E_ARG, "%s: graph is NULL", who);
    if (!g->frozen)
        return sx_error(SX_E_STATE, "%s: the graph is not frozen", who);
    int64_t len = g->n_order;
    int64_t *pos = sx_alloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *pos);
    int64_t *root = sx_alloc((size_t)(len > 0 ? len : 1) * sizeof *root);
    int64_t *last = sx_alloc((size_t)(len > 0 ? len : 1) * sizeof *last);
    int64_t *active = sx_alloc((size_t)(len > 0 ? len : 1) * sizeof *active);
    sx_status st = pos && root && last && active ? SX_OK : SX_E_NOMEM;
    const char *lo = g->arena, *hi = g->arena ? g->arena + g->arena_bytes : NULL;

    /* lifetimes from the order alone: a value lives from its step to its last reader's */
    for (int64_t i = 0; st == SX_OK && i < g->n_nodes; i++)
        pos[i] = -1;
    for (int64_t i = 0; st == SX_OK && i < len; i++)
        pos[g->order[i]->id] = i;
    for (int64_t i = 0; st == SX_OK && i < len; i++) {
        const sx_cg_node *x = g->order[i];
        bool view = (sx_cg_ops[x->op].flags & SX_OPF_VIEW) && x->n_in > 0;
        root[i] = view ? root[pos[x->in[0]->id]] : i;
        last[i] = i;
        for (int j = 0; j < x->n_in; j++) {
            int64_t r = root[pos[x->in[j]->id]];
            if (last[r] < i)
                last[r] = i;
        }
    }

    /* every planned block inside the arena, aligned; nothing else in the arena */
    for (int64_t i = 0; st == SX_OK && i < len; i++) {
        const sx_cg_node *x = g->order[i];
        const char *d = x->value.data;
        if (x->planned) {
            if (d != g->arena + x->plan_offset || x->plan_offset % BLOCK_ALIGN != 0 ||
                x->plan_offset + value_bytes(x) > g->arena_bytes)
                st = sx_error(SX_E_STATE,
                              "%s: node %lld (%s) has a block at offset %zu of %zu bytes outside "
                              "an arena of %zu bytes, or misaligned",
                              who, (long long)x->id, sx_cg_op_name(x->op), x->plan_offset,
                              value_bytes(x), g->arena_bytes);
        } else if (root[i] == i && d != NULL && lo != NULL && d >= lo && d < hi) {
            st = sx_error(SX_E_STATE, "%s: node %lld (%s) is not planned but lives in the arena",
                          who, (long long)x->id, sx_cg_op_name(x->op));
        }
    }

    /* sweep the steps: compare each planned block with the blocks still live when it starts,
     * and each scratch block with the blocks live at its step (the node's own among them) */
    int64_t n_active = 0;
    for (int64_t i = 0; st == SX_OK && i < len; i++) {
        const sx_cg_node *x = g->order[i];
        if (!x->planned && !x->ws_planned)
            continue;
        int64_t k = 0;
        for (int64_t a = 0; a < n_active; a++)
            if (last[active[a]] >= i)
                active[k++] = active[a];
        n_active = k;
        if (x->planned)
            st = check_block(g, x, i, active, n_active, last);
        if (x->planned)
            active[n_active++] = i;
        if (st == SX_OK && x->ws_planned)
            st = check_scratch(g, x, i, active, n_active, last);
    }
    sx_free(pos);
    sx_free(root);
    sx_free(last);
    sx_free(active);
    return st;
}

/* ---------------------------------------------------------------- freezing */

sx_cg_freeze_params sx_cg_freeze_params_default(void)
{
    sx_cg_freeze_params p = {true, true, NULL, 0};
    return p;
}

/* Order, plan (plan.c), then every allocation (arena, own buffers of the kept nodes, scratch);
 * the graph changes only once all of them succeeded. Own buffers made before a failure stay
 * with their nodes (as after a lazy evaluation) and are freed with the graph. `who`: the public
 * function called. */
static sx_status freeze(const char *who, sx_cg_graph *g, int n, sx_cg_node *const *outputs,
                        const sx_cg_freeze_params *p, sx_cg_plan_report *report)
{
    double t0 = sx_seconds();
    SX_TRY(cg_check_request(who, g, n, outputs));
    if (g->frozen)
        return sx_error(SX_E_STATE, "%s: the graph is already frozen", who);
    if (n == 0)
        return sx_error(SX_E_ARG, "%s: no outputs", who);
    sx_cg_freeze_params def = sx_cg_freeze_params_default();
    if (p == NULL)
        p = &def;
    int64_t count = 0, len = 0;
    SX_TRY(cg_mark_needed(g, n, outputs, true, &count));
    sx_cg_node **order = sx_alloc((size_t)count * sizeof *order);
    sx_cg_node **outs = sx_alloc((size_t)n * sizeof *outs);
    sx_cg_node **memo = cg_realloc_nodes(g->memo, n); /* room to remember one request */
    mem_plan plan;
    memset(&plan, 0, sizeof plan);
    if (memo != NULL) {
        g->memo = memo;
        g->memo_cap = n;
        g->memo_n = 0;
    }
    sx_status s =
        order && outs && memo
            ? SX_OK
            : sx_error(SX_E_NOMEM, "%s: out of memory ordering %lld nodes", who, (long long)count);
    if (s == SX_OK)
        s = cg_topo_order(g, n, outputs, count, order, &len);
    if (s == SX_OK)
        s = plan_make(g, order, len, n, outputs, p, &plan);
    /* scratch blocks are marked now, for the scratch sizes below (cleared on failure) */
    for (int64_t i = 0; s == SX_OK && i < len; i++) {
        order[i]->ws_planned = plan.slots[i].ws;
        order[i]->ws_offset = plan.slots[i].ws_offset;
    }
    size_t ws = 0;
    for (int64_t i = 0; s == SX_OK && i < len; i++) {
        if (!plan_planned(&plan, i))
            s = cg_storage(g, order[i]);
        if (order[i]->ws_bytes > ws && !order[i]->ws_planned)
            ws = order[i]->ws_bytes;
    }
    void *wsp = NULL;
    if (s == SX_OK && ws > 0)
        s = cg_workspace(g, ws, &wsp);
    if (s == SX_OK && sx_cg_workers(g) >= 2) {
        int64_t n_planned = 0;
        for (int64_t i = 0; i < len; i++)
            n_planned += plan_planned(&plan, i);
        s = cg_par_prepare_frozen(g, sx_cg_workers(g), order, len, n_planned);
    }
    if (s != SX_OK) {
        for (int64_t i = 0; i < len; i++)
            order[i]->ws_planned = false;
        plan_discard(&plan);
        sx_free(order);
        sx_free(outs);
        return s;
    }
    sx_cg_plan_report rep = plan.report;
    plan_commit(g, order, len, &plan);
    for (int64_t i = 0; i < len; i++)
        order[i]->frozen_member = true;
    memcpy(outs, outputs, (size_t)n * sizeof *outs);
    g->order = order;
    g->n_order = len;
    g->outputs = outs;
    g->n_outputs = n;
    g->memo_cap = n;
    g->memo_n = 0;
    g->frozen = true;
    if (sx_cg_workers(g) >= 2 &&
        cg_par_prepare_frozen(g, sx_cg_workers(g), g->order, g->n_order, -1) != SX_OK)
        sx_error_clear(); /* room in the engine is made at the first evaluation instead */
    if (report != NULL) {
        rep.workspace_bytes = g->ws_bytes;
        rep.seconds = sx_seconds() - t0;
        *report = rep;
    }
    return SX_OK;
}

sx_status sx_cg_freeze_ex(sx_cg_graph *g, int n, sx_cg_node *const *outputs,
                          const sx_cg_freeze_params *p, sx_cg_plan_report *report)
{
    return freeze("sx_cg_freeze_ex", g, n, outputs, p, report);
}

sx_status sx_cg_freeze(sx_cg_graph *g, int n, sx_cg_node *const *outputs)
{
    return freeze("sx_cg_freeze", g, n, outputs, NULL, NULL);
}

bool sx_cg_frozen(const sx_cg_graph *g)
{
    return g != NULL && g->frozen;
}
