"""``from_onnx`` on the graph shapes PyTorch's ONNX exporters write: shape arithmetic of static
shapes (folded at import, ``ext.onnx_fixes``), an ``If`` on a shape test, a ``GridSample`` grid
of another float type, a symbolic input that must stay symbolic; and the ops whose stock
converters hid them from ext's passes (``ext.onnx_importer``: ``Clip``, ``Pad``, ``Einsum``).
Each model is built and run against NumPy (or PyTorch for ``grid_sample``)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.testing import assert_close

onnx = pytest.importorskip("onnx")
helper, TP = onnx.helper, onnx.TensorProto


def _const(name: str, values, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(values, dtype), name))


def _model(nodes, inputs, out_name: str, out_type=TP.FLOAT):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out_name, out_type, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, *arrays):
    ex = ext.build(ext.frontend.from_onnx(model), ext.target.cpu(), cache=False, verbose=False)
    return relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def _x(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape).astype("float32")


def test_constant_of_the_empty_shape_is_a_scalar():
    """``ConstantOfShape([])``: a 0-d tensor (PyTorch's exporter writes it for attention-mask
    constants; the importer broadcast the 1-element value to rank 0 and failed)."""
    nodes = [_const("empty", np.zeros((0,))),
             helper.make_node("ConstantOfShape", ["empty"], ["c"],
                              value=onnx.numpy_helper.from_array(np.array([1.5], "float32"))),
             helper.make_node("Add", ["x", "c"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])], "y")
    x = _x(2, 3)
    assert_close(_run(model, x), x + 1.5, rtol=0, atol=0, what="x + 0-d constant")


def test_pads_computed_from_a_static_shape():
    """``Pad`` whose pads come from ``Shape`` arithmetic ("Dynamic pads are not supported yet"):
    pad H to a multiple of 4 and W by one on each side."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             _const("i2", [2]), helper.make_node("Gather", ["s", "i2"], ["h"], axis=0),
             _const("four", [4]), helper.make_node("Mod", ["h", "four"], ["hm"]),
             helper.make_node("Sub", ["four", "hm"], ["hpad"]),
             _const("zeros3", [0, 0, 0]), _const("one", [1]),
             helper.make_node("Concat", ["zeros3", "one", "zeros3", "one"], ["p0"], axis=0),
             _const("mask", [0, 0, 0, 0, 0, 0, 1, 0]),
             helper.make_node("Mul", ["mask", "hpad"], ["hp"]),
             helper.make_node("Add", ["p0", "hp"], ["pads"]),
             helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [1, 2, 5, 6])], "y")
    x = _x(1, 2, 5, 6)
    want = np.pad(x, [(0, 0), (0, 0), (0, 3), (1, 1)])
    got = _run(model, x)
    assert got.shape == want.shape
    assert_close(got, want, rtol=0, atol=0, what="padded")


def test_pads_computed_layer_after_layer():
    """Twelve convs, each input padded by arithmetic on the previous conv's output length (the
    shape of EnCodec's encoder): every layer needs its own fold + shape-inference pass; eight
    passes left the last layers' pads to the importer ("Dynamic pads are not supported yet")."""
    torch = pytest.importorskip("torch")
    import io
    import math

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(torch.nn.Conv1d(2, 2, 3) for _ in range(12))

        def forward(self, x):
            for conv in self.convs:
                length = x.shape[-1]
                x = conv(torch.nn.functional.pad(x, (0, math.ceil(length / 4) * 4 - length + 2)))
            return x

    torch.manual_seed(0)
    net, x = Chain().eval(), torch.randn(1, 2, 11)
    buf = io.BytesIO()
    torch.onnx.export(net, (x,), buf, opset_version=17, dynamo=False)
    with torch.no_grad():
        want = net(x).numpy()
    assert_close(_run(onnx.load_from_string(buf.getvalue()), x.numpy()), want, rtol=1e-5, atol=1e-5, what="chain")


