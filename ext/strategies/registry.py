"""The op-strategy registry: kernel candidates per op family and target kind.

A candidate is one table entry (see ``ext/strategies/matmul.py``): a stable
name ``<op>.<variant>``, the target kinds it serves, a named priority level, a
predicate that says why it declines a workload, a knob space, a heuristic
default config, and a builder returning a scheduled PrimFunc. Candidates that
need their inputs in another layout (packed weights) also return the PrimFuncs
that transform those inputs; the pipeline folds them at compile time when the
input is a constant.

Selection order (``select.py``): candidates that apply -> tuning log -> cost
model -> among those that suit the shape, the lowest declared estimate when all
declare one, else the highest ``plevel`` -> table order.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable

from tvm.target import Target

from ..target import get_target_kind, known_kinds, target_kind
from ..workload import Workload
from ._symbolic import undeclared


class PLEVEL:
    """Named priority levels (higher wins when nothing measured says otherwise)."""

    #: correct for every shape it accepts, no blocking: small problems, odd dtypes
    DIRECT = 5
    #: a family's general high-performance kernel (blocked/packed/tiled)
    BLOCKED = 10
    #: a kernel specialised to a shape class it accepts only where it wins (GEMV, Winograd)
    SPECIALIZED = 15
    #: vendor libraries: strong by default but measured against ours when tuned
    LIBRARY = 12


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a candidate takes a workload; falsy with the reason when it declines."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


YES = Verdict(True)


def no(reason: str) -> Verdict:
    return Verdict(False, reason)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One kernel candidate.

    Parameters
    ----------
    name : ``"<op>.<variant>"``, stable across registry, logs, reports and tests.
    targets : target kinds served (``"llvm"``, ``"cuda"``: rows of the table in ``ext.target``).
    plevel : a ``PLEVEL`` constant.
    check : ``(workload, target) -> None`` when it can run the workload, else the reason.
    config : the knob dataclass (named fields, JSON-able values).
    space : ``(workload, target) -> list[config]``, the knob space.
    default : ``(workload, target) -> config``, the heuristic default.
    build : ``(workload, config, target) -> PrimFunc`` taking the (transformed)
        inputs in call order and writing the output, or a ``PackedCall`` (a
        library candidate: a packed function, then an epilogue kernel of ours).
    transforms : ``(workload, config, target) -> {input index: PrimFunc}``,
        input layout changes (e.g. weight packing) done before ``build``'s kernel.
    suits : ``(workload, target) -> None | reason``: a heuristic "not the best
        choice here" about this kernel alone (never a sibling) that selection
        respects but tuning ignores.
    estimate : ``(workload, target) -> seconds | None``, the family's declared
        preference: when every candidate that suits a workload has an estimate,
        the lowest wins (else the plevel rule); see ``conv2d_cost.py``.
    version : bump when the kernel changes so old tuning records go stale.
    """

    name: str
    targets: tuple
    plevel: int
    check: Callable[[Workload, Target], str | None]
    config: type
    space: Callable[[Workload, Target], list]
    default: Callable[[Workload, Target], Any]
    build: Callable[[Workload, Any, Target], Any]
    transforms: Callable[[Workload, Any, Target], dict] | None = None
    suits: Callable[[Workload, Target], str | None] | None = None
    estimate: Callable[[Workload, Target], float | None] | None = None
    version: int = 1
    #: runs only inside this Python process (a packed function registered from Python)
    needs_python: bool = False
    #: the vendor library it calls (``"openblas"``, ``"onednn"``, ``"cublas"``...), None for our kernels;
    #: ``Selector(libraries=False)`` turns every candidate with a library off
    library: str | None = None
    #: knobs added after tuning records were written without them: such a record gets the config
    #: class's default for the knob (the kernel's behaviour before the knob existed); any other
    #: missing knob makes a record invalid. A config class shared by many candidates declares its
    #: own (an ``added_knobs`` class attribute), which count for each of them
    added_knobs: tuple = ()
    #: roles of the dimensions this kernel may take symbolic (``("rows",)``: M of a GEMM left to run
    #: time; ``_symbolic.py`` names each family's roles); empty: static shapes only. ``applies``
    #: declines a workload with a symbolic dimension in any other role, naming it
    dynamic: tuple = ()
    #: transforms whole input tiles (Winograd, FFT): a NaN or infinite input element reaches every
    #: output of its tiles, not only its receptive field's; ``Selector(exact_specials=True)``
    #: turns such candidates off
    tile_transform: bool = False

    @property
    def op(self) -> str:
        return self.name.split(".", 1)[0]

    def applies(self, wl: Workload, target: Target) -> Verdict:
        kind = target_kind(target)
        if not kind.serves(self.targets):
            return no(f"serves {'/'.join(self.targets)}, not {kind.name}")
        if wl.op != self.op:
            return no(f"is a {self.op} kernel, not {wl.op}")
        if not wl.is_static:
            reason = undeclared(wl, self.dynamic)
            if reason:
                return no(reason)
        reason = self.check(wl, target)
        return no(reason) if reason else YES

    def suited(self, wl: Workload, target: Target) -> Verdict:
        reason = self.suits(wl, target) if self.suits else None
        return no(reason) if reason else YES

    def estimated(self, wl: Workload, target: Target) -> float | None:
        """Estimated seconds on ``wl`` (None: this candidate declares no estimate)."""
        return self.estimate(wl, target) if self.estimate else None

    def default_config(self, wl: Workload, target: Target):
        return self.default(wl, target)

    def input_transforms(self, wl: Workload, config, target: Target) -> dict:
        return self.transforms(wl, config, target) if self.transforms else {}

    def build_all(self, wl: Workload, config, target: Target) -> tuple:
        """``(kernel, {input index: transform})`` built under ``target``: the computes read the
        target being built for (``topi_kernels.elemwise.reciprocal``)."""
        with target:
            return self.build(wl, config, target), self.input_transforms(wl, config, target)

    def config_from_dict(self, data: dict):
        try:
            return self.config(**data)
        except TypeError as err:
            raise ValueError(f"{self.name}: bad config {data!r}: {err}") from None

    def space_points(self, wl: Workload, target: Target) -> list[dict]:
        """The default config, then every config of the knob space, as dicts (no duplicates)."""
        out, seen = [], set()
        for cfg in [self.default_config(wl, target)] + list(self.space(wl, target) or []):
            d = config_to_dict(cfg)
            key = _canonical(d)
            if key not in seen:
                seen.add(key)
                out.append(d)
        return out

    def config_problem(self, data, wl: Workload, target: Target, points: list[dict] | None = None) -> str | None:
        """Why ``data`` (e.g. a tuning record's config) is not a point of this candidate's knob space
        for ``wl`` on ``target``; None when it is. ``points``: ``space_points(wl, target)`` if known."""
        if not isinstance(data, dict):
            return f"config is a {type(data).__name__}, not a JSON object"
        if points is None:
            verdict = self.applies(wl, target)
            if not verdict:
                return f"{self.name} does not apply to the workload ({verdict.reason})"
            try:
                points = self.space_points(wl, target)
            except Exception as err:  # noqa: BLE001 - a broken space is a reason, not a crash
                return f"{self.name}: knob space raised {type(err).__name__}: {err}"
        return knob_problem(self.name, data, points, self._with_added_knobs(data))

    def _with_added_knobs(self, data: dict) -> dict:
        """``data`` plus the config class's defaults of the ``added_knobs`` it lacks."""
        added = self.added_knobs + tuple(getattr(self.config, "added_knobs", ()))
        missing = [k for k in added if k not in data]
        if not missing:
            return data
        try:
            full = config_to_dict(self.config(**data))
        except (TypeError, ValueError):
            return data
        return dict(data, **{k: full[k] for k in missing if k in full})


