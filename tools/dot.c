/* dot.c: `strix dot MODEL [--output FILE.dot] [--batch N]`: a model's optimised, planned
 * inference graph as Graphviz DOT (nodes sharing an arena block share a colour). */
#include "tool.h"

#include <string.h>

static const char *const dot_help =
    "usage: strix dot MODEL [--output FILE] [--batch N]\n"
    "Write MODEL's inference graph (optimised and memory-planned for batches of N, 1 by\n"
    "default) as Graphviz DOT to FILE, or to standard output. Render: dot -Tsvg FILE.\n";

int tool_cmd_dot(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    long batch = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (tool_is_help(a)) {
            fputs(dot_help, stdout);
            return TOOL_OK;
        } else if (strcmp(a, "--output") == 0)
            ok = (out = v) != NULL, i++;
        else if (strcmp(a, "--batch") == 0)
            ok = tool_parse_long(v, 1, 65536, &batch), i++;
        else if (a[0] == '-' && a[1] != '\0')
            return tool_usage("dot", "unknown option %s", a);
        else if (model == NULL)
            model = a;
        else
            return tool_usage("dot", "unexpected argument %s", a);
        if (!ok)
            return tool_usage("dot", "bad or missing value for %s", a);
    }
    if (model == NULL)
        return tool_usage("dot", "no MODEL");
    sx_nn_model *m = NULL;
    if (tool_load_model(model, batch, &m) != SX_OK)
        return tool_fail("dot", "%s", sx_last_error());
    const sx_cg_graph *g = sx_nn_model_graph(m);
    sx_status s = out ? sx_cg_dot_save(g, out) : sx_cg_dot_write(g, stdout);
    sx_nn_model_free(m);
    if (s != SX_OK)
        return tool_fail("dot", "%s", sx_last_error());
    return TOOL_OK;
}
