"""Vendor-library bindings: packed functions registered from Python.

Each binding module registers global packed functions named
``ext.lib.<library>.<op>`` with ``tvm.register_global_func`` when it is
imported, and exposes ``unavailable_reason(...) -> str | None`` (None when the
library can run here). Tensors cross the boundary without copies: the TVM
runtime tensors the VM passes in are viewed as NumPy arrays / PyTorch tensors
through DLPack (``np.from_dlpack``, ``torch.from_dlpack``), and the library
writes the result into the output tensor the VM allocated (destination
passing, ``relax.call_dps_packed``).

Because the functions live in this Python process, an executable that calls
them runs only in a process that has imported ``ext`` (see
``ext.libraries.export``). Bindings:

* ``blas``: OpenBLAS, the BLAS NumPy ships (``ext.lib.openblas.matmul``);
* ``torch_ops``: PyTorch's kernels, on CPU (MKL sgemm, oneDNN convolution)
  and, when PyTorch is built for CUDA, on the GPU (cuBLAS, cuDNN)
  (``ext.lib.torch.matmul``, ``ext.lib.torch.conv2d``).
"""
from . import blas, torch_ops  # noqa: F401  (registers the packed functions)

PREFIX = "ext.lib."


def is_library_function(name: str) -> bool:
    """Whether a global function name is one of ours (for reports and exports)."""
    return str(name).startswith(PREFIX)
