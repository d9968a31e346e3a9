"""The epilogues MobileNet/EfficientNet-style models and the audio encoders need, end to end.

Why: ReLU6, hardswish, hardsigmoid, leaky ReLU and exported SiLU ran as separate stock kernels
after every conv/matmul, an SE gate's channel-wise multiply too, and conv1d (Whisper, wav2vec 2.0)
had no candidate at all. Here each one goes through import (the forms ``torch.export`` emits),
fusion, selection and the kernels, against NumPy or PyTorch, with NaN in the inputs; every
candidate on its own is checked in ``test_nan_inf.py``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from test_nan_inf import assert_matches, ref
from tvm import relax

import ext
from conv2d_helpers import conv_wl
from ext.runner import CompiledCandidate
from ext.testing import own_candidates, run_relax
from ext.tuning import references as refs
from ext.workload import Workload, activation_name, parse_activation

import torch
nn = torch.nn

from ext.frontend import from_torch  # noqa: E402

NAN = np.nan


# -- names -----------------------------------------------------------------------------------

def test_activation_names_round_trip_through_key_and_json():
    assert activation_name("clip", 0.0, 6.0) == "clip:0:6"
    assert activation_name("leaky_relu", 0.1) == "leaky_relu:0.1"
    assert activation_name("clip", -math.inf, 1e30) == "clip:-inf:1e30"  # no '+': keys join steps with it
    assert parse_activation("clip:-inf:1e30") == ("clip", (-math.inf, 1e30))
    wl = Workload("conv2d", [(1, 3, 5, 7), (5, 3, 3, 3), (1, 5, 1, 1), (1, 5, 1, 1)], ["float32"] * 4,
                  epilogue=("bias", "clip:0:6", "scale"))
    assert wl.key.endswith("|bias+clip:0:6+scale")
    assert Workload.from_json(wl.to_json()) == wl and wl.activation == "clip:0:6"


@pytest.mark.parametrize("name,problem", [("clip", "takes 2 parameters"), ("clip:6:0", "out of order"),
                                          ("leaky_relu:x", "must be numbers"), ("clip:nan:1", "NaN"),
                                          ("relu:1", "takes 0 parameters"), ("swish", "unknown")])
def test_bad_activation_names_are_named(name, problem):
    with pytest.raises(ValueError, match=problem):
        Workload("matmul", [(3, 5), (5, 7)], ["float32"] * 2, epilogue=(name,))


# -- activations as PyTorch exports them, after a linear layer and a conv ------------------------

# module, the epilogue step ext must report
EXPORTED = [(nn.Hardswish(), "hardswish"), (nn.Hardsigmoid(), "hardsigmoid"), (nn.ReLU6(), "clip:0:6"),
            (nn.Hardtanh(-1.0, 2.0), "clip:-1:2"), (nn.LeakyReLU(0.2), "leaky_relu:0.2"), (nn.SiLU(), "silu"),
            (nn.GELU(approximate="tanh"), "gelu_tanh")]


def _with_nan(shape, seed: int) -> torch.Tensor:
    x = torch.from_numpy(np.random.default_rng(seed).normal(0, 2, shape).astype("float32"))
    x.view(-1)[x.numel() // 3] = NAN  # a NaN row (linear) / a NaN neighbourhood (conv)
    return x


@pytest.mark.parametrize("anchor", ["linear", "conv2d"])
@pytest.mark.parametrize("act,step", EXPORTED, ids=[s for _, s in EXPORTED])
def test_exported_activation_is_one_fused_kernel(cpu_target, anchor, act, step):
    torch.manual_seed(0)
    layer = nn.Linear(13, 37) if anchor == "linear" else nn.Conv2d(5, 11, 3, padding=1)
    model = nn.Sequential(layer, act).eval()
    x = _with_nan((7, 13) if anchor == "linear" else (1, 5, 9, 11), seed=1)
    ex = ext.build(from_torch(model, (x,)), cpu_target)
    rep = ext.last_report()
    assert [d.workload.epilogue for d in rep] == [("bias", step)], rep
    assert all(d.candidate is not None for d in rep) and not rep.find_stock(), rep
    with torch.no_grad():
        want = model(x).numpy()
    assert np.isnan(want).any() and np.isfinite(want).any()
    assert_matches(run_relax(ex, x.numpy()), want, rtol=1e-5, atol=1e-5, what=step)


def _relu6_3(y):
    return relax.op.clip(relax.op.add(y, relax.const(3.0)), 0.0, 6.0)


def _onnx_hardsigmoid(y):
    return relax.op.clip(relax.op.add(relax.op.multiply(relax.const(1 / 6), y), relax.const(0.5)), 0, 1)


# other importers' forms (the ONNX frontend's HardSwish / HardSigmoid, ``* (1/6)``), and near misses
FORMS = {
    "onnx_hardswish": (lambda y: relax.op.multiply(y, relax.op.divide(_relu6_3(y), relax.const(6.0))), "hardswish"),
    "onnx_hardsigmoid": (_onnx_hardsigmoid, "hardsigmoid"),
    "onnx_hardswish_v1": (lambda y: relax.op.multiply(y, _onnx_hardsigmoid(y)), "hardswish"),
    "times_sixth": (lambda y: relax.op.multiply(_relu6_3(y), relax.const(1 / 6)), "hardsigmoid"),
    "sigmoid_times_y": (lambda y: relax.op.multiply(relax.op.sigmoid(y), y), "silu"),
    "not_hardsigmoid": (lambda y: relax.op.divide(_relu6_3(y), relax.const(5.0)), None),  # / 5: no hardsigmoid
}


@pytest.mark.parametrize("form", list(FORMS))
def test_other_activation_forms_fuse_after_matmul(cpu_target, form):
    build, step = FORMS[form]
    M, K, N = 7, 13, 37
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((M, K), "float32"))
    w = relax.Var("w", relax.TensorType((K, N), "float32"))
    b = relax.Var("b", relax.TensorType((N,), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(build(relax.op.add(relax.op.matmul(x, w), b))))
        bb.emit_func_output(out)
    rng = np.random.default_rng(5)
    xv, wv = rng.normal(0, 2, (M, K)).astype("float32"), rng.uniform(-1, 1, (K, N)).astype("float32")
    bv = rng.uniform(-1, 1, N).astype("float32")
    xv[3, 4] = NAN
    ex = ext.build(bb.get(), cpu_target)
    (row,) = ext.last_report().find("matmul")
    assert row.workload.epilogue == (("bias", step) if step else ("bias",))
    y = xv.astype("float64") @ wv + bv
    want = ref(lambda v: np.clip(v + 3, 0, 6) / 5, y) if step is None else ref(refs.activation(step), y)
    assert_matches(run_relax(ex, xv, wv, bv), want, rtol=1e-5, atol=4e-6 * 16, what=form)


@pytest.mark.parametrize("act", [nn.Hardswish(), nn.Hardsigmoid(), nn.ReLU6()], ids=["hardswish", "hardsigmoid",
                                                                                     "relu6"])
def test_standalone_activation_is_one_elementwise_kernel(cpu_target, act):
    """Not after an anchor: the exported chain (add, two clips, multiply, divide) is one kernel."""
    x = _with_nan((3, 37), seed=2)
    mod = from_torch(nn.Sequential(act).eval(), (x,))
    with cpu_target:
        lowered = ext.pipeline(cpu_target)(mod)
    kernels = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) == 1, kernels
    with torch.no_grad():
        want = act(x).numpy()
    assert_matches(run_relax(ext.build(mod, cpu_target), x.numpy()), want, rtol=1e-6, atol=1e-6, what=str(act))


# -- the channel-wise multiply (SE gate) ---------------------------------------------------------

def _conv_gate_module(n: int, c: int, hw: tuple, o: int, gate_from_input: bool):
    """``clip(conv(x) + b, 0, 6) * g``: ``g`` an input ``(n, o, 1, 1)`` or pooled from the conv output."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, *hw), "float32"))
    w = relax.Var("w", relax.TensorType((o, c, 3, 3), "float32"))
    b = relax.Var("b", relax.TensorType((1, o, 1, 1), "float32"))
    g = relax.Var("g", relax.TensorType((n, o, 1, 1), "float32"))
    with bb.function("main", [x, w, b, g]):
        with bb.dataflow():
            y = bb.emit(relax.op.clip(relax.op.add(relax.op.nn.conv2d(x, w, padding=1), b), 0.0, 6.0))
            gate = g if gate_from_input else bb.emit(relax.op.sigmoid(
                relax.op.add(relax.op.mean(y, axis=[2, 3], keepdims=True), g)))  # the usual SE: cycle
            out = bb.emit_output(bb.emit(relax.op.multiply(y, gate)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("n", [1, 2])
def test_se_gate_multiply_fuses_into_the_conv(cpu_target, n):
    c, hw, o = 5, (7, 9), 13
    rng = np.random.default_rng(n)
    x, w = rng.uniform(-1, 1, (n, c, *hw)).astype("float32"), rng.uniform(-1, 1, (o, c, 3, 3)).astype("float32")
    b, g = rng.uniform(-1, 1, (1, o, 1, 1)).astype("float32"), rng.uniform(0, 1, (n, o, 1, 1)).astype("float32")
    g[-1, 3], g[0, 4] = NAN, np.inf  # a NaN gate channel, an infinite one (inf * 0 = NaN where relu6 is 0)
    ex = ext.build(_conv_gate_module(n, c, hw, o, gate_from_input=True), cpu_target)
    rep = ext.last_report()
    assert [d.workload.epilogue for d in rep] == [("bias", "clip:0:6", "scale")], rep
    assert not rep.find_stock("relax.multiply")
    conv = refs.conv_nchw(x.astype("float64"), w.astype("float64"), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    want = ref(lambda v: np.clip(v + b, 0, 6) * g, conv)
    assert_matches(run_relax(ex, x, w, b, g), want, rtol=1e-5, atol=4e-6 * c * 9, what=f"n={n}")


# (N, C, H, W, O, K, groups): 3x3 (winograd, direct, im2col), 1x1 (pointwise), depthwise, batch 2
SCALE_CONVS = [(1, 3, 9, 11, 13, 3, 1), (1, 8, 7, 5, 13, 1, 1), (1, 13, 9, 7, 13, 3, 13), (2, 5, 7, 9, 11, 3, 1)]


@pytest.mark.parametrize("geom", SCALE_CONVS, ids=["3x3", "1x1", "depthwise", "batch2"])
def test_every_conv2d_candidate_applies_the_scale(cpu_target, geom):
    """``bias, hardswish, scale`` with an ``(N, O, 1, 1)`` gate holding NaN, on every candidate that applies."""
    N, C, H, W, O, K, g = geom
    wl = conv_wl(N, C, H, W, O, K, pad=K // 2, groups=g, epilogue=("bias", "hardswish"))
    wl = wl.with_(shapes=wl.shapes + ((N, O, 1, 1),), dtypes=wl.dtypes + ("float32",),
                  epilogue=("bias", "hardswish", "scale"))
    cands = own_candidates(wl, cpu_target)
    assert cands, "no conv2d candidate applies"
    rng = np.random.default_rng(O * K + g)
    x, w, b, gate = (rng.uniform(-1, 1, s).astype("float32") for s in wl.shapes)
    gate[-1, 2] = NAN
    want = ref(lambda v: refs.conv2d(wl, [x, w, b, gate]), x)
    assert np.isnan(want[-1, 2]).all() and np.isfinite(want[0, 0]).all()
    for cand in cands:
        got = CompiledCandidate(cand, wl, cand.default_config(wl, cpu_target), cpu_target).run([x, w, b, gate])
        assert_matches(got, want, rtol=1e-5, atol=4e-6 * max(C // g * K * K, 16), what=cand.name)


def test_gate_pooled_from_the_conv_output_is_not_fused(cpu_target):
    """The SE block's gate depends on the conv's own output: fusing the multiply would be a cycle."""
    n, c, hw, o = 1, 5, (7, 9), 13
    rng = np.random.default_rng(3)
    x, w = rng.uniform(-1, 1, (n, c, *hw)).astype("float32"), rng.uniform(-1, 1, (o, c, 3, 3)).astype("float32")
    b, g = rng.uniform(-1, 1, (1, o, 1, 1)).astype("float32"), rng.uniform(-1, 1, (n, o, 1, 1)).astype("float32")
    ex = ext.build(_conv_gate_module(n, c, hw, o, gate_from_input=False), cpu_target)
    conv_rows = ext.last_report().find("conv2d")
    assert [d.workload.epilogue for d in conv_rows] == [("bias", "clip:0:6")]
    y = np.clip(refs.conv_nchw(x.astype("float64"), w.astype("float64"), (1, 1), (1, 1, 1, 1), (1, 1), 1) + b, 0, 6)
    want = y / (1 + np.exp(-(y.mean(axis=(2, 3), keepdims=True) + g)))
    np.testing.assert_allclose(run_relax(ex, x, w, b, g), want, rtol=1e-5, atol=1e-5)


# -- conv1d ------------------------------------------------------------------------------------

# (C, O, K, stride, padding, dilation, groups, L): stride 2 + dilation 2 + groups, 'same'-style
# padding, depthwise, a 1x1, Whisper's stride-2 kernel-3 layer
CONV1D = [(4, 6, 3, 2, 1, 2, 2, 17), (5, 7, 5, 1, 2, 1, 1, 23), (6, 6, 3, 1, 2, 2, 6, 19), (7, 5, 1, 1, 0, 1, 1, 13),
          (16, 32, 3, 2, 1, 1, 1, 31)]


@pytest.mark.parametrize("cfg", CONV1D, ids=["s2d2g2", "k5pad2", "depthwise", "1x1", "whisper"])
def test_conv1d_runs_as_a_conv2d_candidate(cpu_target, cfg):
    C, O, K, s, p, d, g, L = cfg
    torch.manual_seed(sum(cfg))
    conv = nn.Conv1d(C, O, K, stride=s, padding=p, dilation=d, groups=g)
    model = nn.Sequential(conv, nn.GELU(), nn.Conv1d(O, 3, 3, padding=1)).eval()  # conv1d after conv1d
    x = torch.randn(1, C, L)
    ex = ext.build(from_torch(model, (x,)), cpu_target)
    rep = ext.last_report()
    assert not rep.find_stock("relax.nn.conv1d") and not rep.find_stock("relax.nn.conv2d"), rep
    convs = rep.find("conv2d")
    assert len(convs) == 2 and all(c.candidate is not None for c in convs), rep
    assert convs[0].workload.epilogue == ("bias", "gelu"), rep  # the squeeze was sunk past bias and GELU
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run_relax(ex, x.numpy()), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("layout", ["NCW", "NWC"])
def test_conv1d_asymmetric_padding_and_layouts(cpu_target, layout):
    """Relax-level conv1d (PyTorch cannot pad asymmetrically or run NWC) against NumPy."""
    N, C, L, O, K = 2, 6, 29, 9, 4
    nwc = layout == "NWC"
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((N, L, C) if nwc else (N, C, L), "float32"))
    w = relax.Var("w", relax.TensorType((O, C // 3, K), "float32"))
    b = relax.Var("b", relax.TensorType((O,) if nwc else (O, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = relax.op.nn.conv1d(x, w, strides=2, padding=(1, 2), dilation=2, groups=3, data_layout=layout)
            out = bb.emit_output(bb.emit(relax.op.nn.leakyrelu(relax.op.add(y, b), 0.05)))
        bb.emit_func_output(out)
    rng = np.random.default_rng(7)
    xv = rng.uniform(-1, 1, [int(d) for d in x.ty.shape]).astype("float32")
    wv, bv = rng.uniform(-1, 1, (O, C // 3, K)).astype("float32"), rng.uniform(-1, 1, (O,)).astype("float32")
    ex = ext.build(bb.get(), cpu_target)
    rows = ext.last_report().find("conv2d")
    assert len(rows) == 1 and rows[0].candidate is not None
    # NWC: LayoutPolicy turns the conv to NCHW and transposes back before the bias (as for any NHWC conv2d)
    assert rows[0].workload.epilogue == (() if nwc else ("bias", "leaky_relu:0.05"))
    x_ncw = xv.transpose(0, 2, 1) if nwc else xv
    conv = refs.conv_nchw(x_ncw[:, :, None].astype("float64"), wv[:, :, None].astype("float64"), (1, 2),
                          (0, 1, 0, 2), (1, 2), 3)[:, :, 0] + bv[:, None]
    want = np.where(conv < 0, 0.05 * conv, conv)
    got = run_relax(ex, xv, wv, bv.reshape(int(b.ty.shape[0]), -1) if not nwc else bv)
    np.testing.assert_allclose(got.transpose(0, 2, 1) if nwc else got, want, rtol=1e-5, atol=4e-6 * 2 * K)


@pytest.mark.parametrize("name", ["whisper_tiny_encoder", "wav2vec2_base"])
def test_audio_encoders_convs_are_candidates(cpu_target, name):
    """The zoo's audio encoders (quick configs): every conv a candidate, none left to stock lowering
    (their correctness against PyTorch is tests/test_zoo.py's)."""
    import transformers  # noqa: F401
    from ext.models.zoo import zoo_model

    model, inputs = zoo_model(name, quick=True)
    ext.build(from_torch(model, inputs), cpu_target)
    rep = ext.last_report()
    assert not [d for d in rep.stock if "conv" in d.workload.op], rep
    convs = rep.find("conv2d")
    assert len(convs) >= 2 and all(d.candidate is not None for d in convs), rep
