/* idx_info: what is in IDX files (raw or gzip). For each FILE: element type, rank, dimensions
 * and value range; for a label file (u8, rank 1) the count of each class. A bad file gets one
 * line "FILE: problem" on stderr and the exit status is 1 (2 for a usage error).
 *     idx_info data/mnist/train-labels-idx1-ubyte.gz data/mnist/t10k-images-idx3-ubyte.gz */
#include <sx_datasets.h>

#include <stdio.h>
#include <string.h>

/* Element i of a read file as a double. */
static double value_at(const sx_ds_idx *x, int64_t i)
{
    switch (x->type) {
    case SX_DS_U8:
        return ((const uint8_t *)x->data)[i];
    case SX_DS_I8:
        return ((const int8_t *)x->data)[i];
    case SX_DS_I16:
        return ((const int16_t *)x->data)[i];
    case SX_DS_I32:
        return ((const int32_t *)x->data)[i];
    case SX_DS_F32:
        return (double)((const float *)x->data)[i];
    case SX_DS_F64:
        return ((const double *)x->data)[i];
    case SX_DS_I64: /* not an IDX type; sources only */
        return (double)((const int64_t *)x->data)[i];
    }
    return 0;
}

static void describe(const char *path, const sx_ds_idx *x)
{
    char shape[200];
    double lo = value_at(x, 0), hi = lo;
    for (int64_t i = 1; i < x->count; i++) {
        double v = value_at(x, i);
        lo = v < lo ? v : lo; /* NaN never replaces a number here */
        hi = v > hi ? v : hi;
    }
    printf("%s: %s, rank %d, dims %s, %lld elements, values %.9g..%.9g\n", path,
           sx_ds_type_name(x->type), x->rank, sx_shape_str(x->rank, x->dims, shape, sizeof shape),
           (long long)x->count, lo, hi);
    if (x->type != SX_DS_U8 || x->rank != 1)
        return;
    /* A label file: how many of each class. */
    int64_t counts[256] = {0};
    const uint8_t *p = x->data;
    for (int64_t i = 0; i < x->count; i++)
        counts[p[i]]++;
    int classes = 0;
    for (int c = 0; c < 256; c++)
        classes += counts[c] > 0;
    printf("  %d classes:", classes);
    for (int c = 0; c < 256; c++)
        if (counts[c] > 0)
            printf(" %d:%lld", c, (long long)counts[c]);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: idx_info FILE...\n"
                "Prints the element type, rank, dimensions and value range of each IDX file\n"
                "(raw or gzip), and the class counts of label files (u8, rank 1).\n"
                "Exit status: 0 if every file is valid, 1 if one is not, 2 for bad usage.\n");
        return argc < 2 ? 2 : 0;
    }
    int status = 0;
    for (int i = 1; i < argc; i++) {
        sx_ds_idx *x = NULL;
        if (sx_ds_idx_read_raw(argv[i], 0, &x) != SX_OK) {
            fflush(stdout);
            fprintf(stderr, "%s\n", sx_last_error());
            status = 1;
            continue;
        }
        describe(argv[i], x);
        sx_ds_idx_free(x);
    }
    return status;
}
