"""Targets: detect the host CPU, describe a CUDA device, validate user input.

Targets are always ``tvm.target.Target`` objects built from dicts (TVM 0.27
rejects CLI strings, and a bare dict crashes ``relax.build``).

Threads: TVM 0.27 starts its CPU pool with half the logical CPUs on x86 (one
thread on a 2-core VM) unless ``TVM_NUM_THREADS`` is set before the first
parallel call. :func:`configure_threads` (run by ``import ext``) sets it to the
usable core count unless the user already set it; export ``TVM_NUM_THREADS=N``
before importing ``ext`` to override.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

import tvm
from tvm.target import Target

_KNOWN_KINDS = ("llvm", "cuda")


def usable_cores() -> int:
    """CPUs this process may run on (affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def configure_threads() -> int:
    """Make TVM's CPU pool use every usable core unless ``TVM_NUM_THREADS`` is set.

    Returns the thread count in force. Must run before the first parallel kernel.
    """
    os.environ.setdefault("TVM_NUM_THREADS", str(usable_cores()))
    return int(os.environ["TVM_NUM_THREADS"])


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu(mcpu: str | None = None, num_cores: int | None = None) -> Target:
    """The host CPU as an LLVM target.

    Parameters
    ----------
    mcpu : LLVM CPU name; detected from LLVM (e.g. ``"znver4"``) when None.
    num_cores : cores kernels may use; the usable core count when None.

    Example
    -------
    >>> import ext
    >>> ext.target.cpu().kind.name
    'llvm'
    """
    mcpu = mcpu or tvm.target.codegen.llvm_get_system_cpu()
    return normalize({"kind": "llvm", "mcpu": mcpu, "num-cores": num_cores or usable_cores()})


_SM_ARCH = re.compile(r"sm_(\d{2,3})[af]?")


def check_cuda_arch(arch) -> str:
    """``arch`` if it names a CUDA compute capability (``sm_75``, ``sm_90a``...), else ValueError."""
    m = _SM_ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if m is None or int(m.group(1)) < 30:
        raise ValueError(f"CUDA arch must look like 'sm_80' or 'sm_90a' (compute capability >= 3.0), got {arch!r}")
    return arch


def cuda(arch: str | None = None) -> Target:
    """A CUDA target for ``arch`` (``"sm_80"``, ``"sm_90"``...) with an LLVM host.

    Without ``arch`` the local GPU's compute capability is used; with no GPU
    visible a ``ValueError`` asks for ``arch=`` (code generation needs no GPU).
    """
    return Target({"kind": "cuda", "arch": check_cuda_arch(arch or _detected_cuda_arch())}, host={"kind": "llvm"})


def _detected_cuda_arch() -> str:
    arch = local_cuda_arch()
    if arch is None:
        raise ValueError("no CUDA GPU is visible to detect the architecture from: "
                         "pass it, e.g. ext.target.cuda(arch='sm_90')")
    return arch


def check_mcpu(mcpu: str, triple: str | None = None) -> str:
    """``mcpu`` if LLVM knows it for ``triple`` (the host's by default), else ValueError.

    LLVM itself only prints a warning for an unknown CPU and then generates
    baseline (SSE2) code, which would be a silent 5-10x slowdown.
    """
    codegen = tvm.target.codegen
    triple = triple or codegen.llvm_get_system_triple()
    if not isinstance(mcpu, str) or not codegen.llvm_is_valid_cpu(mcpu, triple):
        known = [str(c) for c in codegen.llvm_get_cpu_archlist(Target({"kind": "llvm", "mtriple": triple}))]
        close = [c for c in known if isinstance(mcpu, str) and mcpu[:3].lower() == c[:3]][:8]
        raise ValueError(f"LLVM does not know the CPU {mcpu!r} for {triple}"
                         + (f"; similar names: {', '.join(close)}" if close else "")
                         + f" ({len(known)} known; ext.target.cpu() detects the host's)")
    return mcpu


def local_cuda_arch() -> str | None:
    """``"sm_XY"`` of the GPU this process sees (device 0), or None without one."""
    try:
        import tvm

        dev = tvm.cuda(0)
        if not dev.exist:
            return None
        major, minor = dev.compute_version.split(".")
        return f"sm_{major}{minor}"
    except Exception:  # no CUDA runtime in this TVM build, or no driver
        return None


def normalize(target: Any) -> Target:
    """Turn a Target, a dict or a kind name into a validated ``Target``.

    Raises ``ValueError`` naming the problem for anything else (CLI strings,
    unknown kinds, malformed dicts).
    """
    if isinstance(target, Target):
        t = target
    elif isinstance(target, dict):
        if "kind" not in target:
            raise ValueError(f"target dict needs a 'kind' key (one of {_KNOWN_KINDS}), got {target!r}")
        if target["kind"] == "llvm" and "mcpu" in target:
            check_mcpu(target["mcpu"], target.get("mtriple"))
        if target["kind"] == "cuda":
            target = {**target, "arch": check_cuda_arch(target.get("arch") or _detected_cuda_arch())}
        try:
            t = Target(target)
        except Exception as err:  # TVM raises several error types
            raise ValueError(f"malformed target {target!r}: {err}") from None
    elif isinstance(target, str):
        if target.strip() not in _KNOWN_KINDS:
            raise ValueError(
                f"target string {target!r} is not supported: pass ext.target.cpu(), "
                f"ext.target.cuda(arch=...), or a dict like {{'kind': 'llvm', 'mcpu': 'znver4'}}")
        t = cpu() if target.strip() == "llvm" else cuda()
    else:
        raise ValueError(f"target must be a tvm Target, a dict or 'llvm'/'cuda', got {type(target).__name__}")
    if t.kind.name not in _KNOWN_KINDS:
        raise ValueError(f"target kind {t.kind.name!r} is not supported by ext (known: {_KNOWN_KINDS})")
    if t.kind.name == "cuda" and not str(t.attrs.get("arch", "")):
        raise ValueError("CUDA target without an arch: pass ext.target.cuda(arch='sm_90') or add 'arch'")
    if t.kind.name == "llvm" and "mcpu" in t.attrs:
        check_mcpu(str(t.attrs["mcpu"]), str(t.attrs.get("mtriple", "")) or None)
    if t.kind.name == "llvm" and ("num-cores" not in t.attrs or "mcpu" not in t.attrs):
        # A bare llvm target would generate generic SSE2 code: fill in the host CPU.
        attrs = {k: v for k, v in dict(t.export()).items() if k not in ("tag", "keys", "host", "features")}
        attrs.setdefault("num-cores", usable_cores())
        attrs.setdefault("mcpu", tvm.target.codegen.llvm_get_system_cpu())
        t = Target(attrs)
    return t


@dataclasses.dataclass(frozen=True)
class CPUInfo:
    """What CPU schedules need to know about an LLVM target."""

    mcpu: str
    vector_bits: int  # 512 with AVX-512, 256 with AVX2, 128 otherwise
    cores: int
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024

    @property
    def lanes_f32(self) -> int:
        return self.vector_bits // 32

    @property
    def isa(self) -> str:
        return {512: "avx512", 256: "avx2"}.get(self.vector_bits, "sse")


def cpu_info(target: Target) -> CPUInfo:
    """ISA and core count of an LLVM target (from its mcpu; host flags as a hint)."""
    mcpu = str(target.attrs.get("mcpu", "")) or tvm.target.codegen.llvm_get_system_cpu()
    try:
        has = lambda feat: bool(tvm.target.codegen.llvm_cpu_has_features(feat, target))  # noqa: E731
        bits = 512 if has("avx512f") else 256 if has("avx2") else 128
    except Exception:  # unknown cpu name: fall back to the host's flags
        flags = _cpu_flags()
        bits = 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
    cores = int(target.attrs.get("num-cores", usable_cores()))
    return CPUInfo(mcpu=mcpu, vector_bits=bits, cores=cores)


def describe(target: Target) -> str:
    """One line naming the target, its ISA and thread count (for reports and logs)."""
    if target.kind.name == "llvm":
        info = cpu_info(target)
        return f"llvm mcpu={info.mcpu} isa={info.isa} cores={info.cores} threads={os.environ.get('TVM_NUM_THREADS', '?')}"
    return f"cuda arch={target.attrs.get('arch', '?')}"
