"""Test helpers: explicit-tolerance comparison, GPU/nvcc detection, running built modules.

Tolerances default to 0 so every test has to choose its own.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest


def has_gpu() -> bool:
    from .target import local_cuda_arch

    return shutil.which("nvidia-smi") is not None and local_cuda_arch() is not None


def own_candidates(wl, target) -> list:
    """ext's own kernels (library calls left out) for ``wl``'s op on ``target`` that apply to ``wl``."""
    from .strategies import REGISTRY

    return [c for c in REGISTRY.for_op(wl.op, target) if not c.library and c.applies(wl, target)]


requires_gpu = pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")


def has_nvcc() -> bool:
    return shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")


def assert_close(actual, expected, *, rtol: float = 0.0, atol: float = 0.0, what: str = ""):
    """``np.testing.assert_allclose`` with no default tolerance: each test chooses."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def one_op_module(op, shape, dtype: str = "float32", **attrs):
    """A Relax module ``main(x: shape) -> op(x, **attrs)`` (one operator under test)."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType(tuple(shape), dtype))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(op(x, **attrs))
        bb.emit_func_output(out)
    return bb.get()


def run_relax(ex, *inputs, target_kind: str = "llvm"):
    import tvm
    from tvm import relax

    from .target import get_target_kind

    dev = get_target_kind(target_kind).device(0)
    vm = relax.VirtualMachine(ex, dev)
    out = vm["main"](*[tvm.runtime.tensor(x, dev) for x in inputs])
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]


def nvcc_compile(src: str, arch: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "k.cu"
    path.write_text(src)
    return subprocess.run(["nvcc", f"-arch={arch}", "-c", str(path), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True)
