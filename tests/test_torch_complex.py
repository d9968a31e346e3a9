"""Complex tensors in PyTorch programs (``ext/torch_complex.py``): carried as real and
imaginary parts, each case matches PyTorch. Without the translations each stops at import
("polar.default, view_as_complex.default" unsupported; a complex buffer's dtype not handled)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ext.frontend import from_torch
from ext.testing import assert_close
from torch_helpers import Call, torch_and_ext


def _angles(n: int, dim: int) -> torch.Tensor:
    return torch.outer(torch.arange(n).float(), 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))


def _rotate(x, freqs_cis):
    """Meta's Llama reference rotary embedding: pairs of features as complex numbers."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3).type_as(x)


class RopeComputed(torch.nn.Module):
    def forward(self, x):
        angles = _angles(x.shape[1], x.shape[-1])
        return _rotate(x, torch.polar(torch.ones_like(angles), angles))


class RopeBuffer(torch.nn.Module):
    """The angles precomputed as a complex buffer for 16 positions, sliced to the sequence."""

    def __init__(self, dim: int):
        super().__init__()
        angles = _angles(16, dim)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        q = self.proj(x)
        return _rotate(q, self.freqs_cis[: x.shape[1]]) + _rotate(x, self.freqs_cis[: x.shape[1]]) * 0.5


class Arithmetic(torch.nn.Module):
    """Complex add, sub, mul by a complex number and a real tensor, conj, cat, abs."""

    def forward(self, x, y):
        a = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        b = torch.view_as_complex(y.reshape(*y.shape[:-1], -1, 2))
        c = (a + b) * (a - b.conj()) * (0.5 - 2j) + a * y[..., ::2] - b
        return torch.cat([torch.view_as_real(torch.cat([c, a], -1)).flatten(-2), c.abs(), torch.fft.fft(x).abs()], -1)


class SpectralConv(torch.nn.Module):
    """A Fourier neural operator layer: rfft, a complex weight on the low modes, irfft."""

    def __init__(self, channels: int, modes: int):
        super().__init__()
        self.modes = modes
        self.weight = torch.nn.Parameter(torch.randn(channels, channels, modes, dtype=torch.cfloat) / channels)

    def forward(self, x):
        spectrum = torch.fft.rfft(x, norm="ortho")
        low = spectrum[:, :, : self.modes]
        mixed = (low[:, :, None] * self.weight[None]).sum(1) + torch.einsum("bim,iom->bom", low, self.weight) / 2
        high = torch.zeros_like(spectrum[:, :, self.modes:])
        return torch.fft.irfft(torch.cat([mixed, high], -1), n=x.shape[-1], norm="ortho") + x


CASES = {
    "rope_computed": (RopeComputed, [(2, 5, 3, 8)]),
    "rope_buffer": (lambda: RopeBuffer(12), [(2, 7, 3, 12)]),
    "arithmetic": (Arithmetic, [(3, 10), (3, 10)]),
    # irfft (``_fft_c2r``): FNO's spectral convolution, odd and even lengths, 2-D
    "spectral_conv": (lambda: SpectralConv(3, 4), [(2, 3, 15)]),
    "irfft2": (lambda: Call(lambda x: torch.fft.irfft2(torch.fft.rfft2(x) * 2, s=x.shape[-2:])
                              + torch.fft.irfft(torch.fft.rfft(x), n=10)[..., :7]), [(2, 5, 7)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_program_matches_pytorch(cpu_target, name):
    make, shapes = CASES[name]
    torch.manual_seed(0)
    inputs = [torch.randn(*s) for s in shapes]
    got, want = torch_and_ext(make().eval(), inputs, cpu_target)
    assert_close(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()), what=name)


def test_unsupported_op_on_a_complex_value_is_named():
    class Exp(torch.nn.Module):
        def forward(self, x):
            return torch.view_as_real(torch.view_as_complex(x.reshape(2, -1, 2)).exp())

    with pytest.raises(Exception, match="exp.default of the complex value"):
        from_torch(Exp().eval(), (torch.randn(2, 6),))

