"""PyTorch programs fed a NaN (and infinities) give NaN, infinities and values where PyTorch does.

Each case is a small module whose answer at a NaN depends on a rule TVM's lowering gets wrong
without ext's fix: float ``!=`` and negated comparisons (``relax_passes/nan_compare.py``), NaN as\nthe largest value in argmax/argmin, sorts and top-k (``relax_passes/nan_order.py``).
The input holds a NaN, a +inf and a -inf at fixed places; the check is exact on the non-finite
positions and within 1e-5 of the largest magnitude elsewhere.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_helpers import Call, torch_and_ext

F = torch.nn.functional
CAUSAL = torch.ones(9, 9, dtype=torch.bool).tril()


CASES = {
    # the NaN test idiom and its negation: TVM's `!=` is ordered (false at NaN), `x == x` simplified to true
    "x_ne_x": (lambda x: (x != x).float() + 2 * (x == x).float(), [(3, 7)]),
    "ne_tensors": (lambda x, y: torch.ne(x, y).float() - (x <= y).logical_not().float() * 3, [(3, 7), (3, 7)]),
    "not_less": (lambda x: (~(x < 0.5)).float() + (~(x >= 0)).float() * 2 + torch.logical_not(x > 1).float() * 4,
                 [(4, 5)]),
    # nanmean counts its elements with ~(x != x)
    "nanmean": (lambda x: torch.nanmean(x, 0), [(5, 7)]),
    # a query row of NaNs: the decomposed masked attention's "fully masked row" test read it as masked (zeros)
    "sdpa_bool_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=CAUSAL),
                       [(1, 2, 9, 8), (1, 2, 9, 8), (1, 2, 9, 8)]),
    # TVM's argmax/argmin keep the best by `>`/`<`, which skips a NaN; its sorts compare with `<`
    "argmax_argmin": (lambda x: torch.stack([x.argmax(1), x.argmin(1), x.argmax(0, keepdim=True)[0, :3],
                                             x.argmin().expand(3)]).float(), [(3, 7)]),
    "sort_argsort": (lambda x: torch.sort(x, 1)[0] + torch.sort(x, 0, descending=True)[1].float()
                     + x.argsort(1).float(), [(3, 7)]),
    "topk": (lambda x: torch.topk(x, 3, 1)[0] + torch.topk(x, 2, 1, largest=False)[1].float().sum(1, keepdim=True)
             + torch.topk(x, 3, 1)[1].float(), [(3, 7)]),
    # TVM lowers max(a, b) to `a > b ? a : b`: a NaN `a` gave `b`
    "maximum_minimum": (lambda x: torch.maximum(x, x.flip(-1)) + torch.minimum(x.flip(0), x)
                        + torch.clamp(x, min=x.flip(-1) - 1), [(3, 7)]),
    # softshrink decomposes to where(|x| > l, x - sign(x) l, x * 0): the simplifier folded x * 0 to 0
    "softshrink_times_zero": (lambda x: F.softshrink(x, 0.3) + x * 0.0, [(3, 7)]),
    # a row with a NaN has NaN as its median (the NaN's index); bucketize puts NaN past the end
    "median": (lambda x: torch.stack([x.median(1)[0], x.median(1)[1].float(), x.median().expand(3)]), [(3, 7)]),
    "bucketize": (lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0])).float(), [(3, 7)]),
    # the stock 3-D max pool skipped a NaN; relax_passes/pool3d.py runs it as two 2-D max pools
    "max_pool3d": (lambda x: F.max_pool3d(x, 3, 2, 1)[:, :, :, :4, :4] + F.max_pool3d(x, 2, ceil_mode=True)
                   + F.max_pool3d(x, (1, 3, 3), (1, 2, 2), (0, 1, 1), dilation=(2, 1, 1))[:, :, :2],
                   [(2, 3, 3, 7, 8)]),
}


def _inputs(shapes, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(*s, generator=gen) for s in shapes]
    flat = xs[0].view(-1)
    flat[1], flat[-1] = float("nan"), float("inf")
    if flat.numel() > 4:
        flat[3] = float("-inf")
    return xs


def assert_same_specials(got, want, what: str):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.where(np.isinf(want), want, 0), np.where(np.isinf(got), got, 0),
                                  err_msg=f"{what}: infinities")
    fin = np.isfinite(want)
    scale = max(float(np.abs(want[fin]).max()) if fin.any() else 1.0, 1e-30)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5 * scale, err_msg=what)


@pytest.mark.parametrize("name", sorted(CASES))
def test_nan_answers_like_pytorch(cpu_target, name):
    fn, shapes = CASES[name]
    got, want = torch_and_ext(Call(fn).eval(), _inputs(shapes), cpu_target)
    assert_same_specials(got, want, name)
