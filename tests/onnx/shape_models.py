#!/usr/bin/python3
"""shape_models.py: small ONNX models made of the shape arithmetic PyTorch's exporter writes
(test_fold.c imports them; strix must fold it at import for the batch it builds), each with a
plain NumPy reference. Only python3-onnx and NumPy (no PyTorch, no ONNX Runtime).

    /usr/bin/python3 tests/onnx/shape_models.py OUTDIR

writes, per case, OUTDIR/<case>.onnx (one float input "x" whose axis 0 is the dynamic batch "n",
opset 13, one output "y"), OUTDIR/<case>_x.pb (a batch of 3) and OUTDIR/<case>_y.pb (the
reference); and the malformed models OUTDIR/bad_<case>.onnx, each with the words its error must
contain in OUTDIR/bad_<case>.txt.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

I64 = TensorProto.INT64
F32 = TensorProto.FLOAT


def ints(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.int64), name)


def floats(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.float32), name)


def node(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, name=outs[0] + "_node", **kw)


def model(nodes, inits, xshape, yrank, opset=13, xtype=F32):
    x = helper.make_tensor_value_info("x", xtype, ["n"] + list(xshape))
    y = helper.make_tensor_value_info("y", F32, ["n"] + [None] * (yrank - 1))
    g = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def batch_of(s):
    """Shape -> Gather(0) -> Unsqueeze: the batch as a 1-element list, named s_b."""
    return [node("Shape", ["x"], [s + "_shape"]),
            node("Gather", [s + "_shape", "zero"], [s + "_b0"], axis=0),
            node("Unsqueeze", [s + "_b0", "axes0"], [s + "_b"])]


COMMON = [ints("zero", 0), ints("one", 1), ints("two", 2), ints("axes0", [0]),
          ints("minus1", [-1])]


def case_flatten():
    """x.view(x.size(0), -1) * 2"""
    nodes = batch_of("f") + [
        node("Concat", ["f_b", "minus1"], ["f_target"], axis=0),
        node("Reshape", ["x", "f_target"], ["f_flat"]),
        node("Mul", ["f_flat", "k2"], ["y"])]
    m = model(nodes, COMMON + [floats("k2", 2.0)], (4, 3, 2), 2)
    return m, (4, 3, 2), lambda x: x.reshape(x.shape[0], -1) * 2


def case_heads():
    """ViT's attention reshapes: (n, s, d) -> (n, s, h, d/h) with d/h = Div(d, h) on the shape,
    heads to the front, q k^T on 4-d batches, softmax, back to (n, s, d)."""
    nodes = batch_of("h") + [
        node("Gather", ["h_shape", "one"], ["h_s0"], axis=0),
        node("Gather", ["h_shape", "two"], ["h_d0"], axis=0),
        node("Div", ["h_d0", "heads"], ["h_hd0"]),
        node("Unsqueeze", ["h_s0", "axes0"], ["h_s"]),
        node("Unsqueeze", ["h_hd0", "axes0"], ["h_hd"]),
        node("Concat", ["h_b", "h_s", "heads1", "h_hd"], ["h_t4"], axis=0),
        node("Reshape", ["x", "h_t4"], ["h_x4"]),
        node("Transpose", ["h_x4"], ["h_q"], perm=[0, 2, 1, 3]),
        node("Transpose", ["h_x4"], ["h_kt"], perm=[0, 2, 3, 1]),
        node("MatMul", ["h_q", "h_kt"], ["h_att"]),
        node("Cast", ["h_hd0"], ["h_hdf"], to=F32),
        node("Sqrt", ["h_hdf"], ["h_sq"]),
        node("Div", ["h_att", "h_sq"], ["h_scaled"]),
        node("Softmax", ["h_scaled"], ["h_p"], axis=-1),
        node("MatMul", ["h_p", "h_q"], ["h_o"]),
        node("Transpose", ["h_o"], ["h_ot"], perm=[0, 2, 1, 3]),
        node("Gather", ["h_shape", "two"], ["h_d1"], axis=0),
        node("Unsqueeze", ["h_d1", "axes0"], ["h_d"]),
        node("Concat", ["h_b", "h_s", "h_d"], ["h_t3"], axis=0),
        node("Reshape", ["h_ot", "h_t3"], ["y"])]
    inits = COMMON + [ints("heads", 2), ints("heads1", [2])]

    def ref(x):
        n, s, d = x.shape
        q = x.reshape(n, s, 2, d // 2).transpose(0, 2, 1, 3).astype(np.float64)
        a = q @ q.transpose(0, 1, 3, 2) / np.sqrt(d // 2)
        p = np.exp(a - a.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return (p @ q).transpose(0, 2, 1, 3).reshape(n, s, d)
    return model(nodes, inits, (5, 8), 3), (5, 8), ref


def case_shuffle():
    """ShuffleNet's channel shuffle: (n, c, h, w) -> (n, g, c/g, h, w), a rank-5 transpose,
    back to (n, c, h, w); the sizes from Shape, c/g from Div."""
    nodes = batch_of("s") + [
        node("Gather", ["s_shape", "one"], ["s_c0"], axis=0),
        node("Div", ["s_c0", "two"], ["s_cg0"]),
        node("Unsqueeze", ["s_cg0", "axes0"], ["s_cg"]),
        node("Slice", ["s_shape", "two1", "big"], ["s_hw"]),
        node("Concat", ["s_b", "two1", "s_cg", "s_hw"], ["s_t5"], axis=0),
        node("Reshape", ["x", "s_t5"], ["s_x5"]),
        node("Transpose", ["s_x5"], ["s_x5t"], perm=[0, 2, 1, 3, 4]),
        node("Concat", ["s_b", "minus1", "s_hw"], ["s_t4"], axis=0),
        node("Reshape", ["s_x5t", "s_t4"], ["s_back"]),
        node("Relu", ["s_back"], ["y"])]
    inits = COMMON + [ints("two1", [2]), ints("big", [2 ** 62])]

    def ref(x):
        n, c, h, w = x.shape
        return np.maximum(x.reshape(n, 2, c // 2, h, w).transpose(0, 2, 1, 3, 4)
                          .reshape(n, c, h, w), 0)
    return model(nodes, inits, (4, 3, 3), 4), (4, 3, 3), ref


def case_window_mask():
    """Swin's shifted-window mask and padding: the pad to a multiple of the window from Mod on
    the shape, Pad with those pads; a mask written by ScatterND into ConstantOfShape, compared
    (Equal, Not) and turned into -100 / 0 by Where, added to the data."""
    nodes = [
        node("Shape", ["x"], ["w_shape"]),
        node("Gather", ["w_shape", "one"], ["w_h"], axis=0),
        node("Mod", ["w_h", "win"], ["w_m"]),
        node("Sub", ["win", "w_m"], ["w_r"]),
        node("Mod", ["w_r", "win"], ["w_pad0"]),
        node("Unsqueeze", ["w_pad0", "axes0"], ["w_pad"]),
        node("Concat", ["zeros3", "zeros1", "w_pad", "zeros1"], ["w_pads"], axis=0),
        node("Pad", ["x", "w_pads"], ["w_x"]),  # (n, 6, 4): 5 padded to a multiple of 3
        node("Shape", ["w_x"], ["w_shape2"]),
        node("Slice", ["w_shape2", "one1", "big"], ["w_hw"]),
        node("ConstantOfShape", ["w_hw"], ["w_zero"],
             value=numpy_helper.from_array(np.array([0], dtype=np.float32))),
        node("ScatterND", ["w_zero", "rows", "upd"], ["w_mask"]),
        node("Equal", ["w_mask", "zf"], ["w_eq"]),
        node("Not", ["w_eq"], ["w_ne"]),
        node("Where", ["w_ne", "m100", "zf"], ["w_add"]),
        node("Add", ["w_x", "w_add"], ["y"])]
    inits = COMMON + [ints("win", 3), ints("zeros3", [0, 0, 0]), ints("zeros1", [0]),
                      ints("one1", [1]), ints("big", [2 ** 62]),
                      ints("rows", [[1], [4]]), floats("upd", [[1, 2, 0, 3], [0, 0, 5, 0]]),
                      floats("zf", 0.0), floats("m100", -100.0)]

    def ref(x):
        n = x.shape[0]
        p = np.concatenate([x, np.zeros((n, 1, 4), np.float32)], axis=1)
        mask = np.zeros((6, 4))
        mask[1] = [1, 2, 0, 3]
        mask[4] = [0, 0, 5, 0]
        return p + np.where(mask != 0, -100.0, 0.0)
    return model(nodes, inits, (5, 4), 3), (5, 4), ref


def case_class_token():
    """ViT's class token: expand to (n, -1, -1) where the -1s come from ConstantOfShape, Mul,
    Equal and Where on the shape, then Concat with the data along the sequence."""
    nodes = batch_of("c") + [
        node("Concat", ["c_b", "minus1", "minus1"], ["c_want"], axis=0),
        node("ConstantOfShape", ["three"], ["c_ones"],
             value=numpy_helper.from_array(np.array([1], dtype=np.int64))),
        node("Mul", ["c_ones", "minus1"], ["c_neg"]),
        node("Equal", ["c_want", "c_neg"], ["c_is"]),
        node("Where", ["c_is", "c_ones", "c_want"], ["c_exp"]),
        node("Expand", ["tok", "c_exp"], ["c_tok"]),
        node("Concat", ["c_tok", "x"], ["y"], axis=1)]
    tok = np.linspace(-1, 1, 6).reshape(1, 1, 6).astype(np.float32)
    inits = COMMON + [ints("three", [3]), floats("tok", tok)]

    def ref(x):
        return np.concatenate([np.broadcast_to(tok, (x.shape[0], 1, 6)), x], axis=1)
    return model(nodes, inits, (4, 6), 3), (4, 6), ref


def case_causal():
    """A causal mask from Range, Unsqueeze and LessOrEqual on the sequence length (Shape), and
    Where on graph data with that known condition."""
    nodes = [
        node("Shape", ["x"], ["k_shape"]),
        node("Gather", ["k_shape", "one"], ["k_s"], axis=0),
        node("Range", ["zero", "k_s", "one"], ["k_r"]),
        node("Unsqueeze", ["k_r", "axes0"], ["k_row"]),
        node("Unsqueeze", ["k_r", "axes1"], ["k_col"]),
        node("LessOrEqual", ["k_row", "k_col"], ["k_keep"]),
        node("Where", ["k_keep", "x", "m1e4"], ["y"])]
    inits = COMMON + [ints("axes1", [1]), floats("m1e4", -1e4)]

    def ref(x):
        s = x.shape[1]
        return np.where(np.tril(np.ones((s, s), bool)), x, -1e4)
    return model(nodes, inits, (4, 4), 3), (4, 4), ref


def case_int_arith():
    """Integer arithmetic on known values with negative numbers: Range down, Mod with the
    divisor's sign and with fmod, Div truncating, Gather at a negative index, Slice backwards by
    2, Max and Neg; cast to float and added to the data."""
    nodes = [
        node("Range", ["five", "m4", "m3"], ["a_a"]),  # 5, 2, -1
        node("Mod", ["a_a", "four"], ["a_mod"]),  # 1, 2, 3
        node("Mod", ["a_a", "four"], ["a_fmod"], fmod=1),  # 1, 2, -1
        node("Div", ["a_a", "two"], ["a_div"]),  # 2, 1, 0
        node("Gather", ["a_a", "m1s"], ["a_last"], axis=0),  # [-1]
        node("Neg", ["a_a"], ["a_neg"]),
        node("Max", ["a_neg", "a_mod"], ["a_max"]),  # 1, 2, 3
        node("Concat", ["a_a", "a_mod", "a_fmod", "a_div", "a_last", "a_max"], ["a_all"], axis=0),
        node("Slice", ["a_all", "minus1", "m100s", "axes0", "m2s"], ["a_back"]),
        node("Concat", ["a_all", "a_back"], ["a_v"], axis=0),
        node("Cast", ["a_v"], ["a_f"], to=F32),
        node("Add", ["x", "a_f"], ["y"])]
    inits = COMMON + [ints("five", 5), ints("m4", -4), ints("m3", -3), ints("four", 4),
                      ints("m1s", [-1]), ints("m100s", [-100]), ints("m2s", [-2])]
    a = np.array([5, 2, -1])
    allv = np.concatenate([a, np.mod(a, 4), np.fmod(a, 4), np.trunc(a / 2), a[-1:],
                           np.maximum(-a, np.mod(a, 4))])
    v = np.concatenate([allv, allv[::-1][::2]]).astype(np.float32)
    return model(nodes, inits, (v.size,), 2), (v.size,), lambda x: x + v


def case_external():
    """A weight kept outside the model file (external data, as PyTorch writes models over 2 GB):
    x @ w + b, b in external.data at an offset after w."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    b = np.array([0.5, -1, 2], dtype=np.float32)
    nodes = [node("MatMul", ["x", "w"], ["e_xw"]), node("Add", ["e_xw", "b"], ["y"])]
    m = model(nodes, [floats("w", w), floats("b", b)], (4,), 2)
    return m, (4,), lambda x: x @ w + b


