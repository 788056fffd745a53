/* A program outside the strix tree, built against the installed headers and libraries: a
 * tensor kernel (tensor), an .npy file written and read back (datasets; the path is argv[1]),
 * and a network (nn), so every layer's public symbols must be exported. */
#include <sx_nn.h>

int main(int argc, char **argv)
{
    sx_tensor *a = NULL, *b = NULL, *c = NULL;
    int64_t shape[2] = {2, 3};
    if (argc < 2 || sx_tensor_ones(SX_F32, 2, shape, &a) != SX_OK)
        return 1;
    if (sx_tensor_map(SX_MAP_EXP, 0, a, &b) != SX_OK)
        return 1;
    int ok = b->size == 6 && sx_tensor_get(b, 5) > 2.71 && sx_tensor_get(b, 5) < 2.72;
    ok = ok && sx_ds_npy_write_tensor(argv[1], b) == SX_OK &&
         sx_ds_npy_read(argv[1], SX_F32, &c) == SX_OK && sx_tensor_get(c, 5) == sx_tensor_get(b, 5);
    sx_nn_net *net = NULL;
    ok = ok && sx_nn_net_new("consumer", SX_F32, 1, &net) == SX_OK;
    sx_nn_layer *x = sx_nn_input(net, 1, (int64_t[]){4});
    x = sx_nn_linear(net, x, 3, SX_ACT_SOFTMAX);
    ok = ok && sx_nn_net_status(net) == SX_OK && sx_nn_net_param_count(net) == 15;
    sx_nn_net_free(net);
    sx_tensor_free(a);
    sx_tensor_free(b);
    sx_tensor_free(c);
    return ok ? 0 : 1;
}
