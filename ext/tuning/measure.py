"""Measure (candidate, config) points in isolated subprocesses, locally or over TVM RPC.

Each point runs in a TVM ``PopenWorker`` (``tvm.support.popen_pool``): the
worker builds the kernel and its input transforms, runs them on random
inputs, compares the output with a reference (NumPy for matmul; the family's
``<op>.direct`` candidate otherwise) and only then times the kernel. The
parent watches the clock: a worker that does not answer within ``timeout``
seconds is killed (even a kernel stuck in C with the GIL held), the point is
recorded as ``timeout``, and a fresh worker serves the next point. A worker
that dies (segfault, ``os._exit``) gives ``failed`` with the error.

``LocalMeasurer`` times on this machine; ``RPCMeasurer`` (``rpc.py``) times
on devices behind a stock ``tvm.rpc`` tracker.

Caches and threads: a point is timed warm (repeated calls on the same inputs,
no cache flush) on the thread pool the model uses (the worker inherits
``TVM_NUM_THREADS``). In a model each kernel reads the activations the previous
one has just written (warm), but its weights are warm only while all the
model's weights fit the last-level cache: ResNet-50's 100 MB do not fit this
VM's 32 MB L3, and its kernels run 1.3-1.9x their warm time inside the model.
Timing with the weights flushed (TVM's ``cache_flush_cpu_non_first_arg``) was
tried on ResNet-50's six heaviest layers over their knob spaces: the flushed
times were 5-45% higher, but the best point was the same one (or within 2%) in
both modes, so the ranking, which is all tuning uses, does not change; the
warm mode stays (it needs no flush per call). The end-to-end check (``e2e.py``)
drops the choices where the kernel alone misleads anyway: ResNet-18's 7x7x512
Winograd layers ran F(4x4) in 0.73-0.82x F(2x2)'s time alone, warm and flushed
alike, but the same time inside the model (AVX2 Zen 4 guest), and the check
dropped those choices.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import signal
import statistics
import sys
import threading
import time
import traceback

import numpy as np

from ..workload import Workload
from .references import REFERENCES


@dataclasses.dataclass
class Result:
    """Outcome of one measurement (fields as in the tuning log)."""

    status: str  # ok | wrong | failed | timeout | infra
    seconds: float | None = None
    times: list = dataclasses.field(default_factory=list)
    max_error: float | None = None
    error: str | None = None
    device: str = "local"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Timing settings: ``repeat`` runs of at least ``min_repeat_ms`` each (``number`` calls, grown to
    fill ``min_repeat_ms``); the fastest repeat is the point's time: on shared cores other work
    only ever slows a kernel down, so the minimum is the least disturbed estimate (all repeats
    are kept in the record's ``times``)."""

    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 25
    seed: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


#: wall-clock cap on timing one library candidate (its thread pool can make calls erratic)
LIBRARY_TIMING_BUDGET_S = 3.0


# -- references ------------------------------------------------------------------------------------

def register_reference(op: str, fn, tolerance) -> None:
    """Register a NumPy reference ``fn(wl, inputs)`` and ``tolerance(wl) -> (rtol, atol)`` for an op family."""
    REFERENCES[op] = (fn, tolerance)


_REF_CACHE: dict = {}


def _reference(wl: Workload, xs, target, seed, measured: str = ""):
    """(reference output, rtol, atol, source) for ``wl`` on inputs ``xs`` (cached per process).

    NumPy when the family has an entry in ``REFERENCES``; else another of the family's own
    candidates (the lowest plevel, not a library, not the one being measured); ``None`` when
    the measured candidate is the only one (its time then counts unchecked, and says so).
    """
    key = (wl.key, seed, "" if wl.op in REFERENCES else measured)
    if key not in _REF_CACHE:
        _REF_CACHE.clear()  # keep at most one (possibly large) reference
        if wl.op in REFERENCES:
            fn, tol = REFERENCES[wl.op]
            _REF_CACHE[key] = (np.asarray(fn(wl, xs), dtype="float64"),) + tuple(tol(wl)) + ("numpy",)
        else:
            from ..runner import CompiledCandidate
            from ..strategies.registry import REGISTRY

            others = sorted((c for c in REGISTRY.for_op(wl.op, target) if c.name != measured
                             and not getattr(c, "library", None) and c.applies(wl, target)),
                            key=lambda c: c.plevel)
            if not others:
                _REF_CACHE[key] = (None, 0.0, 0.0, "none")
            else:
                ref = others[0]
                out = CompiledCandidate(ref, wl, ref.default_config(wl, target), target).run(xs).astype("float64")
                _REF_CACHE[key] = (out, 1e-4, 1e-4 * max(1.0, float(np.abs(out).max())), ref.name)
    return _REF_CACHE[key]