def bad_external():
    """External data whose location leaves the model's folder."""
    m, _, _ = case_external()
    t = m.graph.initializer[0]
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    t.external_data.add(key="location", value="../escape.data")
    t.ClearField("float_data")
    t.ClearField("raw_data")
    return m, ["'w'", "outside the model's folder"]


def case_embed():
    """Token ids (an int64 input) looked up in an embedding table by Gather, as PyTorch exports
    nn.Embedding; the ids reshaped (Unsqueeze) and compared (Equal) on the way, to a padding
    mask that zeroes the rows of id 0."""
    table = np.linspace(-2, 2, 7 * 3).reshape(7, 3).astype(np.float32)
    nodes = [node("Gather", ["table", "x"], ["m_rows"], axis=0),
             node("Unsqueeze", ["x", "axes2"], ["m_ids"]),
             node("Equal", ["m_ids", "zero"], ["m_pad"]),
             node("Where", ["m_pad", "zf", "m_rows"], ["y"])]
    inits = COMMON + [floats("table", table), ints("axes2", [2]), floats("zf", 0.0)]

    def ref(x):
        return np.where((x == 0)[..., None], 0, table[x])
    return model(nodes, inits, (5,), 3, xtype=I64), (5,), ref


def bad_int_div():
    """An integer graph input divided in the graph (float division would not truncate)."""
    nodes = [node("Div", ["x", "two"], ["i_q"]), node("Cast", ["i_q"], ["y"], to=F32)]
    return model(nodes, COMMON, (4,), 2, xtype=I64), \
        ["i_q_node", "Div", "integers computed by the graph"]


