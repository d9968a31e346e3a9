"""The ``npu`` row of the target-kind table: a simulated systolic array next to the host CPU.

An NPU target is an LLVM target (host code, and every op the array cannot run, is
compiled for this CPU by ext's ``llvm`` candidates) with the key ``"npu"`` and the array
configuration in the string attribute ``model`` that TVM's llvm kind accepts and ignores
in code generation, e.g. ``npu:r16:c16:auto:spad256:acc64:bw32:mhz1000``. The row matches
on the key, so ``target_kind`` finds it before the plain ``llvm`` row; kernels for the array
are candidates with ``targets=("npu",)`` (``ext/strategies/npu.py``).

The array configuration is part of the tuning log's provenance (field ``npu``): records
measured for a 16x16 array never steer a build for a 32x32 one.
"""
from __future__ import annotations

import dataclasses
import re

import tvm
from tvm.target import Target

DATAFLOWS = ("ws", "os")
_MODEL = re.compile(r"npu:r(\d+):c(\d+):(auto|ws|os):spad(\d+):acc(\d+):bw(\d+):mhz(\d+)")


@dataclasses.dataclass(frozen=True)
class ArrayConfig:
    """A systolic array of ``rows x cols`` float32 MACs with its on-chip memories.

    rows, cols : processing elements (rows take the reduction axis in ws, output rows in os).
    dataflow : ``"ws"`` (weight-stationary), ``"os"`` (output-stationary) or ``"auto"``
        (the kernels choose per layer, fewest simulated cycles).
    spad_kib : scratchpad for inputs and weights (KiB, float32 words, half of it per buffer:
        double buffering).
    acc_kib : accumulator memory for partial sums (KiB, float32).
    bandwidth : DRAM <-> scratchpad bytes per cycle.
    mhz : clock, to convert simulated cycles into seconds (tuning logs and decisions keep seconds).
    """

    rows: int = 16
    cols: int = 16
    dataflow: str = "auto"
    spad_kib: int = 256
    acc_kib: int = 64
    bandwidth: int = 32
    mhz: int = 1000

    def __post_init__(self):
        for name in ("rows", "cols", "spad_kib", "acc_kib", "bandwidth", "mhz"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"npu {name} must be a positive integer, got {value!r}")
        if self.rows > 1024 or self.cols > 1024:
            raise ValueError(f"npu array {self.rows}x{self.cols} is larger than the 1024x1024 the simulator models")
        if self.dataflow not in DATAFLOWS + ("auto",):
            raise ValueError(f"npu dataflow must be one of {DATAFLOWS + ('auto',)}, got {self.dataflow!r}")
        if self.spad_words < 2 * (self.rows * self.rows + self.rows * self.cols):
            raise ValueError(f"npu scratchpad of {self.spad_kib} KiB cannot double-buffer one "
                             f"{self.rows}x{self.cols} tile of each operand")
        if self.acc_words < self.rows * self.cols:
            raise ValueError(f"npu accumulator of {self.acc_kib} KiB cannot hold one {self.rows}x{self.cols} tile")

    @property
    def spad_words(self) -> int:
        return self.spad_kib * 1024 // 4

    @property
    def acc_words(self) -> int:
        return self.acc_kib * 1024 // 4

    @property
    def dataflows(self) -> tuple:
        """The dataflows kernels may use on this array."""
        return DATAFLOWS if self.dataflow == "auto" else (self.dataflow,)

    def seconds(self, cycles: float) -> float:
        return float(cycles) / (self.mhz * 1e6)

    def model(self) -> str:
        """The string stored in the target's ``model`` attribute (parsed back by :func:`parse`)."""
        return (f"npu:r{self.rows}:c{self.cols}:{self.dataflow}:spad{self.spad_kib}:acc{self.acc_kib}"
                f":bw{self.bandwidth}:mhz{self.mhz}")

    def __str__(self) -> str:
        return (f"{self.rows}x{self.cols} {self.dataflow} spad={self.spad_kib}KiB acc={self.acc_kib}KiB "
                f"bw={self.bandwidth}B/cycle {self.mhz}MHz")


def parse(model: str) -> ArrayConfig:
    """The ``ArrayConfig`` of a ``model`` string; ValueError naming the problem."""
    m = _MODEL.fullmatch(str(model))
    if m is None:
        raise ValueError(f"npu target model {model!r} is not 'npu:r<rows>:c<cols>:<auto|ws|os>:spad<KiB>"
                         ":acc<KiB>:bw<bytes/cycle>:mhz<MHz>' (build it with ext.target.npu(...))")
    r, c, df, spad, acc, bw, mhz = m.groups()
    return ArrayConfig(int(r), int(c), df, int(spad), int(acc), int(bw), int(mhz))


def is_npu(target: Target) -> bool:
    return "npu" in [str(k) for k in target.keys]


def array_config(target: Target) -> ArrayConfig:
    """The array of an npu target (ValueError for any other target)."""
    if not is_npu(target):
        raise ValueError(f"target {target} is not an npu target (build one with ext.target.npu(...))")
    return parse(str(target.attrs.get("model", "")))


def npu(rows: int = 16, cols: int = 16, dataflow: str = "auto", spad_kib: int = 256, acc_kib: int = 64,
        bandwidth: int = 32, mhz: int = 1000, mcpu: str | None = None, num_cores: int | None = None) -> Target:
    """A simulated ``rows x cols`` systolic array (float32) with the host CPU as an LLVM target.

    Matmuls and convolutions run on the array simulator (``ext.npu.sim``) with exact float32
    results and counted cycles; everything else runs on the host with ext's CPU kernels.
    Defaults follow Gemmini's (16x16, 256 KiB scratchpad, 64 KiB accumulator). A bad
    configuration raises ValueError naming the problem.
    """
    from ..target import host_llvm_cpu, normalize, usable_cores

    cfg = ArrayConfig(rows, cols, dataflow, spad_kib, acc_kib, bandwidth, mhz)
    return normalize({"kind": "llvm", "keys": ["npu", "cpu"], "model": cfg.model(),
                      **({"mcpu": mcpu} if mcpu else host_llvm_cpu()),
                      "num-cores": num_cores or usable_cores()})


def _check(t: Target) -> Target:
    from ..target import _check_llvm

    array_config(t)  # a malformed model string is a ValueError here, not a wrong simulation later
    return _check_llvm(t)


def _provenance(t: Target) -> dict:
    from ..target import llvm_provenance

    return {**llvm_provenance(t), "npu": array_config(t).model()}


def _describe(t: Target) -> str:
    from ..target import llvm_describe

    return f"npu {array_config(t)}; host {llvm_describe(t)}"


def register() -> None:
    """Add the ``npu`` row (``ext.target`` calls this once on import)."""
    from .. import target as tg

    if "npu" in tg.known_kinds():
        return
    tg.register_target_kind(tg.TargetKind(
        "npu", "llvm", device=tg._cpu_device, backend="tvm.relax.backend.cpu_generic.pipeline",
        fallback_schedule="ext.tir_schedules.cpu.fallback:fallback_pass", provenance=_provenance,
        cost_features=tg.llvm_cost_features, describe=_describe, default=lambda: npu(), check=_check,
        prepare=tg._prepare_llvm, match=is_npu, cpu=True, provenance_fields=("npu",), uses=("llvm",)))