def _if_model(cond_nodes, height: int):
    """``y = If(cond, 2 * r, r)`` with ``r = Relu(x)`` read by the branches from outside."""
    two = onnx.numpy_helper.from_array(np.array(2.0, "float32"), "two")
    then = helper.make_graph([helper.make_node("Constant", [], ["two"], value=two),
                              helper.make_node("Mul", ["r", "two"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TP.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["r"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TP.FLOAT, None)])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), *cond_nodes,
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    return _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [2, height])], "y")


@pytest.mark.parametrize("height,scale", [(5, 2.0), (3, 1.0)])
def test_if_on_a_static_shape_takes_its_branch(height, scale):
    """``If (H > 4)`` (window padding in ViTDet): the branch taken replaces the ``If``."""
    model = _if_model([helper.make_node("Shape", ["x"], ["s"]), _const("i1", 1),
                       helper.make_node("Gather", ["s", "i1"], ["h"], axis=0), _const("four", 4),
                       helper.make_node("Greater", ["h", "four"], ["cond"])], height)
    from ext.onnx_fixes import prepare

    assert "If" not in [n.op_type for n in prepare(model).graph.node]
    x = _x(2, height)
    assert_close(_run(model, x), np.maximum(x, 0) * scale, rtol=0, atol=0, what="branch")


def test_if_on_input_values_keeps_what_its_branches_read():
    """An ``If`` on input values stays; ``r``, read only inside its branches, is not dropped as
    dead when folding elsewhere rewrites the graph."""
    model = _if_model([helper.make_node("Shape", ["x"], ["s"]),  # something to fold
                       helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                       helper.make_node("Cast", ["s"], ["sf"], to=TP.FLOAT),
                       helper.make_node("ReduceSum", ["sf"], ["bound"], keepdims=0),
                       helper.make_node("Greater", ["total", "bound"], ["cond"])], 4)
    from ext.onnx_fixes import prepare

    folded = prepare(model)
    assert "Relu" in [n.op_type for n in folded.graph.node] and "Shape" not in [n.op_type for n in folded.graph.node]
    for x in (_x(2, 4) * 0.1, _x(2, 4) + 3):
        want = np.maximum(x, 0) * (2.0 if x.sum() > 6 else 1.0)
        assert_close(_run(model, x), want, rtol=0, atol=0, what="branch on values")


def test_grid_sample_with_a_double_grid():
    """``GridSample(float32 data, float64 grid)`` times float32 weights (Deformable DETR's
    export): the grid is cast to the data's type; the build failed on a float64 x float32
    multiply."""
    torch = pytest.importorskip("torch")
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["g"], align_corners=0, mode="bilinear"),
             helper.make_node("Constant", [], ["w"], value=onnx.numpy_helper.from_array(np.array(0.5, "float32"))),
             helper.make_node("Mul", ["g", "w"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 5, 7]),
                           helper.make_tensor_value_info("grid", TP.DOUBLE, [1, 4, 6, 2])], "y")
    x = _x(1, 3, 5, 7)
    grid = np.random.default_rng(7).uniform(-1.1, 1.1, (1, 4, 6, 2))
    want = torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(grid).float(),
                                           align_corners=False).numpy() * 0.5
    assert_close(_run(model, x, grid), want, rtol=1e-5, atol=1e-5, what="grid_sample")


def test_symbolic_input_stays_symbolic():
    """Shape arithmetic of a symbolic size is not folded: one build runs at two sizes."""
    nodes = [helper.make_node("Shape", ["x"], ["n"], start=0, end=1), _const("rest", [-1]),
             helper.make_node("Concat", ["n", "rest"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 3, 4])], "y")
    ex = ext.build(ext.frontend.from_onnx(model), ext.target.cpu(), cache=False, verbose=False)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for n in (2, 5):
        x = _x(n, 3, 4)
        assert_close(vm["main"](tvm.runtime.tensor(x)).numpy(), np.maximum(x.reshape(n, 12), 0), rtol=0, atol=0,
                     what=f"n={n}")


def test_folding_keeps_the_original_model_untouched():
    from ext.onnx_fixes import prepare

    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])], "y")
    before = model.SerializeToString()
    folded = prepare(model)
    assert model.SerializeToString() == before
    assert [n.op_type for n in folded.graph.node] == ["Constant", "Reshape"]