def bad_gather():
    """Gather from the shape at an index past its end."""
    nodes = [node("Shape", ["x"], ["b_shape"]),
             node("Gather", ["b_shape", "seven"], ["b_g"], axis=0),
             node("Unsqueeze", ["b_g", "axes0"], ["b_u"]),
             node("Reshape", ["x", "b_u"], ["y"])]
    return model(nodes, COMMON + [ints("seven", 7)], (4,), 1), \
        ["b_g_node", "Gather", "out of range"]


def bad_range():
    """Range whose limit the graph computes (a reduction of the data): nothing to fold."""
    nodes = [node("ReduceSum", ["x"], ["b_sum"], keepdims=0),
             node("Range", ["zf", "b_sum", "onef"], ["b_r"]),
             node("Add", ["x", "b_r"], ["y"])]
    return model(nodes, COMMON + [floats("zf", 0.0), floats("onef", 1.0)], (4,), 2), \
        ["b_r_node", "Range", "computed by the graph"]


def bad_div():
    """An integer division of the shape by zero."""
    nodes = batch_of("d") + [
        node("Div", ["d_b", "zero1"], ["d_q"]),
        node("Concat", ["d_q", "minus1"], ["d_t"], axis=0),
        node("Reshape", ["x", "d_t"], ["y"])]
    return model(nodes, COMMON + [ints("zero1", [0])], (4,), 2), \
        ["d_q_node", "Div", "division by zero"]


