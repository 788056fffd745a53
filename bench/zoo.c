/* zoo: the CNN zoo benchmark, one network per run (bench/compare_zoo runs it against
 * PyTorch's bench/zoo_torch.py). The networks: bench/zoo_nets.h.
 *
 *   zoo --net NAME [--data DIR] [--limit N] [--test-limit N] [--epochs E] [--batch B]
 *       [--threads T] [--reps R] [--seed S] [--eager] [--profile] [--quiet]
 *
 * Training nets (lenet5, resnet20, vgg_bn, mobilenet): train for E epochs on the first N images
 * of DIR (default: Fashion-MNIST when Debian's dataset-fashion-mnist is installed, else
 * data/mnist), test on the first --test-limit test images, then time inference over them at
 * batch B through a compiled inference graph. --eager trains without the compiler.
 * Inference nets (resnet50, inception_v3): random weights and random N(0,1) images; batch 1
 * (latency: the median of R calls after a first call timed apart, which includes the compile),
 * then batch B (default 16; none when B = 1) for throughput. --eager evaluates without the
 * compiler (sx_nn_predict_eager). --profile: time and CPU time per op kind of the compiled
 * graphs (stderr): the training graph's, then the inference graph's over the test set (with an
 * FNV hash of every bit of its outputs, to check that a change keeps the results).
 * --ops SCOPE (training nets): the kernels of one layer (e.g. batch_norm_3) in the compiled
 * training graph, with their shapes, and how many are full passes (stderr): counts, no timing.
 *
 * One line on stdout (fields in zoo_nets.h's zoo_result):
 *   result: net=NAME data=D train_s=... img_per_s=... test_acc=... loss=... peak_rss_mb=...
 *           infer_ips=... latency_ms=... first_ms=... arena_mb=... naive_mb=... live_mb=...
 * compile_ms=... nodes_before=... nodes_after=... params=... out_sum=... batch=... threads=...
 * eager=0|1 (test_acc and loss are -1 for the inference nets; arena_mb, compile_ms and the node
 * counts are the training graph's, or the batch-1 inference graph's, and 0 when eager). */
#include "zoo_nets.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: zoo --net NAME [--data DIR] [--limit N] [--test-limit N] [--epochs E]\n"
               "           [--batch B] [--threads T] [--reps R] [--seed S] [--eager]\n"
               "           [--profile] [--ops SCOPE] [--sub-batch R] [--quiet]\nnets:");
    for (int i = 0; zoo_names[i] != NULL; i++)
        fprintf(f, " %s", zoo_names[i]);
    fprintf(f, "\n");
}

int main(int argc, char **argv)
{
    zoo_opts o = zoo_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        bool ok = true, takes = true;
        if (strcmp(a, "--net") == 0)
            ok = v != NULL && zoo_find(v) != NULL, o.net = v;
        else if (strcmp(a, "--data") == 0)
            ok = v != NULL, o.data = v;
        else if (strcmp(a, "--limit") == 0)
            ok = parse_long(v, 1, 1L << 40, &n), o.limit = n;
        else if (strcmp(a, "--test-limit") == 0)
            ok = parse_long(v, 1, 1L << 40, &n), o.test_limit = n;
        else if (strcmp(a, "--epochs") == 0)
            ok = parse_long(v, 1, 1000, &n), o.epochs = (int)n;
        else if (strcmp(a, "--batch") == 0)
            ok = parse_long(v, 1, 65536, &n), o.batch = (int)n;
        else if (strcmp(a, "--threads") == 0)
            ok = parse_long(v, 1, 1024, &n), o.threads = (int)n;
        else if (strcmp(a, "--reps") == 0)
            ok = parse_long(v, 1, 64, &n), o.reps = (int)n;
        else if (strcmp(a, "--seed") == 0)
            ok = parse_long(v, 0, 2147483647L, &n), o.seed = (uint64_t)n;
        else if (strcmp(a, "--sub-batch") == 0)
            ok = parse_long(v, 0, 65536, &n), o.sub_batch = n;
        else if (strcmp(a, "--ops") == 0)
            ok = v != NULL, o.ops_scope = v;
        else if (strcmp(a, "--eager") == 0)
            o.eager = true, takes = false;
        else if (strcmp(a, "--profile") == 0)
            o.profile = true, takes = false;
        else if (strcmp(a, "--quiet") == 0)
            o.quiet = true, takes = false;
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "zoo: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "zoo: bad or missing value for %s%s%s\n", a, v ? ": " : "", v ? v : "");
            usage(stderr);
            return 2;
        }
        i += takes;
    }
    if (o.net == NULL) {
        fprintf(stderr, "zoo: --net is required\n");
        usage(stderr);
        return 2;
    }
    zoo_result r;
    if (zoo_run(&o, &r) != SX_OK) {
        fprintf(stderr, "zoo: %s: %s\n", o.net, sx_last_error());
        return 1;
    }
    char line[1024];
    zoo_result_format(&r, line, sizeof line);
    printf("%s\n", line);
    return 0;
}
