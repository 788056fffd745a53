#!/usr/bin/python3
"""make_onnx.py DIR: test data for tests/tools/test_cli.c (Debian's python3-onnx and numpy).

DIR/conv_nchw.onnx: a fully convolutional ONNX model, x (N, 2, 5, 5) -> Conv (3 filters, 3x3,
pads 1, bias) -> Relu -> y (N, 3, 5, 5): an output of rank 4 in ONNX's NCHW order.
DIR/conv_x.npy (4, 2, 5, 5) f32 inputs and DIR/conv_ref.npy (4, 3, 5, 5) f32: numpy's
outputs (float64 arithmetic rounded to f32), the reference the tool's results are held to.
DIR/two_out.onnx: the same Conv + Relu with two outputs: "y" (N, 3, 5, 5) and "pooled" (N, 3),
the mean of y over its 5x5 pixels (GlobalAveragePool, Flatten); DIR/pooled_ref.npy (4, 3) f32.
DIR/rank1.onnx: the same Conv + Relu, then the mean of y over all but the batch axis
(ReduceMean, keepdims 0): an output "score" (N) of rank 1, one value per example;
DIR/score_ref.npy (4,) f32.
DIR/two_in.onnx: two inputs, token ids "ids" (N, 4) of int64 and floats "feat" (N, 3), and two
outputs: "emb" (N, 4, 3), the ids' rows of a (10, 3) embedding table (Gather), and "y" (N, 3),
their mean over the 4 tokens plus feat; DIR/ids.npy (5, 4) int64, DIR/feat.npy (5, 3) f32,
DIR/emb_ref.npy and DIR/y_ref.npy f32."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(out):
    rng = np.random.default_rng(21)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((4, 2, 5, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "conv_nchw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 5, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, out + "/conv_nchw.onnx")
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((4, 3, 5, 5))
    for i in range(5):
        for j in range(5):
            y[:, :, i, j] = np.einsum("nchw,fchw->nf", xp[:, :, i:i + 3, j:j + 3], w)
    y = np.maximum(y + b[None, :, None, None], 0)
    two = helper.make_graph(
        nodes + [helper.make_node("GlobalAveragePool", ["y"], ["g"]),
                 helper.make_node("Flatten", ["g"], ["pooled"])], "two_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 5, 5]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model2 = helper.make_model(two, opset_imports=[helper.make_opsetid("", 13)])
    model2.ir_version = 7
    onnx.checker.check_model(model2)
    onnx.save(model2, out + "/two_out.onnx")
    np.save(out + "/pooled_ref.npy", y.mean(axis=(2, 3)).astype(np.float32))
    one = helper.make_graph(
        nodes + [helper.make_node("ReduceMean", ["y"], ["score"], axes=[1, 2, 3], keepdims=0)],
        "rank1", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 5, 5])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model3 = helper.make_model(one, opset_imports=[helper.make_opsetid("", 13)])
    model3.ir_version = 7
    onnx.checker.check_model(model3)
    onnx.save(model3, out + "/rank1.onnx")
    np.save(out + "/score_ref.npy", y.mean(axis=(1, 2, 3)).astype(np.float32))
    two_inputs(out, rng)
    np.save(out + "/conv_x.npy", x)
    np.save(out + "/conv_ref.npy", y.astype(np.float32))


def two_inputs(out, rng):
    table = rng.standard_normal((10, 3)).astype(np.float32)
    ids = rng.integers(0, 10, (5, 4)).astype(np.int64)
    feat = rng.standard_normal((5, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["emb"]),
         helper.make_node("ReduceMean", ["emb"], ["m"], axes=[1], keepdims=0),
         helper.make_node("Add", ["m", "feat"], ["y"])], "two_in",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["N", 4, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, out + "/two_in.onnx")
    emb = table.astype(np.float64)[ids]
    np.save(out + "/ids.npy", ids)
    np.save(out + "/feat.npy", feat)
    np.save(out + "/emb_ref.npy", emb.astype(np.float32))
    np.save(out + "/y_ref.npy", (emb.mean(axis=1) + feat).astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1])