@dataclasses.dataclass(frozen=True)
class PackedCall:
    """What a library candidate's ``build`` returns instead of a PrimFunc.

    ``LowerToCandidates`` emits ``relax.call_dps_packed(func_name, inputs[:num_inputs]
    + static_args, TensorType(out_shape, out_dtype))``; when ``epilogue`` is a PrimFunc
    ``(anchor_out, *inputs[num_inputs:], D)`` it is applied after, by ``call_tir``
    (left unscheduled: the pipeline's fusion and fallback schedule handle it).

    func_name : global packed function ``(*inputs, *static_args, out) -> None``.
    num_inputs : how many of the workload's inputs the library call takes.
    out_shape, out_dtype : the library call's output (the anchor's result).
    static_args : ints / floats / strings passed after the inputs (strides, flags).
    epilogue : PrimFunc or None.
    """

    func_name: str
    num_inputs: int
    out_shape: tuple
    out_dtype: str
    static_args: tuple = ()
    epilogue: Any = None


def config_to_dict(config) -> dict:
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config or {})


def _canonical(value) -> str:
    """One string per JSON value: ``4``, ``4.0``, ``"4"`` and ``true`` all differ (tuples are lists)."""
    return json.dumps(value, sort_keys=True)


def _json_type(value) -> str:
    """The JSON type name of a knob value (a tuple in a config is a list in a record)."""
    return "list" if isinstance(value, (list, tuple)) else type(value).__name__


