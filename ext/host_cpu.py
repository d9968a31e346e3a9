"""The host CPU as ext's schedules see it: usable cores, TVM's thread count, and ``CPUInfo``
(vector width, registers, caches, peak rate) of an LLVM target.

Threads: TVM 0.27 starts its CPU pool with half the logical CPUs on x86 (one thread on a
2-core VM) unless ``TVM_NUM_THREADS`` is set before the first parallel call;
:func:`configure_threads` (run by ``import ext``) sets it to the usable core count unless the
user already set it.
"""
from __future__ import annotations

import dataclasses
import os

import tvm
from tvm.target import Target


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


#: LLVM feature -> /proc/cpuinfo flag for the instruction-set extensions an LLVM cpu name
#: implies and a hypervisor may hide from its guests (a Zen 4 VM without AVX-512 still reports
#: the family and model that LLVM names ``znver4``; its AVX-512 code then dies of SIGILL)
_HIDEABLE_FEATURES = {
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512cd": "avx512cd", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
    "avx512vbmi2": "avx512_vbmi2", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16", "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq",
    "avxvnni": "avx_vnni", "amx-tile": "amx_tile", "amx-bf16": "amx_bf16", "amx-int8": "amx_int8",
    "gfni": "gfni", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq", "sha": "sha_ni", "adx": "adx",
}


def host_llvm_cpu() -> dict:
    """``mcpu`` of the host as LLVM names it, plus ``mattr`` turning off each extension that
    name implies and the host's ``/proc/cpuinfo`` does not list (features hidden by a
    hypervisor). Without readable flags (not Linux, not x86) the name alone."""
    mcpu = str(tvm.target.codegen.llvm_get_system_cpu())
    flags = _cpu_flags()
    if not flags or "sse2" not in flags:
        return {"mcpu": mcpu}
    try:
        implied = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": mcpu}))}
    except Exception:  # a cpu name this LLVM cannot describe: leave it to LLVM
        return {"mcpu": mcpu}
    hidden = sorted(feat for feat, flag in _HIDEABLE_FEATURES.items() if feat in implied and flag not in flags)
    return {"mcpu": mcpu, "mattr": [f"-{feat}" for feat in hidden]} if hidden else {"mcpu": mcpu}


#: LLVM cpu names of cores with two 512-bit FMA units (``CPUInfo.two_fma512``)
TWO_FMA512_CPUS = frozenset({"skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "sapphirerapids",
                             "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"})


@dataclasses.dataclass(frozen=True)
class CPUInfo:
    """What CPU schedules need to know about an LLVM target."""

    mcpu: str
    vector_bits: int  # 512 with AVX-512, 256 with AVX2, 128 otherwise
    cores: int
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024
    #: clock x full-width vector FMAs per cycle (server Xeons and Zen 5: two 512-bit FMA units),
    #: set so that ``peak_flops`` is a little above what the best kernel reached on this VM's
    #: Xeon: 141 GFLOP/s on one core (``conv2d.conv1x1``, 64->256 at 56x56); only ratios of
    #: estimates matter (``strategies/conv2d_cost.py``)
    ghz: float = 2.5
    fma_per_cycle: int = 2
    #: DRAM bandwidth the cores share (a NumPy copy of 256 MiB moved 20-25 GB/s here)
    dram_bytes_per_s: float = 25e9
    #: what a kernel streams a tensor that fits in L3 at (fitted to the 1x1 convs' pack/unpack cost)
    stream_bytes_per_s: float = 50e9

    @property
    def lanes_f32(self) -> int:
        return self.vector_bits // 32

    @property
    def peak_flops(self) -> float:
        """float32 flops per second of all cores at full FMA issue (an FMA counts 2)."""
        return 2.0 * self.lanes_f32 * self.fma_per_cycle * self.ghz * 1e9 * self.cores

    @property
    def isa(self) -> str:
        return {512: "avx512", 256: "avx2"}.get(self.vector_bits, "sse")

    @property
    def two_fma512(self) -> bool:
        """Two full-width 512-bit FMA units per core: the AVX-512 server Xeons (LLVM cpu names
        below). A register tile then needs more accumulators per loaded B vector than where
        one unit issues a zmm FMA per cycle (Zen 4 runs a zmm FMA as two 256-bit halves);
        Zen 5 and client parts keep the one-unit tiles, the ones measured there."""
        return self.vector_bits == 512 and self.mcpu in TWO_FMA512_CPUS

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 zmm with AVX-512, 16 ymm/xmm otherwise."""
        return 32 if self.vector_bits == 512 else 16

    @property
    def accumulators(self) -> int:
        """Vector registers a register-tiled kernel may hold accumulators in: all but 4, which
        stay free for the broadcast input and the weight vectors of the inner loop (28 with
        AVX-512, 12 with AVX2)."""
        return self.vector_registers - 4


def cpu_info(target: Target) -> CPUInfo:
    """ISA and core count of an LLVM target (from its mcpu; host flags as a hint)."""
    if "mcpu" not in target.attrs:
        target = Target({**{k: v for k, v in dict(target.export()).items() if k in ("kind", "num-cores", "mtriple")},
                         **host_llvm_cpu()})
    mcpu = str(target.attrs["mcpu"])
    try:
        has = lambda feat: bool(tvm.target.codegen.llvm_cpu_has_features(feat, target))  # noqa: E731
        bits = 512 if has("avx512f") else 256 if has("avx2") else 128
    except Exception:  # unknown cpu name: fall back to the host's flags
        flags = _cpu_flags()
        bits = 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
    cores = int(target.attrs.get("num-cores", usable_cores()))
    return CPUInfo(mcpu=mcpu, vector_bits=bits, cores=cores)
