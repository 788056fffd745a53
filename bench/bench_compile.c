/* bench_compile.c: the neural compiler on a graph the size of Owl's lazy_lstm (the
 * target: "15,105 nodes and 21,335 edges ... compile the graph within 230ms then optimise it
 * within 210ms"). A character-level LSTM training graph -- embedding, a stack of LSTM layers
 * unrolled over the sequence, a softmax layer at every step, cross-entropy, Adam -- is traced,
 * differentiated, optimised and planned by sx_nn_compile_train, `repeat` times; the median time
 * of the whole call is compile_ms (the target: < 50 ms).
 * Usage: bench_compile [--steps T] [--layers L] [--units H] [--vocab V] [--batch B]
 *                      [--repeat R]
 * Ends with: result: nodes=N edges=E compile_ms=T (N, E: the traced graph, before the
 * optimiser; after it on the line above). */
#include "sx_nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

/* CPU seconds of this process: the compile's own work, which a loaded machine does not inflate
 * as it does the wall-clock time. */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int64_t steps = 120, layers = 2, units = 128, vocab = 64, batch = 32;
    int repeat = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        int64_t v = atoll(argv[i + 1]);
        if (strcmp(argv[i], "--steps") == 0)
            steps = v;
        else if (strcmp(argv[i], "--layers") == 0)
            layers = v;
        else if (strcmp(argv[i], "--units") == 0)
            units = v;
        else if (strcmp(argv[i], "--vocab") == 0)
            vocab = v;
        else if (strcmp(argv[i], "--batch") == 0)
            batch = v;
        else if (strcmp(argv[i], "--repeat") == 0)
            repeat = (int)v;
        else {
            fprintf(stderr, "bench_compile: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (repeat < 1 || repeat > 100 || steps < 1 || layers < 1) {
        fprintf(stderr, "bench_compile: bad options\n");
        return 2;
    }
    sx_nn_net *net = NULL;
    CHECK(sx_nn_net_new("lazy_lstm", SX_F32, 1, &net));
    sx_nn_net_set_input_scale(net, 1);
    sx_nn_layer *l = sx_nn_input(net, 1, &steps);
    sx_nn_embedding_params ep = sx_nn_embedding_params_default(vocab, units);
    l = sx_nn_embedding(net, l, &ep);
    sx_nn_rnn_params rp = sx_nn_rnn_params_default(units);
    rp.layers = (int)layers;
    rp.return_sequences = true;
    l = sx_nn_lstm(net, l, &rp);
    l = sx_nn_linear(net, l, vocab, SX_ACT_SOFTMAX);
    CHECK(sx_nn_net_status(net));
    sx_nn_train_params p = sx_nn_train_params_default();
    p.optim.kind = SX_OPTIM_ADAM;
    p.optim.lr = 0.002;
    printf("lazy_lstm-like: %lld steps, %lld LSTM layers of %lld units, vocab %lld, batch %lld, "
           "%lld parameters\n",
           (long long)steps, (long long)layers, (long long)units, (long long)vocab,
           (long long)batch, (long long)sx_nn_net_param_count(net));
    double total[100], opt[100], plan[100], cpu[100];
    sx_nn_compile_report r = {0};
    for (int k = 0; k < repeat; k++) {
        sx_nn_model *m = NULL;
        double t0 = now(), c0 = cpu_now();
        CHECK(sx_nn_compile_train(net, &p, batch, &m));
        total[k] = now() - t0;
        cpu[k] = cpu_now() - c0;
        r = sx_nn_model_report(m);
        opt[k] = r.optimise_seconds;
        plan[k] = r.plan_seconds;
        sx_nn_model_free(m);
    }
    qsort(total, (size_t)repeat, sizeof *total, cmp_double);
    qsort(opt, (size_t)repeat, sizeof *opt, cmp_double);
    qsort(plan, (size_t)repeat, sizeof *plan, cmp_double);
    qsort(cpu, (size_t)repeat, sizeof *cpu, cmp_double);
    double med = total[repeat / 2] * 1e3, mo = opt[repeat / 2] * 1e3, mp = plan[repeat / 2] * 1e3;
    printf("graph: %lld nodes, %lld edges traced; %lld nodes, %lld edges after the optimiser\n",
           (long long)r.nodes_before, (long long)r.edges_before, (long long)r.nodes_after,
           (long long)r.edges_after);
    printf("compile (median of %d): %.1f ms = trace + differentiate %.1f ms, optimise %.1f ms, "
           "plan %.1f ms (min %.1f ms, max %.1f ms)\n",
           repeat, med, med - mo - mp, mo, mp, total[0] * 1e3, total[repeat - 1] * 1e3);
    printf("cpu time of one compile (median): %.1f ms\n", cpu[repeat / 2] * 1e3);
    printf("optimiser: %d rounds;", r.opt.rounds);
    for (int ps = 0; ps < SX_PASS_COUNT; ps++)
        if (r.opt.pass_seconds[ps] > 0)
            printf(" %s %.1f ms (%lld)", sx_cg_pass_name((sx_cg_pass)ps),
                   r.opt.pass_seconds[ps] * 1e3, (long long)r.opt.changed[ps]);
    printf("\n");
    printf("result: nodes=%lld edges=%lld compile_ms=%.1f\n", (long long)r.nodes_before,
           (long long)r.edges_before, med);
    sx_nn_net_free(net);
    return 0;
}