def check_output(out, ref, rtol: float, atol: float) -> tuple[bool, float]:
    """(within tolerance, max abs error); NaN/inf or a shape mismatch count as wrong."""
    if out.shape != ref.shape:
        return False, float("inf")
    if not np.all(np.isfinite(out)):
        return False, float("inf")
    diff = np.abs(out.astype("float64") - ref)
    return bool(np.all(diff <= atol + rtol * np.abs(ref))), float(diff.max()) if diff.size else 0.0


# -- the worker side -------------------------------------------------------------------------------

def _load_plugins(plugins) -> None:
    """Run test/user plugins in the worker: ``"module:function"`` or ``"/path/file.py:function"``."""
    import ext  # noqa: F401  (registers candidates, sets TVM_NUM_THREADS)

    for spec in plugins:
        mod_name, _, fn = spec.partition(":")
        if mod_name.endswith(".py"):
            name = "_ext_plugin_" + os.path.basename(mod_name)[:-3]
            if name in sys.modules:
                module = sys.modules[name]
            else:
                s = importlib.util.spec_from_file_location(name, mod_name)
                module = importlib.util.module_from_spec(s)
                sys.modules[name] = module
                s.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
        if fn:
            getattr(module, fn)()


def _resolve(task: dict):
    from ..strategies.registry import REGISTRY
    from ..target import normalize
    from tvm.target import Target

    wl = Workload.from_json(task["workload"])
    target = normalize(Target(task["target"]))
    cand = REGISTRY.get(task["candidate"])
    return wl, target, cand, cand.config_from_dict(task["config"])


def measure_in_worker(task: dict) -> dict:
    """Build, check and time one point on this machine (runs inside the worker process)."""
    import tvm

    from ..runner import CompiledCandidate, random_inputs

    settings = Settings(**task["settings"])
    wl, target, cand, config = _resolve(task)
    try:
        cc = CompiledCandidate(cand, wl, config, target)
    except Exception:  # noqa: BLE001 - any build error is the candidate's failure
        return {"status": "failed", "error": "build: " + _short(traceback.format_exc())}
    xs = random_inputs(wl, seed=settings.seed)
    ref, rtol, atol, source = _reference(wl, xs, target, settings.seed, cand.name)
    args = cc.prepare(xs)
    out = tvm.runtime.empty(tuple(wl.attr("out_shape")), wl.out_dtype, cc.dev)
    cc.kernel["kernel"](*args, out)
    note = None
    if ref is None:
        err, note = None, "unchecked: no NumPy reference and no other candidate for this workload"
    else:
        ok, err = check_output(out.numpy(), ref, rtol, atol)
        if not ok:
            return {"status": "wrong", "max_error": err,
                    "error": f"max abs error {err:.3g} vs {source} exceeds atol {atol:.3g} + rtol {rtol:.3g}*|ref|"}
    times = _time_kernel(cc, args, out, settings, task.get("cutoff"))
    return {"status": "ok", "seconds": min(times), "times": times, "max_error": err, "error": note}


def _time_kernel(cc, args, out, settings: Settings, cutoff: float | None) -> list[float]:
    """Per-repeat mean seconds of the kernel alone; a single time when one call exceeds ``cutoff``."""
    mod = getattr(cc.kernel, "mod", None)
    if mod is not None and hasattr(mod, "time_evaluator"):
        if cutoff:  # one call first: a point far slower than the best known is not worth the repeats
            first = mod.time_evaluator("kernel", cc.dev, number=1, repeat=1)(*args, out).mean
            if first > cutoff:
                return [first]
        ev = mod.time_evaluator("kernel", cc.dev, number=settings.number, repeat=settings.repeat,
                                min_repeat_ms=settings.min_repeat_ms)
        return list(ev(*args, out).results)
    # a library candidate (packed function + epilogue): wall clock around the calls
    est = statistics.median(cc.kernel.time(args, out, 1, 1) for _ in range(3))
    if cutoff and est > cutoff:
        return [est]
    number = min(max(settings.number, int(settings.min_repeat_ms / 1e3 / max(est, 1e-7)) + 1), 10_000)
    times, start = [], time.perf_counter()
    for _ in range(settings.repeat):  # stop early when the calls run far slower than estimated
        times.append(cc.kernel.time(args, out, number, 1))
        if time.perf_counter() - start > LIBRARY_TIMING_BUDGET_S:
            break
    return times


