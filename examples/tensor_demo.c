/* tensor_demo: a first look at strix's tensor layer. Builds two tensors, broadcasts, reduces
 * and multiplies them, and prints the results; every call's status is checked. */
#include <sx_tensor.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SX_OK) {                                                                     \
            fprintf(stderr, "tensor_demo: %s\n", sx_last_error());                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(void)
{
    sx_rng rng;
    sx_rng_seed(&rng, 2026);
    int64_t xs[2] = {3, 4}, bs[1] = {4};
    sx_tensor *x = NULL, *b = NULL, *y = NULL, *s = NULL, *m = NULL;
    CHECK(sx_tensor_new(SX_F32, 2, xs, &x));
    CHECK(sx_tensor_rand_normal(x, &rng, 0, 1));
    CHECK(sx_tensor_new(SX_F32, 1, bs, &b));
    CHECK(sx_tensor_arange(b, 0, 1));
    printf("x = ");
    sx_tensor_print(x, stdout);
    printf("b = ");
    sx_tensor_print(b, stdout);
    CHECK(sx_tensor_binary(SX_BINARY_ADD, x, b, &y)); /* b broadcast over the rows of x */
    CHECK(sx_tensor_map_out(SX_MAP_TANH, 0, y, y));   /* in place */
    printf("tanh(x + b) = ");
    sx_tensor_print(y, stdout);
    CHECK(sx_tensor_fold(SX_FOLD_SUM, y, SX_AXIS(0), false, &s));
    printf("column sums = ");
    sx_tensor_print(s, stdout);
    CHECK(sx_tensor_matmul(x, y, false, true, &m)); /* x @ y^T: (3,3) */
    printf("x @ y^T = ");
    sx_tensor_print(m, stdout);
    sx_tensor_free(x);
    sx_tensor_free(b);
    sx_tensor_free(y);
    sx_tensor_free(s);
    sx_tensor_free(m);
    return 0;
}