def case_pad_modes():
    """Reflect then edge padding (ReflectionPad2d, ReplicationPad2d), pads as inputs (opset 13),
    then a constant pad."""
    nodes = [node("Pad", ["x", "p_reflect"], ["p_r"], mode="reflect"),
             node("Pad", ["p_r", "p_edge"], ["p_e"], mode="edge"),
             node("Pad", ["p_e", "p_const", "p_value"], ["p_c"]),
             node("Flatten", ["p_c"], ["y"], axis=1)]
    inits = [ints("p_reflect", [0, 0, 2, 1, 0, 1, 1, 3]), ints("p_edge", [0, 1, 0, 7, 0, 0, 3, 0]),
             ints("p_const", [0, 0, 1, 0, 0, 0, 0, 1]), floats("p_value", 0.5)]
    m = model(nodes, inits, (2, 4, 5), 2)

    def ref(x):
        y = np.pad(x, ((0, 0), (0, 1), (2, 1), (1, 3)), mode="reflect")
        y = np.pad(y, ((0, 0), (1, 0), (0, 3), (7, 0)), mode="edge")
        y = np.pad(y, ((0, 0), (0, 0), (1, 0), (0, 1)), constant_values=0.5)
        return y.reshape(y.shape[0], -1)
    return m, (2, 4, 5), ref


