"""Symbolic (run-time) outer dimensions: ``Candidate.dynamic``, the ``*_dyn`` candidates
(``ext/strategies/dynamic.py``) against NumPy for several values of each symbol (1 and
primes), and whole graphs built once with a symbolic batch / sequence and run at several
sizes against PyTorch and the static build."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, tirx
from tvm.relax import TensorType

import ext
from ext.relax_passes.symbolic import out_shape, parse_dim
from ext.strategies import REGISTRY
from ext.strategies._symbolic import symbolic_roles
from ext.testing import assert_close
from ext.workload import Workload

SIZES = (1, 7, 64)
F32 = "float32"


def _wl(op, shapes, **attrs):
    epilogue = attrs.pop("epilogue", ())
    return Workload(op, shapes, [F32] * len(shapes), F32, attrs=attrs, epilogue=epilogue)


def _concrete(shape, values: dict) -> tuple:
    """``shape`` with its symbols replaced by ``values`` (name -> int)."""
    return tuple(d if isinstance(d, int) else int(parse_dim(d, values)) for d in shape)


def _run_candidate(name, wl, target, inputs: list, out: tuple) -> np.ndarray:
    """Build ``name``'s default kernel for symbolic ``wl`` once; run it on concrete ``inputs``."""
    cand = REGISTRY.get(name)
    assert cand.applies(wl, target), cand.applies(wl, target).reason
    cfg = cand.default_config(wl, target)
    args = [tvm.runtime.tensor(a) for a in inputs]
    for idx, tf in cand.input_transforms(wl, cfg, target).items():
        dst = tvm.runtime.empty([int(d) for d in tf.params[-1].ty.shape], F32)
        tvm.compile(tf.with_attr("global_symbol", "t"), target=target)["t"](args[idx], dst)
        args[idx] = dst
    kernel = tvm.compile(cand.build(wl, cfg, target).with_attr("global_symbol", "k"), target=target)
    res = tvm.runtime.empty(out, F32)
    kernel["k"](*args, res)
    return res.numpy()


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(F32)


# -- declarations ----------------------------------------------------------------------------------

def test_roles_name_each_symbol():
    wl = _wl("matmul", [(1, "s", 64), (64, 96)], transpose_b=False, b_const=True)
    assert symbolic_roles(wl) == {"s": {"rows"}}
    att = _wl("matmul", [(4, "s", 16), (4, 16, "s")], transpose_b=False, b_const=False)
    assert symbolic_roles(att) == {"s": {"rows", "cols"}}
    assert symbolic_roles(_wl("softmax", [("n", 37)])) == {"n": {"rows"}}
    assert symbolic_roles(_wl("matmul", [(5, 7), (7, 9)])) == {}


def test_static_candidates_decline_naming_the_role(cpu_target):
    wl = _wl("matmul", [("n", 33), (33, 45)], transpose_b=False, b_const=True)
    verdict = REGISTRY.get("matmul.packed").applies(wl, cpu_target)
    assert not verdict and "n: rows" in verdict.reason and "static shapes only" in verdict.reason
    assert REGISTRY.get("matmul.packed_dyn").applies(wl, cpu_target)


def test_dynamic_candidate_declines_an_undeclared_role(cpu_target):
    wl = _wl("matmul", [(5, "k"), ("k", 45)], transpose_b=False, b_const=True)  # symbolic reduction
    verdict = REGISTRY.get("matmul.packed_dyn").applies(wl, cpu_target)
    assert not verdict and "k: reduction" in verdict.reason and "rows" in verdict.reason
    ln = _wl("layer_norm", [("r", "n"), ("n",), ("n",)], eps=1e-5, out_shape=("r", "n"))
    verdict = REGISTRY.get("layer_norm.fused_dyn").applies(ln, cpu_target)
    assert not verdict and "n: cols" in verdict.reason


def test_dynamic_candidates_leave_static_shapes_to_the_static_kernels(cpu_target):
    wl = _wl("softmax", [(5, 37)], out_shape=(5, 37))
    assert REGISTRY.get("softmax.rowwise_dyn").applies(wl, cpu_target)
    assert not REGISTRY.get("softmax.rowwise_dyn").suited(wl, cpu_target)
    assert ext.strategies.choose(wl, cpu_target).candidate.name == "softmax.rowwise"