def _conv_nodes(pad_node: bool):
    """x -> [Pad 1] -> Conv 3x3 (+ bias) -> Clip(0, 6) -> y, weights as initializers."""
    nodes = [_const("pads", [0, 0, 1, 1, 0, 0, 1, 1]), helper.make_node("Pad", ["x", "pads"], ["xp"])] if pad_node else []
    conv_in = "xp" if pad_node else "x"
    nodes += [helper.make_node("Conv", [conv_in, "w", "b"], ["c"], kernel_shape=[3, 3],
                               pads=[0, 0, 0, 0] if pad_node else [1, 1, 1, 1]),
              _const("lo", 0.0, np.float32), _const("hi", 6.0, np.float32),
              helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    return nodes


@pytest.mark.parametrize("pad_node", [False, True], ids=["conv_padding", "pad_op"])
def test_relu6_and_pad_reach_the_conv(pad_node):
    """``Clip(0, 6)`` after a conv is the conv's ``clip:0:6`` epilogue and an explicit zero
    ``Pad`` before it becomes the conv's padding (the stock converters emitted opaque TOPI
    kernels: two extra passes over the output, one over the input); NaN stays NaN."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 5, 3, 3)).astype("float32")
    b = rng.standard_normal(8).astype("float32")
    graph = helper.make_graph(_conv_nodes(pad_node), "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 5, 9, 11])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                              initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = _x(1, 5, 9, 11) * 3
    x[0, 0, 4, 4] = np.nan
    got = _run(model, x)
    report = ext.last_report()
    convs = report.find("conv2d")
    assert len(convs) == 1 and "clip:0:6" in convs[0].workload.epilogue, report
    assert not report.find_stock("relax.nn.pad") and not report.find_stock("relax.clip"), report
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # 1, 5, 9, 11, 3, 3
    conv = np.einsum("nchwij,ocij->nohw", windows, w) + b[None, :, None, None]
    want = np.clip(conv, 0, 6)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).any()
    assert_close(np.nan_to_num(got), np.nan_to_num(want), rtol=1e-5, atol=1e-5, what="conv + relu6")


@pytest.mark.parametrize("bound", [np.nan, 2.0])
def test_clip_bounds(bound):
    """A NaN bound is no bound (ONNX / onnxruntime); a NaN input stays NaN."""
    nodes = [_const("lo", -1.0, np.float32), _const("hi", bound, np.float32),
             helper.make_node("Clip", ["x", "lo", "hi"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [4, 6])], "y")
    x = _x(4, 6) * 3
    x[1, 2] = np.nan
    want = np.clip(x, -1.0, np.inf if np.isnan(bound) else bound)
    got = _run(model, x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert_close(np.nan_to_num(got), np.nan_to_num(want), rtol=0, atol=0, what="clip")


def test_einsum_is_a_relax_einsum():
    """``Einsum`` becomes ``relax.einsum`` (not an opaque TOPI kernel), and computes numpy's."""
    nodes = [helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")]
    model = _model(nodes, [helper.make_tensor_value_info("a", TP.FLOAT, [2, 3, 5]),
                           helper.make_tensor_value_info("b", TP.FLOAT, [2, 5, 4])], "y")
    assert "R.einsum" in ext.frontend.from_onnx(model)["main"].script()
    a, b = _x(2, 3, 5), _x(2, 5, 4) + 1
    assert_close(_run(model, a, b), np.einsum("bij,bjk->bik", a, b), rtol=1e-5, atol=1e-5, what="einsum")


@pytest.mark.parametrize("last,axis,inverse,onesided", [(1, 1, 0, 0), (1, 2, 0, 1), (2, 1, 1, 0), (2, -2, 0, 0)])
def test_dft_matches_onnxruntime(last, axis, inverse, onesided):
    """ONNX ``DFT`` (opset 17; the dynamo exporter's form of every ``torch.fft`` call), real or
    complex input, forward or inverse, two-sided or one-sided, over odd lengths."""
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node("DFT", ["x"], ["y"], axis=axis, inverse=inverse, onesided=onesided)
    model = _model([node], [helper.make_tensor_value_info("x", TP.FLOAT, [2, 7, 5, last])], "y")
    x = _x(2, 7, 5, last)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert_close(_run(model, x), want, rtol=1e-5, atol=1e-5, what="DFT")


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_log_sum_exp_with_infinities(opset):
    """Rows holding +inf, -inf everywhere, NaN: the stock ``x - max`` gave ``inf - inf`` (NaN)
    for the +inf row; onnxruntime gives +inf, -inf and NaN."""
    ort = pytest.importorskip("onnxruntime")
    if opset == 13:
        node = helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1], keepdims=0)
        nodes = [node]
    else:
        nodes = [_const("axes", [1]), helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [4, 5])], "y")
    model.opset_import[0].version = opset
    x = _x(4, 5)
    x[0, 2], x[1, :], x[2, 4] = np.inf, -np.inf, np.nan
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = _run(model, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6, atol=1e-6, what="logsumexp")


