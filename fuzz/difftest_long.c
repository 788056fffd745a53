/* difftest: the long mode of the differential tester (tests/cgraph/difftest.h).
 * Random expression graphs from the op table, checked in every evaluation mode, against finite
 * differences, through optimise-then-differentiate and Hessian-vector products, for as long as
 * asked; each distinct failing check is shrunk and printed as C calls.
 *
 *   difftest [--seconds N] [--count N] [--seed S] [--depth D] [--family modes|grad|optgrad|hvp]
 *            [--reports K] [--no-shrink] [--print SEED]
 *
 * Defaults: 60 seconds from seed 1, random depths 3..8, every family, one reproducer per
 * distinct check. --print SEED prints the program of one seed (unchecked). Exit status 1 when
 * a check failed, 2 on bad arguments. */
#include "difftest.c"

#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: difftest [--seconds N] [--count N] [--seed S] [--depth D] "
                    "[--family modes|grad|optgrad|hvp]... [--reports K] [--no-shrink] "
                    "[--print SEED]\n");
    return 2;
}

int main(int argc, char **argv)
{
    dt_campaign c;
    memset(&c, 0, sizeof c);
    c.seed0 = 1;
    c.seconds = 60;
    c.shrink = true;
    c.max_reports = 1;
    bool any_family = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-shrink") == 0) {
            c.shrink = false;
            continue;
        }
        if (v == NULL)
            return usage();
        i++;
        if (strcmp(a, "--seconds") == 0) {
            c.seconds = atof(v);
        } else if (strcmp(a, "--count") == 0) {
            c.count = atoll(v);
            c.seconds = 0;
        } else if (strcmp(a, "--seed") == 0) {
            c.seed0 = strtoull(v, NULL, 10);
        } else if (strcmp(a, "--depth") == 0) {
            c.depth = atoi(v);
        } else if (strcmp(a, "--reports") == 0) {
            c.max_reports = atoi(v);
        } else if (strcmp(a, "--family") == 0) {
            int f = 0;
            while (f < DT_FAMILY_COUNT && strcmp(dt_family_name[f], v) != 0)
                f++;
            if (f == DT_FAMILY_COUNT)
                return usage();
            c.families[f] = true;
            any_family = true;
        } else if (strcmp(a, "--print") == 0) {
            uint64_t seed = strtoull(v, NULL, 10);
            dt_prog *p = dt_generate(seed, seed % 2 ? SX_F32 : SX_F64, c.depth);
            dt_result r;
            memset(&r, 0, sizeof r);
            snprintf(r.check, sizeof r.check, "(none)");
            snprintf(r.msg, sizeof r.msg, "program only");
            dt_print_c(p, DT_GRAD, &r, stdout);
            dt_prog_free(p);
            return 0;
        } else {
            return usage();
        }
    }
    for (int f = 0; f < DT_FAMILY_COUNT && !any_family; f++)
        c.families[f] = true;
    c.log = stdout;
    int64_t failures = dt_campaign_run(&c);
    return failures > 0 ? 1 : 0;
}
