"""Targets: detect the host CPU, describe a CUDA device, validate user input.

Targets are always ``tvm.target.Target`` objects built from dicts (TVM 0.27
rejects CLI strings, and a bare dict crashes ``relax.build``).

The host CPU's description (``CPUInfo``, ``cpu_info``, cores and TVM's thread
count) is ``ext/host_cpu.py``; its names are importable from here too. Export
``TVM_NUM_THREADS=N`` before importing ``ext`` to choose the thread count.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import re
from typing import Any, Callable

import tvm
from tvm.target import Target

from . import tir_lowering
# the host CPU's description lives in its own module; these names stay importable from here
from .host_cpu import CPUInfo, configure_threads, cpu_info, host_llvm_cpu, usable_cores  # noqa: F401

def cpu(mcpu: str | None = None, num_cores: int | None = None) -> Target:
    """The host CPU as an LLVM target.

    Parameters
    ----------
    mcpu : LLVM CPU name; the host's when None (LLVM's name, e.g. ``"znver4"``, with ``mattr``
        turning off the extensions a hypervisor hides from this machine).
    num_cores : cores kernels may use; the usable core count when None.

    Example
    -------
    >>> import ext
    >>> ext.target.cpu().kind.name
    'llvm'
    """
    cpu_attrs = {"mcpu": mcpu} if mcpu else host_llvm_cpu()
    return normalize({"kind": "llvm", **cpu_attrs, "num-cores": num_cores or usable_cores()})


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
            raise ValueError(f"target dict needs a 'kind' key (one of {known_kinds()}), got {target!r}")
        base = _base_row(str(target["kind"]))
        if base is not None:
            target = base.prepare(target)
        try:
            t = Target(target)
        except Exception as err:  # TVM raises several error types
            raise ValueError(f"malformed target {target!r}: {err}") from None
    elif isinstance(target, str):
        row = _KINDS.get(target.strip())
        if row is None:
            raise ValueError(
                f"target string {target!r} is not supported: pass ext.target.cpu(), "
                f"ext.target.cuda(arch=...), or a dict like {{'kind': 'llvm', 'mcpu': 'znver4'}}")
        t = row.default()
    else:
        raise ValueError(f"target must be a tvm Target, a dict or one of {known_kinds()}, got {type(target).__name__}")
    return target_kind(t).check(t)


def _check_llvm(t: Target) -> Target:
    if "mcpu" in t.attrs:
        check_mcpu(str(t.attrs["mcpu"]), str(t.attrs.get("mtriple", "")) or None)
    if "num-cores" not in t.attrs or "mcpu" not in t.attrs:
        # A bare llvm target would generate generic SSE2 code: fill in the host CPU.
        attrs = {k: v for k, v in dict(t.export()).items() if k not in ("tag", "keys", "host", "features")}
        if [str(k) for k in t.keys] != ["cpu"]:  # keys a table row may match on survive
            attrs["keys"] = [str(k) for k in t.keys]
        attrs.setdefault("num-cores", usable_cores())
        if "mcpu" not in attrs:
            attrs.update(host_llvm_cpu())
        t = Target(attrs)
    return t


def _prepare_llvm(d: dict) -> dict:
    if "mcpu" in d:
        check_mcpu(d["mcpu"], d.get("mtriple"))
    return d


def _check_cuda(t: Target) -> Target:
    if not str(t.attrs.get("arch", "")):
        raise ValueError("CUDA target without an arch: pass ext.target.cuda(arch='sm_90') or add 'arch'")
    return t


def _prepare_cuda(d: dict) -> dict:
    return {**d, "arch": check_cuda_arch(d.get("arch") or _detected_cuda_arch())}


def describe(target: Target) -> str:
    """One line naming the target, its ISA and thread count (for reports and logs)."""
    return target_kind(target).describe(target)


# -- the target-kind table -------------------------------------------------------------------
# Everything ext does differently per kind of target lives in one row, so a new kind (an NPU,
# a simulator) is one ``register_target_kind`` call plus its own files, and no layer branches
# on ``target.kind.name``. Rows name their schedule and backend modules as strings: this
# module is imported by the schedules, so it must not import them.


def _same(x):
    return x


@dataclasses.dataclass(frozen=True)
class TargetKind:
    """One kind of target ext compiles for.

    name : the kind's name in candidate tables (``Candidate.targets``), tuning logs and reports.
    tvm_kind : the TVM target kind its Targets carry (``"llvm"``, ``"cuda"``).
    device : ``(index) -> tvm Device`` the compiled code runs on.
    backend : module of TVM's backend pipeline (``library_dispatch_passes``, ``legalize_passes``...).
    fallback_schedule : ``"module:function"``; ``function(target)`` returns the pass that
        schedules every PrimFunc no candidate scheduled.
    provenance : ``(target) -> dict`` of the fields a tuning record must match (see
        ``provenance_fields``), kind excluded.
    cost_features : ``(target) -> dict`` with ``lanes, cores, l1, l2, regs`` for the cost model.
    describe : ``(target) -> str``, one line for reports and logs.
    default : ``() -> Target`` that the bare kind name (``normalize("llvm")``) means.
    check : ``(Target) -> Target`` validates (ValueError) and completes a Target of this kind.
    prepare : ``(dict) -> dict`` checks a target dict of this TVM kind before TVM parses it.
    match : ``(Target) -> bool``; None: every Target of ``tvm_kind``. Rows registered later
        are asked first, so a row matching a subset (a key, an attribute) overrides its base.
    cpu : its kernels run on the host CPU (CPU layout policy, polynomial math, in-place calls).
    uses : other kinds whose candidates also serve this one.
    tir_pipeline : the named TIR pipeline its kernels compile with (``ext.tir_lowering``).
    """

    name: str
    tvm_kind: str
    device: Callable[[int], Any]
    backend: str
    fallback_schedule: str
    provenance: Callable[[Target], dict]
    cost_features: Callable[[Target], dict]
    describe: Callable[[Target], str]
    default: Callable[[], Target]
    check: Callable[[Target], Target] = _same
    prepare: Callable[[dict], dict] = _same
    match: Callable[[Target], bool] | None = None
    cpu: bool = False
    provenance_fields: tuple = ()
    uses: tuple = ()
    tir_pipeline: str = "default"

    def matches(self, target: Target) -> bool:
        if target.kind.name != self.tvm_kind:
            return False
        return True if self.match is None else bool(self.match(target))

    @property
    def candidate_kinds(self) -> tuple:
        """Kind names whose candidates serve this kind (its own first)."""
        return (self.name,) + tuple(self.uses)

    def serves(self, kinds) -> bool:
        """Whether a candidate serving ``kinds`` runs on this kind."""
        return any(k in kinds for k in self.candidate_kinds)

    def backend_module(self):
        return importlib.import_module(self.backend)

    def fallback_pass(self, target: Target):
        module, func = self.fallback_schedule.split(":")
        return getattr(importlib.import_module(module), func)(target)


_KINDS: dict[str, TargetKind] = {}


def register_target_kind(kind: TargetKind) -> TargetKind:
    """Add a row to the target-kind table (a duplicate name raises ValueError)."""
    if not isinstance(kind, TargetKind):
        raise ValueError(f"register_target_kind takes a TargetKind, got {type(kind).__name__}")
    if kind.name in _KINDS:
        raise ValueError(f"target kind {kind.name!r} is already registered")
    unknown = [k for k in kind.uses if k not in _KINDS]
    if unknown:
        raise ValueError(f"target kind {kind.name!r} uses unknown kinds {unknown} (known: {known_kinds()})")
    _KINDS[kind.name] = kind
    return kind


def unregister_target_kind(name: str) -> None:
    """Remove a row (tests registering a kind of their own clean up with this)."""
    _KINDS.pop(name, None)


def known_kinds() -> tuple:
    """Names of the registered target kinds, in registration order."""
    return tuple(_KINDS)


def get_target_kind(name: str) -> TargetKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown target kind {name!r} (known: {known_kinds()})") from None


def target_kind(target: Target) -> TargetKind:
    """The table row of ``target`` (rows registered later are asked first); ValueError if none."""
    for row in reversed(list(_KINDS.values())):
        if row.matches(target):
            return row
    raise ValueError(f"target kind {target.kind.name!r} is not supported by ext (known: {known_kinds()})")


def compile_tir(mod, target: Target):
    """``tvm.compile`` of PrimFuncs for ``target`` with its kind's TIR pipeline (the tuner's
    measurements compile kernels as the model's build does)."""
    return tvm.compile(mod, target=target, tir_pipeline=target_kind(target).tir_pipeline)


