"""attention.fused: softmax(q k^T * scale + mask) v in one kernel, against PyTorch and NumPy.

Each model is imported from PyTorch (``from_torch``), built for the CPU and compared with
PyTorch's own result; the report must show the attention family's decision, so a pattern
that silently stopped matching fails here rather than only getting slower.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm

import ext
import ext.relax_passes as rp
from ext.frontend import from_torch
import ext.relax_passes.families.attention as fa
from ext.relax_passes.families.attention import compress_mask, mask_groups
from ext.runner import CompiledCandidate
from ext.strategies import REGISTRY
from ext.testing import assert_close, run_relax
from ext.tuning.references import attention as reference
from ext.workload import Workload


@pytest.fixture(autouse=True)
def fused_on_every_cpu(monkeypatch, request):
    """The fused kernel is checked on any host: AVX2's 16 registers would keep attention separate
    (``MIN_VECTOR_REGISTERS``) everywhere but in the test of that rule."""
    if "keep_policy" not in request.keywords:
        monkeypatch.setattr(fa, "MIN_VECTOR_REGISTERS", 0)


class Attention(torch.nn.Module):
    """``softmax(q k^T * scale + mask) v`` over (batch, heads, tokens, dim) tensors, in the forms
    models write it."""

    def __init__(self, form: str = "multiply", mask=None, bias_heads: int = 0, M: int = 0, N: int = 0,
                 cast: bool = False):
        super().__init__()
        self.form, self.mask, self.cast = form, mask, cast
        self.bias = torch.nn.Parameter(torch.randn(1, bias_heads, M, N)) if bias_heads else None

    def forward(self, q, k, v):
        d = q.shape[-1]
        kt = k if self.form == "kt" else k.transpose(-1, -2)
        s = torch.matmul(q, kt)
        if self.form == "divide":
            s = s / (d ** 0.5)
        elif self.form == "left":
            s = (d ** -0.5) * s
        elif self.form in ("multiply", "kt"):
            s = s * (d ** -0.5)
        if self.mask is not None:
            s = s + self.mask
        if self.bias is not None:
            s = s + self.bias
        p = torch.softmax(s, dim=-1)
        return torch.matmul(p.to(torch.float32) if self.cast else p, v)  # cast: ViT's, a Cast in ONNX


def _inputs(B, H, M, N, d, dv, kt=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, M, d, generator=g)
    k = torch.randn(B, H, d, N, generator=g) if kt else torch.randn(B, H, N, d, generator=g)
    return q, k, torch.randn(B, H, N, dv, generator=g)


def _build(model, inputs, target=None):
    ex = ext.build(from_torch(model, inputs), target or ext.target.cpu(), cache=False, verbose=False)
    return ex, ext.last_report()


def _check(model, inputs, fused: bool = True):
    ex, rep = _build(model, inputs)
    got = run_relax(ex, *[x.numpy() for x in inputs])
    with torch.no_grad():
        want = model(*inputs).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN positions differ from PyTorch's"
    ok = ~np.isnan(want)
    assert_close(got[ok], want[ok], rtol=1e-5, atol=2e-5, what="attention vs PyTorch")
    names = [d.candidate.name for d in rep if d.workload.op == "attention" and d.candidate is not None]
    assert (names == ["attention.fused"]) if fused else not names, [d.workload.key for d in rep]
    return rep


@pytest.mark.parametrize("form", ["multiply", "divide", "left", "none", "kt"])
@pytest.mark.parametrize("shape", [(1, 2, 13, 67, 16, 16), (2, 3, 1, 71, 20, 24), (1, 1, 50, 64, 64, 64)])
def test_forms_and_shapes(form, shape):
    B, H, M, N, d, dv = shape
    inputs = _inputs(B, H, M, N, d, dv, kt=form == "kt")
    rep = _check(Attention(form), inputs)
    wl = rep.find("attention")[0].workload
    if form == "kt" or B == 1:  # batch > 1: the importer transposes the 4-D keys before the reshape
        assert wl.attr("k_layout") == ("kn" if form == "kt" else "nk")
    assert (wl.attr("scale") is None) == (form == "none")


def test_padding_mask_per_sequence():
    """A (batch, 1, 1, N) mask with -inf on each sequence's padding: heads share it."""
    B, H, M, N, d = 2, 3, 11, 66, 16
    mask = torch.zeros(B, 1, 1, N)
    mask[0, ..., -4:] = float("-inf")
    mask[1, ..., -1:] = float("-inf")
    rep = _check(Attention(mask=mask), _inputs(B, H, M, N, d, d))
    assert rep.find("attention")[0].workload.shapes[3] == (B, 1, N)


