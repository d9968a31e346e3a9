"""Special functions (``ext/torch_special.py``): each imports, builds and matches PyTorch in
float32 and float64, at the poles, zeros, infinities and NaN, and on random values across the
range each is used in (Gamma arguments of both signs, probabilities near 0 and 1, Bessel
arguments on both sides of the series/asymptotic switch at 30)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ext.frontend import UnsupportedOperatorError, from_torch
from torch_helpers import Call, torch_and_ext

SP = torch.special
EDGES = [0.0, -0.0, -1.0, -2.0, -2.5, 0.5, -0.5, 1.0, 2.0, 1e-30, -1e-30, 1e30, -1e30, 3.7, -7.3,
         29.9, 30.1, -30.1, 35.0, 100.0, float("inf"), float("-inf"), float("nan")]
FUNCTIONS = {
    "lgamma": torch.lgamma, "gammaln": SP.gammaln, "digamma": torch.digamma,
    "polygamma0": lambda x: torch.polygamma(0, x), "i0": torch.i0, "i0e": SP.i0e, "i1": SP.i1, "i1e": SP.i1e,
    "erfinv": lambda x: torch.erfinv(x), "ndtri": SP.ndtri,
}
UNIT = {"erfinv", "ndtri"}  # probabilities: values in [-1, 1] / [0, 1] and a little outside
# relative error allowed where the result is not near 0 (float32: PyTorch's own float32 kernels
# are a few ulps off the float64 truth), and the absolute error near a root
TOLERANCE = {"float32": (2e-6, 1e-6), "float64": (1e-12, 1e-13)}


def _inputs(name: str, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if name in UNIT:
        p = torch.rand(200, generator=g, dtype=torch.float64)
        tails = torch.tensor([1e-30, 1e-12, 1e-7, 1 - 1e-7, 0.0, 1.0, 0.5, -0.0, -1e-3, 1.001, float("nan")],
                             dtype=torch.float64)
        x = torch.cat([p, tails, p * 1e-5, 1 - p * 1e-6])
        x = x * 2 - 1 if name == "erfinv" else x
        if name == "erfinv":  # tails at erf's side: 1 - 1e-7 and such, exactly representable
            x = torch.cat([x, torch.tensor([1 - 1e-7, -1 + 1e-12, 1e-30, -0.0])])
    else:
        x = torch.cat([torch.tensor(EDGES, dtype=torch.float64), torch.randn(300, generator=g, dtype=torch.float64) * 8])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_special_function_matches_pytorch(cpu_target, name, dtype):
    x = _inputs(name, getattr(torch, dtype))
    got, want = torch_and_ext(Call(FUNCTIONS[name]).eval(), [x], cpu_target)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaN positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{name}: infinities")
    rtol, atol = TOLERANCE[dtype]
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol, err_msg=name)


def test_integer_input_gives_float32(cpu_target):
    got, want = torch_and_ext(Call(lambda x: torch.lgamma(x) + torch.i0(x)).eval(), [torch.arange(-3, 9)], cpu_target)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6)


def test_higher_polygamma_is_refused_by_name():
    with pytest.raises(UnsupportedOperatorError, match="polygamma.*order 2"):
        from_torch(Call(lambda x: torch.polygamma(2, x)).eval(), [torch.rand(4) + 1])


def test_ops_with_side_effects_are_refused_by_name():
    """``torch.linalg.inv`` checks its input through a token-threaded side effect: TVM's
    importer said only "Unsupported input kind: InputKind.TOKEN"."""
    with pytest.raises(UnsupportedOperatorError, match="_linalg_check_errors.*side effects.*linalg_inv_ex"):
        from_torch(Call(lambda x: torch.linalg.inv(x + 4 * torch.eye(4))).eval(), [torch.randn(4, 4)])