def _shown(values: list[str], limit: int = 12) -> str:
    text = ", ".join(values[:limit])
    return text + (f", ... ({len(values)} values)" if len(values) > limit else "")


def knob_problem(name: str, data: dict, points: list[dict], filled: dict | None = None) -> str | None:
    """Why config ``data`` is none of ``points`` (dicts), naming the knob; None when it is one.

    ``filled``: ``data`` completed with defaults of knobs added later (see ``Candidate.added_knobs``).
    """
    filled = data if filled is None else filled
    canon = {_canonical(p) for p in points}
    if _canonical(filled) in canon:
        return None
    if not points:
        return f"{name} has an empty knob space for this workload"
    knobs = sorted(set().union(*(p.keys() for p in points)))
    unknown = sorted(set(filled) - set(knobs))
    if unknown:
        return f"unknown knob(s) {unknown} for {name} (knobs: {knobs})"
    shapes = [set(p) for p in points]
    if set(filled) not in shapes:  # the closest set of knobs (some candidates mix config classes)
        best = max(shapes, key=lambda s: (len(s & set(filled)), -len(s)))
        return f"missing knob(s) {sorted(best - set(filled))} for {name}"
    for knob in sorted(filled):
        values = [p[knob] for p in points if knob in p]
        allowed = list(dict.fromkeys(_canonical(v) for v in values))
        value = filled[knob]
        types = sorted({_json_type(v) for v in values})
        if _json_type(value) not in types:
            return f"knob {knob}={_canonical(value)} has type {_json_type(value)}, expected {'/'.join(types)}"
        if _canonical(value) not in allowed:
            return f"knob {knob}={_canonical(value)} is not in the space of {name} (values: {_shown(allowed)})"
    return f"config {_canonical(filled)} is not in the knob space of {name} for this workload (each value occurs, " \
           "not this combination)"


class Registry:
    """Candidates by name, in registration order (ties in plevel go to the earlier)."""

    def __init__(self):
        self._by_name: dict[str, Candidate] = {}

    def register(self, cand: Candidate) -> Candidate:
        if "." not in cand.name:
            raise ValueError(f"candidate name {cand.name!r} must be '<op>.<variant>'")
        if cand.name in self._by_name:
            raise ValueError(f"candidate {cand.name!r} is already registered")
        unknown = [k for k in cand.targets if k not in known_kinds()]
        if unknown or not cand.targets:
            raise ValueError(f"candidate {cand.name!r}: unknown target kinds {unknown or cand.targets}; "
                             f"known: {known_kinds()}")
        if not isinstance(cand.plevel, int):
            raise ValueError(f"candidate {cand.name!r}: plevel must be a PLEVEL constant")
        self._by_name[cand.name] = cand
        return cand

    def unregister(self, name: str) -> None:
        self._by_name.pop(name, None)

    def get(self, name: str) -> Candidate:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no candidate named {name!r}; known: {sorted(self._by_name)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def for_op(self, op: str, kind: str | Target | None = None) -> list[Candidate]:
        """Candidates of ``op`` (serving ``kind``: a kind name or a Target, whose table row may
        also use other kinds' candidates), in registration order."""
        if kind is None:
            return [c for c in self._by_name.values() if c.op == op]
        row = target_kind(kind) if isinstance(kind, Target) else get_target_kind(kind)
        return [c for c in self._by_name.values() if c.op == op and row.serves(c.targets)]

    def ops(self) -> set[str]:
        return {c.op for c in self._by_name.values()}

    def __iter__(self) -> Iterable[Candidate]:
        return iter(list(self._by_name.values()))


REGISTRY = Registry()


def register(cand: Candidate) -> Candidate:
    """Add ``cand`` to the global registry (duplicates and unknown targets raise)."""
    return REGISTRY.register(cand)


def candidates(wl: Workload, target, registry: Registry = REGISTRY) -> list[tuple[Candidate, Verdict]]:
    """Every candidate of ``wl``'s op family with whether it applies on ``target``."""
    from ..target import normalize

    target = normalize(target)
    return [(c, c.applies(wl, target)) for c in registry.for_op(wl.op)]