def case_pad_modes_v2():
    """The same modes as attributes (Pad before opset 11)."""
    nodes = [node("Pad", ["x"], ["p_r"], mode="reflect", pads=[0, 2, 1, 0, 1, 3]),
             node("Pad", ["p_r"], ["p_e"], mode="edge", pads=[0, 0, 4, 0, 2, 0]),
             node("Flatten", ["p_e"], ["y"], axis=1)]
    m = model(nodes, [], (3, 4), 2, opset=10)

    def ref(x):
        y = np.pad(x, ((0, 0), (2, 1), (1, 3)), mode="reflect")
        y = np.pad(y, ((0, 0), (0, 2), (4, 0)), mode="edge")
        return y.reshape(y.shape[0], -1)
    return m, (3, 4), ref


CASES = {"flatten": case_flatten, "heads": case_heads, "shuffle": case_shuffle,
         "window_mask": case_window_mask, "class_token": case_class_token, "causal": case_causal,
         "int_arith": case_int_arith, "external": case_external, "embed": case_embed,
         "pad_modes": case_pad_modes, "pad_modes_v2": case_pad_modes_v2}
def bad_reflect():
    """Reflect padding as wide as the axis (it mirrors without the edge element)."""
    nodes = [node("Pad", ["x", "p_reflect"], ["p_r"], mode="reflect"),
             node("Flatten", ["p_r"], ["y"], axis=1)]
    return (model(nodes, [ints("p_reflect", [0, 0, 4, 0, 0, 0])], (3, 4), 2),
            ["p_r_node", "Pad", "mode reflect", "size 4"])


BAD = {"reflect": bad_reflect, "gather": bad_gather, "range": bad_range, "div": bad_div, "external": bad_external,
       "int_div": bad_int_div}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    for name, make in CASES.items():
        m, xshape, ref = make()
        onnx.checker.check_model(m)
        if name == "external":  # both tensors in one file beside the model
            onnx.save(m, os.path.join(out, name + ".onnx"), save_as_external_data=True,
                      all_tensors_to_one_file=True, location="external.data", size_threshold=0)
        else:
            onnx.save(m, os.path.join(out, name + ".onnx"))
        if m.graph.input[0].type.tensor_type.elem_type == I64:  # token ids, 0 the padding
            x = rng.integers(0, 7, (3,) + tuple(xshape)).astype(np.int64)
        else:
            x = rng.uniform(-1, 1, (3,) + tuple(xshape)).astype(np.float32)
        y = np.asarray(ref(x), dtype=np.float32)
        for suffix, t in (("_x.pb", x), ("_y.pb", y)):
            with open(os.path.join(out, name + suffix), "wb") as f:
                f.write(numpy_helper.from_array(t).SerializeToString())
    for name, make in BAD.items():
        m, words = make()
        onnx.save(m, os.path.join(out, "bad_" + name + ".onnx"))
        with open(os.path.join(out, "bad_" + name + ".txt"), "w") as f:
            f.write("\n".join(words) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
