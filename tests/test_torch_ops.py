"""ATen ops ext translates itself (``ext/torch_ops.py``): each imports, builds and matches PyTorch.

Without the translations every case below stops at import with TVM's "Unsupported function
types"; the shapes are odd so that a wrong axis or a window rounding shows.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext

from ext.frontend import from_torch
from ext.testing import assert_close
from torch_helpers import Call, torch_and_ext

F = torch.nn.functional
W3 = [torch.randn(*s, generator=torch.Generator().manual_seed(1)) for s in
      ((2, 3, 3, 3, 3), (4, 2, 3, 2, 3), (3, 5, 2, 2, 2))]


def _nans(x):
    """``x`` with NaN at a few places: one in row 1, row 3 all NaN, three in row 4."""
    x = x.clone()
    x[1, 2] = x[3] = x[4, :3] = float("nan")
    return x


def _put(x, index, value):
    y = x.clone()
    y[index] = value
    return y


CASES = {
    "amax_amin": (lambda x: x.amax(1) - x.amin((0, 2), keepdim=True).squeeze(0).squeeze(-1) + x.amax(), [(3, 5, 5)]),
    "prod_dim": (lambda x: (x * 0.5 + 1).prod(1) + (x + 1).prod(-1, keepdim=True).sum(1), [(3, 5)]),
    "var_mean": (lambda x: torch.stack([*torch.var_mean(x, 1), *torch.var_mean(x, 1, correction=0),
                                        torch.var_mean(x, (0, 1), keepdim=True)[0].expand(3, 1).squeeze(1)]),
                 [(3, 7)]),
    "fmax_fmin_nan": (lambda x, y: torch.fmax(x, y.masked_fill(y > 1, float("nan")))
                      + torch.fmin(x.masked_fill(x < -1, float("nan")), y), [(4, 9), (4, 9)]),
    "hypot": (lambda x, y: torch.hypot(x, y), [(5, 3), (3,)]),
    "rrelu_eval": (lambda x: F.rrelu(x, 0.1, 0.3, training=False), [(4, 11)]),
    "scatter_add": (lambda x: torch.zeros(4, 6).scatter_add(0, (x.abs() * 3).long().clamp(max=3), x), [(5, 6)]),
    # Relax's clip takes a missing bound as an infinity, which an integer clip cannot lower
    "int_clamp_one_side": (lambda x: (x * 10).long().clamp(min=-3) + (x * 10).long().clamp(max=2) * 10
                           + (x * 10).int().clamp_max(4).long() * 100, [(3, 7)]),
    "shifts": (lambda x: ((x * 100).long() >> 2) + ((x * 10).long() << 3), [(3, 7)]),
    "logcumsumexp": (lambda x: torch.logcumsumexp(x * 30, 1), [(3, 11)]),
    "adaptive_max_even": (lambda x: F.adaptive_max_pool2d(x, (2, 3)), [(1, 4, 8, 9)]),
    "adaptive_max_uneven": (lambda x: F.adaptive_max_pool2d(x, (3, 4)), [(2, 3, 7, 10)]),
    # SELU exports as ELU with scale 1.0507: the stock translation dropped the scale (5% off)
    "elu_scaled": (lambda x: F.selu(x) + F.celu(x, 0.7) + F.elu(x, 1.3), [(4, 9)]),
    "erfc_exp2": (lambda x: torch.special.erfc(x) + torch.exp2(x), [(3, 7)]),
    "signbit_copysign": (lambda x: torch.signbit(torch.cat([x, -torch.zeros(1, 7)])).float()
                         + torch.copysign(torch.cat([x, x[:1]]), -torch.cat([x, torch.zeros(1, 7)])), [(3, 7)]),
    "dist": (lambda x, y: torch.stack([torch.dist(x, y), torch.dist(x, y, 1), torch.dist(x, y, float("inf")),
                                       torch.dist(x, y, 3)]), [(3, 5), (5,)]),
    "kthvalue": (lambda x: torch.kthvalue(x, 3, 1)[0] + torch.kthvalue(x, 2, 0, keepdim=True)[1].float().sum(), [(5, 7)]),
    "median": (lambda x: x.median(1)[0] + x.median(1)[1].float() + x.median() + x[:, :6].median(1)[0], [(5, 7)]),
    "searchsorted": (lambda x: torch.searchsorted(torch.tensor([-1.0, 0.0, 0.5, 2.0]), x).float()
                     + torch.searchsorted(torch.tensor([-1.0, 0.0, 0.5]), x, right=True).float() * 10, [(3, 7)]),
    # running extremes with ties (rounded values: the later index wins) and NaNs (a later NaN wins)
    "cummax_cummin": (lambda x: torch.cat([t.float() for t in (
        *torch.cummax(torch.where(x > 1.2, float("nan"), (x * 2).round()), 1),
        *torch.cummin(torch.where(x < -1.5, float("nan"), (x * 2).round()), 0),
        *torch.cummax((x * 3).round().long(), 1))], 1), [(6, 13)]),
    # the middle axis of three (lines strided by the last), an axis of one, a 0-d tensor
    "cummin_3d": (lambda x: torch.cat([t.float() for t in (*torch.cummin((x * 2).round(), 1),
                                                           *torch.cummax(x[:, :1], 1))], 1)
                  + torch.cummax(x.sum(), 0)[0], [(3, 7, 5)]),
    # one sorted row per row of values (the leading axes alike), ties at both sides, a NaN value
    "searchsorted_batched": (lambda x: torch.searchsorted(torch.sort(x[:, :4], 1).values, torch.cat(
        [x[:, :4], x[:, :2], torch.full((3, 1), float("nan"))], 1)).float() + torch.searchsorted(
        torch.sort(x[:, 2:6], 1).values, x, side="right").float() * 10, [(3, 7)]),
    # bool operands of `*` and of comparisons: TVM's LLVM backend read them as floats and failed
    "bool_arithmetic": (lambda x: torch.isfinite(x).float() + torch.count_nonzero(x > 0, 1).float()[:, None]
                        + torch.isclose(x, x * 1.0000001).float() + torch.logaddexp(x, x.flip(-1)), [(3, 7)]),
    # x[idx] = v with fewer index tensors than axes: the stock index_put required one per axis
    "index_put_rows": (lambda x: _put(x, (torch.tensor([0, -1, 2]),), x[:3] * 3), [(5, 7)]),
    "index_put_inner": (lambda x: _put(x, (slice(None), torch.tensor([[1], [-2]])), 2.5), [(3, 6, 4)]),
    "index_put_split": (lambda x: _put(x, (torch.tensor([2, 0]), slice(None), torch.tensor([1, 3])), x[0, :, :2].T),
                        [(3, 5, 4)]),
    "index_add_copy": (lambda x: torch.zeros(4, 7).index_add(0, torch.tensor([0, 3, 3, 1, 0]), x)
                       + torch.zeros(7, 5).index_copy(0, torch.tensor([6, 0, 2, 3, 1]), x[:, :5]).sum(0)[:4, None],
                       [(5, 7)]),
    "index_put_accumulate": (lambda x: torch.zeros(5, 7).index_put((torch.tensor([0, 2, 2]),), x[:3], accumulate=True),
                             [(5, 7)]),
    "masked_put": (lambda x: _put(x, (x > 0.5,), 0.0) + _put(x, (x[:, 0] > 0,), -1.0) + _put(x, (slice(None), x[0] < 0), 3.0),
                   [(4, 6)]),
    # any/all of numbers (the stock any took the max of the values: a float, False for [-1, -2]),
    # of bools, over dims; NaN counts as true
    "any_all": (lambda x: torch.cat([torch.any(x - 5, 1), torch.all(x.masked_fill(x > 1, 0), 1),
                                     torch.any(x > 1, 1), torch.all(x > -1, 1), torch.any(x * 0, 1),
                                     torch.all(x.masked_fill(x > 0, float("nan")), 1),
                                     torch.any((x * 0).long(), 1), torch.all(x).expand(1)]).float(), [(5, 7)]),
    # overlapping windows (Longformer's chunks) of a permuted view, an offset, a 0-stride axis
    "as_strided": (lambda x: torch.cat([
        x.transpose(1, 2).as_strided((4, 7, 8, 3), (3, 48, 6, 1)).flatten(),
        x.reshape(-1).as_strided((5, 4), (7, 2), 11).flatten(),
        x.as_strided((3, 2, 5), (0, 9, 1)).flatten()]), [(4, 16, 6)]),
    # infinite and NaN fills: the stock legalization crashed (a PrimType where topi wants a name)
    "full_nonfinite": (lambda x: torch.cat([torch.maximum(x, torch.full_like(x, float("-inf"))),
                                            torch.full((3, 2), float("nan")), torch.full_like(x, float("inf"))[:, :1],
                                            torch.full_like(x[:, :2], float("-inf"))], 1), [(3, 5)]),
    # transposed 3-D convolutions (3-D U-Nets): the stock translation took 1-D and 2-D only
    "conv_transpose3d": (lambda x: F.conv_transpose3d(x, W3[0], torch.arange(3.0), stride=2, padding=1, output_padding=1),
                         [(1, 2, 3, 5, 4)]),
    "conv_transpose3d_groups": (lambda x: F.conv_transpose3d(x, W3[1], stride=(1, 2, 2), padding=(1, 0, 2), dilation=2,
                                                             groups=2), [(2, 4, 3, 4, 5)]),
    "conv_transpose3d_k_is_s": (lambda x: F.conv_transpose3d(x, W3[2], stride=2), [(1, 3, 2, 3, 4)]),
    # nn.Bilinear exports as _trilinear; Tensor.unfold frames a signal (windows of a size, a step)
    "bilinear_layer": (lambda x, y: F.bilinear(x, y, W3[1][:, 0, :, 0, :], torch.arange(4.0)), [(3, 3), (3, 3)]),
    "unfold_windows": (lambda x: x.unfold(-1, 4, 3).sum(-1) + x.unfold(1, 2, 1).sum(-1)[:, :1, :4], [(2, 5, 13)]),
    "cdist": (lambda x, y: torch.cdist(x, y) + torch.cdist(x, y, p=1) + torch.cdist(x, y, p=float("inf"))
              + torch.cdist(x, y, p=3), [(2, 5, 7), (2, 3, 7)]),
    # group norm without weight and bias: the stock converter passed None on and the build crashed
    "group_norm_no_affine": (lambda x: F.group_norm(x, 3) + torch.nn.GroupNorm(1, 6, affine=False)(x), [(2, 6, 5, 7)]),
    # max-pool indices were zeros (max_unpool2d scattered every value to pixel 0): SegNet's unpooling
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(7, 9)),
                     [(1, 3, 7, 9)]),
    "max_pool_indices": (lambda x: torch.cat([
        F.max_pool2d(x, 3, 2, 1, return_indices=True)[1].flatten(),
        F.max_pool2d(x, 3, 2, 0, ceil_mode=True, return_indices=True)[1].flatten(),
        F.max_pool2d(x, 2, 1, 1, dilation=2, return_indices=True)[1].flatten(),
        F.max_pool1d(x[0], 3, 2, 1, return_indices=True)[1].flatten(),
        # 25 taps: the select chain stays linear once fused (it doubled per tap before)
        F.max_pool2d(x, 5, 2, 2, return_indices=True)[1].flatten()]).float(), [(2, 3, 9, 10)]),
    # a NaN is the max (PyTorch takes each NaN it meets); a window of -inf keeps its first pixel inside
    "max_pool_indices_special": (lambda x: torch.cat([
        F.max_pool2d(x.masked_fill(x > 1.0, float("nan")), 3, 2, 1, return_indices=True)[1].flatten(),
        F.max_pool2d(x.masked_fill(x < 0.5, float("-inf")), 3, 2, 1, return_indices=True)[1].flatten()]).float(),
        [(1, 4, 8, 8)]),
    # scale factors whose output size is not in * s, and antialiasing: resize2d used in / out, and
    # a plain bilinear resize for antialias=True
    "interpolate_scale_factor": (lambda x: torch.cat([
        F.interpolate(x, scale_factor=1.7, mode="bilinear").flatten(),
        F.interpolate(x, scale_factor=(0.6, 1.3), mode="bicubic").flatten(),
        F.interpolate(x, scale_factor=1.7, mode="nearest").flatten(),
        F.interpolate(x, scale_factor=2.0, mode="bilinear").flatten()]), [(1, 3, 9, 11)]),
    "interpolate_antialias": (lambda x: torch.cat([
        F.interpolate(x, size=(4, 5), mode="bilinear", antialias=True).flatten(),
        F.interpolate(x, scale_factor=0.37, mode="bilinear", antialias=True).flatten()]), [(2, 3, 13, 11)]),
    "avg_pool_divisor_override": (lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5)
                                  + F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False, divisor_override=2),
                                  [(2, 3, 9, 11)]),
    # an integer tensor over a Python int: the stock constant was int32 and the build failed
    "integer_division": (lambda x: torch.cat([((x * 10).long() // 3).float(), ((x * 10).long() // -3).float(),
                                              torch.div((x * 10).long(), 4, rounding_mode="trunc").float(),
                                              torch.div((x * 10).long(), 4)], 1), [(3, 7)]),
    "stable_sort": (lambda x: torch.cat([torch.round(x * 2).argsort(dim=1, stable=True),
                                         torch.round(x * 2).argsort(dim=1, stable=True, descending=True)]).float(),
                    [(3, 11)]),
    # graph networks' neighbour aggregation: every reduction, with and without self
    "scatter_reduce": (lambda x: torch.cat([
        torch.ones(3, 4).scatter_reduce(1, (torch.arange(7) % 3).repeat(3, 1), x, "sum", include_self=False),
        torch.full((3, 4), 2.0).scatter_reduce(1, (torch.arange(7) % 4).repeat(3, 1), x, "prod"),
        torch.zeros(3, 4).scatter_reduce(1, (torch.arange(7) % 4).repeat(3, 1), x, "amax", include_self=False),
        torch.zeros(3, 4).scatter_reduce(1, (torch.arange(7) % 4).repeat(3, 1), x, "amin"),
        torch.full((3, 4), 7.0).scatter_reduce(1, (torch.arange(7) % 3).repeat(3, 1), x, "mean", include_self=False),
        torch.full((3, 4), 7.0).scatter_reduce(1, (torch.arange(7) % 4).repeat(3, 1), x, "mean"),
        torch.zeros(3, 4, dtype=torch.long).scatter_reduce(1, (torch.arange(7) % 4).repeat(3, 1), (x * 10).long(),
                                                           "amax", include_self=False).float()], 1), [(3, 7)]),
    # the median of the non-NaN values (a row of NaN stays NaN), indices where the row has values
    "nanmedian": (lambda x: torch.cat([torch.nanmedian(_nans(x), 1)[0], torch.nanmedian(_nans(x))[None],
                                       torch.nanmedian(_nans(x)[[0, 1, 4]], 1)[1].float()]), [(5, 7)]),
    "histc": (lambda x: torch.cat([torch.histc(_nans(x), 7, -1, 1.5), torch.histc(x, 5),
                                   torch.histc(torch.ones(5) * x[0, 0], 4)]), [(5, 7)]),
    "pdist": (lambda x: torch.cat([torch.pdist(x, p) for p in (2, 1, 3, float("inf"), 0)]), [(5, 3)]),
    "ldexp": (lambda x: torch.ldexp(x, (x * 3).round().int()) + torch.ldexp((x * 3).long(), torch.arange(-2, 5)),
              [(3, 7)]),
    # a float divided by a constant zero stopped the build (TIR's "Divide by zero"): IEEE's infinities
    "divide_by_zero": (lambda x: torch.cat([x, torch.cat([x, torch.zeros(3, 1)], 1) / 0.0, x.sum(1, keepdim=True) / -0.0],
                                           1), [(3, 7)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_imports_and_matches_pytorch(cpu_target, name):
    fn, shapes = CASES[name]
    torch.manual_seed(0)
    inputs = [torch.randn(*s) for s in shapes]
    got, want = torch_and_ext(Call(fn).eval(), inputs, cpu_target)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaN positions")
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)], err_msg=f"{name}: infinities")
    scale = max(float(np.abs(want[finite]).max()), 1e-30)
    assert_close(got[finite], want[finite], rtol=1e-4, atol=1e-4 * scale, what=name)


def test_adaptive_max_pool_indices_are_refused(cpu_target):
    model = Call(lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True)[1].float()).eval()
    with pytest.raises(Exception, match="indices"):
        from_torch(model, [torch.randn(1, 2, 7, 7)])


def test_max_pool3d_indices_are_refused(cpu_target):
    """3-D pool indices stay the stock zeros: refused when read, imported when not (1-D pools
    export as 2-D ones: their indices import, ``max_pool_indices``)."""
    x = [torch.randn(1, 2, 5, 7, 6)]
    with pytest.raises(Exception, match="indices"):
        from_torch(Call(lambda x: F.max_pool3d(x, 3, 2, return_indices=True)[1].float()).eval(), x)
    got, want = torch_and_ext(Call(lambda x: F.max_pool3d(x, 3, 2, return_indices=True)[0]).eval(), x, cpu_target)
    assert_close(got, want, rtol=1e-6, atol=1e-6)


class Bags(torch.nn.Module):
    """``nn.EmbeddingBag`` in each mode: fixed-size bags (2-D input), bags by offsets with an
    empty one, ``include_last_offset``, per-sample weights."""

    def __init__(self):
        super().__init__()
        self.sum = torch.nn.EmbeddingBag(11, 6, mode="sum")
        self.max = torch.nn.EmbeddingBag(11, 6, mode="max")
        self.mean = torch.nn.EmbeddingBag(11, 6, mode="mean", include_last_offset=True)

    def forward(self, fixed, flat, offsets, weights):
        last = torch.cat([offsets, torch.tensor([flat.shape[0]])])
        return (self.sum(fixed) + self.max(flat, offsets) + self.mean(flat, last)
                + self.sum(flat, offsets, per_sample_weights=weights))


def test_embedding_bag_matches_pytorch(cpu_target):
    torch.manual_seed(0)
    inputs = [torch.randint(0, 11, (3, 5)), torch.randint(0, 11, (9,)), torch.tensor([0, 4, 4]), torch.randn(9)]
    got, want = torch_and_ext(Bags().eval(), inputs, cpu_target)
    assert_close(got, want, rtol=1e-5, atol=1e-5, what="embedding bags")


SYMBOLIC = {
    "median": lambda x: x.median(1)[0] + x.median(1)[1].float(),
    "var_mean": lambda x: torch.var_mean(x, 1)[0] + torch.var_mean(x, (1, 2), correction=2)[0][:, None],
    "index_put": lambda x: _put(x, (torch.tensor([0, -1]),), x[:2] * 2).sum(1),
    # along the length (ties: the later index) and across it
    "cummax_cummin": lambda x: (torch.cummax((x * 2).round(), 1)[1].float().sum(2) + torch.cummax(x, 1)[0].sum(2)
                                + torch.cummin(x, 2)[1].float().sum(2)),
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC))
def test_op_over_a_symbolic_length(cpu_target, name):
    """The translations take a symbolic size (the sequence length) as a run-time value: one
    build, checked at two lengths."""
    model = Call(SYMBOLIC[name]).eval()
    torch.manual_seed(0)
    seq = torch.export.Dim("seq", min=2, max=64)
    mod = from_torch(model, (torch.randn(3, 9, 5),), dynamic_shapes=(({1: seq},),))  # forward(*x)
    vm = relax.VirtualMachine(ext.build(mod, cpu_target, verbose=False), tvm.cpu())
    for length in (4, 11):
        x = torch.randn(3, length, 5)
        with torch.no_grad():
            want = model(x).numpy()
        got = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
        assert_close(got, want, rtol=1e-5, atol=1e-5, what=f"{name} at length {length}")


def test_log_of_sigmoid_does_not_underflow(cpu_target):
    """``log(sigmoid(x))`` written out (and ONNX's ``Log(Sigmoid(x))`` for ``F.logsigmoid``): below
    x = -87 the sigmoid is a denormal that ext's kernels flush to zero, and the log was -inf.
    Rewritten (``StableLogSigmoid``), it answers ``F.logsigmoid``'s value, NaN and infinities too."""
    x = torch.tensor([[-150.0, -90.0, -20.0, -1e-3, 0.0, 3.0, 40.0, float("nan"), -float("inf"), float("inf")]])
    got, _ = torch_and_ext(Call(lambda a: torch.log(torch.sigmoid(a))).eval(), [x], cpu_target)
    want = F.logsigmoid(x).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    fine = np.isfinite(want)
    assert_close(got[fine], want[fine], rtol=1e-6, atol=1e-7, what="log(sigmoid(x))")


@pytest.mark.parametrize("fn, match", [
    (lambda x: x.as_strided((3, 3), (4, 1), 5), "reads element 15 of an input of 12"),  # past the input
    (lambda x: x[:, ::2].as_strided((2, 2), (1, 1)), "not one dense storage"),  # a view with holes
])
def test_as_strided_beyond_what_the_program_holds_is_refused(fn, match):
    with pytest.raises(NotImplementedError, match=match):
        from_torch(Call(fn).eval(), (torch.randn(3, 4),))


def test_running_extremes_off_the_cpu_are_data_parallel(cpu_target):
    """``cummax``/``cummin`` import as a host scan; for a GPU (kernels need bound threads)
    ``ExpandRunningExtremes`` rewrites it as data-parallel ops, checked here on the CPU, and a
    CUDA build keeps no host loop."""
    from ext.relax_passes.running_extremes import ExpandRunningExtremes

    model = Call(lambda x: torch.cat([t.float() for t in (*torch.cummax(torch.where(x > 1, float("nan"), x.round()), 1),
                                                          *torch.cummin(x, 0))], 1)).eval()
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(3)) * 2
    mod = from_torch(model, [x])
    expanded = ExpandRunningExtremes()(mod)
    assert not [gv for gv, f in expanded.functions_items() if isinstance(f, tvm.tirx.PrimFunc)], "scan left"
    with torch.no_grad():
        want = model(x).numpy()
    got = relax.VirtualMachine(ext.build(expanded, cpu_target, cache=False, verbose=False), tvm.cpu())["main"](
        tvm.runtime.tensor(x.numpy())).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-5, atol=1e-5, what="expanded scan")
    ex = ext.build(mod, ext.target.cuda(arch="sm_90"), cache=False, verbose=False)
    assert "parallel" not in ex.mod.inspect_source(), "a host loop in the CUDA build"