def _base_row(tvm_kind: str) -> TargetKind | None:
    """The first row registered for a TVM kind (it checks dicts of that kind)."""
    return next((r for r in _KINDS.values() if r.tvm_kind == tvm_kind and r.match is None), None)


def llvm_provenance(target: Target) -> dict:
    ci = cpu_info(target)
    return {"mcpu": ci.mcpu, "isa": ci.isa, "cores": ci.cores}


def llvm_cost_features(target: Target) -> dict:
    ci = cpu_info(target)
    return {"lanes": ci.lanes_f32, "cores": ci.cores, "l1": ci.l1_bytes, "l2": ci.l2_bytes,
            "regs": ci.vector_registers}


def llvm_describe(target: Target) -> str:
    info = cpu_info(target)
    return f"llvm mcpu={info.mcpu} isa={info.isa} cores={info.cores} threads={os.environ.get('TVM_NUM_THREADS', '?')}"


def _cuda_device(index: int = 0):
    return tvm.cuda(index)


def _cpu_device(index: int = 0):
    return tvm.cpu(index)


LLVM = register_target_kind(TargetKind(
    "llvm", "llvm", device=_cpu_device, backend="tvm.relax.backend.cpu_generic.pipeline",
    fallback_schedule="ext.tir_schedules.cpu.fallback:fallback_pass", provenance=llvm_provenance,
    cost_features=llvm_cost_features, describe=llvm_describe, default=lambda: cpu(), check=_check_llvm,
    prepare=_prepare_llvm, cpu=True, provenance_fields=("mcpu", "isa", "cores"), tir_pipeline=tir_lowering.TIR_PIPELINE))

