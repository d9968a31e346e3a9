"""Target detection and validation."""
from __future__ import annotations

import os

import pytest
from tvm.target import Target

import ext
from ext.target import cpu_info, normalize


def test_cpu_target_detects_isa_and_cores():
    t = ext.target.cpu()
    assert isinstance(t, Target) and t.kind.name == "llvm"
    info = cpu_info(t)
    assert info.vector_bits in (128, 256, 512) and info.cores == ext.target.usable_cores()
    assert info.isa in ("avx512", "avx2", "sse")
    assert cpu_info(normalize({"kind": "llvm", "mcpu": "haswell"})).isa == "avx2"
    assert cpu_info(normalize({"kind": "llvm", "mcpu": "skylake-avx512"})).isa == "avx512"


def test_bare_llvm_gets_host_cpu_and_cores():
    t = normalize({"kind": "llvm"})
    assert str(t.attrs["mcpu"]) and int(t.attrs["num-cores"]) >= 1


@pytest.mark.parametrize("bad", ["llvm -mcpu=znver4", {"mcpu": "znver4"}, {"kind": "nonsense"}, 42, "opencl"])
def test_malformed_targets_raise_value_error(bad):
    with pytest.raises(ValueError):
        normalize(bad)


def test_cuda_target():
    t = ext.target.cuda("sm_90")
    assert t.kind.name == "cuda" and str(t.attrs["arch"]) == "sm_90" and t.host is not None
    with pytest.raises(ValueError, match="sm_80"):
        ext.target.cuda("hopper")


def test_threads_use_every_core_unless_overridden():
    assert int(os.environ["TVM_NUM_THREADS"]) >= 1
    import tvm

    assert tvm.runtime.num_threads() == int(os.environ["TVM_NUM_THREADS"])