def test_parse_dim_rejects_what_is_not_a_shape_expression():
    n = tirx.Var("n", "int64")
    assert str(parse_dim("n * 4", {"n": n})) == "n * T.int64(4)"
    with pytest.raises(ValueError, match="do not define"):
        parse_dim("m + 1", {"n": n})
    with pytest.raises(ValueError, match="not an integer expression"):
        parse_dim("__import__('os')", {"n": n})


# -- each symbolic candidate against NumPy -----------------------------------------------------------

@pytest.mark.parametrize("transpose_b", [False, True])
def test_packed_dyn_matches_numpy(cpu_target, transpose_b):
    K, N = 37, 53
    wshape = (N, K) if transpose_b else (K, N)
    wl = _wl("matmul", [("n", K), wshape, (N,)], transpose_b=transpose_b, b_const=True, epilogue=("bias", "relu"))
    rng = np.random.default_rng(1)
    w, b = _rand(rng, wshape), _rand(rng, (N,))
    for n in SIZES:
        a = _rand(rng, (n, K))
        got = _run_candidate("matmul.packed_dyn", wl, cpu_target, [a, w, b], (n, N))
        ref = np.maximum(a.astype("float64") @ (w.T if transpose_b else w) + b, 0)
        assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"n={n}")


def test_packed_dyn_takes_batch_and_sequence_axes_with_a_residual(cpu_target):
    K, N = 19, 31
    wl = _wl("matmul", [("b", "s", K), (K, N), (N,), ("b", "s", N)], transpose_b=False, b_const=True,
             epilogue=("bias", "residual"))
    rng = np.random.default_rng(2)
    w, bias = _rand(rng, (K, N)), _rand(rng, (N,))
    for bs, s in [(1, 1), (2, 7), (3, 13)]:
        a, res = _rand(rng, (bs, s, K)), _rand(rng, (bs, s, N))
        got = _run_candidate("matmul.packed_dyn", wl, cpu_target, [a, w, bias, res], (bs, s, N))
        assert_close(got, a.astype("float64") @ w + bias + res, rtol=1e-4, atol=1e-4, what=f"b={bs} s={s}")


@pytest.mark.parametrize("transpose_b", [True, False])
def test_batch_dyn_attention_shapes_match_numpy(cpu_target, transpose_b):
    """q @ k^T (M = N = s, K = head dim, k read transposed) and p @ v (M = K = s, N = head dim)."""
    H, D = 3, 17
    if transpose_b:
        wl = _wl("matmul", [(1, H, "s", D), (1, H, "s", D)], transpose_b=True, b_const=False)
    else:
        wl = _wl("matmul", [(1, H, "s", "s"), (1, H, "s", D)], transpose_b=False, b_const=False)
    rng = np.random.default_rng(3)
    for s in SIZES:
        shapes = [_concrete(sh, {"s": s}) for sh in wl.shapes]
        a, b = (_rand(rng, sh) for sh in shapes)
        out = _concrete(out_shape(wl), {"s": s})
        got = _run_candidate("matmul.batch_dyn", wl, cpu_target, [a, b], out)
        ref = a.astype("float64") @ (np.swapaxes(b, -1, -2) if transpose_b else b)
        assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"s={s}")


@pytest.mark.parametrize("M,D,epilogue,lanes", [(1, 64, (), None), (3, 20, ("scale",), None), (1, 48, (), 8)])
def test_batch_dot_dyn_matches_numpy(cpu_target, M, D, epilogue, lanes):
    """A decode step's scores ``q @ k^T`` over a cache of symbolic length (1, primes), K static;
    with the softmax scale as an epilogue tensor; a non-default vector split."""
    H = 5
    shapes = [(2, H, M, D), (2, H, "p", D)] + ([(1,)] if epilogue else [])
    wl = _wl("matmul", shapes, transpose_b=True, b_const=False, epilogue=epilogue)
    cand = REGISTRY.get("matmul.batch_dot_dyn")
    rng = np.random.default_rng(4)
    for p in (1, 13, 257):
        a, b = _rand(rng, (2, H, M, D)), _rand(rng, (2, H, p, D))
        extra = [np.array([0.125], F32)] if epilogue else []
        out = (2, H, M, p)
        if lanes is None:
            got = _run_candidate("matmul.batch_dot_dyn", wl, cpu_target, [a, b, *extra], out)
        else:
            cfg = cand.config(lanes=lanes)
            kernel = tvm.compile(cand.build(wl, cfg, cpu_target).with_attr("global_symbol", "k"), target=cpu_target)
            res = tvm.runtime.empty(out, F32)
            kernel["k"](*[tvm.runtime.tensor(x) for x in (a, b, *extra)], res)
            got = res.numpy()
        ref = a.astype("float64") @ np.swapaxes(b, -1, -2) * (0.125 if epilogue else 1.0)
        assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"p={p}")


