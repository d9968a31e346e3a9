"""PyTorch's kernels as packed functions: ``ext.lib.torch.matmul`` / ``conv2d``.

One function per op serves every device PyTorch was built for: on CPU the
matmul is PyTorch's sgemm (oneAPI MKL in the PyPI wheels) and the convolution
oneDNN (MKL-DNN); on CUDA they are cuBLAS and cuDNN. TVM tensors are viewed as
torch tensors through DLPack (CPU: ``np.from_dlpack`` then ``torch.from_numpy``,
about 1 us against 3 us for ``torch.from_dlpack``), the matmul writes straight
into the output (``out=``); the convolution has no ``out=`` overload, so its
result is copied into the output (one extra pass over the output).

Threads: each call takes the candidate's ``threads`` knob (0 keeps PyTorch's
setting); on a loaded 2-core machine PyTorch's 2-thread OpenMP team was
measured at ~30 ms for a 64x64x64 GEMM that takes ~20 us on one thread.

CUDA: TVM and PyTorch both use the device's legacy default stream, so calls
are ordered with the kernels around them.
"""
from __future__ import annotations

import functools
import importlib.util

import numpy as np
import tvm

MATMUL = "ext.lib.torch.matmul"
CONV2D = "ext.lib.torch.conv2d"
DTYPES = ("float32", "float64")


@functools.lru_cache(maxsize=None)
def _torch():
    try:
        import torch
    except Exception as err:  # ImportError, or a broken install
        return None, f"PyTorch is not importable ({type(err).__name__}: {err})"
    return torch, None


def unavailable_reason(device: str) -> str | None:
    """None when PyTorch can run on ``device`` ("cpu" or "cuda"), else why not."""
    if device == "cpu":  # don't import torch (seconds, and an OpenMP pool) just to select kernels
        if importlib.util.find_spec("torch") is None:
            return "PyTorch is not installed (pip install torch)"
        return None
    torch, why = _torch()
    if torch is None:
        return why
    if torch.version.cuda is None:
        return f"no CUDA-enabled library importable: PyTorch {torch.__version__} is built without CUDA"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
    return None


def _view(t):
    torch = _torch()[0]
    if t.device.dlpack_device_type() == 1:  # kDLCPU
        return torch.from_numpy(np.from_dlpack(t))
    return torch.from_dlpack(t)


class _Threads:
    """PyTorch's intra-op thread count set to ``n`` (0: unchanged) inside the block."""

    def __init__(self, n: int):
        self.n, self.prev = n, None

    def __enter__(self):
        torch = _torch()[0]
        if self.n > 0 and torch.get_num_threads() != self.n:
            self.prev = torch.get_num_threads()
            torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.prev is not None:
            _torch()[0].set_num_threads(self.prev)


@tvm.register_global_func(MATMUL, override=True)
def _matmul(a, b, transpose_b, threads, out):
    """``out = a @ b`` (``b`` swapped in its last two axes when ``transpose_b``), batched with
    broadcasting, on ``threads`` intra-op threads (0: PyTorch's setting)."""
    rhs = _view(b)
    if transpose_b:
        rhs = rhs.transpose(-1, -2)
    with _Threads(threads):
        _torch()[0].matmul(_view(a), rhs, out=_view(out))


@tvm.register_global_func(CONV2D, override=True)
def _conv2d(x, w, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, dil_h, dil_w, groups, layout, threads, out):
    """``out = conv2d(x, w)``; ``layout`` "NCHW" (weight OIHW) or "NHWC" (weight OHWI).

    NHWC tensors are handed to PyTorch as channels-last views (no copy); asymmetric
    padding is applied by ``F.pad`` first (a copy of the input).
    """
    torch = _torch()[0]
    F = torch.nn.functional
    xt, wt, ot = _view(x), _view(w), _view(out)
    if layout == "NHWC":
        xt, wt, ot = xt.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2), ot.permute(0, 3, 1, 2)
    pad = (pad_t, pad_l)
    if (pad_t, pad_l) != (pad_b, pad_r):
        xt, pad = F.pad(xt, (pad_l, pad_r, pad_t, pad_b)), (0, 0)
    with _Threads(threads):
        ot.copy_(F.conv2d(xt, wt, None, (stride_h, stride_w), pad, (dil_h, dil_w), groups))
