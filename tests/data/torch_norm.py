#!/usr/bin/python3
"""Reference values of PyTorch's LayerNorm / GroupNorm / InstanceNorm2d for tests/nn/test_norm.c.

Regenerate (Debian's python3-torch; run from the source tree):
    /usr/bin/python3 tests/data/torch_norm.py > tests/data/torch_norm.txt

Every case has fixed inputs (a closed formula, no random generator), computes y = layer(x) and
the gradients of sum(y * dy) with respect to x and, with affine, the layer's weight (gamma) and
bias (beta), in float64, and writes them in strix's layout: images NHWC (PyTorch's NCHW, or NCL,
permuted to put the channels last). LayerNorm is applied to the tensor as strix holds it
(normalized_shape = its last `axes` dims), so it needs no permutation.

File format, whitespace separated, one case after another:
    case <name> <layer|group|instance> <axes or groups> <eps> <affine 0|1>
    <tensor> x, y, dy, dx, then with affine gamma, beta, dgamma, dbeta, each as:
    tensor <name> <rank> <dims...> <values...>   (row-major, %.17g)
(axes: LayerNorm's trailing axes; groups: GroupNorm's num_groups, 0 for instance norm.)
"""
import math

import torch

torch.set_default_dtype(torch.float64)


def fixed(shape, salt, lo=-1.0, hi=1.0):
    """Deterministic values in (lo, hi)."""
    n = math.prod(shape)
    v = [0.5 * (math.sin(1.0 + 0.7 * i + salt) * 0.9 + 0.05 * math.cos(3.1 * i * i + salt) + 1)
         for i in range(n)]
    return torch.tensor([lo + (hi - lo) * u for u in v]).reshape(shape)


def emit(name, t):
    t = t.detach().contiguous()
    dims = " ".join(str(d) for d in t.shape)
    vals = " ".join("%.17g" % v for v in t.flatten().tolist())
    print("tensor %s %d %s %s" % (name, t.dim(), dims, vals))


def channels_last(t):
    """NC... -> N...C"""
    return t.permute(0, *range(2, t.dim()), 1)


def run(name, kind, arg, eps, affine, layer, x, to_strix):
    """x in PyTorch's layout; to_strix maps a PyTorch-layout tensor to strix's."""
    x = x.clone().requires_grad_(True)
    if affine:
        with torch.no_grad():
            layer.weight.copy_(fixed(layer.weight.shape, 5.0, 0.5, 1.5))
            layer.bias.copy_(fixed(layer.bias.shape, 6.0, -0.5, 0.5))
    y = layer(x)
    dy = fixed(y.shape, 7.0)
    (y * dy).sum().backward()
    print("case %s %s %d %.17g %d" % (name, kind, arg, eps, 1 if affine else 0))
    emit("x", to_strix(x))
    emit("y", to_strix(y))
    emit("dy", to_strix(dy))
    emit("dx", to_strix(x.grad))
    if affine:
        emit("gamma", layer.weight)
        emit("beta", layer.bias)
        emit("dgamma", layer.weight.grad)
        emit("dbeta", layer.bias.grad)


def same(t):
    return t


def main():
    print("# made by tests/data/torch_norm.py with torch %s; do not edit" % torch.__version__)
    # LayerNorm over the last 1, 2 and 3 axes (an NHWC image: normalized_shape (h, w, c))
    for affine in (True, False):
        a = "affine" if affine else "plain"
        for shape, axes, eps in (((3, 5), 1, 1e-5), ((2, 3, 4), 2, 1e-3),
                                 ((2, 3, 2, 4), 3, 1e-5)):
            x = fixed(shape, 1.0 + axes, -2, 3)
            layer = torch.nn.LayerNorm(shape[-axes:], eps=eps, elementwise_affine=affine)
            run("layer%d_%s" % (axes, a), "layer", axes, eps, affine, layer, x, same)
    # GroupNorm of NCHW (strix NHWC), NCL and NC inputs
    for affine in (True, False):
        a = "affine" if affine else "plain"
        for shape, groups, eps in (((2, 6, 3, 2), 3, 1e-5), ((2, 4, 5), 2, 1e-5),
                                   ((3, 8), 4, 1e-2), ((1, 4, 2, 3), 1, 1e-5)):
            x = fixed(shape, 2.0 + groups, -1, 2)
            layer = torch.nn.GroupNorm(groups, shape[1], eps=eps, affine=affine)
            run("group%d_%dd_%s" % (groups, len(shape), a), "group", groups, eps, affine, layer,
                x, channels_last)
    # InstanceNorm2d (no running statistics) of NCHW, with and without affine
    for affine in (True, False):
        a = "affine" if affine else "plain"
        x = fixed((2, 3, 4, 3), 9.0, -1, 1)
        layer = torch.nn.InstanceNorm2d(3, eps=1e-5, affine=affine)
        run("instance_%s" % a, "instance", 0, 1e-5, affine, layer, x, channels_last)


if __name__ == "__main__":
    main()
