#!/usr/bin/python3
"""make_multi_io.py: writes the model and references of test_onnx's several-inputs test, once
(the files are committed; run again only to change them), with python3-onnx and NumPy only:
multi_io.onnx takes token ids "ids" (N, 4) of int64 and floats "feat" (N, 3) and gives "emb"
(N, 4, 3), the ids' rows of a (10, 3) embedding table (Gather), and "y" (N, 3), their mean over
the 4 tokens plus feat (opset 13). multi_io_x.pb holds 5 examples as a row of the strix model
takes them (5, 7): each example's 4 ids then its 3 floats; multi_io_y.pb the outputs as strix
gives them (5, 15): emb's 12 values then y's 3 (NumPy in float64, rounded to float32).
    cd tests/onnx/data && /usr/bin/python3 make_multi_io.py
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((10, 3)).astype(np.float32)
    ids = rng.integers(0, 10, (5, 4)).astype(np.int64)
    feat = rng.standard_normal((5, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["emb"], name="lookup"),
         helper.make_node("ReduceMean", ["emb"], ["m"], axes=[1], keepdims=0, name="mean"),
         helper.make_node("Add", ["m", "feat"], ["y"], name="add")], "multi_io",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["N", 4, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, "multi_io.onnx")
    emb = table.astype(np.float64)[ids]
    y = emb.mean(axis=1) + feat
    x = np.concatenate([ids.astype(np.float32), feat], axis=1)
    out = np.concatenate([emb.reshape(5, 12), y], axis=1).astype(np.float32)
    onnx.save_tensor(numpy_helper.from_array(x, "x"), "multi_io_x.pb")
    onnx.save_tensor(numpy_helper.from_array(out, "y"), "multi_io_y.pb")


if __name__ == "__main__":
    main()
