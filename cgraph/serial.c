/* serial.c: save and load of graphs, named tensors and metadata (strix model files and
 * checkpoints). A file is a list of tagged, length-prefixed sections closed by a CRC-32
 * trailer; every number is written byte by byte, little-endian, whatever the host. Loading
 * trusts nothing it has not checked against the bytes really there: framing and checksum
 * first, then every field, then every node is rebuilt through sx_cg_op_new so that the op
 * table's shape rules judge it exactly as they judge a node built by hand.
 *
 * The format, version 2 (version 1, without the conv2 and pool2 fields below, still loads).
 * Integers are unsigned little-endian (u8, u16, u32, u64) or two's
 * complement little-endian (i16, i32, i64); f32/f64 are IEEE-754 bit patterns, little-endian.
 * A string is a u32 byte count followed by that many bytes (UTF-8 by convention, no NUL byte,
 * no terminator). A shape is a u8 rank (0..8) followed by rank u64 dims (each < 2^63; the
 * product of the non-zero ones < 2^60, so that byte counts fit). A dtype is a u8: 0 = f32, 1 = f64.
 * Values are row-major, 4 (f32) or 8 (f64) bytes each.
 *
 *   file    = header section* trailer
 *   header  = "STRIXMDL" (8 bytes)  u32 version (= 2)  u32 flags (= 0; unknown bits are refused)
 *   section = tag (4 printable ASCII bytes)  u64 length  payload (length bytes)
 *   trailer = "END "  u64 8  u32 CRC-32  4 zero bytes
 * The CRC-32 (zlib's crc32: polynomial 0xEDB88320, reflected, initial and final xor 0xFFFFFFFF)
 * covers every byte before the trailer. Nothing follows the trailer. Sections appear at most
 * once each, in any order; a reader skips sections whose tags it does not know, and each
 * section it knows must use exactly its length. The writer writes GRPH, TENS, META, in that
 * order, and omits empty ones.
 *
 *   "GRPH" (a graph)
 *     dtype               the graph's dtype (of sx_cg_scalar constants)
 *     u32 R               random generators, then R x (4 x u64): xoshiro256** states (not all
 *                         zero); the i-th
 *                         is generator id i (sx_cg_rng_new, dropout masks' attr.rng_id)
 *     u64 N               nodes, then N nodes, inputs before their readers; per node:
 *       string op         the op's name in sx_ops.def ("conv2d"), never its number, so that
 *                         the table may grow without changing old files
 *       dtype, shape      of the node's value (for an op, what its shape rule must give)
 *       string name       empty = unnamed
 *       u32 k, k x u64    input count and input node indices, each < this node's index
 *       attributes        every field of sx_cg_attr in declaration order:
 *                           f64 alpha, f64 beta, u32 axes, u8 keepdims, u8 trans_a,
 *                           u8 trans_b (bools are 0 or 1), i32 axis, i32 rank (0..8),
 *                           8 x i64 shape, 8 x i64 ints, 8 x i64 ints2,
 *                           8 x (i64 start, i64 stop, i64 step) slice,
 *                           conv: i32 stride_h, i32 stride_w, i32 padding (0 VALID, 1 SAME),
 *                           pool: i32 kernel_h, i32 kernel_w, i32 stride_h, i32 stride_w,
 *                                 i32 padding,
 *                           (version 2 on) conv2: i32 pad_top, pad_bottom, pad_left,
 *                                 pad_right, dilation_h, dilation_w, groups,
 *                                 output_padding_h, output_padding_w; pool2: i32 pad_top,
 *                                 pad_bottom, pad_left, pad_right, dilation_h, dilation_w,
 *                                 ceil_mode, count_include_pad (paddings 0 VALID, 1 SAME =
 *                                 SAME_UPPER, 2 SAME_LOWER, 3 EXPLICIT),
 *                           i32 rng_id, 6 x f64 (zero; read and ignored),
 *                           prog: i32 n (0..32), then n instructions, each: u8 kind (0 map,
 *                                 1 binary, 2 fma, 3 where, 4 store), string op (the map or binary
 *                                 op's name, sx_map_name / sx_binary_name; empty for fma and
 *                                 where), i16 a, i16 b, i16 c, f64 alpha; instructions past
 *                                 n are zero
 *                         (571 bytes when n = 0; leaves have all-zero attributes)
 *       values            for "const" and "param" only: the node's value (so a model file is
 *                         self-contained); an "input" stores nothing more
 *     u32 M (>= 1)        outputs, then M x (u64 node index, string name (non-empty,
 *                         distinct))
 *   "TENS" (named tensors)
 *     u64 count, then per tensor: string name (non-empty, distinct), dtype, shape, values
 *   "META" (metadata)
 *     u64 count, then per entry: string key (non-empty, distinct), string value
 */
#include "cgraph_impl.h"
#include "codec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FORMAT_VERSION 2u
/* The least bytes a node can take: op name of one byte, rank 0, empty name, no input,
 * attributes without a fused program (503 bytes). */
#define NODE_MIN_BYTES (4u + 1u + 1u + 1u + 4u + 4u + 503u)
#define MAX_OP_NAME 64u
#define MAX_INPUT_BYTES ((uint64_t)1 << 48) /* 256 TiB: beyond any machine's address space */

static const char magic[8] = {'S', 'T', 'R', 'I', 'X', 'M', 'D', 'L'};

/* The attribute encoding below lists every field of sx_cg_attr. A new field must be added to
 * put_attr/get_attr (and the format version bumped); this catches most additions. */
#if defined(__x86_64__) || defined(__aarch64__)
/* The typed views of (alpha, ints[]) store as those fields: their double over alpha, their
 * integers over ints[0], ints[1], ... (sx_cgraph.h). */
