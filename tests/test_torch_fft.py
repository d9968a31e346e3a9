"""Complex FFTs of real tensors import (``ext/torch_fft.py``) and match PyTorch: FNet's
``fftn(x, dim=(1, 2)).real``, a normalized 1-D FFT, an inverse after a forward one, both parts
through ``view_as_real``; odd lengths."""
from __future__ import annotations

import pytest
import torch

import ext
from ext.frontend import from_torch
from ext.testing import assert_close, run_relax


class _Fft(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "fnet":
            return torch.fft.fftn(x, dim=(1, 2)).real + x
        if self.kind == "ortho":
            return torch.fft.fft(x, dim=-1, norm="ortho").real
        if self.kind == "roundtrip":  # ifft(fft(x)).real: an inverse of a complex value
            return torch.fft.ifft(torch.fft.fft(x, dim=1), dim=1).real
        return torch.view_as_real(torch.fft.fftn(x, dim=(1, 2), norm="forward"))  # both parts


@pytest.mark.parametrize("kind", ["fnet", "ortho", "roundtrip", "both_parts"])
def test_fft_matches_torch(cpu_target, kind):
    torch.manual_seed(0)
    x = torch.randn(2, 13, 7)
    model = _Fft(kind).eval()
    want = model(x).numpy()
    got = run_relax(ext.build(from_torch(model, (x,)), cpu_target, cache=False, verbose=False), x.numpy())
    assert got.shape == want.shape
    assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_rfft_keeps_the_onesided_bins(cpu_target):
    model = _Fft("fnet").eval()
    model.forward = lambda x: torch.view_as_real(torch.fft.rfft(x, dim=-1))
    x = torch.randn(3, 11)
    want = model(x).numpy()  # (3, 6, 2)
    got = run_relax(ext.build(from_torch(model, (x,)), cpu_target, cache=False, verbose=False), x.numpy())
    assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [8, 9])
def test_irfft_inverts_rfft(cpu_target, n):
    """``_fft_c2r``: the round trip gives the signal back (the odd length drops no bin)."""
    model = _Fft("fnet").eval()
    model.forward = lambda x: torch.fft.irfft(torch.fft.rfft(x, dim=-1), n=n, dim=-1)
    x = torch.randn(2, n)
    got = run_relax(ext.build(from_torch(model, (x,)), cpu_target), x.numpy())
    assert_close(got, x.numpy(), rtol=1e-5, atol=1e-5)


def test_other_ops_on_complex_values_are_refused(cpu_target):
    """``exp`` of an FFT would read its real part alone: refused by name, not computed wrong."""
    model = _Fft("fnet").eval()
    model.forward = lambda x: torch.fft.fft(x, dim=-1).exp()
    with pytest.raises(Exception, match="complex"):
        from_torch(model, (torch.randn(2, 8),))