def test_batch_dot_dyn_declines_what_it_cannot_read_in_place(cpu_target):
    cand = REGISTRY.get("matmul.batch_dot_dyn")
    plain = _wl("matmul", [(1, 4, 1, 64), (1, 4, 64, "p")], transpose_b=False, b_const=False)
    assert "not transposed" in cand.applies(plain, cpu_target).reason
    by_p = _wl("matmul", [(1, 4, 1, "p"), (1, 4, "p", 64)], transpose_b=False, b_const=False)
    assert "p: reduction" in cand.applies(by_p, cpu_target).reason
    odd_k = _wl("matmul", [(1, 4, 1, 7), (1, 4, "p", 7)], transpose_b=True, b_const=False)
    assert "K=7" in cand.applies(odd_k, cpu_target).reason
    many_rows = _wl("matmul", [(1, 4, "s", 64), (1, 4, "s", 64)], transpose_b=True, b_const=False)
    assert "rows" in cand.applies(many_rows, cpu_target).reason


def _softmax_ref(x):
    x = x.astype("float64")
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("name,cols", [("softmax.rowwise_dyn", 37), ("softmax.rowwise_dyn", 1031),
                                       ("softmax.cols_dyn", "n")])
def test_softmax_dyn_matches_numpy(cpu_target, name, cols):
    wl = _wl("softmax", [("r", cols)], out_shape=("r", cols))
    rng = np.random.default_rng(4)
    # row lengths: shorter than a vector, whole vectors only (an empty scalar tail), ragged
    for r, n in zip(SIZES + (5,), (1, 64, 23, 16) if isinstance(cols, str) else (cols,) * 4):
        x = _rand(rng, (r, n)) * 4
        got = _run_candidate(name, wl, cpu_target, [x], (r, n))
        assert_close(got, _softmax_ref(x), rtol=1e-5, atol=1e-6, what=f"{name} rows={r} n={n}")


def test_layer_norm_dyn_matches_numpy(cpu_target):
    n = 67
    wl = _wl("layer_norm", [("r", n), (n,), (n,)], eps=1e-5, center=True, scale=True, out_shape=("r", n))
    rng = np.random.default_rng(5)
    g, b = _rand(rng, (n,)), _rand(rng, (n,))
    for r in SIZES:
        x = _rand(rng, (r, n)) + 100.0
        got = _run_candidate("layer_norm.fused_dyn", wl, cpu_target, [x, g, b], (r, n))
        xd = x.astype("float64")
        ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * g + b
        assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"rows={r}")


@pytest.mark.parametrize("kind,R,I", [("mean", 67, 1), ("max", 5, 1), ("sum", 7, 37), ("min", 3, 19)])
def test_reduce_dyn_matches_numpy(cpu_target, kind, R, I):
    name = "reduce.inner_dyn" if I == 1 else "reduce.outer_dyn"
    wl = _wl("reduce", [("o", R, I)], kind=kind, out_shape=("o", I))
    rng = np.random.default_rng(8)
    for o in SIZES:
        x = _rand(rng, (o, R, I))
        got = _run_candidate(name, wl, cpu_target, [x], (o, I))
        assert_close(got, getattr(np, kind)(x.astype("float64"), axis=1), rtol=1e-5, atol=1e-5, what=f"o={o}")