def test_causal_mask_and_relative_bias():
    M = N = 67
    causal = torch.triu(torch.full((M, N), float("-inf")), 1)
    _check(Attention(mask=causal), _inputs(1, 4, M, N, 8, 8))
    rep = _check(Attention(bias_heads=4, M=M, N=N), _inputs(1, 4, M, N, 8, 8))  # T5-style per-head bias
    assert rep.find("attention")[0].workload.shapes[3] == (4, M, N)


def test_nan_and_inf_propagate_like_pytorch():
    q, k, v = _inputs(1, 2, 9, 69, 16, 16)
    q[0, 0, 3, 5] = float("nan")      # one score row NaN: that output row NaN
    k[0, 1, 7, 2] = float("inf")      # a +-inf score: exp(inf - inf) is NaN in that row
    v[0, 1, 4, 0] = float("inf")      # an inf value: inf (or NaN) in its column
    mask = torch.zeros(1, 1, 1, 69)
    mask[..., 0] = float("-inf")      # a masked key: exp(-inf) = 0, and 0 * v is 0 there
    _check(Attention(mask=mask), (q, k, v))


def test_fully_masked_row_is_nan_as_in_pytorch():
    M, N = 5, 64
    mask = torch.zeros(M, N)
    mask[2, :] = float("-inf")
    _check(Attention(mask=mask), _inputs(1, 1, M, N, 8, 8))


class MaskedFill(torch.nn.Module):
    """GPT-Neo's form: ``where(causal, scores, finfo.min)`` (no scale), then an additive padding
    mask given with the call; ``invert``: ``masked_fill(~causal, -inf)``, the scores as ``where``'s
    third operand; ``runtime``: the condition is an input, not a constant."""

    def __init__(self, M: int, N: int, invert: bool = False, runtime: bool = False):
        super().__init__()
        self.causal = torch.tril(torch.ones(M, N, dtype=torch.bool))
        self.invert, self.runtime = invert, runtime

    def forward(self, q, k, v, pad, *cond):
        s = q @ k.transpose(-1, -2)
        causal = cond[0] > 0 if self.runtime else self.causal
        if self.invert:
            s = s.masked_fill(~causal, float("-inf"))
        else:
            s = torch.where(causal, s, torch.tensor(torch.finfo(torch.float32).min))
        return torch.softmax(s + pad, dim=-1) @ v


@pytest.mark.parametrize("invert,runtime", [(False, False), (True, False), (False, True)])
def test_masked_fill_then_mask(invert, runtime):
    """The fill replaces the score, so a NaN key past a query's causal window does not reach
    that query's row (it does through ``v``'s product only where the row keeps it)."""
    B, H, M, N, d = 2, 3, 67, 67, 16
    q, k, v = _inputs(B, H, M, N, d, d)
    k[0, 1, 40, 3] = float("nan")  # rows 0..39 of batch 0, head 1 never see key 40
    v[1, 0, 50, 2] = 7.0
    pad = torch.zeros(B, 1, 1, N)
    pad[1, ..., :2] = torch.finfo(torch.float32).min
    extra = (torch.tril(torch.ones(M, N)),) if runtime else ()
    rep = _check(MaskedFill(M, N, invert, runtime), (q, k, v, pad, *extra))
    wl = rep.find("attention")[0].workload
    assert wl.attr("fill") == (float("-inf") if invert else float(torch.finfo(torch.float32).min))
    assert wl.shapes[3:] == ((B, 1, N), (1, M, N)), wl.shapes


def test_position_bias_then_mask():
    """T5's form: a per-head position bias, then a padding mask; both constants sum into one
    mask, and a mask given with the call is added to the bias in the graph."""
    M = N = 66
    mask = torch.zeros(1, 1, 1, N)
    mask[..., -3:] = float("-inf")

    class BiasThenMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.randn(1, 4, M, N))

        def forward(self, q, k, v, *pad):
            return torch.softmax(q @ k.transpose(-1, -2) + self.bias + (pad[0] if pad else mask), dim=-1) @ v

    rep = _check(BiasThenMask(), _inputs(1, 4, M, N, 8, 8))
    assert rep.find("attention")[0].workload.shapes[3:] == ((4, M, N),)
    rep = _check(BiasThenMask(), (*_inputs(1, 4, M, N, 8, 8), mask))
    assert rep.find("attention")[0].workload.shapes[3:] == ((4, M, N),)


def test_declined_shapes_stay_correct():
    """A mask that varies along the heads but not the batch cannot be grouped: not fused."""
    B, H, M, N, d = 2, 3, 5, 70, 8
    _check(Attention(mask=torch.randn(1, H, 1, N)), _inputs(B, H, M, N, d, d), fused=False)


