"""The tuning log: append-only JSONL, one record per measurement.

A record (one line, one JSON object)::

    {"schema": 1, "workload": "<Workload.key>", "workload_json": {...},
     "target": {"kind": "llvm", "mcpu": "znver4", "isa": "avx512", "cores": 2, "arch": null, ...},
     "candidate": "matmul.packed", "candidate_version": 1, "config": {"mb": 4, "nb": 64, ...},
     "status": "ok" | "wrong" | "failed" | "timeout" | "infra" | "dropped",
     "seconds": 0.0095 | null, "times": [...], "max_error": 1.2e-5 | null, "error": null | "...",
     "tvm_version": "0.27.0.post1", "ext_version": "0.1.0", "timestamp": "2026-...Z",
     "device": "local" | "rpc:<key>", "measure": {"number": .., "repeat": ..}}

``status``: ``ok`` (checked against the reference, time counts), ``wrong``
(output differs from the reference: never chosen), ``failed`` (build or run
raised, or the worker crashed), ``timeout`` (exceeded the time limit),
``infra`` (the measuring machinery failed, e.g. an RPC server died: not the
candidate's fault, so resuming measures the point again), ``dropped`` (not a
measurement: the end-to-end check (``e2e.py``) found that this point, chosen
for its workload, made the whole model slower in place; ``error`` says why, and
the ``History`` never picks a dropped point, so builds fall back to the
workload's untuned choice).

Every record is written with one ``write`` call, flushed and fsynced, so a
killed tuner loses at most the record being written; a torn last line is
reported as malformed (with its line number) and skipped, and the next append
starts on a fresh line. Records are never rewritten or deleted.

Provenance: a record is *valid* for a target when its target fields
(the kind and its row's ``provenance_fields`` in ``ext.target``), the TVM and ext versions and the candidate's version
match the current ones. Others are *stale*: they are counted per reason and
reported, never used and never dropped from the file.

Trust: a record's config is only ever used when it is a point of its
candidate's knob space for its workload (``Candidate.config_problem``): a
hand-edited or corrupted ``mb=100000`` would otherwise be built as the "best
record" (and could exhaust memory). Records of unknown candidates, with
unknown or missing knobs, values outside the space or of the wrong type are
*invalid*: skipped with a warning naming the line and the reason, and counted
(the count reaches ``TuneSummary`` and the build's ``SelectionReport``).

Sharing: several tuners may append to one log. ``TuningLog`` remembers how far
it has read (complete lines only), so ``split_new`` returns just the records
other processes appended since; the tuner re-reads before every measurement
and skips points measured meanwhile. ``check_writable`` fails before the first
measurement, naming the path, when records could not be appended.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import warnings
from typing import Iterable

from ..workload import Workload
from .validity import Staleness, invalid_reason, stale_reason  # noqa: F401  (re-exported)

SCHEMA = 1
STATUSES = ("ok", "wrong", "failed", "timeout", "infra", "dropped")
#: statuses a resumed run does not measure again (``infra`` is not the candidate's fault)
FINAL_STATUSES = ("ok", "wrong", "failed", "timeout")
#: per-line warnings (malformed or invalid lines) per read before one summary warning for the rest
MAX_LINE_WARNINGS = 20


class TuningLogWarning(UserWarning):
    """Malformed lines, invalid and stale records in a tuning log."""


def target_info(target) -> dict:
    """Provenance fields of a target (JSON-able), e.g. kind, mcpu, isa, cores, arch, threads."""
    from ..target import provenance_fields, target_kind

    kind = target_kind(target)
    info = {"kind": kind.name, **{f: None for f in provenance_fields()},
            "threads": int(os.environ.get("TVM_NUM_THREADS", "0")) or None}
    info.update(kind.provenance(target))
    return info


def versions() -> dict:
    import tvm

    from .. import __version__ as ext_version

    return {"tvm_version": tvm.__version__, "ext_version": ext_version}


def point_key(wl_key: str, candidate: str, config: dict) -> tuple:
    """Identity of one measured point: (workload key, candidate name, canonical config JSON)."""
    return (wl_key, candidate, json.dumps(config, sort_keys=True))


@dataclasses.dataclass
class Record:
    """One measurement (see the module doc for the fields)."""

    workload: str
    workload_json: dict
    target: dict
    candidate: str
    candidate_version: int
    config: dict
    status: str
    seconds: float | None = None
    times: list = dataclasses.field(default_factory=list)
    max_error: float | None = None
    error: str | None = None
    tvm_version: str = ""
    ext_version: str = ""
    timestamp: str = ""
    device: str = "local"
    measure: dict = dataclasses.field(default_factory=dict)
    schema: int = SCHEMA
    line: int = 0  # line number in the file it was read from (not written)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"record status must be one of {STATUSES}, got {self.status!r}")
        if self.status == "ok" and (self.seconds is None or not self.seconds > 0):
            raise ValueError(f"an 'ok' record needs positive seconds, got {self.seconds!r}")

    @property
    def key(self) -> tuple:
        return point_key(self.workload, self.candidate, self.config)

    @property
    def wl(self) -> Workload:
        return Workload.from_json(self.workload_json)

    @property
    def gflops(self) -> float | None:
        if self.seconds is None:
            return None
        return self.wl.flops / self.seconds / 1e9

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("line")
        return out

    @classmethod
    def from_json(cls, data: dict, line: int = 0) -> "Record":
        if not isinstance(data, dict):
            raise ValueError(f"a record is a JSON object, got {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)} - {"line"}
        missing = [f for f in ("workload", "workload_json", "target", "candidate", "candidate_version",
                               "config", "status") if f not in data]
        if missing:
            raise ValueError(f"record lacks fields {missing}")
        rec = cls(**{k: v for k, v in data.items() if k in fields}, line=line)
        if not isinstance(rec.config, dict) or not isinstance(rec.target, dict):
            raise ValueError("record 'config' and 'target' must be JSON objects")
        if rec.wl.key != rec.workload:
            raise ValueError(f"workload key {rec.workload!r} does not match its workload_json")
        return rec


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_record(wl: Workload, target, cand, config: dict, result, device: str = "local",
                measure: dict | None = None) -> Record:
    """A record for one measurement ``result`` (a ``measure.Result``)."""
    return Record(workload=wl.key, workload_json=wl.to_json(), target=target_info(target),
                  candidate=cand.name, candidate_version=int(cand.version), config=config,
                  status=result.status, seconds=result.seconds, times=list(result.times),
                  max_error=result.max_error, error=result.error, device=device, measure=dict(measure or {}),
                  timestamp=_now(), **versions())


def make_dropped(rec: Record, reason: str) -> Record:
    """A ``dropped`` record for the measured point ``rec`` (same workload, candidate, config), ``reason`` why."""
    return dataclasses.replace(rec, status="dropped", error=str(reason), times=[], max_error=None, line=0,
                               timestamp=_now())


def dropped_keys(records: Iterable[Record]) -> set:
    """Point keys the end-to-end check dropped (never chosen again for their workload)."""
    return {r.key for r in records if r.status == "dropped"}


class TuningLog:
    """An append-only JSONL file of ``Record`` s.

    Parameters
    ----------
    path : the log file (created by ``check_writable`` or the first append; its directory must exist).

    ``malformed`` / ``invalid``: ``(line, why)`` of the lines skipped by the last read.

    Example
    -------
    >>> log = TuningLog("tune.jsonl")            # doctest: +SKIP
    >>> valid, stale = log.split(ext.target.cpu())  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.malformed: list[tuple[int, str]] = []
        self.invalid: list[tuple[int, str]] = []
        self._offset, self._lines = 0, 0  # end of the last complete line read, lines before it
        self._warned: set = set()  # (line, kind) already warned about
        self._spaces: dict = {}

    # -- reading ---------------------------------------------------------------
    def _read(self, start: int, first: int) -> tuple[list[Record], list[tuple[int, str]], int, int, str | None]:
        """Records of the complete lines after byte ``start`` (numbered from ``first + 1``), their
        malformed lines, the new offset and line count, and a trailing partial line's text."""
        out, bad = [], []
        if not os.path.exists(self.path):
            return out, bad, 0, 0, None
        with open(self.path, "rb") as f:
            f.seek(start)
            data = f.read()
        partial = data.rpartition(b"\n")[2]
        n = first
        for raw in data.split(b"\n")[:-1]:
            n += 1
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                out.append(Record.from_json(json.loads(text), line=n))
            except (ValueError, TypeError) as err:
                bad.append((n, str(err)[:200]))
        offset = start + len(data) - len(partial)
        tail = partial.decode("utf-8", errors="replace").strip() or None
        return out, bad, offset, n, tail

    def _warn_lines(self, kind: str, lines: list[tuple[int, str]], what: str) -> None:
        fresh = [(n, why) for n, why in lines if (n, kind) not in self._warned]
        for n, why in fresh[:MAX_LINE_WARNINGS]:
            warnings.warn(f"{self.path}:{n}: {what} ({why})", TuningLogWarning, stacklevel=3)
        if len(fresh) > MAX_LINE_WARNINGS:
            warnings.warn(f"{self.path}: {len(fresh) - MAX_LINE_WARNINGS} more {what.split(' ', 1)[0]} lines "
                          f"(lines {fresh[MAX_LINE_WARNINGS][0]}-{fresh[-1][0]})", TuningLogWarning, stacklevel=3)
        self._warned.update((n, kind) for n, _ in fresh)

    def records(self, warn: bool = True) -> list[Record]:
        """Every well-formed record in file order; malformed lines are skipped with a warning.

        A trailing line without its newline (a writer killed mid-line) counts as malformed.
        """
        out, self.malformed, self._offset, self._lines, tail = self._read(0, 0)
        if tail is not None:
            try:
                out.append(Record.from_json(json.loads(tail), line=self._lines + 1))
            except (ValueError, TypeError) as err:
                self.malformed.append((self._lines + 1, str(err)[:200]))
        if warn:
            self._warned = set()  # a full read reports everything again
            self._warn_lines("malformed", self.malformed, "malformed tuning record skipped")
        return out

    def new_records(self, warn: bool = True) -> list[Record]:
        """Records in complete lines appended since the last ``records`` / ``new_records`` (by any process)."""
        out, self.malformed, self._offset, self._lines, _ = self._read(self._offset, self._lines)
        if warn:
            self._warn_lines("malformed", self.malformed, "malformed tuning record skipped")
        return out

    def _classify(self, recs: list[Record], target, registry, warn: bool) -> tuple[list[Record], Staleness]:
        tf, vers = target_info(target), versions()
        valid, stale, self.invalid = [], Staleness(), []
        for rec in recs:
            why = stale_reason(rec, tf, vers, registry)
            if why is not None:
                stale.add(why)
                continue
            why = invalid_reason(rec, target, registry, self._spaces)
            if why is None:
                valid.append(rec)
            else:
                self.invalid.append((rec.line, why[:300]))
        if warn:
            self._warn_lines("invalid", self.invalid, "invalid tuning record skipped")
            if stale.total:
                warnings.warn(f"{self.path}: {stale.total} stale tuning records not used ({stale})",
                              TuningLogWarning, stacklevel=3)
        return valid, stale

    def split(self, target, registry=None, warn: bool = True) -> tuple[list[Record], Staleness]:
        """(records valid for ``target``, the current versions and their candidates' knob spaces,
        staleness counts); ``invalid`` then lists the records skipped as untrustworthy."""
        return self._classify(self.records(warn=warn), target, registry, warn)

    def split_new(self, target, registry=None, warn: bool = True) -> tuple[list[Record], Staleness]:
        """``split`` of the records appended since the last read (another tuner's, or ours)."""
        return self._classify(self.new_records(warn=warn), target, registry, warn)

    def measured(self, target, registry=None) -> set:
        """Point keys (``point_key``) that a resumed run must not measure again."""
        valid, _ = self.split(target, registry, warn=False)
        return {r.key for r in valid if r.status in FINAL_STATUSES}

    def history(self, target, registry=None) -> "History":
        valid, stale = self.split(target, registry)
        from .history import History

        return History(valid, stale, registry, invalid=len(self.invalid), malformed=len(self.malformed),
                       path=self.path)

    # -- writing ---------------------------------------------------------------
    def check_writable(self) -> None:
        """Raise an ``OSError`` naming the path when records could not be appended to the log
        (call it before measuring anything: a measurement that cannot be recorded is lost).
        A missing log is created, empty (never removed again: another tuner may share it)."""
        path = self.path
        parent = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise IsADirectoryError(f"tuning log {path!r} is a directory, not a file")
        if os.path.exists(path):
            if not os.access(path, os.W_OK):
                raise PermissionError(f"tuning log {path!r} is not writable")
            try:
                open(path, "ab").close()  # appending opens nothing new and changes nothing
            except OSError as err:
                raise PermissionError(f"tuning log {path!r} cannot be appended to: {err.strerror or err}") from None
            return
        if not os.path.exists(parent):
            raise FileNotFoundError(f"tuning log {path!r}: directory {parent!r} does not exist")
        if not os.path.isdir(parent):
            raise NotADirectoryError(f"tuning log {path!r}: {parent!r} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise PermissionError(f"tuning log {path!r} cannot be created: directory {parent!r} is not writable")
        try:  # access() does not know every filesystem (procfs, quotas...): create the (empty) log now
            open(path, "ab").close()
        except OSError as err:
            raise OSError(err.errno, f"tuning log {path!r} cannot be created: {err.strerror or err}") from None

    def append(self, rec: Record) -> None:
        """Append one record durably (one write, flush, fsync); starts a fresh line after a torn one."""
        data = json.dumps(rec.to_json(), sort_keys=True, allow_nan=False)
        with open(self.path, "ab+") as f:
            f.seek(0, os.SEEK_END)
            prefix = b""
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    prefix = b"\n"  # the previous writer was killed mid-line
            f.write(prefix + data.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def extend(self, recs: Iterable[Record]) -> None:
        for r in recs:
            self.append(r)
