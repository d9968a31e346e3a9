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


def test_host_target_turns_off_extensions_the_hypervisor_hides(monkeypatch):
    """A Zen 4 guest whose hypervisor hides AVX-512 still reports the model LLVM names
    ``znver4``: the host target turns off what /proc/cpuinfo lacks, so kernels are AVX2 (before,
    every model died of SIGILL on such a VM). With every flag present the name stands alone."""
    import tvm

    from ext import host_cpu

    full = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": "znver4"}))}
    full_flags = {"sse2"} | {host_cpu._HIDEABLE_FEATURES.get(f, f) for f in full}
    monkeypatch.setattr(tvm.target.codegen, "llvm_get_system_cpu", lambda: "znver4")
    monkeypatch.setattr(host_cpu, "_cpu_flags", lambda: full_flags)
    assert host_cpu.host_llvm_cpu() == {"mcpu": "znver4"}
    assert cpu_info(ext.target.cpu()).isa == "avx512"
    monkeypatch.setattr(host_cpu, "_cpu_flags", lambda: {f for f in full_flags if not f.startswith("avx512")})
    attrs = host_cpu.host_llvm_cpu()
    assert attrs["mcpu"] == "znver4" and "-avx512f" in attrs["mattr"] and "-avx2" not in attrs["mattr"]
    for t in (ext.target.cpu(), normalize({"kind": "llvm"}), ext.target.npu()):
        assert cpu_info(t).isa == "avx2", t
    assert cpu_info(ext.target.cpu(mcpu="znver4")).isa == "avx512"  # a named cpu is the user's choice
    monkeypatch.setattr(host_cpu, "_cpu_flags", lambda: set())  # no /proc/cpuinfo: LLVM's name alone
    assert host_cpu.host_llvm_cpu() == {"mcpu": "znver4"}


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


@pytest.mark.parametrize("arch", ["sm_9", "sm_", "sm_2", "hopper", "sm_90b", 90])
def test_cuda_arch_is_checked_by_ext(arch):
    with pytest.raises(ValueError, match="CUDA arch must look like"):
        ext.target.cuda(arch)
    with pytest.raises(ValueError, match="CUDA arch must look like"):
        normalize({"kind": "cuda", "arch": arch})


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90a", "sm_120"])
def test_cuda_arch_accepts_real_capabilities(arch):
    assert str(normalize({"kind": "cuda", "arch": arch}).attrs["arch"]) == arch


def test_cuda_without_arch_detects_or_asks(monkeypatch):
    monkeypatch.setattr(ext.target, "local_cuda_arch", lambda: None)
    for spell in (lambda: ext.target.cuda(), lambda: normalize("cuda"), lambda: normalize({"kind": "cuda"})):
        with pytest.raises(ValueError, match="arch="):
            spell()
    monkeypatch.setattr(ext.target, "local_cuda_arch", lambda: "sm_86")
    assert str(ext.target.cuda().attrs["arch"]) == "sm_86"
    assert str(normalize("cuda").attrs["arch"]) == "sm_86"


@pytest.mark.parametrize("mcpu", ["nonsense", "znver", "cortex-a72"])
def test_unknown_mcpu_is_rejected_before_llvm_falls_back_to_sse(mcpu):
    with pytest.raises(ValueError, match=f"LLVM does not know the CPU '{mcpu}'"):
        normalize({"kind": "llvm", "mcpu": mcpu})
    with pytest.raises(ValueError, match="does not know the CPU"):
        ext.target.cpu(mcpu)


def test_frontend_is_available_after_import_ext():
    import subprocess
    import sys

    code = "import ext; print(callable(ext.frontend.from_torch), callable(ext.frontend.from_onnx))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stderr


@pytest.mark.parametrize("mcpu, regs, acc, lanes", [("skylake-avx512", 32, 28, 16), ("haswell", 16, 12, 8)])
def test_register_budget_comes_from_the_isa(mcpu, regs, acc, lanes):
    info = cpu_info(normalize({"kind": "llvm", "mcpu": mcpu, "num-cores": 3}))
    assert (info.vector_registers, info.accumulators, info.lanes_f32, info.cores) == (regs, acc, lanes, 3)


def test_every_kind_goes_through_the_table():
    from ext.target import get_target_kind, known_kinds, target_kind

    assert known_kinds()[:2] == ("llvm", "cuda")
    assert target_kind(ext.target.cpu()).cpu and not target_kind(ext.target.cuda("sm_90")).cpu
    with pytest.raises(ValueError, match="unknown target kind 'tpu'"):
        get_target_kind("tpu")
    with pytest.raises(ValueError, match="already registered"):
        ext.target.register_target_kind(get_target_kind("llvm"))
