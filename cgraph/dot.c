/* dot.c: the graph as Graphviz DOT: one record per node with its
 * index, op, name, number of readers and shape; leaves drawn distinctly. */
#include "cgraph_impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Names are user text: keep them out of DOT's way. */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\' || *s == '{' || *s == '}' || *s == '<' || *s == '>' ||
            *s == '|')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
}

/* Leaves by kind, then mutating ops, then the rest (no switch over ops: docs/STYLE.md). */
static const char *style_of(const sx_cg_node *n)
{
    if (n->op == SX_OP_INPUT)
        return "shape=ellipse, style=filled, fillcolor=\"#cfe8ff\"";
    if (n->op == SX_OP_PARAM)
        return "shape=box, style=\"filled,bold\", fillcolor=\"#ffd9a8\"";
    if (n->op == SX_OP_CONST)
        return "shape=box, style=\"filled,dashed\", fillcolor=\"#eeeeee\"";
    if (sx_cg_ops[n->op].flags & SX_OPF_MUTATES)
        return "shape=box, style=\"filled\", fillcolor=\"#f4b6b6\"";
    return "shape=box, style=\"rounded,filled\", fillcolor=white";
}

/* In a planned graph, nodes sharing an arena block share a colour (a hue from the block's
 * offset); kept nodes stay white. */
static void block_colour(const sx_cg_node *n, FILE *f)
{
    if (!n->planned)
        return;
    uint64_t h = (uint64_t)n->plan_offset * 0x9e3779b97f4a7c15ULL;
    double hue = (double)(h >> 40) / (double)(1ULL << 24);
    fprintf(f, ", style=\"rounded,filled\", fillcolor=\"%.3f 0.45 0.95\"", hue);
}

sx_status sx_cg_dot_write(const sx_cg_graph *g, FILE *f)
{
    if (g == NULL || f == NULL)
        return sx_error(SX_E_ARG, "sx_cg_dot_write: NULL argument");
    fprintf(f, "digraph strix {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
    for (int64_t i = 0; i < g->n_nodes; i++) {
        const sx_cg_node *n = g->nodes[i];
        if (n->dead)
            continue;
        char shape[160];
        sx_shape_str(n->value.rank, n->value.shape, shape, sizeof shape);
        fprintf(f, "  n%lld [%s", (long long)n->id, style_of(n));
        block_colour(n, f);
        fprintf(f, ", label=\"#%lld %s", (long long)n->id, sx_cg_op_name(n->op));
        if (n->name != NULL) {
            fputs("\\n", f);
            put_escaped(f, n->name);
        }
        fprintf(f, "\\nrefs=%d %s\"];\n", n->n_users, shape);
    }
    for (int64_t i = 0; i < g->n_nodes; i++) {
        const sx_cg_node *n = g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            fprintf(f, "  n%lld -> n%lld;\n", (long long)n->in[k]->id, (long long)n->id);
    }
    fputs("}\n", f);
    return ferror(f) ? sx_error(SX_E_IO, "sx_cg_dot_write: write error") : SX_OK;
}

sx_status sx_cg_dot_save(const sx_cg_graph *g, const char *path)
{
    if (g == NULL || path == NULL)
        return sx_error(SX_E_ARG, "sx_cg_dot_save: NULL argument");
    size_t len = strlen(path);
    char *tmp = sx_alloc(len + 8);
    if (tmp == NULL)
        return SX_E_NOMEM;
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".XXXXXX", 8);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        sx_status s = sx_error(SX_E_IO, "sx_cg_dot_save: cannot create a file next to %s", path);
        sx_free(tmp);
        return s;
    }
    FILE *f = fdopen(fd, "w");
    sx_status s = f ? sx_cg_dot_write(g, f) : sx_error(SX_E_IO, "sx_cg_dot_save: fdopen failed");
    if (f != NULL && fclose(f) != 0 && s == SX_OK)
        s = sx_error(SX_E_IO, "sx_cg_dot_save: cannot write %s", path);
    if (f == NULL)
        close(fd);
    if (s == SX_OK && rename(tmp, path) != 0)
        s = sx_error(SX_E_IO, "sx_cg_dot_save: cannot rename to %s", path);
    if (s != SX_OK)
        unlink(tmp);
    sx_free(tmp);
    return s;
}
