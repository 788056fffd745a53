/* A program outside the strix tree, built against the installed headers and libraries. */
#include <sx_tensor.h>

int main(void)
{
    sx_tensor *a = NULL, *b = NULL;
    int64_t shape[2] = {2, 3};
    if (sx_tensor_ones(SX_F32, 2, shape, &a) != SX_OK)
        return 1;
    if (sx_tensor_map(SX_MAP_EXP, 0, a, &b) != SX_OK)
        return 1;
    int ok = b->size == 6 && sx_tensor_get(b, 5) > 2.71 && sx_tensor_get(b, 5) < 2.72;
    sx_tensor_free(a);
    sx_tensor_free(b);
    return ok ? 0 : 1;
}