def _short(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


# -- the parent side -------------------------------------------------------------------------------

class LocalMeasurer:
    """Measure points one at a time in a reusable TVM ``PopenWorker``.

    Parameters
    ----------
    timeout : seconds one point (build + check + timing) may take before its worker is killed.
    settings : timing ``Settings``.
    plugins : ``"module:function"`` / ``"file.py:function"`` run in each new worker (e.g. tests
        registering extra candidates).
    """

    device = "local"
    remote = False
    _fn = staticmethod(measure_in_worker)

    def __init__(self, timeout: float = 60.0, settings: Settings | None = None, plugins=()):
        from tvm.support.popen_pool import PopenWorker

        self.timeout, self.settings, self.plugins = float(timeout), settings or Settings(), tuple(plugins)
        # library candidates get their own worker: their thread pools (OpenMP, OpenBLAS) would
        # otherwise compete with TVM's pool inside one process and slow the next points down
        self._workers = {kind: PopenWorker(initializer=_load_plugins, initargs=(self.plugins,))
                         for kind in ("kernel", "library")}

    def task(self, wl: Workload, cand, config: dict, target) -> dict:
        return {"workload": wl.to_json(), "candidate": cand.name, "config": config,
                "target": dict(target.export()), "settings": self.settings.to_json()}

    def measure(self, wl: Workload, cand, config: dict, target, cutoff: float | None = None) -> Result:
        """Measure one point; never raises for the candidate's faults.

        ``cutoff``: seconds; when one call takes longer, that single time is the result (no repeats).
        """
        task = dict(self.task(wl, cand, config, target), cutoff=cutoff)
        worker = self._workers["library" if getattr(cand, "library", None) else "kernel"]
        # the first call also starts the worker and imports ext: that does not count against the point
        if getattr(worker, "_proc", None) is None:
            _, exc, _ = _call(worker, _noop, (), WORKER_START_TIMEOUT_S)
            if exc is not None:
                return Result("infra", error=f"measurement worker did not start: {exc}", device=self.device)
        t0 = time.time()
        out, exc, timed_out = _call(worker, type(self)._fn, (task,), self.timeout)
        if timed_out:
            return Result("timeout", error=f"no result within {self.timeout:.0f} s (worker killed)",
                          device=self.device)
        if exc is not None:  # a crash, or an exception raised in the worker
            msg = _short(str(exc)) or type(exc).__name__
            if isinstance(exc, ChildProcessError):
                msg = f"worker process died ({msg}) after {time.time() - t0:.1f} s"
            return Result("failed", error=msg, device=self.device)
        out.setdefault("device", self.device)
        return Result(**out)

    def close(self) -> None:
        for w in self._workers.values():
            w.kill()


def _noop():
    return None


#: seconds a new worker may take to start and import ext
WORKER_START_TIMEOUT_S = 180.0


def _call(worker, fn, args, timeout: float):
    """``fn(*args)`` in ``worker`` with a parent-side watchdog: ``(result, exception, timed_out)``.

    The watchdog SIGKILLs the worker, so even a kernel stuck in C with the GIL held ends;
    after any failure the worker is killed and the next call starts a fresh one.
    """
    fired = threading.Event()

    def _kill():
        fired.set()
        proc = getattr(worker, "_proc", None)
        if proc is not None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    watchdog = threading.Timer(timeout, _kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        worker.send(fn, args)
        out = worker.recv()
    except Exception as exc:  # noqa: BLE001
        worker.kill()
        return None, exc, fired.is_set()
    finally:
        watchdog.cancel()
    if fired.is_set():  # answered just as the watchdog fired: the process is gone anyway
        worker.kill()
    return out, None, False


def make_measurer(rpc=None, **kwargs):
    """``LocalMeasurer`` when ``rpc`` is None; else ``RPCMeasurer`` from ``{"tracker": "H:P", "key": K}``,
    a ``(tracker, key)`` pair, or an existing measurer."""
    if rpc is None:
        return LocalMeasurer(**kwargs)
    if isinstance(rpc, LocalMeasurer):
        return rpc
    if isinstance(rpc, dict):
        extra = {k: v for k, v in rpc.items() if k not in ("tracker", "key")}
        return RPCMeasurer(rpc["tracker"], rpc["key"], **extra, **kwargs)
    if isinstance(rpc, (tuple, list)) and len(rpc) == 2:
        return RPCMeasurer(rpc[0], rpc[1], **kwargs)
    raise ValueError(f"rpc must be None, {{'tracker': 'HOST:PORT', 'key': KEY}} or (tracker, key); got {rpc!r}")


from .rpc import RPCMeasurer  # noqa: E402  (re-exported; rpc.py builds on this module)