def test_short_key_sequences_stay_separate():
    """Below MIN_KEYS keys (Swin's 49-key windows) matmul + softmax + matmul measured faster."""
    _check(Attention(), _inputs(4, 3, 49, 49, 32, 32), fused=False)


def test_value_widths_off_the_vector_grid_stay_separate():
    """A 30-wide head (MobileViT) would run 2-lane vectors in the fused kernel: left separate."""
    _check(Attention(), _inputs(1, 4, 64, 64, 30, 30), fused=False)


def test_probabilities_used_elsewhere_are_not_fused():
    class Both(torch.nn.Module):
        def forward(self, q, k, v):
            p = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1)
            return p @ v + p.sum(-1, keepdim=True)

    _check(Both(), _inputs(1, 2, 5, 70, 16, 16), fused=False)


def test_gpu_targets_keep_the_separate_kernels():
    """The family is CPU-only: a CUDA build fuses the matmuls and the softmax on their own."""
    mod = from_torch(Attention(), _inputs(1, 2, 13, 67, 16, 16))
    with ext.target.cuda(arch="sm_90"):
        fused = rp.FuseEpilogues(cpu=False)(rp.Canonicalize()(mod))
    families = {str(f.attrs["ext.family"]) for _, f in fused.functions_items()
                if f.attrs is not None and "ext.family" in f.attrs}
    assert "attention" not in families and {"matmul", "softmax"} <= families


def test_mask_groups():
    assert mask_groups((1, 1, 1, 9), (2, 3), 5, 9) == (1, 1, 9)
    assert mask_groups((1, 3, 5, 9), (1, 3), 5, 9) == (3, 5, 9)  # a per-head bias at batch 1
    assert mask_groups((2, 1, 1, 9), (2, 3), 5, 9) == (2, 1, 9)
    assert mask_groups((2, 3, 5, 9), (2, 3), 5, 9) == (6, 5, 9)
    assert mask_groups((5, 9), (2, 3), 5, 9) == (1, 5, 9)
    assert mask_groups((1, 3, 1, 9), (2, 3), 5, 9) is None  # per head, shared by the batch
    assert mask_groups((1, 1, 4, 9), (2, 3), 5, 9) is None  # neither 1 nor M rows


def test_constant_masks_are_cut_to_what_varies():
    assert compress_mask(np.zeros((1, 5, 7), "float32")) is None  # all zero: no mask at all
    pad = np.zeros((2, 5, 7), "float32")
    pad[:, :, -2:] = -np.inf
    assert compress_mask(pad).shape == (1, 1, 7)
    causal = np.triu(np.full((5, 5), -np.inf, "float32"), 1)[None]
    assert compress_mask(causal).shape == (1, 5, 5)
    nan = np.zeros((1, 5, 7), "float32")
    nan[0, 2, 3] = np.nan  # a NaN is kept where it is
    assert compress_mask(nan).shape == (1, 5, 7)


def test_zero_mask_is_dropped_and_a_row_mask_shrinks():
    """A constant all-zero (M, N) mask (DINOv2 adds one) costs the kernel nothing; a padding mask
    repeated on every query row is read as one row."""
    M = N = 70
    rep = _check(Attention(mask=torch.zeros(M, N)), _inputs(1, 2, M, N, 16, 16))
    assert len(rep.find("attention")[0].workload.shapes) == 3
    pad = torch.zeros(M, N)
    pad[:, -5:] = float("-inf")
    rep = _check(Attention(mask=pad), _inputs(1, 2, M, N, 16, 16))
    assert rep.find("attention")[0].workload.shapes[3] == (1, 1, N)


@pytest.mark.parametrize("layout,mask,keep", [("nk", (3, 1, 29), None), ("kn", None, None), ("nk", (1, 1, 29), (1, 11, 29)),
                                              ("kn", None, (3, 1, 29))])
def test_every_config_matches_numpy(cpu_target, layout, mask, keep):
    """``keep``: drawn from a normal distribution, so about half the scores are replaced by the fill."""
    B, M, N, d, dv = 3, 11, 29, 24, 20
    shapes = [(B, M, d), (B, N, d) if layout == "nk" else (B, d, N), (B, N, dv)] + [s for s in (mask, keep) if s]
    attrs = {"k_layout": layout, "scale": 0.2, "scale_op": "multiply", "out_shape": (B, M, dv)}
    if keep:
        attrs["fill"] = -3.0
    wl = Workload("attention", shapes, ["float32"] * len(shapes), "float32", attrs=attrs)
    cand = REGISTRY.get("attention.fused")
    space = cand.space(wl, cpu_target)
    assert len(space) >= 8 and cand.default_config(wl, cpu_target) in space
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s).astype("float32") for s in shapes]
    want = reference(wl, xs)
    for cfg in space:
        got = CompiledCandidate(cand, wl, cfg, cpu_target).run(xs)
        assert_close(got, want, rtol=1e-5, atol=1e-5, what=f"attention.fused {cfg}")