@pytest.mark.parametrize("kind", ["mean", "max", "min", "sum"])
def test_reduce_cols_dyn_takes_a_symbolic_reduced_extent(cpu_target, kind):
    """``reduce.cols_dyn``: rows and reduced length both run-time (a global pool over a run-time
    image size), lengths under, at and past a vector with a tail; a NaN stays NaN."""
    wl = _wl("reduce", [("o", "r", 1)], kind=kind, out_shape=("o", 1))
    rng = np.random.default_rng(13)
    for o, r in [(3, 1), (2, 15), (5, 16), (1, 49), (4, 227)]:
        x = _rand(rng, (o, r, 1))
        x[o - 1, r // 2, 0] = np.nan
        got = _run_candidate("reduce.cols_dyn", wl, cpu_target, [x], (o, 1))
        ref = getattr(np, kind)(x.astype("float64"), axis=1)
        assert np.array_equal(np.isnan(got), np.isnan(ref)), f"NaN rows differ at o={o} r={r}"
        assert_close(np.nan_to_num(got), np.nan_to_num(ref), rtol=1e-5, atol=1e-5, what=f"o={o} r={r}")


def test_global_window_pool_on_a_symbolic_map(cpu_target, tmp_path):
    """EfficientNet's head, ``AvgPool2d(k, ceil_mode=True)`` with ``k`` past the map, on a
    run-time image size: the spatial mean (``reduce.cols_dyn``), the classifier a static-K GEMM;
    a map wider than the window stops with the shape check instead of a wrong answer."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.AvgPool2d(128, ceil_mode=True), nn.Flatten(),
                        nn.Linear(8, 5)).eval()
    path = str(tmp_path / "head.onnx")
    torch.onnx.export(net, (torch.randn(1, 3, 16, 16),), path, input_names=["x"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}})
    ex, report = _build(ext.frontend.from_onnx(path), cpu_target)
    assert {"reduce.cols_dyn", "matmul.packed_dyn"} <= set(_chosen(report).values()), report
    assert not [r for r in report.stock if r.workload.op in ("relax.nn.avg_pool2d", "relax.matmul")], report
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for shape in ((1, 3, 16, 16), (2, 3, 37, 100), (1, 3, 255, 256)):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = net(x).numpy()
        assert_close(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), want, rtol=1e-4, atol=1e-5, what=str(shape))
    with pytest.raises(Exception, match="match_cast"):  # 258 rows: a 129-row map, two windows in PyTorch
        vm["main"](tvm.runtime.tensor(np.zeros((1, 3, 258, 20), "float32")))


@pytest.mark.parametrize("C,O,stride,epilogue", [(3, 17, 1, ("bias", "relu")), (16, 32, 2, ("bias", "residual"))])
def test_conv2d_dyn_matches_numpy(cpu_target, C, O, stride, epilogue):
    import torch
    H = 13
    OH = (H + 2 - 3) // stride + 1
    shapes = [("n", C, H, H), (O, C, 3, 3), (1, O, 1, 1)] + ([("n", O, OH, OH)] if "residual" in epilogue else [])
    wl = _wl("conv2d", shapes, strides=(stride, stride), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
             data_layout="NCHW", kernel_layout="OIHW", out_shape=("n", O, OH, OH), w_const=True, epilogue=epilogue)
    rng = np.random.default_rng(9)
    w, b = _rand(rng, (O, C, 3, 3)), _rand(rng, (1, O, 1, 1))
    for n in SIZES[:2] + (5,):
        x = _rand(rng, (n, C, H, H))
        ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                         stride=stride, padding=1).numpy() + b
        inputs = [x, w, b]
        if "residual" in epilogue:
            res = _rand(rng, (n, O, OH, OH))
            inputs.append(res)
            ref = ref + res
        else:
            ref = np.maximum(ref, 0)
        got = _run_candidate("conv2d.direct_nchwc_dyn", wl, cpu_target, inputs, (n, O, OH, OH))
        assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"n={n}")


def _conv_case(rng, x, w, b, stride, pad, groups, epilogue) -> tuple[list, np.ndarray]:
    """The inputs of a conv kernel with ``epilogue`` (bias, then a residual drawn here, ReLU or
    ReLU6) and PyTorch's float64 result; NaN stays NaN through the activations."""
    import torch
    ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                     stride=stride, padding=pad, groups=groups).numpy() + b
    inputs = [x, w, b]
    if "residual" in epilogue:
        res = _rand(rng, ref.shape)
        inputs.append(res)
        ref = ref + res
    elif "relu" in epilogue:
        ref = np.where(np.isnan(ref), ref, np.maximum(ref, 0))
    elif "clip:0:6" in epilogue:
        ref = np.where(np.isnan(ref), ref, np.clip(ref, 0, 6))
    return inputs, ref