CUDA = register_target_kind(TargetKind(
    "cuda", "cuda", device=_cuda_device, backend="tvm.relax.backend.cuda.pipeline",
    fallback_schedule="ext.tir_schedules.cuda.fallback:fallback_pass",
    provenance=lambda t: {"arch": str(t.attrs.get("arch", "")) or None},
    # an A100-class device (the model's features only need to be stable per kind)
    cost_features=lambda t: {"lanes": 32, "cores": 108, "l1": 228 * 1024, "l2": 40 * 2 ** 20, "regs": 255},
    describe=lambda t: f"cuda arch={t.attrs.get('arch', '?')}", default=lambda: cuda(), check=_check_cuda,
    prepare=_prepare_cuda, provenance_fields=("arch",)))


def provenance_fields() -> tuple:
    """Every registered kind's provenance fields, in table order (a tuning record's target has
    all of them; the ones of other kinds are None)."""
    return tuple(dict.fromkeys(f for row in _KINDS.values() for f in row.provenance_fields))


def npu(rows: int = 16, cols: int = 16, dataflow: str = "auto", **kwargs) -> Target:
    """A simulated systolic-array NPU with this CPU as host (see ``ext.npu.target.npu``)."""
    from .npu.target import npu as _npu

    return _npu(rows, cols, dataflow, **kwargs)


from .npu import target as _npu_target  # noqa: E402  (the npu row; imports this module's names)

_npu_target.register()
