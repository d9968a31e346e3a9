"""Complex FFTs of real tensors in ``torch.export`` graphs, translated to real matmuls.

Relax has no complex dtype, so FNet's token mixing (``torch.fft.fftn(x, dim=(1, 2)).real``,
exported as ``_to_copy(x, complex64) -> _fft_c2c -> view_as_real -> select(-1, 0)``) did not
import. A complex value is carried as its real and imaginary parts (``torch_complex``), and a
DFT along one axis of length ``N`` is two matmuls with the constant ``N x N`` cosine and sine
matrices ``C[k, n] = cos(2 pi k n / N)``, ``S`` likewise:
with ``F = C - i s S`` (``s = 1`` forward, ``-1`` inverse),
``(R + iI) F = (R C + s I S) + i (I C - s R S)``. ``view_as_real`` stacks the parts; when
every use reads the real part only (``.real``), the imaginary part is never computed.
Normalization ``"ortho"`` / ``"forward"`` scales the matrices. Only static FFT lengths; the
dense DFT is O(N^2) per axis, which is what a matmul kernel is fast at for FNet's 512 tokens
and 768 features.
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from .torch_complex import ComplexParts

def dft_matrices(n: int, dtype: str, scale: float) -> tuple:
    k = np.arange(n)
    angle = 2 * np.pi * np.outer(k, k) / n
    return (relax.const((np.cos(angle) * scale).astype(dtype)), relax.const((np.sin(angle) * scale).astype(dtype)))


def contract_along(bb, x, axis: int, mat):
    """``x`` contracted with ``mat[k, t]`` along ``axis`` (``k``: the axis' index), as a matmul
    with that axis moved last and back."""
    rank = len(x.ty.shape)
    perm = [i for i in range(rank) if i != axis] + [axis]
    y = bb.emit(relax.op.matmul(bb.emit(relax.op.permute_dims(x, perm)), mat))
    return bb.emit(relax.op.permute_dims(y, [perm.index(i) for i in range(rank)]))


class ComplexFFT(ComplexParts):
    """Importer mixin (before ``ExportedProgramImporter`` in the bases): ``_fft_c2c``,
    ``_fft_r2c`` (``fft``/``rfft`` of a real tensor) and ``_fft_c2r`` (``irfft``: the inverse
    of a one-sided spectrum, real) on ``ComplexParts``' complex values."""

    complex_users = ComplexParts.complex_users | {"_fft_c2c.default", "_fft_c2r.default"}

    def _along(self, x, axis: int, mat):
        return contract_along(self.block_builder, x, axis, mat)

    def _transform(self, node, real, imag, dims, norm, forward: bool):
        """The DFT of ``real + i imag`` (``imag`` None: zero) over ``dims``, recorded for ``node``."""
        bb, shape, dtype = self.block_builder, real.ty.shape, str(real.ty.dtype)
        sign = 1.0 if forward else -1.0
        for d in dims:
            axis = d % len(shape)
            if not hasattr(shape[axis], "value"):
                raise NotImplementedError(f"{node.target}: FFT over a symbolic axis ({shape[axis]}), "
                                          "static lengths only")
            n = int(shape[axis].value)
            cos, sin = dft_matrices(n, dtype, {0: 1.0, 1: 1.0 / np.sqrt(n), 2: 1.0 / n}[int(norm)])
            rc, rs = self._along(real, axis, cos), self._along(real, axis, sin)
            if imag is None:
                real, imag = rc, bb.emit(relax.op.multiply(rs, relax.const(-sign, dtype)))
            else:
                ic, is_ = self._along(imag, axis, cos), self._along(imag, axis, sin)
                real = bb.emit(relax.op.add(rc, relax.op.multiply(is_, relax.const(sign, dtype))))
                imag = bb.emit(relax.op.subtract(ic, relax.op.multiply(rs, relax.const(sign, dtype))))
        return self._record(node, real, imag)

    def _fft_c2c(self, node):
        src, dims, norm, forward = node.args
        parts = self._parts.get(src)
        if parts is None:
            raise NotImplementedError(f"_fft_c2c of {src.name}: only FFTs of real tensors (or of their FFTs) import")
        return self._transform(node, *parts, dims, norm, forward)

    def _fft_r2c(self, node):
        """``torch.fft.fft`` / ``rfft`` of a real tensor; ``onesided`` keeps ``N // 2 + 1`` bins of the last axis."""
        src, dims, norm, onesided = node.args
        x = self.env[src]
        self._transform(node, x, None, dims, norm, True)
        if onesided:
            axis = dims[-1] % len(x.ty.shape)
            keep = int(x.ty.shape[axis].value) // 2 + 1
            self._record(node, *(self.block_builder.emit(relax.op.strided_slice(p, [axis], [0], [keep]))
                                 for p in self._parts[node]))
        return self._parts[node][0]

    def _fft_c2r(self, node):
        """``irfft``: inverse transforms over all but the last of ``dims``, then the real signal
        of length ``n`` from the ``K`` one-sided bins of the last: ``y[t] = sum_k w_k (R_k
        cos(2 pi k t / n) - I_k sin(2 pi k t / n))``, ``w`` 1 for the zero (and, n even, the
        middle) bin and 2 for the bins that stand for a conjugate pair; the imaginary parts of
        those 1-weighted bins drop out, as in PyTorch."""
        src, dims, norm, n = node.args
        parts = self._parts.get(src)
        if parts is None:
            raise NotImplementedError(f"_fft_c2r of {src.name}: only inverse FFTs of FFTs or complex values import")
        real, imag = parts
        if len(dims) > 1:
            self._transform(node, real, imag, dims[:-1], norm, False)
            real, imag = self._parts.pop(node)
        axis = dims[-1] % len(real.ty.shape)
        bins = int(real.ty.shape[axis].value)
        k, t = np.arange(bins)[:, None], np.arange(n)[None, :]
        weight = np.where((k == 0) | (2 * k == n), 1.0, 2.0) * {0: 1.0, 1: 1.0 / np.sqrt(n), 2: 1.0 / n}[int(norm)]
        dtype = str(real.ty.dtype)
        angle = 2 * np.pi * k * t / n
        out = self._along(real, axis, relax.const((weight * np.cos(angle)).astype(dtype)))
        if imag is not None:
            out = self.block_builder.emit(relax.op.subtract(
                out, self._along(imag, axis, relax.const((weight * np.sin(angle)).astype(dtype)))))
        return out

    def fft_converters(self) -> dict:
        return {"_fft_c2c.default": self._fft_c2c, "_fft_r2c.default": self._fft_r2c, "_fft_c2r.default": self._fft_c2r}