@pytest.mark.parametrize("C,O,k,stride,groups,epilogue", [
    (16, 24, 1, 2, 1, ("bias",)),              # a 1x1 stride-2 shortcut: the pack subsamples
    (32, 17, 1, 1, 1, ("bias", "relu")),       # 1x1 stride 1: read in place, padded columns clamped
    (8, 8, 3, 1, 1, ("bias", "residual")),     # 3x3 with the residual read in the unpack
    (12, 18, 3, 2, 3, ("bias", "relu")),       # grouped, strided
])
def test_conv2d_dyn_takes_symbolic_height_and_width(cpu_target, C, O, k, stride, groups, epilogue):
    """Batch, height and width symbolic: one kernel for every image size (odd and prime sides,
    widths that are no multiple of the register tile)."""
    pad = k // 2
    oh = f"(h + {2 * pad - k}) // {stride} + 1"
    ow = f"(w + {2 * pad - k}) // {stride} + 1"
    out = ("n", O, oh, ow)
    shapes = [("n", C, "h", "w"), (O, C // groups, k, k), (1, O, 1, 1)] + ([out] if "residual" in epilogue else [])
    wl = _wl("conv2d", shapes, strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=groups,
             data_layout="NCHW", kernel_layout="OIHW", out_shape=out, w_const=True, epilogue=epilogue)
    rng = np.random.default_rng(10)
    w, b = _rand(rng, (O, C // groups, k, k)), _rand(rng, (1, O, 1, 1))
    for n, h, wd in [(1, 13, 29), (2, 7, 5), (1, 32, 17), (3, 1, 2)]:
        x = _rand(rng, (n, C, h, wd))
        inputs, ref = _conv_case(rng, x, w, b, stride, pad, groups, epilogue)
        got = _run_candidate("conv2d.direct_nchwc_dyn", wl, cpu_target, inputs, ref.shape)
        assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"n={n} h={h} w={wd}")


#: (n, h, w) a symbolic-size sliding-window kernel runs at: odd, prime, tiny and wider than a tile
WINDOW_SIZES = [(1, 13, 29), (2, 7, 5), (1, 40, 17), (1, 3, 2)]


@pytest.mark.parametrize("C,mult,k,stride,epilogue", [
    (16, 1, 3, 1, ("bias", "clip:0:6")),       # MobileNet's depthwise + ReLU6
    (8, 1, 5, 2, ("bias", "residual")),        # 5x5 stride 2, a residual read in the epilogue
    (6, 2, 3, 2, ("bias",)),                   # channel multiplier 2
])
def test_depthwise_dyn_takes_symbolic_sizes(cpu_target, C, mult, k, stride, epilogue):
    """``conv2d.depthwise_dyn``: one kernel for every batch and image size, against PyTorch
    (float64), NaN pixels included."""
    O, pad = C * mult, k // 2
    out = ("n", O, f"(h + {2 * pad - k}) // {stride} + 1", f"(w + {2 * pad - k}) // {stride} + 1")
    shapes = [("n", C, "h", "w"), (O, 1, k, k), (1, O, 1, 1)] + ([out] if "residual" in epilogue else [])
    wl = _wl("conv2d", shapes, strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=C,
             data_layout="NCHW", kernel_layout="OIHW", out_shape=out, w_const=True, epilogue=epilogue)
    rng = np.random.default_rng(11)
    w, b = _rand(rng, (O, 1, k, k)), _rand(rng, (1, O, 1, 1))
    for n, h, wd in WINDOW_SIZES:
        x = _rand(rng, (n, C, h, wd))
        x[0, 0, h // 2, wd // 2] = np.nan
        inputs, ref = _conv_case(rng, x, w, b, stride, pad, C, epilogue)
        got = _run_candidate("conv2d.depthwise_dyn", wl, cpu_target, inputs, ref.shape)
        assert np.array_equal(np.isnan(got), np.isnan(ref)), f"NaN positions differ at n={n} h={h} w={wd}"
        assert_close(np.nan_to_num(got), np.nan_to_num(ref), rtol=1e-4, atol=1e-4, what=f"n={n} h={h} w={wd}")


@pytest.mark.parametrize("kind,k,stride,pad,count_include_pad", [
    ("max", 3, 2, 1, False),                   # ResNet's stem pool
    ("max", 2, 2, 0, False),
    ("avg", 3, 1, 1, False),                   # padding not counted
    ("avg", 3, 2, 1, True),                    # padding counted
])
def test_pool_dyn_takes_symbolic_sizes(cpu_target, kind, k, stride, pad, count_include_pad):
    """``pool2d.rows_dyn``: one kernel for every batch and image size, against PyTorch; a NaN in
    a max window gives NaN."""
    import torch
    C = 5
    out = ("n", C, f"(h + {2 * pad - k}) // {stride} + 1", f"(w + {2 * pad - k}) // {stride} + 1")
    wl = Workload("pool2d", [("n", C, "h", "w")], [F32], F32,
                  attrs=dict(kind=kind, pool_size=(k, k), strides=(stride, stride), padding=(pad,) * 4,
                             dilation=(1, 1), ceil_mode=False, count_include_pad=count_include_pad, layout="NCHW",
                             out_shape=out))
    rng = np.random.default_rng(12)
    for n, h, wd in WINDOW_SIZES:
        if h < k or wd < k:
            continue
        x = _rand(rng, (n, C, h, wd))
        x[0, 1, h // 2, wd - 1] = np.nan
        t = torch.tensor(x, dtype=torch.float64)
        ref = (torch.nn.functional.max_pool2d(t, k, stride, pad) if kind == "max" else
               torch.nn.functional.avg_pool2d(t, k, stride, pad, count_include_pad=count_include_pad)).numpy()
        got = _run_candidate("pool2d.rows_dyn", wl, cpu_target, [x], ref.shape)
        assert np.array_equal(np.isnan(got), np.isnan(ref)), f"NaN positions differ at n={n} h={h} w={wd}"
        assert_close(np.nan_to_num(got), np.nan_to_num(ref), rtol=1e-5, atol=1e-5, what=f"n={n} h={h} w={wd}")


def test_pool_dyn_declines_symbolic_ceil_mode(cpu_target):
    wl = Workload("pool2d", [(1, 4, "h", "w")], [F32], F32,
                  attrs=dict(kind="max", pool_size=(3, 3), strides=(2, 2), padding=(0,) * 4, dilation=(1, 1),
                             ceil_mode=True, count_include_pad=False, layout="NCHW",
                             out_shape=(1, 4, "(h - 2) // 2 + 1", "(w - 2) // 2 + 1")))
    verdict = REGISTRY.get("pool2d.rows_dyn").applies(wl, cpu_target)
    assert not verdict and "ceil_mode" in verdict.reason


# -- whole graphs: built once, run at several sizes ---------------------------------------------------

def _build(mod, target):
    ex = ext.build(mod, target, cache=False, verbose=False)
    return ex, ext.last_report()


def _chosen(report) -> dict:
    return {row.workload.key: row.candidate.name for row in report.decisions if row.candidate is not None}


def test_symbolic_rows_graph_uses_dynamic_candidates(cpu_target):
    K, N = 33, 45
    rng = np.random.default_rng(6)
    w, b, g, be = _rand(rng, (K, N)), _rand(rng, (N,)), _rand(rng, (N,)), _rand(rng, (N,))
    n = tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", TensorType([n, K], F32))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.matmul(x, relax.const(w)), relax.const(b))))
            z = bb.emit(relax.op.nn.softmax(y, axis=-1))
            out = bb.emit_output(bb.emit(relax.op.nn.layer_norm(z, relax.const(g), relax.const(be), axes=[-1])))
        bb.emit_func_output(out)
    ex, report = _build(bb.get(), cpu_target)
    chosen = set(_chosen(report).values())
    assert {"matmul.packed_dyn", "softmax.rowwise_dyn", "layer_norm.fused_dyn"} <= chosen, report
    assert not [r for r in report.decisions if r.source == "failed"], report
    assert not [r for r in report.stock if r.workload.op.startswith(("relax.matmul", "relax.nn"))], report
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for m in SIZES:
        xa = _rand(rng, (m, K))
        z = _softmax_ref(np.maximum(xa.astype("float64") @ w + b, 0))
        ref = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5) * g + be
        assert_close(vm["main"](tvm.runtime.tensor(xa)).numpy(), ref, rtol=1e-4, atol=1e-4, what=f"n={m}")


def test_symbolic_sequence_transformer_layer_equals_static_builds(cpu_target):
    import torch
    from ext.models.transformer import encoder_layer

    net = encoder_layer(64, 4, 96)
    s = torch.export.Dim("s", min=1, max=512)
    mod = ext.frontend.from_torch(net, (torch.randn(1, 17, 64),), dynamic_shapes={"x": {1: s}})
    ex, report = _build(mod, cpu_target)
    chosen = set(_chosen(report).values())
    assert {"matmul.packed_dyn", "matmul.batch_dyn", "softmax.cols_dyn", "layer_norm.fused_dyn"} <= chosen, report
    assert not [r for r in report.stock if r.workload.op in ("relax.matmul", "relax.nn.softmax",
                                                             "relax.nn.layer_norm")], report
    assert not [r for r in report.decisions if r.source == "failed"], report
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for n in SIZES:
        x = torch.randn(1, n, 64)
        got = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
        with torch.no_grad():
            ref = net(x).numpy()
        assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"s={n} vs PyTorch")
        if n == 7:  # the static build of the same layer at this size gives the same numbers
            static, _ = _build(ext.frontend.from_torch(net, (x,)), cpu_target)
            want = relax.VirtualMachine(static, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
            assert_close(got, want, rtol=1e-5, atol=1e-5, what="symbolic vs static build")


def test_onnx_dynamic_axis_imports_symbolic_and_selects_dynamic_kernels(cpu_target):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = _rand(np.random.default_rng(7), (33, 45))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Softmax", ["y"], ["z"], axis=-1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 33])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 45])], [numpy_helper.from_array(w, "W")])
    mod = ext.frontend.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ex, report = _build(mod, cpu_target)
    assert {"matmul.packed_dyn", "softmax.rowwise_dyn"} <= set(_chosen(report).values()), report
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for n in SIZES:
        x = _rand(np.random.default_rng(n), (n, 33))
        assert_close(vm["main"](tvm.runtime.tensor(x)).numpy(), _softmax_ref(x.astype("float64") @ w),
                     rtol=1e-5, atol=1e-6, what=f"n={n}")


def test_symbolic_batch_conv_net_equals_static_builds(cpu_target):
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.MaxPool2d(3, 2, 1), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Conv2d(32, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 11)).eval()
    n = torch.export.Dim("n", min=1, max=64)
    mod = ext.frontend.from_torch(net, (torch.randn(2, 3, 15, 15),), dynamic_shapes={"input": {0: n}})
    ex, report = _build(mod, cpu_target)
    chosen = set(_chosen(report).values())
    assert {"reduce.inner_dyn", "matmul.packed_dyn"} <= chosen, report
    # convs and the pool: the static kernel of one image, looped over the symbolic batch
    looped = [d for d in report.decisions if d.workload.op in ("conv2d", "pool2d")]
    assert len(looped) == 4 and all(d.reason.startswith("per image over the symbolic batch") for d in looped)
    assert all(d.workload.is_static and d.workload.shapes[0][0] == 1 for d in looped), report
    assert not [r for r in report.stock if r.workload.op in ("relax.nn.conv2d", "relax.mean", "relax.matmul")], report
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for b in SIZES[:2] + (13,):
        x = torch.randn(b, 3, 15, 15)
        got = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
        with torch.no_grad():
            assert_close(got, net(x).numpy(), rtol=1e-4, atol=1e-4, what=f"batch {b} vs PyTorch")
        if b == 7:  # the static build at this batch gives the same numbers
            static, _ = _build(ext.frontend.from_torch(net, (x,)), cpu_target)
            want = relax.VirtualMachine(static, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
            assert_close(got, want, rtol=1e-5, atol=1e-5, what="symbolic vs static build")


def test_onnx_cnn_with_symbolic_batch_and_image_size(cpu_target, tmp_path):
    """Batch, height and width dynamic in ONNX: every conv (3x3, a strided residual block with
    its 1x1 stride-2 shortcut, grouped) takes ``conv2d.direct_nchwc_dyn``, the depthwise one
    ``conv2d.depthwise_dyn``, one build for every size (odd, prime, a 2-pixel width) and the same numbers as PyTorch."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1))
            self.short = nn.Conv2d(8, 16, 1, 2)
            self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
            self.gc = nn.Conv2d(16, 16, 3, 1, 1, groups=4)

        def forward(self, x):
            y = torch.relu(self.a(x) + self.short(x))
            return self.gc(torch.relu(self.dw(y)) + y)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), Block(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(16, 5)).eval()
    path = str(tmp_path / "cnn.onnx")
    torch.onnx.export(net, (torch.randn(1, 3, 16, 16),), path, input_names=["x"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}})
    ex, report = _build(ext.frontend.from_onnx(path), cpu_target)
    convs = [d for d in report.decisions if d.workload.op == "conv2d"]
    picks = sorted(d.candidate.name for d in convs)
    assert picks == ["conv2d.depthwise_dyn"] + ["conv2d.direct_nchwc_dyn"] * 5, report
    assert not [r for r in report.stock if r.workload.op == "relax.nn.conv2d"], report
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for shape in ((1, 3, 16, 16), (2, 3, 7, 11), (1, 3, 29, 2), (3, 3, 1, 5)):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = net(x).numpy()
        assert_close(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), want, rtol=1e-4, atol=1e-5, what=str(shape))


def test_hf_bert_with_symbolic_sequence_builds_and_matches_pytorch(cpu_target):
    """transformers' BERT slices its position table by the input length; with the length's
    declared bound the slice is proved in range (``ProveSliceBounds``), so the shapes after it
    stay known and the layers take the dynamic kernels."""
    import torch
    import transformers as tf

    from ext.frontend import from_torch
    from ext.models.transformer import last_hidden_state

    torch.manual_seed(0)
    cfg = tf.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                        vocab_size=101, max_position_embeddings=40)
    body = tf.BertModel(cfg, add_pooling_layer=False).eval()

    s = torch.export.Dim("s", min=2, max=40)
    mod = from_torch(last_hidden_state(body), (torch.randint(0, 101, (1, 9)),), dynamic_shapes={"ids": {1: s}})
    ex, report = _build(mod, cpu_target)
    assert "layer_norm.fused_dyn" in set(_chosen(report).values()), report
    _matches_at_lengths(ex, body, 101, (2, 13, 40))


def _matches_at_lengths(ex, body, vocab: int, lengths) -> None:
    """The symbolic-length build ``ex`` against ``body(input_ids=ids).last_hidden_state``."""
    import torch

    vm = relax.VirtualMachine(ex, tvm.cpu())
    for length in lengths:
        ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            ref = body(input_ids=ids).last_hidden_state.numpy()
        got = vm["main"](tvm.runtime.tensor(ids.numpy())).numpy()
        assert_close(got, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())), what=f"seq {length}")


def test_every_primfunc_of_a_symbolic_build_is_noalias(cpu_target):
    """VMShapeLower's shape function gets ``tirx.noalias`` (one buffer: exact); without it TVM's
    codegen drops the noalias compute functions of every kernel in the module."""
    n = tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", TensorType([n, 3, 8, 8], F32))
    w = relax.const(np.random.default_rng(0).standard_normal((5, 3, 3, 3)).astype(F32))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w, padding=1))))
        bb.emit_func_output(out)
    with cpu_target:
        lowered = ext.pipeline(cpu_target)(bb.get())
    funcs = {gv.name_hint: f for gv, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc)}
    assert any("shape_func" in name for name in funcs), sorted(funcs)
    assert all(f.attrs and f.attrs.get("tirx.noalias") for f in funcs.values()), sorted(funcs)


def test_hf_decoder_with_symbolic_sequence_builds_and_matches_pytorch(cpu_target):
    """transformers' decoders slice along axis -1 by the symbolic length (the packed-sequence
    check); stock legalization of such a slice stopped at the negative axis, so every decoder
    with a symbolic sequence failed to build until ``ProveSliceBounds`` counted it from the front."""
    import torch
    import transformers as tf

    from ext.frontend import from_torch
    from ext.models.transformer import last_hidden_state

    torch.manual_seed(0)
    cfg = tf.Qwen2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, vocab_size=97, use_cache=False)
    body = tf.Qwen2Model(cfg).eval()

    s = torch.export.Dim("s", min=2, max=40)
    mod = from_torch(last_hidden_state(body), (torch.randint(0, 97, (1, 9)),), dynamic_shapes={"ids": {1: s}})
    ex, _ = _build(mod, cpu_target)
    _matches_at_lengths(ex, body, 97, (2, 13, 40))