def test_mask_passed_at_run_time():
    """A padding mask given with every call (an encoder's attention_mask input), per sequence."""

    class WithMask(torch.nn.Module):
        def forward(self, q, k, v, keep):
            mask = (1.0 - keep[:, None, None, :]) * torch.finfo(torch.float32).min
            return torch.matmul(torch.softmax(q @ k.transpose(-1, -2) * 0.25 + mask, dim=-1), v)

    B, H, M, N, d = 2, 3, 7, 66, 16
    keep = torch.ones(B, N)
    keep[0, -9:] = 0
    rep = _check(WithMask(), (*_inputs(B, H, M, N, d, d), keep))
    assert rep.find("attention")[0].workload.shapes[3] == (B, 1, N)


def test_onnx_four_dimensional_attention():
    """``from_onnx`` keeps (batch, heads) as two axes: the 4-D form is fused too, viewed as 3-D;
    the same-dtype Cast ViT's export puts after the softmax is dropped."""
    import io

    import onnx

    from ext.frontend import from_onnx

    B, H, M, N, d = 2, 3, 9, 70, 16
    mask = torch.zeros(B, 1, 1, N)
    mask[1, ..., -4:] = float("-inf")
    model, inputs = Attention(mask=mask, cast=True).eval(), _inputs(B, H, M, N, d, d)
    buf = io.BytesIO()
    torch.onnx.export(model, inputs, buf, opset_version=17, dynamo=False)
    ex = ext.build(from_onnx(onnx.load_from_string(buf.getvalue())), ext.target.cpu(), cache=False, verbose=False)
    assert [d.candidate.name for d in ext.last_report().find("attention")] == ["attention.fused"]
    with torch.no_grad():
        want = model(*inputs).numpy()
    assert_close(run_relax(ex, *[x.numpy() for x in inputs]), want, rtol=1e-5, atol=2e-5, what="ONNX attention")


def test_onnx_key_permute_of_split_heads():
    """BERT's ONNX export splits the heads of k as (batch, N, heads, d) and permutes it to
    (batch, heads, d, N) in one Transpose: that permute runs first and the rest is fused."""
    import io

    import onnx

    from ext.frontend import from_onnx

    class SplitHeads(torch.nn.Module):
        def forward(self, q, k, v):  # k: (batch, N, heads, d)
            s = torch.matmul(q, k.permute(0, 2, 3, 1)) * 0.25
            return torch.matmul(torch.softmax(s, dim=-1), v)

    B, H, M, N, d = 2, 3, 9, 70, 16
    q, _, v = _inputs(B, H, M, N, d, d)
    k = torch.randn(B, N, H, d)
    buf = io.BytesIO()
    torch.onnx.export(SplitHeads(), (q, k, v), buf, opset_version=17, dynamo=False)
    ex = ext.build(from_onnx(onnx.load_from_string(buf.getvalue())), ext.target.cpu(), cache=False, verbose=False)
    decisions = ext.last_report().find("attention")
    assert [d.candidate.name if d.candidate else d.reason for d in decisions] == ["attention.fused"]
    assert decisions[0].workload.attr("k_layout") == "kn"
    with torch.no_grad():
        want = SplitHeads()(q, k, v).numpy()
    assert_close(run_relax(ex, q.numpy(), k.numpy(), v.numpy()), want, rtol=1e-5, atol=2e-5, what="split heads")


@pytest.mark.keep_policy
def test_sixteen_vector_registers_keep_attention_separate():
    """With AVX2's 16 registers the fused kernel's tiles are too small to pay: matmul, softmax and
    matmul stay separate kernels there; AVX-512 targets fuse."""
    from tvm.target import Target

    avx2 = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    assert not fa.fuses_on(avx2) and fa.fuses_on(Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}))
    inputs = _inputs(1, 2, 13, 67, 16, 16)
    model = Attention()
    ex, rep = _build(model, inputs, avx2)
    assert not [d for d in rep if d.workload.op == "attention"]
    assert {"matmul", "softmax"} <= {d.workload.op for d in rep}
    with torch.no_grad():
        want = model(*inputs).numpy()
    got = run_relax(ex, *[x.numpy() for x in inputs])
    assert_close(got, want, rtol=1e-5, atol=2e-5, what="separate attention")