@pytest.mark.parametrize("mode,coord,nearest", [("linear", "pytorch_half_pixel", "round_prefer_floor"),
                                                ("linear", "half_pixel", "round_prefer_floor"),
                                                ("cubic", "pytorch_half_pixel", "round_prefer_floor"),
                                                ("nearest", "asymmetric", "floor"),
                                                ("nearest", "half_pixel", "round_prefer_ceil"),
                                                ("linear", "asymmetric", "round_prefer_floor")])
def test_resize_by_a_scale_the_sizes_do_not_state(mode, coord, nearest):
    """``scales`` 1.7 and 0.6 on 9 x 11: outputs 15 x 6, whose pixels map back with the given
    scale. The stock ``resize2d`` used ``in / out`` (bilinear off by up to 1.3, nearest rows off by
    one); whole scales keep the stock converter."""
    ort = pytest.importorskip("onnxruntime")
    nodes = [_const("roi", [], np.float32), _const("scales", [1, 1, 1.7, 0.6], np.float32),
             helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode=mode, coordinate_transformation_mode=coord,
                              nearest_mode=nearest)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 9, 11])], "y")
    x = _x(2, 3, 9, 11)
    x[0, 1, 4, 5] = np.nan  # reaches only the outputs whose taps read it
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = _run(model, x)
    assert got.shape == want.shape == (2, 3, 15, 6)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert_close(got[ok], want[ok], rtol=1e-5, atol=1e-5, what=f"Resize {mode} {coord}")


@pytest.mark.parametrize("mode,coord", [("nearest", "tf_half_pixel_for_nn"), ("cubic", "half_pixel"),
                                        ("linear", "align_corners")])
def test_resize_by_sizes_beside_an_empty_scales(mode, coord):
    """``Resize(x, roi, scales=[], sizes)``: opset 11-12 required the scales input, so exporters
    pass an empty one; the stock converter stopped on "Only one of scales and sizes"."""
    ort = pytest.importorskip("onnxruntime")
    nodes = [_const("roi", [], np.float32), _const("scales", [], np.float32), _const("sizes", [1, 3, 14, 5]),
             helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode=mode,
                              coordinate_transformation_mode=coord, exclude_outside=int(mode == "cubic"),
                              cubic_coeff_a=-0.5)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 9, 11])], "y")
    x = _x(1, 3, 9, 11)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert_close(_run(model, x), want, rtol=1e-5, atol=1e-5, what=f"Resize {mode} by sizes")


@pytest.mark.parametrize("p,axis", [(2, 1), (1, -1)])
def test_lp_normalization(p, axis):
    ort = pytest.importorskip("onnxruntime")
    model = _model([helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)],
                   [helper.make_tensor_value_info("x", TP.FLOAT, [2, 5, 7])], "y")
    x = _x(2, 5, 7)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert_close(_run(model, x), want, rtol=1e-5, atol=1e-6, what=f"LpNormalization p={p}")


@pytest.mark.parametrize("out,auto_pad", [([20, 23], "NOTSET"), ([18, 21], "NOTSET"), ([18, 21], "SAME_UPPER"),
                                          ([18, 22], "SAME_LOWER")])
