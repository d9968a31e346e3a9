#!/usr/bin/env python
"""Autotune any model with ext's tuner; print tuned vs untuned model latency; optionally compare with MetaSchedule.

    python scripts/autotune.py                                   # GEMM + MLP demo, < 2 minutes
    python scripts/autotune.py --model resnet18 --seconds 240    # a built-in model (resnet18, resnet50, encoder)
    python scripts/autotune.py --model mobilenet_v2              # a zoo model (ext/models/zoo.py)
    python scripts/autotune.py --model model.onnx                # an ONNX file
    python scripts/autotune.py --model model.pt2                 # a saved torch.export program
    python scripts/autotune.py --model resnet18 --dry-run        # import + list the tasks, measure nothing
    python scripts/autotune.py --model gemm1024 --seconds 120 --compare-metaschedule
    python scripts/autotune.py --rpc-tracker 127.0.0.1:9190 --rpc-key zen4

``--model`` takes the built-in names (demo, gemm, gemm1024, mlp, resnet18,
resnet50, encoder), a zoo name (``zoo:NAME`` when a built-in has the same
name), a ``.onnx`` path or a ``.pt2`` path (``torch.export.save``; its example
inputs give the input shapes). Tuning uses the whole-model task scheduler
(every task's untuned choice first, then rounds where the estimated end-to-end
gain per second is largest; a line per round shows the estimated model
latency) and ends with the end-to-end check, which drops tuned choices that
make the model slower (``ext.tuning.e2e``; its time comes on top of
``--seconds``). Each measurement is appended to ``--log`` (JSONL) as soon as it
finishes; running the same command again resumes: points already in the log
are not measured again. Finally ``ext.build(model)`` and
``ext.build(model, tuning_log=LOG)`` are timed in ``--rounds`` interleaved
rounds (median and spread; skipped with ``--rpc-tracker``: the model would run
here, not on the device).

``--compare-metaschedule`` then tunes the same module with stock MetaSchedule
(``tune_relax``, default xgb cost model and evolutionary search, 16 trials per
batch, one builder process, called once per pass of one batch per task so that
each pass's measurements reach its database) for the same wall-clock budget as ext's
(``--seconds``; its start-up not counted), in a subprocess with the same
``TVM_NUM_THREADS``, and times NumPy, ext untuned, ext tuned and MetaSchedule
in one process: 9 rounds, contender order rotated each round, idle time between
contenders (ratios to NumPy per round, median).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (sets TVM_NUM_THREADS before TVM starts its pool)
import numpy as np  # noqa: E402
from ext import cli  # noqa: E402
import tvm  # noqa: E402

GEMM_MODELS = ("demo", "gemm", "gemm1024", "mlp")
TORCH_MODELS = ("resnet18", "resnet50", "encoder")
#: most seconds MetaSchedule may spend starting up before its tuning clock starts anyway
MS_STARTUP_LIMIT_S = 300


def build_model(name: str, shape: str | None):
    """(Relax module, NumPy inputs, NumPy reference function or None, params or None) of ``--model``."""
    from ext.models.gemm import dense, mlp

    rng = np.random.default_rng(0)
    if name in ("gemm", "gemm1024"):
        m, n, k = _shape(shape) if shape else ((1024, 1024, 1024) if name == "gemm1024" else (256, 256, 256))
        mod, params = dense(m, n, k)
        x = rng.standard_normal((m, k)).astype("float32")
        return mod, [x], (lambda: np.maximum(x @ params["w"] + params["b"], 0)), params
    if name == "mlp":
        mod = mlp()
        return mod, [rng.standard_normal((32, 784)).astype("float32")], None, None
    if name == "demo":  # a 256^3 GEMM layer feeding the MLP's shapes (one module, four GEMM tasks)
        return mlp(batch=64, sizes=(256, 256, 512, 10)), [rng.standard_normal((64, 256)).astype("float32")], None, None
    return (*load_model(name), None, None)


def load_model(name: str):
    """(Relax module, NumPy inputs) of a built-in torch model, a zoo model, an ONNX or a ``.pt2`` file."""
    from ext.frontend import UnsupportedOperatorError
    from ext.models.zoo import ZOO

    lower = name.lower()
    try:
        if lower.endswith((".onnx", ".pt2")):
            if not os.path.isfile(name):
                raise SystemExit(f"autotune: no such model file {name!r}")
            return _load_onnx(name) if lower.endswith(".onnx") else _load_pt2(name)
        if name in TORCH_MODELS:
            from ext.models import torch_model

            return _from_torch(*torch_model(name))
        zoo_name = name[4:] if name.startswith("zoo:") else name
        if zoo_name in ZOO:
            from ext.models.zoo import zoo_model

            return _from_torch(*zoo_model(zoo_name))
    except UnsupportedOperatorError as err:
        raise SystemExit(f"autotune: cannot import {name!r}: {err}") from None
    raise SystemExit(f"autotune: unknown model {name!r}: expected one of {', '.join(GEMM_MODELS + TORCH_MODELS)}, "
                     f"a zoo name ({', '.join(ZOO)}), or a path to a .onnx / .pt2 file")


def _from_torch(module, inputs):
    mod = ext.frontend.from_torch(module, inputs)
    return mod, [t.numpy() for t in inputs]


def _load_onnx(path: str):
    from ext.tuning.e2e import model_inputs

    mod = ext.frontend.from_onnx(path)
    return mod, model_inputs(mod)


def _load_pt2(path: str):
    """A saved ``torch.export`` program: weights become constants, its example inputs the inputs."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from ext.tuning.e2e import model_inputs

    ep = torch.export.load(path)
    mod = from_exported_program(ep, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    example = getattr(ep, "example_inputs", None)
    args = list(example[0]) if example and not example[1] else None
    if args and all(isinstance(a, torch.Tensor) for a in args):
        return mod, [a.detach().numpy() for a in args]
    return mod, model_inputs(mod)


def _shape(shape) -> tuple[int, int, int]:
    """``--shape`` as parsed (a tuple), or as passed to the MetaSchedule worker (``MxNxK`` text)."""
    if isinstance(shape, tuple):
        return shape
    try:
        return cli.parse_shape(shape)
    except ValueError as err:
        raise SystemExit(f"autotune: {err}") from None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo",
                   help="built-in name, zoo name, .onnx or .pt2 path (default: demo; see above)")
    p.add_argument("--shape", type=cli.parse_shape, help="MxNxK for --model gemm (default 256x256x256)")
    p.add_argument("--log", default="autotune.jsonl", help="JSONL tuning log to append to (default: %(default)s)")
    p.add_argument("--trials", type=int, default=None, help="measurements per task (default: whole space)")
    p.add_argument("--seconds", type=float, default=None,
                   help="wall-clock budget of the search (default: 75 for demo/mlp/gemm, 120 for gemm1024, "
                        "240 for other models); the end-to-end check comes on top")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one measurement may take")
    p.add_argument("--batch", type=int, default=8, help="points measured per search round")
    p.add_argument("--seed", type=int, default=0)
    cli.common_args(p, rounds=9, json=False, rounds_help="interleaved rounds of the final tuned vs untuned timing")
    p.add_argument("--no-check", action="store_true", help="skip the end-to-end check (keeps every tuned choice)")
    p.add_argument("--dry-run", action="store_true", help="import the model, list its tasks, measure nothing")
    p.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure on devices behind this TVM RPC tracker")
    p.add_argument("--rpc-key", metavar="KEY", help="device key registered with the tracker")
    p.add_argument("--rpc-connect-timeout", type=float, default=3.0, metavar="S",
                   help="seconds to reach the tracker before giving up (default: %(default)s)")
    p.add_argument("--compare-metaschedule", action="store_true",
                   help="also tune with stock MetaSchedule for the same wall-clock time and compare")
    p.add_argument("--ms-dir", default=None, help="MetaSchedule work dir (default: <log>.ms)")
    p.add_argument("--ms-extra-seconds", type=float, default=0.0,
                   help="let MetaSchedule go on this much longer and compare that snapshot too (default: 0)")
    p.add_argument("--summary", help="write the tuning summary as JSON here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--ms-worker", nargs=3, metavar=("MODEL", "SHAPE", "DIR"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if bool(args.rpc_tracker) != bool(args.rpc_key):
        p.error("--rpc-tracker and --rpc-key go together")
    if not args.rpc_connect_timeout > 0:
        p.error(f"--rpc-connect-timeout must be positive seconds, got {args.rpc_connect_timeout}")
    if args.seconds is not None and not args.seconds > 0:
        p.error(f"--seconds must be positive, got {args.seconds}")
    if args.seconds is None:
        args.seconds = {"gemm1024": 120.0}.get(args.model, 75.0 if args.model in GEMM_MODELS else 240.0)
    return args


def print_tasks(tasks) -> None:
    total = sum(t.uses * t.estimated_seconds() for t in tasks) or 1.0
    print(f"{len(tasks)} tasks (distinct workloads; share = uses x flops estimate):")
    for i, t in enumerate(tasks):
        print(f"  {i + 1:3d}  uses {t.uses:3d}  share {t.uses * t.estimated_seconds() / total:6.1%}  {t.workload.key}")


def final_timing(mod, target, log: str, inputs, rounds: int) -> dict:
    """``ext.build`` with and without the log, timed interleaved (``ext.bench.interleaved``): median, spread."""
    from tvm import relax

    from ext.bench import interleaved

    dev = tvm.cpu()
    xs = [tvm.runtime.tensor(x, dev) for x in inputs]
    vms = {"untuned": relax.VirtualMachine(ext.build(mod, target, verbose=False), dev),
           "tuned": relax.VirtualMachine(ext.build(mod, target, tuning_log=log, verbose=False), dev)}
    outs = {k: vm["main"](*xs) for k, vm in vms.items()}
    outs = {k: (o if hasattr(o, "numpy") else o[0]).numpy().astype("float64") for k, o in outs.items()}
    err = float(np.abs(outs["tuned"] - outs["untuned"]).max())
    res = interleaved({k: (lambda vm=vm: vm["main"](*xs)) for k, vm in vms.items()}, "untuned", rounds=rounds,
                      min_seconds=0.1)
    t, u = res["tuned"], res["untuned"]
    print(f"\nmodel latency, {rounds} interleaved rounds (median; spread = fastest-slowest kept round):\n"
          f"  untuned {u['median_s'] * 1e3:9.3f} ms  ({u['spread'][0] * 1e3:.3f}-{u['spread'][1] * 1e3:.3f})\n"
          f"  tuned   {t['median_s'] * 1e3:9.3f} ms  ({t['spread'][0] * 1e3:.3f}-{t['spread'][1] * 1e3:.3f})\n"
          f"  tuned / untuned {t['ratio']:.3f}x (median of per-round ratios); max abs output difference {err:.2e}",
          flush=True)
    return {"untuned_ms": u["median_s"] * 1e3, "tuned_ms": t["median_s"] * 1e3, "ratio": t["ratio"],
            "untuned_spread_ms": [v * 1e3 for v in u["spread"]], "tuned_spread_ms": [v * 1e3 for v in t["spread"]],
            "max_abs_diff": err}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.ms_worker:
        return _ms_worker(*args.ms_worker)
    target = ext.target.cpu()
    mod, inputs, reference, _ = build_model(args.model, args.shape)
    rpc = ({"tracker": args.rpc_tracker, "key": args.rpc_key, "connect_timeout": args.rpc_connect_timeout}
           if args.rpc_tracker else None)
    tasks = ext.tuning.extract_tasks(mod, target)
    print(f"ext autotune: model {args.model}, target {ext.target.describe(target)}, log {args.log}, "
          f"budget {args.seconds:.0f} s" + (f", {args.trials} trials/task" if args.trials else "")
          + (f", rpc {args.rpc_key}@{args.rpc_tracker}" if rpc else ""), flush=True)
    print_tasks(tasks)
    if args.dry_run:
        return 0
    progress = None if args.quiet else ext.tuning.ProgressPrinter(sys.stdout)
    try:
        summary = ext.tune(mod, target, log=args.log, trials=args.trials, seconds=args.seconds, rpc=rpc,
                           timeout=args.timeout, batch=args.batch, seed=args.seed, progress=progress,
                           check=not args.no_check and rpc is None, inputs=inputs, tasks=tasks)
    except (OSError, ValueError) as err:  # unreachable tracker, unwritable --log (found before measuring),
        raise SystemExit(f"autotune: {err}") from None  # malformed --rpc-tracker
    print(summary.table(), flush=True)
    result = summary.to_json()
    if rpc is None:
        result["timing"] = final_timing(mod, target, args.log, inputs, args.rounds)
    else:
        print("tuned vs untuned model latency: not timed (the model would run here, not on the RPC device)")
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(result, f, indent=1)
    if args.compare_metaschedule:
        compare(args, mod, inputs, reference, target, budget=max(args.seconds, summary.elapsed))
    return 0


# -- MetaSchedule comparison ---------------------------------------------------------------------

def _ms_worker(model: str, shape: str, work_dir: str) -> None:
    """Run stock MetaSchedule on the model until killed (the parent enforces the budget)."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu
    from tvm.s_tir import meta_schedule as ms

    target = ext.target.cpu()
    mod, *_ = build_model(model, None if shape == "-" else shape)
    with target:
        lowered = tvm.transform.Sequential(cpu.legalize_passes(target))(mod)
    # stock settings (xgb cost model, evolutionary search, gradient task scheduler, JSON database)
    # except: (1) 16 points per batch instead of 64; (2) one builder process: with the default two
    # (one per physical core) the first round never finished on the 2-core VM; (3) tuning runs in
    # rounds of one batch per task, one ``tune_relax`` call each, sharing the database and the
    # cost model. MetaSchedule joins its measurements (and writes them to the database) only when
    # it comes back to a task, i.e. after a full pass over all tasks: killed by the budget inside
    # its first pass (26 tasks, ~35 s each here for ResNet-18), it had stored nothing at 900 s.
    # Each call's end joins every measurement, so each round's records reach the database.
    n_tasks = len(ms.relax_integration.extract_tasks(lowered, target))
    cost_model = ms.cost_model.XGBModel()
    while True:
        ms.relax_integration.tune_relax(lowered, {}, target, work_dir, max_trials_global=16 * n_tasks,
                                        num_trials_per_iter=16, builder=ms.builder.LocalBuilder(max_workers=1),
                                        cost_model=cost_model)


def _clean_db(src: str, dst: str) -> None:
    """Copy a MetaSchedule JSON database, dropping a line torn when its tuner was killed."""
    os.makedirs(dst, exist_ok=True)
    for name in ("database_workload.json", "database_tuning_record.json"):
        path = os.path.join(src, name)
        lines = []
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    try:
                        json.loads(line)
                        lines.append(line if line.endswith("\n") else line + "\n")
                    except ValueError:
                        pass
        with open(os.path.join(dst, name), "w") as f:
            f.writelines(lines)


def run_metaschedule(args, budget: float, extra: float = 0.0):
    """Tune with MetaSchedule for ``budget`` (+ ``extra``) seconds of its own clock.

    Returns ``[(label, clean database dir, records)]``: a snapshot at ``budget``, and one at
    ``budget + extra`` when ``extra`` > 0.
    """
    work = args.ms_dir or (os.path.splitext(args.log)[0] + ".ms")
    shutil.rmtree(work, ignore_errors=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--ms-worker", args.model,
           cli.format_shape(args.shape) if args.shape else "-", work]
    print(f"stock MetaSchedule: tuning for {budget:.0f} s (same wall clock, TVM_NUM_THREADS="
          f"{os.environ.get('TVM_NUM_THREADS')})" + (f", then {extra:.0f} s more" if extra else ""), flush=True)
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the clock starts when MetaSchedule starts its first task: its start-up (imports, task
    # extraction, worker pools) is not counted against it
    t0, started, snaps = time.time(), None, []
    stops = [budget] + ([budget + extra] if extra > 0 else [])
    sched_log = os.path.join(work, "logs", "tvm.s_tir.meta_schedule.logging.task_scheduler.log")
    while stops:
        now = time.time()
        if started is None and os.path.exists(sched_log) and "Initializing Task" in open(sched_log).read():
            started = now
            print(f"  MetaSchedule start-up took {now - t0:.0f} s (not counted)", flush=True)
        timed_out = now - t0 >= stops[0] + MS_STARTUP_LIMIT_S
        if (started is not None and now - started >= stops[0]) or timed_out or proc.poll() is not None:
            clean = f"{work}.{stops[0]:.0f}s"
            shutil.rmtree(clean, ignore_errors=True)
            _clean_db(work, clean)
            with open(os.path.join(clean, "database_tuning_record.json")) as f:
                snaps.append((f"metaschedule {stops[0]:.0f}s", clean, sum(1 for _ in f)))
            stops.pop(0)
            continue
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return snaps


#: idle time between two contenders' bursts: OpenBLAS and TVM worker threads spin for a while after
#: a call, and would slow down whichever contender runs next
SETTLE_S = 0.3


def compare(args, mod, inputs, reference, target, budget: float) -> None:
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from ext.bench import gflops, interleaved

    snaps = run_metaschedule(args, budget, args.ms_extra_seconds)
    dev = tvm.cpu()
    xs = [tvm.runtime.tensor(x, dev) for x in inputs]
    contenders, outputs = {}, {}
    if reference is not None:
        contenders["numpy"] = reference
    for name, build in (("ext untuned", lambda: ext.build(mod, target)),
                        ("ext tuned", lambda: ext.build(mod, target, tuning_log=args.log))):
        vm = relax.VirtualMachine(build(), dev)
        contenders[name] = (lambda vm=vm: vm["main"](*xs))
        outputs[name] = vm["main"](*xs).numpy()
    for label, db_dir, n in snaps:
        if not n:
            print(f"{label}: stock MetaSchedule had measured nothing yet (no record in its database)", flush=True)
            continue
        db = ms.database.JSONDatabase(work_dir=db_dir)
        vm = relax.VirtualMachine(ms.relax_integration.compile_relax(db, mod, target, params=None), dev)
        contenders[label] = (lambda vm=vm: vm["main"](*xs))
        outputs[label] = vm["main"](*xs).numpy()
    expect = reference() if reference is not None else outputs["ext untuned"]
    for name, out in outputs.items():
        err = float(np.abs(out - expect).max())
        print(f"  {name}: max abs error vs {'numpy' if reference else 'ext untuned'} {err:.2e}")
    ref_name = "numpy" if reference is not None else "ext untuned"
    # every round kept (medians and per-round ratios over all 9), contender order rotated by one each round
    res = interleaved(contenders, ref_name, rounds=9, min_seconds=0.1, settle=SETTLE_S, rotate=True)
    flops = sum(t.workload.flops * t.uses for t in ext.tuning.extract_tasks(mod, target))
    print(f"\nsame process, 9 rounds, contender order rotated each round, {SETTLE_S:.1f} s idle between "
          "contenders; MetaSchedule records: " + ", ".join(f"{n} at {label.split()[1]}" for label, _, n in snaps))
    print(f"{'contender':18s} {'ms':>9s} {'GFLOPS':>8s} {'time / ' + ref_name:>16s}")
    for name, r in res.items():
        sec = r["median_all_s"]
        print(f"{name:18s} {sec * 1e3:9.3f} {gflops(flops, sec):8.1f} {r['ratio_all']:16.3f}")


if __name__ == "__main__":
    sys.exit(main())