#define TYPED_VIEW(f, d, i0)                                                                       \
    _Static_assert(offsetof(sx_cg_attr, f.d) == offsetof(sx_cg_attr, alpha) &&                     \
                       offsetof(sx_cg_attr, f.i0) == offsetof(sx_cg_attr, ints),                   \
                   "sx_cg_attr." #f " is not a view of (alpha, ints[])");
TYPED_VIEW(sparse_xent, smoothing, ignore)
TYPED_VIEW(attention, scale, causal)
TYPED_VIEW(norm, eps, lead)
#undef TYPED_VIEW
_Static_assert(offsetof(sx_cg_attr, embedding.pad) == offsetof(sx_cg_attr, ints) &&
                   offsetof(sx_cg_attr, adaptive_pool.out_h) == offsetof(sx_cg_attr, ints) &&
                   offsetof(sx_cg_attr, allreduce.offset) == offsetof(sx_cg_attr, ints) &&
                   offsetof(sx_cg_attr, index.count) == offsetof(sx_cg_attr, ints) &&
                   offsetof(sx_cg_attr, update.stores) == offsetof(sx_cg_attr, ints) &&
                   offsetof(sx_cg_attr, dropout.p) == offsetof(sx_cg_attr, alpha),
               "the integer views of sx_cg_attr start at ints[0]");
_Static_assert(sizeof(sx_cg_attr) == 1040, "sx_cg_attr changed: update the attribute encoding "
                                           "of serial.c and bump FORMAT_VERSION");
#endif

static void put_shape(writer *w, sx_dtype dtype, int rank, const int64_t *shape)
{
    cg_put_u8(w, (unsigned)dtype);
    cg_put_u8(w, (unsigned)rank);
    for (int i = 0; i < rank; i++)
        cg_put_u64(w, (uint64_t)shape[i]);
}

/* Every field of sx_cg_attr, in declaration order; get_attr reads the same sequence. The
 * fused program's instructions past prog.n are never run and not stored. */
static void put_attr(writer *w, const sx_cg_attr *a)
{
    cg_put_f64(w, a->alpha);
    cg_put_f64(w, a->beta);
    cg_put_u32(w, a->axes);
    cg_put_u8(w, a->keepdims);
    cg_put_u8(w, a->trans_a);
    cg_put_u8(w, a->trans_b);
    cg_put_i32(w, a->axis);
    cg_put_i32(w, a->rank);
    for (int i = 0; i < SX_MAX_RANK; i++)
        cg_put_i64(w, a->shape[i]);
    for (int i = 0; i < SX_MAX_RANK; i++)
        cg_put_i64(w, a->ints[i]);
    for (int i = 0; i < SX_MAX_RANK; i++)
        cg_put_i64(w, a->ints2[i]);
    for (int i = 0; i < SX_MAX_RANK; i++) {
        cg_put_i64(w, a->slice[i].start);
        cg_put_i64(w, a->slice[i].stop);
        cg_put_i64(w, a->slice[i].step);
    }
    cg_put_i32(w, a->conv.stride_h);
    cg_put_i32(w, a->conv.stride_w);
    cg_put_i32(w, (int)a->conv.padding);
    cg_put_i32(w, a->pool.kernel_h);
    cg_put_i32(w, a->pool.kernel_w);
    cg_put_i32(w, a->pool.stride_h);
    cg_put_i32(w, a->pool.stride_w);
    cg_put_i32(w, (int)a->pool.padding);
    const sx_conv2d_params *c = &a->conv;
    const int conv2[] = {c->pad_top,   c->pad_bottom,       c->pad_left,
                         c->pad_right, c->dilation_h,       c->dilation_w,
                         c->groups,    c->output_padding_h, c->output_padding_w};
    const sx_pool2d_params *q = &a->pool;
    const int pool2[] = {q->pad_top,    q->pad_bottom, q->pad_left,  q->pad_right,
                         q->dilation_h, q->dilation_w, q->ceil_mode, q->count_include_pad};
    for (size_t i = 0; i < sizeof conv2 / sizeof conv2[0]; i++)
        cg_put_i32(w, conv2[i]);
    for (size_t i = 0; i < sizeof pool2 / sizeof pool2[0]; i++)
        cg_put_i32(w, pool2[i]);
    cg_put_i32(w, a->rng_id);
    for (int i = 0; i < 6; i++)
        cg_put_f64(w, 0.0);
    cg_put_i32(w, a->prog.n);
    for (int k = 0; k < a->prog.n; k++) {
        const sx_fused_instr *in = &a->prog.ins[k];
        cg_put_u8(w, in->kind);
        cg_put_str(w, in->kind == SX_FUSED_MAP      ? sx_map_name((sx_map_op)in->op)
                      : in->kind == SX_FUSED_BINARY ? sx_binary_name((sx_binary_op)in->op)
                                                    : "");
        cg_put_i16(w, in->a);
        cg_put_i16(w, in->b);
        cg_put_i16(w, in->c);
        cg_put_f64(w, in->alpha);
    }
}

/* ---------------------------------------------------------------- name index */

/* An open-addressing set of names (slot = index + 1; 0 = empty): finds repeated names and
 * looks names up in O(1), so that no file, however many names it claims, costs quadratic
 * time. */
typedef struct name_index {
    int *slot;
    size_t cap; /* a power of two, or 0 when there are no names */
} name_index;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* Index names[0..n); *dup = the index of the first name seen twice, or -1. */
static sx_status index_build(name_index *ix, int n, const char *const *names, int *dup)
{
    *dup = -1;
    ix->slot = NULL;
    ix->cap = 0;
    if (n == 0)
        return SX_OK;
    size_t cap = 8;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    ix->slot = sx_calloc(cap, sizeof *ix->slot);
    if (ix->slot == NULL)
        return SX_E_NOMEM;
    ix->cap = cap;
    for (int i = 0; i < n; i++) {
        size_t j = (size_t)str_hash(names[i]) & (cap - 1);
        for (; ix->slot[j] != 0; j = (j + 1) & (cap - 1))
            if (strcmp(names[ix->slot[j] - 1], names[i]) == 0) {
                if (*dup < 0)
                    *dup = i;
                break;
            }
        if (ix->slot[j] == 0)
            ix->slot[j] = i + 1;
    }
    return SX_OK;
}

static int index_find(const name_index *ix, const char *const *names, const char *name)
{
    if (ix->cap == 0 || name == NULL)
        return -1;
    for (size_t j = (size_t)str_hash(name) & (ix->cap - 1); ix->slot[j] != 0;
         j = (j + 1) & (ix->cap - 1))
        if (strcmp(names[ix->slot[j] - 1], name) == 0)
            return ix->slot[j] - 1;
    return -1;
}

static void index_free(name_index *ix)
{
    sx_free(ix->slot);
    ix->slot = NULL;
    ix->cap = 0;
}

/* ---------------------------------------------------------------- save */

typedef struct save_ctx {
    const sx_cg_graph *g;
    sx_cg_node **order; /* the nodes to store, inputs first */
    int64_t n_order;
    int64_t *pos; /* by node id: position in order */
    int n_out;
    sx_cg_node *const *outs;
    const char *const *out_names;
    int n_tensors;
    const char *const *tensor_names;
    const sx_tensor *const *tensors;
    int n_meta;
    const char *const *keys;
    const char *const *values;
} save_ctx;

/* The nodes the outputs need, in a topological order that keeps creation order where it can
 * (ids are already topological, so this is their order); pos[id] = position. */
static sx_status collect(save_ctx *c)
{
    const sx_cg_graph *g = c->g;
    int64_t nn = g->n_nodes;
    c->pos = sx_alloc((size_t)nn * sizeof *c->pos);
    c->order = sx_alloc((size_t)nn * sizeof *c->order);
    sx_cg_node **stack = sx_alloc((size_t)nn * sizeof *stack);
    int *cursor = sx_alloc((size_t)nn * sizeof *cursor);
    if (c->pos == NULL || c->order == NULL || stack == NULL || cursor == NULL) {
        sx_free(stack);
        sx_free(cursor);
        return SX_E_NOMEM;
    }
    enum { UNSEEN = -1, NEEDED = -2, OPEN = -3 };
    for (int64_t i = 0; i < nn; i++)
        c->pos[i] = UNSEEN;
    /* mark what the outputs need */
    int64_t sp = 0;
    for (int i = 0; i < c->n_out; i++)
        if (c->pos[c->outs[i]->id] == UNSEEN) {
            c->pos[c->outs[i]->id] = NEEDED;
            stack[sp++] = c->outs[i];
        }
    while (sp > 0) {
        sx_cg_node *n = stack[--sp];
        for (int k = 0; k < n->n_in; k++)
            if (c->pos[n->in[k]->id] == UNSEEN) {
                c->pos[n->in[k]->id] = NEEDED;
                stack[sp++] = n->in[k];
            }
    }
    /* post-order from each needed node in id order */
    int64_t len = 0;
    for (int64_t id = 0; id < nn; id++) {
        if (c->pos[id] != NEEDED)
            continue;
        sp = 0;
        stack[sp] = g->nodes[id];
        cursor[sp++] = 0;
        c->pos[id] = OPEN;
        while (sp > 0) {
            sx_cg_node *n = stack[sp - 1];
            if (cursor[sp - 1] < n->n_in) {
                sx_cg_node *in = n->in[cursor[sp - 1]++];
                if (c->pos[in->id] == NEEDED) {
                    c->pos[in->id] = OPEN;
                    stack[sp] = in;
                    cursor[sp++] = 0;
                }
            } else {
                c->pos[n->id] = len;
                c->order[len++] = n;
                sp--;
            }
        }
    }
    c->n_order = len;
    sx_free(stack);
    sx_free(cursor);
    return SX_OK;
}

static void emit_graph(writer *w, const save_ctx *c)
{
    const sx_cg_graph *g = c->g;
    sx_cg_attr none = sx_cg_attr_default();
    cg_put_u8(w, (unsigned)g->dtype);
    cg_put_u32(w, (uint32_t)g->n_rngs);
    for (int r = 0; r < g->n_rngs; r++)
        for (int k = 0; k < 4; k++)
            cg_put_u64(w, g->rngs[r].s[k]);
    cg_put_u64(w, (uint64_t)c->n_order);
    for (int64_t i = 0; i < c->n_order; i++) {
        const sx_cg_node *n = c->order[i];
        bool leaf = sx_cg_ops[n->op].flags & SX_OPF_LEAF;
        cg_put_str(w, sx_cg_op_name(n->op));
        put_shape(w, n->value.dtype, n->value.rank, n->value.shape);
        cg_put_str(w, sx_cg_node_name(n));
        cg_put_u32(w, (uint32_t)n->n_in);
        for (int k = 0; k < n->n_in; k++)
            cg_put_u64(w, (uint64_t)c->pos[n->in[k]->id]);
        put_attr(w, leaf ? &none : &n->attr);
        if (n->op == SX_OP_CONST || n->op == SX_OP_PARAM)
            cg_put_values(w, n->value.dtype, n->value.size, n->value.data);
    }
    cg_put_u32(w, (uint32_t)c->n_out);
    for (int i = 0; i < c->n_out; i++) {
        cg_put_u64(w, (uint64_t)c->pos[c->outs[i]->id]);
        cg_put_str(w, c->out_names[i]);
    }
}

static void emit_tensors(writer *w, const save_ctx *c)
{
    cg_put_u64(w, (uint64_t)c->n_tensors);
    for (int i = 0; i < c->n_tensors; i++) {
        const sx_tensor *t = c->tensors[i];
        cg_put_str(w, c->tensor_names[i]);
        put_shape(w, t->dtype, t->rank, t->shape);
        cg_put_values(w, t->dtype, t->size, t->data);
    }
}

static void emit_meta(writer *w, const save_ctx *c)
{
    cg_put_u64(w, (uint64_t)c->n_meta);
    for (int i = 0; i < c->n_meta; i++) {
        cg_put_str(w, c->keys[i]);
        cg_put_str(w, c->values[i]);
    }
}

typedef void (*emit_fn)(writer *w, const save_ctx *c);

/* A section: its payload is emitted twice, once to count its length, once for real. */
static void put_section(writer *w, const char *tag, emit_fn emit, const save_ctx *c)
{
    writer count = {.fd = -1};
    emit(&count, c);
    cg_put(w, tag, 4);
    cg_put_u64(w, count.bytes);
    emit(w, c);
}

static void emit_file(writer *w, const save_ctx *c)
{
    cg_put(w, magic, 8);
    cg_put_u32(w, FORMAT_VERSION);
    cg_put_u32(w, 0); /* flags */
    if (c->n_out > 0)
        put_section(w, "GRPH", emit_graph, c);
    if (c->n_tensors > 0)
        put_section(w, "TENS", emit_tensors, c);
    if (c->n_meta > 0)
        put_section(w, "META", emit_meta, c);
    cg_w_flush(w); /* the checksum covers everything before the trailer */
    uint32_t crc = w->crc;
    cg_put(w, "END ", 4);
    cg_put_u64(w, 8);
    cg_put_u32(w, crc);
    cg_put_u32(w, 0);
}

/* tmp = path + ".tmp" + the writer's process id + "-" + six random letters and digits. The
 * process id lets a later writer of the same path recognise the file of a writer that died
 * mid-write (kill -9) and remove it (remove_stale_temps). */
#define TEMP_SUFFIX_MAX 32 /* ".tmp", up to 20 digits, "-", 6 characters, NUL */
static void temp_name(char *tmp, size_t path_len)
{
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static atomic_uint_fast64_t counter;
    struct timespec ts = {0, 0};
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                    ((uint64_t)getpid() << 40) ^
                    (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ULL);
    sx_rng r;
    sx_rng_seed(&r, seed);
    int k = snprintf(tmp + path_len, TEMP_SUFFIX_MAX, ".tmp%ld-", (long)getpid());
    for (int i = 0; i < 6; i++)
        tmp[path_len + (size_t)k + (size_t)i] = chars[sx_rng_below(&r, sizeof chars - 1)];
    tmp[path_len + (size_t)k + 6] = '\0';
}

/* Remove the temporary files that writers of `path` left when they died: the names
 * "<name>.tmp<pid>-XXXXXX" next to it whose process no longer runs (kill(pid, 0) fails with
 * ESRCH). This process's own are kept (another thread may be writing), and so are those of a
 * live process, even an unrelated one that reuses the id. Best effort: nothing is reported. */
static void remove_stale_temps(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/'), *base = slash != NULL ? slash + 1 : path;
    size_t dlen = slash == NULL ? 1 : slash == path ? 1 : (size_t)(slash - path);
    if (dlen >= sizeof dir)
        return;
    memcpy(dir, slash != NULL ? path : ".", dlen);
    dir[dlen] = '\0';
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    size_t blen = strlen(base);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp", 4) != 0 || n[blen + 4] < '0' ||
            n[blen + 4] > '9')
            continue;
        char *end = NULL;
        errno = 0;
        long pid = strtol(n + blen + 4, &end, 10);
        if (errno != 0 || pid <= 0 || pid > INT_MAX || *end != '-' || strlen(end + 1) != 6 ||
            pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        (void)unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

/* Make the rename durable: sync the folder that holds the file (best effort: some file
 * systems cannot). `tmp`, the temporary name, is cut down to that folder. */
static void sync_dir(char *tmp)
{
    char *slash = strrchr(tmp, '/');
    if (slash == tmp)
        slash[1] = '\0'; /* the root */
    else if (slash != NULL)
        slash[0] = '\0';
    int fd = open(slash != NULL ? tmp : ".", O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Write the file to a temporary name next to `path`, sync it, rename it over `path`. */
static sx_status write_atomic(const char *path, const save_ctx *c)
{
    const char *who = "sx_cg_save";
    size_t len = strlen(path);
    char *tmp = sx_alloc(len + TEMP_SUFFIX_MAX);
    unsigned char *buf = sx_alloc(WBUF_BYTES);
    if (tmp == NULL || buf == NULL) {
        sx_free(tmp);
        sx_free(buf);
        return SX_E_NOMEM;
    }
    memcpy(tmp, path, len);
    remove_stale_temps(path);
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        temp_name(tmp, len);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST && errno != EINTR)
            break;
    }
    sx_status s = SX_OK;
    if (fd < 0) {
        s = sx_error(SX_E_IO, "%s: cannot create a file next to %s: %s", who, path,
                     strerror(errno));
        goto done;
    }
    writer w = {.fd = fd, .buf = buf};
    emit_file(&w, c);
    cg_w_flush(&w);
    if (w.err == 0 && fsync(fd) != 0)
        w.err = errno;
    if (close(fd) != 0 && w.err == 0)
        w.err = errno;
    if (w.err != 0) {
        s = sx_error(SX_E_IO, "%s: cannot write %s: %s", who, path, strerror(w.err));
    } else if (rename(tmp, path) != 0) {
        s = sx_error(SX_E_IO, "%s: cannot rename %s to %s: %s", who, tmp, path, strerror(errno));
    } else {
        sync_dir(tmp);
    }
    if (s != SX_OK)
        unlink(tmp);
done:
    sx_free(tmp);
    sx_free(buf);
    return s;
}

/* A name or key: non-NULL, non-empty, short enough for its u32 length. */
static sx_status check_name(const char *who, const char *what, int i, const char *s)
{
    if (s == NULL || s[0] == '\0')
        return sx_error(SX_E_ARG, "%s: %s %d is %s", who, what, i, s ? "empty" : "NULL");
    if (strlen(s) > UINT32_MAX)
        return sx_error(SX_E_ARG, "%s: %s %d is too long", who, what, i);
    return SX_OK;
}

static sx_status check_distinct(const char *who, const char *what, int n, const char *const *names)
{
    name_index ix;
    int dup;
    SX_TRY(index_build(&ix, n, names, &dup));
    index_free(&ix);
    if (dup >= 0)
        return sx_error(SX_E_ARG, "%s: two %ss named '%s'", who, what, names[dup]);
    return SX_OK;
}

static sx_status check_save_args(const save_ctx *c, const char *path)
{
    const char *who = "sx_cg_save";
    if (path == NULL || path[0] == '\0')
        return sx_error(SX_E_ARG, "%s: no path", who);
    if (c->n_out < 0 || c->n_tensors < 0 || c->n_meta < 0)
        return sx_error(SX_E_ARG, "%s: negative count", who);
    if ((c->n_out > 0 && (c->g == NULL || c->outs == NULL || c->out_names == NULL)) ||
        (c->n_tensors > 0 && (c->tensor_names == NULL || c->tensors == NULL)) ||
        (c->n_meta > 0 && (c->keys == NULL || c->values == NULL)))
        return sx_error(SX_E_ARG, "%s: NULL array", who);
    for (int i = 0; i < c->n_out; i++) {
        const sx_cg_node *n = c->outs[i];
        if (n == NULL || n->graph != c->g || n->dead)
            return sx_error(SX_E_ARG, "%s: output %d is NULL, of another graph or removed", who, i);
        SX_TRY(check_name(who, "output name", i, c->out_names[i]));
    }
    for (int i = 0; i < c->n_tensors; i++) {
        const sx_tensor *t = c->tensors[i];
        SX_TRY(check_name(who, "tensor name", i, c->tensor_names[i]));
        SX_TRY(sx__check_tensor(who, "tensor", t));
        SX_TRY(sx_shape_check(who, t->rank, t->shape));
        if (t->size != sx_shape_size(t->rank, t->shape))
            return sx_error(SX_E_ARG, "%s: tensor '%s' has size %lld, its shape says %lld", who,
                            c->tensor_names[i], (long long)t->size,
                            (long long)sx_shape_size(t->rank, t->shape));
    }
    for (int i = 0; i < c->n_meta; i++) {
        SX_TRY(check_name(who, "key", i, c->keys[i]));
        if (c->values[i] == NULL || strlen(c->values[i]) > UINT32_MAX)
            return sx_error(SX_E_ARG, "%s: value %d is NULL or too long", who, i);
    }
    SX_TRY(check_distinct(who, "output", c->n_out, c->out_names));
    SX_TRY(check_distinct(who, "tensor", c->n_tensors, c->tensor_names));
    SX_TRY(check_distinct(who, "key", c->n_meta, c->keys));
    return SX_OK;
}

sx_status sx_cg_save(const sx_cg_graph *g, int n_out, sx_cg_node *const *outs,
                     const char *const *out_names, int n_tensors, const char *const *tensor_names,
                     const sx_tensor *const *tensors, int n_meta, const char *const *keys,
                     const char *const *values, const char *path)
{
    save_ctx c = {.g = g,
                  .n_out = n_out,
                  .outs = outs,
                  .out_names = out_names,
                  .n_tensors = n_tensors,
                  .tensor_names = tensor_names,
                  .tensors = tensors,
                  .n_meta = n_meta,
                  .keys = keys,
                  .values = values};
    SX_TRY(check_save_args(&c, path));
    sx_status s = SX_OK;
    if (n_out > 0) {
        s = collect(&c);
        for (int64_t i = 0; s == SX_OK && i < c.n_order; i++) {
            const sx_cg_node *n = c.order[i];
            if ((n->op == SX_OP_CONST || n->op == SX_OP_PARAM) && n->value.data == NULL &&
                n->value.size > 0)
                s = sx_error(SX_E_STATE, "sx_cg_save: node %lld (%s) has no value",
                             (long long)n->id, sx_cg_op_name(n->op));
        }
    }
    if (s == SX_OK)
        s = write_atomic(path, &c);
    sx_free(c.order);
    sx_free(c.pos);
    return s;
}

/* ---------------------------------------------------------------- the file object */

typedef struct file_node {
    sx_cg_op op;
    sx_dtype dtype;
    int rank;
    int64_t shape[SX_MAX_RANK];
    char *name; /* NULL when unnamed */
    int n_in;
    int64_t *in; /* indices of earlier nodes */
    sx_cg_attr attr;
    unsigned char *data; /* const, param: the values' bytes in the file buffer (little-endian,
                            unaligned); NULL otherwise */
} file_node;

struct sx_cg_file {
    char *path;         /* for messages */
    unsigned char *buf; /* the whole file while it holds a graph (leaf values point into it) */
    /* the graph */
    bool has_graph;
    sx_dtype dtype;
    int n_rngs;
    sx_rng *rngs;
    int64_t n_nodes;
    file_node *nodes;
    int max_in;             /* the most inputs of one node */
    sx_cg_graph *built;     /* the graph built while validating, until sx_cg_file_graph takes it */
    sx_cg_node **built_map; /* its node of each stored index */
    int n_out;
    int64_t *out_node;
    char **out_name;
    name_index out_ix;
    /* named tensors */
    int n_tensors;
    char **tensor_name;
    sx_tensor **tensor;
    name_index tensor_ix;
    /* metadata */
    int n_meta;
    char **key, **value;
    name_index meta_ix;
};

void sx_cg_file_free(sx_cg_file *f)
{
    if (f == NULL)
        return;
    for (int64_t i = 0; i < f->n_nodes; i++) {
        sx_free(f->nodes[i].name);
        sx_free(f->nodes[i].in);
    }
    sx_cg_graph_free(f->built);
    sx_free(f->built_map);
    sx_free(f->buf);
    sx_free(f->nodes);
    sx_free(f->rngs);
    for (int i = 0; i < f->n_out; i++)
        sx_free(f->out_name[i]);
    sx_free(f->out_name);
    sx_free(f->out_node);
    index_free(&f->out_ix);
    for (int i = 0; i < f->n_tensors; i++) {
        sx_free(f->tensor_name[i]);
        sx_tensor_free(f->tensor[i]);
    }
    sx_free(f->tensor_name);
    sx_free(f->tensor);
    index_free(&f->tensor_ix);
    for (int i = 0; i < f->n_meta; i++) {
        sx_free(f->key[i]);
        sx_free(f->value[i]);
    }
    sx_free(f->key);
    sx_free(f->value);
    index_free(&f->meta_ix);
    sx_free(f->path);
    sx_free(f);
}

/* dtype, rank and dims; *size = the element count. */
static sx_status rd_shape(reader *r, const char *what, sx_dtype *dtype, int *rank, int64_t *shape,
                          int64_t *size)
{
    unsigned dt, rk;
    SX_TRY(cg_rd_u8(r, &dt));
    SX_TRY(cg_rd_u8(r, &rk));
    if (dt > SX_F64)
        return cg_rd_bad(r, "%s: dtype %u is neither f32 (0) nor f64 (1)", what, dt);
    if (rk > SX_MAX_RANK)
        return cg_rd_bad(r, "%s: rank %u (at most %d)", what, rk, SX_MAX_RANK);
    /* the product of the non-zero dims too must fit (with room for the bytes): an empty
     * tensor of (0, 2^62, 2^62) would overflow whatever drops its zero axis (a sum over it) */
    int64_t n = 1, nz = 1;
    bool empty = false;
    for (unsigned i = 0; i < SX_MAX_RANK; i++)
        shape[i] = 1;
    for (unsigned i = 0; i < rk; i++) {
        uint64_t d;
        SX_TRY(cg_rd_u64(r, &d));
        if (d > INT64_MAX)
            return cg_rd_bad(r, "%s: dimension %u is %llu", what, i, (unsigned long long)d);
        shape[i] = (int64_t)d;
        empty |= d == 0;
        if (d > 0 && nz > INT64_MAX / 8 / (int64_t)d)
            return cg_rd_bad(r, "%s: the shape's element count overflows", what);
        nz *= d > 0 ? (int64_t)d : 1;
    }
    n = empty ? 0 : nz;
    *dtype = (sx_dtype)dt;
    *rank = (int)rk;
    *size = n;
    return SX_OK;
}

static sx_status rd_padding(reader *r, const char *what, sx_padding *p)
{
    int v;
    SX_TRY(cg_rd_i32(r, &v));
    if (v < SX_PAD_VALID || v > SX_PAD_EXPLICIT || (r->version < 2 && v > SX_PAD_SAME))
        return cg_rd_bad(r, "%s padding %d is not a padding mode of format %u", what, v,
                         r->version);
    *p = (sx_padding)v;
    return SX_OK;
}

/* Format 2's convolution and pooling fields (pads, dilations, groups, output padding, the
 * pooling flags); their ranges are judged by the ops' shape rules when the node is rebuilt. */
static sx_status get_window_attr(reader *r, sx_cg_attr *a)
{
    sx_conv2d_params *c = &a->conv;
    int *conv2[] = {&c->pad_top,   &c->pad_bottom,       &c->pad_left,
                    &c->pad_right, &c->dilation_h,       &c->dilation_w,
                    &c->groups,    &c->output_padding_h, &c->output_padding_w};
    sx_pool2d_params *q = &a->pool;
    int *pool2[] = {&q->pad_top,    &q->pad_bottom, &q->pad_left,  &q->pad_right,
                    &q->dilation_h, &q->dilation_w, &q->ceil_mode, &q->count_include_pad};
    for (size_t i = 0; i < sizeof conv2 / sizeof conv2[0]; i++)
        SX_TRY(cg_rd_i32(r, conv2[i]));
    for (size_t i = 0; i < sizeof pool2 / sizeof pool2[0]; i++)
        SX_TRY(cg_rd_i32(r, pool2[i]));
    return SX_OK;
}

/* The index i < count whose name(i) is the bytes b[0..n), or -1 (names are matched, never
 * numbers, so that tables may grow without changing old files). */
static int find_name(const unsigned char *b, size_t n, int count, const char *(*name)(int))
{
    for (int i = 0; i < count; i++) {
        const char *s = name(i);
        if (strlen(s) == n && memcmp(s, b, n) == 0)
            return i;
    }
    return -1;
}

static const char *graph_op_name(int op)
{
    return sx_cg_op_name((sx_cg_op)op);
}

static const char *map_name(int op)
{
    return sx_map_name((sx_map_op)op);
}

static const char *binary_name(int op)
{
    return sx_binary_name((sx_binary_op)op);
}

/* Bytes of an unknown name, printable, for a message. */
static void printable(const unsigned char *b, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (; k < n && k + 1 < cap; k++)
        out[k] = b[k] >= 0x20 && b[k] < 0x7f ? (char)b[k] : '?';
    out[k] = '\0';
}

/* The inverse of put_attr, starting from all-zero attributes (padding bytes included, since
 * structural hashing compares attributes bytewise). Values an op reads are judged later by its
 * shape rule; here only what no C object may hold (bools, enums) and the program's form. */
static sx_status get_attr(reader *r, sx_cg_attr *a)
{
    *a = sx_cg_attr_default();
    uint32_t axes;
    SX_TRY(cg_rd_f64(r, &a->alpha));
    SX_TRY(cg_rd_f64(r, &a->beta));
    SX_TRY(cg_rd_u32(r, &axes));
    a->axes = axes;
    SX_TRY(cg_rd_bool(r, "keepdims", &a->keepdims));
    SX_TRY(cg_rd_bool(r, "trans_a", &a->trans_a));
    SX_TRY(cg_rd_bool(r, "trans_b", &a->trans_b));
    SX_TRY(cg_rd_i32(r, &a->axis));
    SX_TRY(cg_rd_i32(r, &a->rank));
    if (a->rank < 0 || a->rank > SX_MAX_RANK)
        return cg_rd_bad(r, "attribute rank %d (want 0..%d)", a->rank, SX_MAX_RANK);
    for (int i = 0; i < SX_MAX_RANK; i++)
        SX_TRY(cg_rd_i64(r, &a->shape[i]));
    for (int i = 0; i < SX_MAX_RANK; i++)
        SX_TRY(cg_rd_i64(r, &a->ints[i]));
    for (int i = 0; i < SX_MAX_RANK; i++)
        SX_TRY(cg_rd_i64(r, &a->ints2[i]));
    for (int i = 0; i < SX_MAX_RANK; i++) {
        SX_TRY(cg_rd_i64(r, &a->slice[i].start));
        SX_TRY(cg_rd_i64(r, &a->slice[i].stop));
        SX_TRY(cg_rd_i64(r, &a->slice[i].step));
    }
    SX_TRY(cg_rd_i32(r, &a->conv.stride_h));
    SX_TRY(cg_rd_i32(r, &a->conv.stride_w));
    SX_TRY(rd_padding(r, "conv", &a->conv.padding));
    SX_TRY(cg_rd_i32(r, &a->pool.kernel_h));
    SX_TRY(cg_rd_i32(r, &a->pool.kernel_w));
    SX_TRY(cg_rd_i32(r, &a->pool.stride_h));
    SX_TRY(cg_rd_i32(r, &a->pool.stride_w));
    SX_TRY(rd_padding(r, "pool", &a->pool.padding));
    if (r->version >= 2)
        SX_TRY(get_window_attr(r, a));
    SX_TRY(cg_rd_i32(r, &a->rng_id));
    for (int i = 0; i < 6; i++) {
        double unused;
        SX_TRY(cg_rd_f64(r, &unused));
    }
    SX_TRY(cg_rd_i32(r, &a->prog.n));
    if (a->prog.n < 0 || a->prog.n > SX_FUSED_MAX)
        return cg_rd_bad(r, "fused program of %d instructions (want 0..%d)", a->prog.n,
                         SX_FUSED_MAX);
    for (int k = 0; k < a->prog.n; k++) {
        sx_fused_instr *in = &a->prog.ins[k];
        unsigned kind;
        uint32_t len;
        const unsigned char *name;
        SX_TRY(cg_rd_u8(r, &kind));
        SX_TRY(cg_rd_u32(r, &len));
        SX_TRY(cg_rd_bytes(r, len, &name));
        if (kind > SX_FUSED_STORE)
            return cg_rd_bad(r, "fused instruction %d has kind %u", k, kind);
        int op = kind == SX_FUSED_MAP      ? find_name(name, len, SX_MAP_COUNT, map_name)
                 : kind == SX_FUSED_BINARY ? find_name(name, len, SX_BINARY_COUNT, binary_name)
                 : len == 0                ? 0
                                           : -1;
        if (op < 0) {
            char shown[MAX_OP_NAME + 1];
            printable(name, len, shown, sizeof shown);
            return cg_rd_bad(r, "fused instruction %d: unknown op '%s' (written by a newer strix?)",
                             k, shown);
        }
        in->kind = (uint8_t)kind;
        in->op = (uint8_t)op;
        SX_TRY(cg_rd_i16(r, &in->a));
        SX_TRY(cg_rd_i16(r, &in->b));
        SX_TRY(cg_rd_i16(r, &in->c));
        SX_TRY(cg_rd_f64(r, &in->alpha));
    }
    return SX_OK;
}

/* A fused node's program, judged at once by the one validator of programs
 * (tensor/elementwise/fused.c: every field of every instruction), with the node named in the
 * message. */
static sx_status check_prog(const reader *r, int64_t i, const sx_cg_attr *a, int n_in, int n_store)
{
    if (sx__fused_check_stores("fused", &a->prog, n_in, n_store) == SX_OK)
        return SX_OK;
    char msg[400];
    snprintf(msg, sizeof msg, "%s", sx_last_error());
    return cg_rd_bad(r, "node %lld: %s", (long long)i, msg);
}

/* ---------------------------------------------------------------- sections */

static sx_status parse_node(sx_cg_file *f, reader *r, int64_t i)
{
    file_node *fn = &f->nodes[i];
    uint32_t len;
    const unsigned char *b;
    SX_TRY(cg_rd_u32(r, &len));
    if (len == 0 || len > MAX_OP_NAME)
        return cg_rd_bad(r, "node %lld: op name of %u bytes", (long long)i, len);
    SX_TRY(cg_rd_bytes(r, len, &b));
    int op = find_name(b, len, SX_OP_COUNT, graph_op_name);
    bool alias = op < 0;
    if (alias)
        op = cg_op_alias(b, len); /* a name an older strix wrote */
    if (op < 0) {
        char name[MAX_OP_NAME + 1];
        printable(b, len, name, sizeof name);
        return cg_rd_bad(r, "node %lld: unknown op '%s' (written by a newer strix?)", (long long)i,
                         name);
    }
    fn->op = (sx_cg_op)op;
    const char *opname = sx_cg_op_name(fn->op);
    int64_t size;
    SX_TRY(rd_shape(r, opname, &fn->dtype, &fn->rank, fn->shape, &size));
    SX_TRY(cg_rd_string(r, "node name", true, &fn->name));
    if (fn->name[0] == '\0') {
        sx_free(fn->name);
        fn->name = NULL;
    }
    uint32_t n_in;
    SX_TRY(cg_rd_u32(r, &n_in));
    if (n_in > r->left / 8)
        return cg_rd_short(r);
    bool leaf = sx_cg_ops[op].flags & SX_OPF_LEAF;
    int arity = sx_cg_ops[op].arity;
    if ((leaf && n_in != 0) || (!leaf && arity >= 0 && n_in != (uint32_t)arity) ||
        (!leaf && arity < 0 && (n_in < 1 || n_in > INT_MAX)))
        return cg_rd_bad(r, "node %lld: %s with %u inputs", (long long)i, opname, n_in);
    if (n_in > 0) {
        fn->in = sx_alloc((size_t)n_in * sizeof *fn->in);
        if (fn->in == NULL)
            return SX_E_NOMEM;
    }
    fn->n_in = (int)n_in;
    if (fn->n_in > f->max_in)
        f->max_in = fn->n_in;
    for (int k = 0; k < fn->n_in; k++) {
        uint64_t in;
        SX_TRY(cg_rd_u64(r, &in));
        if (in >= (uint64_t)i)
            return cg_rd_bad(r, "node %lld: input %d is node %llu, not an earlier node",
                             (long long)i, k, (unsigned long long)in);
        fn->in[k] = (int64_t)in;
    }
    SX_TRY(get_attr(r, &fn->attr));
    if (alias)
        cg_op_alias_attr(b, len, fn->rank, fn->shape, &fn->attr);
    if (leaf) {
        sx_cg_attr none = sx_cg_attr_default();
        if (memcmp(&fn->attr, &none, sizeof none) != 0)
            return cg_rd_bad(r, "node %lld: a %s with attributes", (long long)i, opname);
    } else if (fn->op == SX_OP_FUSED) {
        SX_TRY(check_prog(r, i, &fn->attr, fn->n_in, 0));
    } else if (fn->op == SX_OP_FUSED_UPDATE || fn->op == SX_OP_MATMUL_UPDATE) {
        /* the program's operands: the inputs, or (matmul_update) all but a and b, then the
         * product */
        const int n_ops = fn->op == SX_OP_FUSED_UPDATE ? fn->n_in : fn->n_in - 1;
        const int64_t k = fn->attr.update.stores;
        if (k < 1 || k > n_ops)
            return cg_rd_bad(r, "node %lld: a %s writing %lld of %d inputs", (long long)i, opname,
                             (long long)k, fn->n_in);
        SX_TRY(check_prog(r, i, &fn->attr, n_ops, (int)k));
    }
    /* an input's buffer is allocated when the graph is built, yet nothing in the file backs
     * it: refuse what no machine could hold rather than try */
    if (fn->op == SX_OP_INPUT && (uint64_t)size > MAX_INPUT_BYTES / sx_dtype_size(fn->dtype))
        return cg_rd_bad(r,
                         "node %lld: an input of %lld elements, more memory than any machine has",
                         (long long)i, (long long)size);
    if (fn->op == SX_OP_CONST || fn->op == SX_OP_PARAM) {
        const unsigned char *at;
        SX_TRY(cg_rd_values(r, fn->dtype, size, &at));
        fn->data = f->buf + (at - f->buf); /* the file's own (mutable) buffer */
    }
    return SX_OK;
}

static sx_status parse_graph(sx_cg_file *f, reader *r)
{
    unsigned dt;
    SX_TRY(cg_rd_u8(r, &dt));
    if (dt > SX_F64)
        return cg_rd_bad(r, "graph dtype %u is neither f32 (0) nor f64 (1)", dt);
    f->dtype = (sx_dtype)dt;
    uint64_t n;
    SX_TRY(cg_rd_count(r, 4, 32, INT_MAX, "generators", &n));
    if (n > 0) {
        f->rngs = sx_alloc((size_t)n * sizeof *f->rngs);
        if (f->rngs == NULL)
            return SX_E_NOMEM;
    }
    f->n_rngs = (int)n;
    for (int i = 0; i < f->n_rngs; i++) {
        uint64_t any = 0;
        for (int k = 0; k < 4; k++) {
            SX_TRY(cg_rd_u64(r, &f->rngs[i].s[k]));
            any |= f->rngs[i].s[k];
        }
        if (any == 0)
            return cg_rd_bad(
                r, "generator %d has the all-zero state (xoshiro256** never reaches it)", i);
    }
    SX_TRY(cg_rd_count(r, 8, NODE_MIN_BYTES, INT64_MAX, "nodes", &n));
    if (n > 0) {
        f->nodes = sx_calloc((size_t)n, sizeof *f->nodes);
        if (f->nodes == NULL)
            return SX_E_NOMEM;
    }
    f->n_nodes = (int64_t)n;
    for (int64_t i = 0; i < f->n_nodes; i++)
        SX_TRY(parse_node(f, r, i));
    SX_TRY(cg_rd_count(r, 4, 8 + 4 + 1, INT_MAX, "outputs", &n));
    if (n == 0)
        return cg_rd_bad(r, "a graph without outputs");
    f->out_node = sx_calloc((size_t)n, sizeof *f->out_node);
    f->out_name = sx_calloc((size_t)n, sizeof *f->out_name);
    if (f->out_node == NULL || f->out_name == NULL)
        return SX_E_NOMEM;
    f->n_out = (int)n;
    for (int i = 0; i < f->n_out; i++) {
        uint64_t idx;
        SX_TRY(cg_rd_u64(r, &idx));
        if (idx >= (uint64_t)f->n_nodes)
            return cg_rd_bad(r, "output %d is node %llu of %lld", i, (unsigned long long)idx,
                             (long long)f->n_nodes);
        f->out_node[i] = (int64_t)idx;
        SX_TRY(cg_rd_string(r, "output name", false, &f->out_name[i]));
    }
    int dup;
    SX_TRY(index_build(&f->out_ix, f->n_out, (const char *const *)f->out_name, &dup));
    if (dup >= 0)
        return cg_rd_bad(r, "two outputs named '%s'", f->out_name[dup]);
    f->has_graph = true;
    return SX_OK;
}

static sx_status parse_tensors(sx_cg_file *f, reader *r)
{
    uint64_t n;
    SX_TRY(cg_rd_count(r, 8, 4 + 1 + 1 + 1, INT_MAX, "tensors", &n));
    if (n > 0) {
        f->tensor_name = sx_calloc((size_t)n, sizeof *f->tensor_name);
        f->tensor = sx_calloc((size_t)n, sizeof *f->tensor);
        if (f->tensor_name == NULL || f->tensor == NULL)
            return SX_E_NOMEM;
    }
    f->n_tensors = (int)n;
    for (int i = 0; i < f->n_tensors; i++) {
        SX_TRY(cg_rd_string(r, "tensor name", false, &f->tensor_name[i]));
        sx_dtype dt;
        int rank;
        int64_t shape[SX_MAX_RANK], size;
        SX_TRY(rd_shape(r, f->tensor_name[i], &dt, &rank, shape, &size));
        const unsigned char *at;
        SX_TRY(cg_rd_values(r, dt, size, &at));
        SX_TRY(sx_tensor_new(dt, rank, shape, &f->tensor[i]));
        cg_decode_values(dt, size, at, f->tensor[i]->data);
    }
    int dup;
    SX_TRY(index_build(&f->tensor_ix, f->n_tensors, (const char *const *)f->tensor_name, &dup));
    if (dup >= 0)
        return cg_rd_bad(r, "two tensors named '%s'", f->tensor_name[dup]);
    return SX_OK;
}

static sx_status parse_meta(sx_cg_file *f, reader *r)
{
    uint64_t n;
    SX_TRY(cg_rd_count(r, 8, 4 + 1 + 4, INT_MAX, "entries", &n));
    if (n > 0) {
        f->key = sx_calloc((size_t)n, sizeof *f->key);
        f->value = sx_calloc((size_t)n, sizeof *f->value);
        if (f->key == NULL || f->value == NULL)
            return SX_E_NOMEM;
    }
    f->n_meta = (int)n;
    for (int i = 0; i < f->n_meta; i++) {
        SX_TRY(cg_rd_string(r, "key", false, &f->key[i]));
        SX_TRY(cg_rd_string(r, "value", true, &f->value[i]));
    }
    int dup;
    SX_TRY(index_build(&f->meta_ix, f->n_meta, (const char *const *)f->key, &dup));
    if (dup >= 0)
        return cg_rd_bad(r, "two entries with key '%s'", f->key[dup]);
    return SX_OK;
}

/* ---------------------------------------------------------------- framing */

enum { SEC_GRPH, SEC_TENS, SEC_META, SEC_COUNT };
static const char *const sec_tags[SEC_COUNT] = {"GRPH", "TENS", "META"};
typedef sx_status (*parse_fn)(sx_cg_file *f, reader *r);
static const parse_fn sec_parse[SEC_COUNT] = {parse_graph, parse_tensors, parse_meta};

/* Header, section framing against the file size, trailer and checksum; then each known
 * section, which must use exactly its bytes. */
static sx_status parse_file(sx_cg_file *f, size_t size)
{
    const unsigned char *buf = f->buf;
    const char *path = f->path;
    if (size < 8 || memcmp(buf, magic, 8) != 0) {
        if (size < 8 && memcmp(buf, magic, size) == 0)
            return sx_error(SX_E_FORMAT, "%s: truncated in the header (%zu bytes)", path, size);
        return sx_error(SX_E_FORMAT, "%s: not a strix model file (bad magic)", path);
    }
    if (size < 16)
        return sx_error(SX_E_FORMAT, "%s: truncated in the header (%zu bytes)", path, size);
    uint32_t version = (uint32_t)le_get(buf + 8, 4), flags = (uint32_t)le_get(buf + 12, 4);
    if (version > FORMAT_VERSION)
        return sx_error(SX_E_UNSUPPORTED, "%s: written by a newer strix (format %u, this reads %u)",
                        path, version, FORMAT_VERSION);
    if (version == 0)
        return sx_error(SX_E_FORMAT, "%s: format version 0 (file corrupt)", path);
    if (flags != 0)
        return sx_error(SX_E_UNSUPPORTED,
                        "%s: uses format flags 0x%08x that this strix does not know", path, flags);

    const unsigned char *sec[SEC_COUNT] = {NULL};
    uint64_t sec_len[SEC_COUNT] = {0};
    char last[5] = "head";
    size_t off = 16;
    for (;;) {
        if (size - off < 12)
            return sx_error(SX_E_FORMAT, "%s: truncated after %s%s (the END trailer is missing)",
                            path, strcmp(last, "head") ? "section " : "the ",
                            strcmp(last, "head") ? last : "header");
        const unsigned char *tag = buf + off;
        for (int k = 0; k < 4; k++)
            if (tag[k] < 0x20 || tag[k] > 0x7e)
                return sx_error(SX_E_FORMAT, "%s: bad section tag at byte %zu (file corrupt)", path,
                                off);
        uint64_t len = le_get(buf + off + 4, 8);
        if (len > size - off - 12)
            return sx_error(SX_E_FORMAT,
                            "%s: truncated in section %.4s (it declares %llu bytes, %zu remain)",
                            path, (const char *)tag, (unsigned long long)len, size - off - 12);
        if (memcmp(tag, "END ", 4) == 0) {
            if (len != 8 || le_get(buf + off + 16, 4) != 0)
                return sx_error(SX_E_FORMAT, "%s: bad END trailer (file corrupt)", path);
            if (off + 20 != size)
                return sx_error(SX_E_FORMAT, "%s: %zu bytes of garbage after the END trailer", path,
                                size - off - 20);
            break;
        }
        for (int k = 0; k < SEC_COUNT; k++)
            if (memcmp(tag, sec_tags[k], 4) == 0) {
                if (sec[k] != NULL)
                    return sx_error(SX_E_FORMAT, "%s: two %s sections (file corrupt)", path,
                                    sec_tags[k]);
                sec[k] = buf + off + 12;
                sec_len[k] = len;
            }
        memcpy(last, tag, 4);
        off += 12 + (size_t)len;
    }
    if (cg_crc32(0, buf, off) != (uint32_t)le_get(buf + off + 12, 4))
        return sx_error(SX_E_FORMAT, "%s: checksum mismatch (file corrupt)", path);

    for (int k = 0; k < SEC_COUNT; k++) {
        if (sec[k] == NULL)
            continue;
        reader r = {sec[k], (size_t)sec_len[k], path, {0}, version};
        memcpy(r.tag, sec_tags[k], 5);
        SX_TRY(sec_parse[k](f, &r));
        if (r.left != 0)
            return cg_rd_bad(&r, "%zu bytes left over (file corrupt)", r.left);
    }
    return SX_OK;
}

/* ---------------------------------------------------------------- building the graph */

/* Rebuild the stored graph: leaves by their constructors, ops through sx_cg_op_new (their shape
 * rules re-check everything), each compared with its stored dtype and shape. *map gets the node
 * of each stored index. */
static sx_status build(const sx_cg_file *f, sx_cg_graph **out, sx_cg_node ***map_out)
{
    *out = NULL;
    *map_out = NULL;
    sx_cg_graph *g = NULL;
    SX_TRY(sx_cg_graph_new(SX_CG_LAZY, f->dtype, &g));
    sx_cg_node **map = sx_calloc((size_t)f->n_nodes, sizeof *map);
    sx_cg_node **ins = sx_alloc((size_t)(f->max_in > 0 ? f->max_in : 1) * sizeof *ins);
    sx_status s = map && ins ? SX_OK : SX_E_NOMEM;
    for (int i = 0; s == SX_OK && i < f->n_rngs; i++) {
        int id;
        s = sx_cg_rng_new(g, 0, &id);
        if (s == SX_OK)
            g->rngs[id] = f->rngs[i];
    }
    for (int64_t i = 0; s == SX_OK && i < f->n_nodes; i++) {
        const file_node *fn = &f->nodes[i];
        sx_cg_node *n;
        if (fn->op == SX_OP_CONST || fn->op == SX_OP_PARAM) {
            /* the constructors copy the values' bytes; big-endian hosts decode them first */
            void *vals = fn->data, *tmp = NULL;
            int64_t size = sx_shape_size(fn->rank, fn->shape);
            if (!host_little_endian() && size > 0) {
                tmp = sx_alloc((size_t)size * sx_dtype_size(fn->dtype));
                if (tmp == NULL) {
                    s = SX_E_NOMEM;
                    break;
                }
                cg_decode_values(fn->dtype, size, fn->data, tmp);
                vals = tmp;
            }
            sx_tensor v = sx_tensor_view(fn->dtype, fn->rank, fn->shape, vals);
            n = fn->op == SX_OP_CONST ? sx_cg_const(g, &v) : sx_cg_param(g, fn->name, &v);
            sx_free(tmp);
        } else if (fn->op == SX_OP_INPUT) {
            n = sx_cg_input(g, fn->name, fn->dtype, fn->rank, fn->shape);
        } else {
            for (int k = 0; k < fn->n_in; k++)
                ins[k] = map[fn->in[k]];
            n = sx_cg_op_new(g, fn->op, fn->n_in, ins, &fn->attr);
        }
        const char *opname = sx_cg_op_name(fn->op);
        if (n == NULL) {
            s = sx_cg_graph_status(g);
            if (s != SX_E_NOMEM) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", sx_last_error());
                s = sx_error(SX_E_FORMAT, "%s: section GRPH: node %lld (%s) is not valid: %s",
                             f->path, (long long)i, opname, msg);
            }
            break;
        }
        if (n->value.dtype != fn->dtype ||
            !sx_shape_equal(n->value.rank, n->value.shape, fn->rank, fn->shape)) {
            char a[128], b[128];
            s = sx_error(SX_E_FORMAT,
                         "%s: section GRPH: node %lld (%s) is stored as %s %s, but its inputs "
                         "give %s %s",
                         f->path, (long long)i, opname, sx_dtype_name(fn->dtype),
                         sx_shape_str(fn->rank, fn->shape, a, sizeof a),
                         sx_dtype_name(n->value.dtype),
                         sx_shape_str(n->value.rank, n->value.shape, b, sizeof b));
            break;
        }
        if (fn->name != NULL && (fn->op == SX_OP_CONST || !(sx_cg_ops[fn->op].flags & SX_OPF_LEAF)))
            s = sx_cg_node_set_name(g, n, fn->name);
        map[i] = n;
    }
    sx_free(ins);
    if (s != SX_OK) {
        sx_free(map);
        sx_cg_graph_free(g);
        return s;
    }
    *out = g;
    *map_out = map;
    return SX_OK;
}

/* ---------------------------------------------------------------- reading a file */

/* The whole file in memory (sizes are then checked against what is really there). */
static sx_status slurp(const char *path, unsigned char **buf, size_t *size)
{
    const char *who = "sx_cg_file_read";
    *buf = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* never wait on a FIFO */
    if (fd < 0)
        return sx_error(SX_E_IO, "%s: cannot open %s: %s", who, path, strerror(errno));
    struct stat st;
    sx_status s = SX_OK;
    if (fstat(fd, &st) != 0) {
        s = sx_error(SX_E_IO, "%s: cannot stat %s: %s", who, path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        s = sx_error(SX_E_IO, "%s: %s is not a regular file", who, path);
    } else if ((uintmax_t)st.st_size >= SIZE_MAX) {
        s = sx_error(SX_E_IO, "%s: %s is too large for this machine", who, path);
    } else {
        size_t n = (size_t)st.st_size, done = 0;
        unsigned char *b = sx_alloc(n > 0 ? n : 1);
        if (b == NULL) {
            s = SX_E_NOMEM;
        } else {
            while (done < n) {
                ssize_t k = read(fd, b + done, n - done);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k < 0) {
                    s = sx_error(SX_E_IO, "%s: cannot read %s: %s", who, path, strerror(errno));
                    break;
                }
                if (k == 0) {
                    s = sx_error(SX_E_IO, "%s: %s changed while being read", who, path);
                    break;
                }
                done += (size_t)k;
            }
            if (s != SX_OK)
                sx_free(b);
            else {
                *buf = b;
                *size = n;
            }
        }
    }
    close(fd);
    return s;
}

sx_status sx_cg_file_read(const char *path, sx_cg_file **out)
{
    if (out == NULL)
        return sx_error(SX_E_ARG, "sx_cg_file_read: out is NULL");
    *out = NULL;
    if (path == NULL)
        return sx_error(SX_E_ARG, "sx_cg_file_read: path is NULL");
    unsigned char *buf;
    size_t size;
    SX_TRY(slurp(path, &buf, &size));
    sx_cg_file *f = sx_calloc(1, sizeof *f);
    char *p = sx_alloc(strlen(path) + 1);
    if (f == NULL || p == NULL) {
        sx_free(buf);
        sx_free(f);
        sx_free(p);
        return SX_E_NOMEM;
    }
    strcpy(p, path);
    f->path = p;
    f->buf = buf;
    sx_status s = parse_file(f, size);
    /* the last check, the graph built through the op table, is kept for sx_cg_file_graph; a
     * file without a graph no longer needs its bytes */
    if (s == SX_OK && f->has_graph) {
        s = build(f, &f->built, &f->built_map);
    } else if (s == SX_OK) {
        sx_free(f->buf);
        f->buf = NULL;
    }
    if (s != SX_OK) {
        sx_cg_file_free(f);
        return s;
    }
    *out = f;
    return SX_OK;
}

/* ---------------------------------------------------------------- accessors */

int sx_cg_file_n_outputs(const sx_cg_file *f)
{
    return f != NULL ? f->n_out : 0;
}

const char *sx_cg_file_output_name(const sx_cg_file *f, int i)
{
    return f != NULL && i >= 0 && i < f->n_out ? f->out_name[i] : NULL;
}

sx_status sx_cg_file_graph(sx_cg_file *f, int n, const char *const *names, sx_cg_graph **g,
                           sx_cg_node **outs)
{
    const char *who = "sx_cg_file_graph";
    if (g == NULL)
        return sx_error(SX_E_ARG, "%s: g is NULL", who);
    *g = NULL;
    if (f == NULL || n < 0 || (n > 0 && (names == NULL || outs == NULL)))
        return sx_error(SX_E_ARG, "%s: NULL or negative argument", who);
    if (!f->has_graph)
        return sx_error(SX_E_ARG, "%s: %s holds no graph", who, f->path);
    for (int i = 0; i < n; i++)
        if (index_find(&f->out_ix, (const char *const *)f->out_name, names[i]) < 0)
            return sx_error(SX_E_ARG, "%s: %s has no output '%s'", who, f->path,
                            names[i] ? names[i] : "(NULL)");
    sx_cg_node **map;
    if (f->built != NULL) { /* hand over the graph built while reading */
        *g = f->built;
        map = f->built_map;
        f->built = NULL;
        f->built_map = NULL;
    } else {
        SX_TRY(build(f, g, &map));
    }
    for (int i = 0; i < n; i++)
        outs[i] =
            map[f->out_node[index_find(&f->out_ix, (const char *const *)f->out_name, names[i])]];
    sx_free(map);
    return SX_OK;
}

int sx_cg_file_n_tensors(const sx_cg_file *f)
{
    return f != NULL ? f->n_tensors : 0;
}

const char *sx_cg_file_tensor_name(const sx_cg_file *f, int i)
{
    return f != NULL && i >= 0 && i < f->n_tensors ? f->tensor_name[i] : NULL;
}

const sx_tensor *sx_cg_file_tensor(const sx_cg_file *f, const char *name)
{
    if (f == NULL)
        return NULL;
    int i = index_find(&f->tensor_ix, (const char *const *)f->tensor_name, name);
    return i >= 0 ? f->tensor[i] : NULL;
}

int sx_cg_file_n_meta(const sx_cg_file *f)
{
    return f != NULL ? f->n_meta : 0;
}

const char *sx_cg_file_meta_key(const sx_cg_file *f, int i)
{
    return f != NULL && i >= 0 && i < f->n_meta ? f->key[i] : NULL;
}

const char *sx_cg_file_meta(const sx_cg_file *f, const char *key)
{
    if (f == NULL)
        return NULL;
    int i = index_find(&f->meta_ix, (const char *const *)f->key, key);
    return i >= 0 ? f->value[i] : NULL;
}