def test_conv_transpose_output_shape(out, auto_pad):
    """``output_shape`` sets the pads (or, past the natural 19 x 23, output padding); the stock
    converter ignored it (19 rows where 20 were asked)."""
    ort = pytest.importorskip("onnxruntime")
    w = np.random.default_rng(3).standard_normal((3, 4, 3, 3)).astype("float32")
    nodes = [helper.make_node("Constant", [], ["w"], value=onnx.numpy_helper.from_array(w, "w")),
             helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=out, auto_pad=auto_pad)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 9, 11])], "y")
    x = _x(1, 3, 9, 11)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = _run(model, x)
    assert got.shape == want.shape == (1, 4, *out)
    assert_close(got, want, rtol=1e-5, atol=1e-5, what=f"ConvTranspose output_shape {out} {auto_pad}")


@pytest.mark.parametrize("pads,strides,ceil", [([1, 1, 1, 1], [2, 2], 0), ([0, 1, 1, 0], [2, 1], 1), ([0, 0, 0, 0], [1, 1], 0)])
def test_max_pool_indices_output(pads, strides, ceil):
    """``MaxPool`` with its ``Indices`` output (flattened over N, C, H, W): the stock converter gave
    one output and the import stopped."""
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=[3, 2], pads=pads, strides=strides, ceil_mode=ceil)
    graph = helper.make_graph([node, helper.make_node("Cast", ["i"], ["y"], to=TP.FLOAT),
                               helper.make_node("Add", ["y", "v"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 8, 9])],
                              [helper.make_tensor_value_info("z", TP.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = _x(2, 3, 8, 9)
    x[0, 1, 2, :] = -np.inf  # a window of -inf keeps its first pixel inside the image
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert_close(_run(model, x), want, rtol=0, atol=1e-4, what=f"MaxPool indices {pads} {strides}")


@pytest.mark.parametrize("mode,k,stride,dilation,dims", [
    ("SAME_UPPER", 3, 1, 1, ["n", 4, "h", "w"]),    # a run-time image size, stride 1: pads known
    ("SAME_LOWER", 4, 1, 1, ["n", 4, "h", "w"]),    # an even kernel: the odd cell first (LOWER)
    ("SAME_UPPER", 3, 2, 1, [1, 4, 9, 10]),         # static, stride 2: one odd and one even side
    ("SAME_LOWER", 5, 2, 1, [1, 4, 9, 10]),
    ("SAME_UPPER", 3, 2, 1, ["n", 4, "h", "w"]),    # symbolic, stride 2: padded by the size's parity
    ("SAME_LOWER", 4, 3, 1, ["n", 4, "h", "w"]),
])
def test_conv_same_auto_pad_becomes_the_convs_padding(mode, k, stride, dilation, dims):
    """``Conv`` with ``auto_pad`` SAME_*: the pads go into the conv where they are known at import
    (no separate pad kernel; EfficientNet's "same" depthwise convs), else zeros concatenated by
    the run-time size (the stock converter's pad failed to import), matching onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    w = np.random.default_rng(4).standard_normal((6, 4, k, k)).astype("float32")
    nodes = [helper.make_node("Constant", [], ["w"], value=onnx.numpy_helper.from_array(w, "w")),
             helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=mode, strides=[stride] * 2,
                              dilations=[dilation] * 2)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, dims)], "y")
    mod = ext.frontend.from_onnx(model)
    known = stride == 1 or all(isinstance(d, int) for d in dims)
    assert "call_tir" not in mod.script() and ("concat" in mod.script()) != known, mod  # no opaque pad kernel
    vm = relax.VirtualMachine(ext.build(mod, ext.target.cpu(), cache=False, verbose=False), tvm.cpu())
    sess = ort.InferenceSession(model.SerializeToString())
    for shape in ([1, 4, 9, 10], [2, 4, 7, 13], [1, 4, 12, 5]) if "h" in dims else ([1, 4, 9, 10],):
        x = _x(*shape)
        want = sess.run(None, {"x": x})[0]
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        assert got.shape == want.shape
        assert_close(got, want, rtol=1e-5, atol=1e-4, what=f"Conv {mode} k={k} s={stride} {shape}")
