/* onnx_test: run the ONNX backend node tests of a folder through strix's importer and print
 * per-op counts and "result: cases=N supported=S passed=P failed=F" (sx_onnx_conformance; the
 * `strix onnx-test` command calls the same function). Exit status 0 when every supported case
 * passed (and, with --min-supported, at least N cases were supported), 1 when one failed or
 * fewer were supported, 2 on a usage or I/O error.
 *   onnx_test DIR [--rtol R] [--atol A] [--min-supported N] */
#include "sx_onnx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *dir = NULL;
    double rtol = 1e-4, atol = 1e-6;
    long min_supported = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc)
            rtol = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--atol") == 0 && i + 1 < argc)
            atol = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--min-supported") == 0 && i + 1 < argc)
            min_supported = strtol(argv[++i], NULL, 10);
        else if (argv[i][0] != '-' && dir == NULL)
            dir = argv[i];
        else
            dir = NULL, i = argc;
    }
    if (dir == NULL) {
        fprintf(stderr, "usage: onnx_test DIR [--rtol R] [--atol A] [--min-supported N]  "
                        "(defaults 1e-4, 1e-6, 0)\n");
        return 2;
    }
    sx_onnx_conformance_report r;
    sx_status s = sx_onnx_conformance(dir, rtol, atol, stdout, &r);
    if (s != SX_OK && s != SX_E_STATE) {
        fprintf(stderr, "onnx_test: %s\n", sx_last_error());
        return 2;
    }
    if (r.supported < min_supported) {
        fprintf(stderr, "onnx_test: %d cases supported, fewer than %ld\n", r.supported,
                min_supported);
        return 1;
    }
    return s == SX_OK ? 0 : 1;
}
