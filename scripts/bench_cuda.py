#!/usr/bin/env python
"""CUDA benchmark: ext's CUDA candidates against PyTorch (cuBLAS/cuDNN) and stock TVM (dlight).

Sections (all in one run, so ratios compare like with like):

* ``gemm``: ``relu(x @ W + b)``-free plain GEMM, fp32 and fp16 (fp32 accumulate) at 1024^3
  and 4096^3; the fp16 4096^3 line also tries a few tensor-core configs and reports the
  ratio to cuBLAS (the issue asks for >= 50%);
* ``conv``: ResNet-50 conv layers (batch 8), fp32 NCHW and fp16 NHWC;
* ``norm``: softmax and layer_norm over (8192, 1024) rows, fp32.

Every ext kernel is checked against a NumPy/PyTorch reference before its time counts; a
candidate that fails to build or is wrong is reported, not timed. Stock TVM runs each case in a
subprocess (its tensor-core path can crash the interpreter); a crash is reported as such.

    python scripts/bench_cuda.py                       # everything (needs an NVIDIA GPU)
    python scripts/bench_cuda.py --sections gemm --quick
    python scripts/bench_cuda.py --dry-run --arch sm_90   # build + nvcc-free checks only, no GPU
Results: a table on stdout and JSON in ``$OUT/bench_cuda.json`` (``./out`` without ``$OUT``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

import ext  # noqa: E402
from ext import cli  # noqa: E402
from ext.strategies import PLEVEL, REGISTRY  # noqa: E402
from ext.workload import Workload  # noqa: E402

GEMM_SIZES = (1024, 4096)
#: ResNet-50 conv layers: (C, H, O, k, stride)
RESNET50_CONVS = [(64, 56, 64, 3, 1), (64, 56, 256, 1, 1), (256, 56, 64, 1, 1), (128, 28, 128, 3, 1),
                  (256, 14, 256, 3, 1), (512, 7, 512, 3, 1), (128, 56, 128, 3, 2)]
NORM_SHAPE = (8192, 1024)
#: direct (one thread per output) kernels are not timed above this: seconds per case for no insight
DIRECT_MAX_FLOPS = 2e10


# -- workloads ---------------------------------------------------------------------------------

def gemm_wl(shape, dtype):
    """``(M, K) @ (K, N)`` for ``shape = (M, N, K)`` (an int means a square problem)."""
    M, N, K = (shape,) * 3 if isinstance(shape, int) else shape
    return Workload("matmul", [(M, K), (K, N)], [dtype, dtype], "float32",
                    attrs={"transpose_b": False, "b_const": True, "out_shape": (M, N)})


def conv_wl(batch, C, H, O, k, stride, dtype):
    pad = k // 2
    oh = (H + 2 * pad - k) // stride + 1
    nhwc = dtype == "float16"
    xs, ws = ((batch, H, H, C), (O, k, k, C)) if nhwc else ((batch, C, H, H), (O, C, k, k))
    out = (batch, oh, oh, O) if nhwc else (batch, O, oh, oh)
    return Workload("conv2d", [xs, ws], [dtype, dtype], "float32",
                    attrs={"strides": (stride, stride), "padding": (pad,) * 4, "dilation": (1, 1), "groups": 1,
                           "data_layout": "NHWC" if nhwc else "NCHW", "kernel_layout": "OHWI" if nhwc else "OIHW",
                           "out_shape": out, "w_const": True})


def norm_wls():
    rows, n = NORM_SHAPE
    return [Workload("softmax", [(rows, n)], ["float32"], "float32", attrs={"out_shape": (rows, n)}),
            Workload("layer_norm", [(rows, n), (n,), (n,)], ["float32"] * 3, "float32",
                     attrs={"eps": 1e-5, "center": True, "scale": True, "out_shape": (rows, n)})]


def cases(sections, quick, gemm_shapes=None):
    out = []
    if "gemm" in sections:
        shapes = gemm_shapes or [(n, n, n) for n in (GEMM_SIZES[:1] if quick else GEMM_SIZES)]
        for shape in shapes:
            for dt in ("float32", "float16"):
                out.append(("gemm", gemm_wl(shape, dt)))
    if "conv" in sections:
        for layer in RESNET50_CONVS[:2] if quick else RESNET50_CONVS:
            for dt in ("float32", "float16"):
                out.append(("conv", conv_wl(8, *layer, dt)))
    if "norm" in sections:
        out += [("norm", wl) for wl in norm_wls()]
    return out


# -- references and baselines ------------------------------------------------------------------

def reference(wl, xs):
    """float64 NumPy reference (conv via PyTorch on CPU when importable, else NumPy)."""
    if wl.op == "matmul":
        return xs[0].astype("float64") @ xs[1].astype("float64")
    if wl.op == "softmax":
        x = xs[0].astype("float64")
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if wl.op == "layer_norm":
        x = xs[0].astype("float64")
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * xs[1] + xs[2]
    import torch

    x, w = torch.from_numpy(xs[0].astype("float64")), torch.from_numpy(xs[1].astype("float64"))
    nhwc = wl.attr("data_layout") == "NHWC"
    if nhwc:
        x, w = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)
    y = torch.nn.functional.conv2d(x, w, stride=wl.attr("strides"), padding=wl.attr("padding")[:2])
    return (y.permute(0, 2, 3, 1) if nhwc else y).numpy()


def tolerance(wl, ref):
    scale = float(np.abs(ref).max()) or 1.0
    return 2e-2 * scale if "float16" in wl.dtypes else 1e-3 * scale


def torch_timer(wl, xs):
    """Seconds per call of the PyTorch CUDA op (cuBLAS / cuDNN), or None without CUDA torch."""
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    t = [torch.from_numpy(x).to(dev) for x in xs]
    if wl.op == "matmul":
        fn = lambda: torch.matmul(t[0], t[1])  # noqa: E731
    elif wl.op == "softmax":
        fn = lambda: torch.softmax(t[0], -1)  # noqa: E731
    elif wl.op == "layer_norm":
        fn = lambda: torch.nn.functional.layer_norm(t[0], (t[0].shape[-1],), t[1], t[2], 1e-5)  # noqa: E731
    else:
        x, w = t
        if wl.attr("data_layout") == "NHWC":
            x = x.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
            w = w.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        fn = lambda: torch.nn.functional.conv2d(x, w, stride=wl.attr("strides"),  # noqa: E731
                                                padding=wl.attr("padding")[:2])
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps, "torch"


def relax_module(wl):
    """The workload as a plain Relax module (for stock TVM)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    args = [relax.Var(f"x{i}", relax.TensorType(list(s), d)) for i, (s, d) in enumerate(zip(wl.shapes, wl.dtypes))]
    with bb.function("main", args):
        with bb.dataflow():
            if wl.op == "matmul":
                y = relax.op.matmul(args[0], args[1], out_dtype="float32")
            elif wl.op == "softmax":
                y = relax.op.nn.softmax(args[0], axis=-1)
            elif wl.op == "layer_norm":
                y = relax.op.nn.layer_norm(args[0], args[1], args[2], axes=[-1], epsilon=1e-5)
            else:
                y = relax.op.nn.conv2d(args[0], args[1], strides=wl.attr("strides"), padding=wl.attr("padding"),
                                       data_layout=wl.attr("data_layout"), kernel_layout=wl.attr("kernel_layout"),
                                       out_dtype="float32")
            out = bb.emit_output(bb.emit(y))
        bb.emit_func_output(out)
    return bb.get()


def stock_child(wls_json: str, arch: str) -> None:
    """Subprocess body: build each workload with stock TVM (default CUDA pipeline = dlight), time
    it and print one ``STOCK_RESULT`` JSON line per workload as soon as it is done."""
    import tvm
    from tvm import relax

    target = ext.target.cuda(arch)
    dev = tvm.cuda(0)
    for data in json.loads(wls_json):
        wl = Workload.from_json(data)
        try:
            vm = relax.VirtualMachine(tvm.compile(relax_module(wl), target=target), dev)
            xs = [tvm.runtime.tensor(x, dev) for x in inputs(wl)]
            res = {"key": wl.key, "seconds": vm.time_evaluator("main", dev, number=10, repeat=3)(*xs).median}
        except Exception as exc:  # noqa: BLE001 - reported, the batch goes on
            res = {"key": wl.key, "seconds": None, "note": f"stock TVM error: {type(exc).__name__}: "
                                                          f"{str(exc).splitlines()[0][:120]}"}
        print("STOCK_RESULT " + json.dumps(res), flush=True)


def stock_timers(wls, arch, timeout) -> dict:
    """``{workload key: (seconds or None, note)}``: all workloads in one subprocess (one TVM
    import); when it crashes or hangs, the culprit is recorded and the rest run in a new one."""
    results, todo = {}, list(wls)
    while todo:
        cmd = [sys.executable, os.path.abspath(__file__), "--stock-child",
               json.dumps([w.to_json() for w in todo]), "--arch", arch]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * len(todo))
            stdout, why = proc.stdout, f"crashed (rc {proc.returncode})"
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            why = "timed out"
        for line in stdout.splitlines():
            if line.startswith("STOCK_RESULT "):
                r = json.loads(line[len("STOCK_RESULT "):])
                results[r["key"]] = (r["seconds"], r.get("note", "stock"))
        todo = [w for w in todo if w.key not in results]
        if todo:  # the first unfinished one is the culprit
            results[todo[0].key] = (None, f"stock TVM {why}")
            todo = todo[1:]
    return results


# -- ext ---------------------------------------------------------------------------------------

def inputs(wl, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=s).astype(d) for s, d in zip(wl.shapes, wl.dtypes)]


def configs_to_try(cand, wl, target, quick):
    default = cand.default_config(wl, target)
    extra = []
    if cand.name.endswith("tensorcore") and not quick and wl.flops >= 1e11:
        extra = [c for c in cand.space(wl, target) if c.chunk == 2 and c != default][:3]
    return [default] + extra


def ext_candidates(wl, target, xs, ref, quick, dry_run):
    """{candidate name: (seconds or None, note)} for every CUDA candidate that applies."""
    from ext.runner import CompiledCandidate
    from ext.tir_schedules.cuda.launch import check_limits, inspect_candidate

    arch = str(target.attrs["arch"])
    out = {}
    for cand in REGISTRY.for_op(wl.op, target):
        if ".cuda_" not in cand.name or not cand.applies(wl, target):
            continue
        if cand.plevel == PLEVEL.DIRECT and wl.flops > DIRECT_MAX_FLOPS and not dry_run:
            out[cand.name] = (None, f"not timed: one thread per output is for small problems ({cand.suited(wl, target).reason})")
            continue
        best, note = None, ""
        for cfg in configs_to_try(cand, wl, target, quick):
            try:
                if dry_run:
                    problems = check_limits(inspect_candidate(cand, wl, target, cfg).kernels, arch)
                    note = "built, " + ("; ".join(problems) if problems else "within limits")
                    continue
                cc = CompiledCandidate(cand, wl, cfg, target)
                got = cc.run(xs).astype("float64")
                err = float(np.abs(got - ref).max())
                if not err <= tolerance(wl, ref):
                    note = f"WRONG (max err {err:.3g}) with {cfg}"
                    continue
                sec = cc.timer(xs, number=10, repeat=3)()
                if best is None or sec < best:
                    best, note = sec, f"ok, err {err:.2g}, {cfg}"
            except Exception as exc:  # a failing candidate is reported, never fatal
                note = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        out[cand.name] = (best, note)
    return out


# -- driver ------------------------------------------------------------------------------------

def label(wl):
    if wl.op == "matmul":
        (M, K), N = wl.shapes[0], wl.shapes[1][1]
        return f"gemm {M}^3 {wl.dtypes[0]}" if M == N == K else f"gemm {M}x{N}x{K} {wl.dtypes[0]}"
    if wl.op == "conv2d":
        return f"conv {wl.attr('data_layout')} {wl.dtypes[0]} x{list(wl.shapes[0])} w{list(wl.shapes[1])} s{wl.attr('strides')[0]}"
    return f"{wl.op} {list(wl.shapes[0])}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", nargs="+", default=["gemm", "conv", "norm"], choices=["gemm", "conv", "norm"])
    cli.common_args(ap, rounds=None, quick="fewer shapes, default configs only",
                    json="output JSON path (default $OUT/bench_cuda.json or ./out/bench_cuda.json)")
    ap.add_argument("--gemm-shapes", nargs="+", type=cli.parse_shape, metavar="MxNxK",
                    help="GEMM shapes (default 1024^3 and 4096^3)")
    ap.add_argument("--dry-run", action="store_true", help="build every kernel and check launch limits; no GPU")
    ap.add_argument("--arch", help="CUDA arch (default: the GPU's, or sm_80 for --dry-run)")
    ap.add_argument("--no-stock", action="store_true", help="skip stock TVM (dlight)")
    ap.add_argument("--stock-timeout", type=int, default=120, help="seconds per stock TVM build+run")
    ap.add_argument("--stock-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stock_child:
        return stock_child(args.stock_child, args.arch)
    arch = args.arch or ext.target.local_cuda_arch()
    if arch is None:
        if not args.dry_run:
            raise SystemExit("no CUDA GPU visible to TVM: use --dry-run (builds only) or run on a GPU machine")
        arch = "sm_80"
    target = ext.target.cuda(arch)
    print(f"target: {ext.target.describe(target)}; dry run: {args.dry_run}", flush=True)
    path = args.json or os.path.join(os.environ.get("OUT") or "out", "bench_cuda.json")
    todo, rows = cases(args.sections, args.quick, args.gemm_shapes), []

    def save(summary=None):
        cli.write_json(path, {"target": ext.target.describe(target), "dry_run": args.dry_run, "rows": rows,
                              "summary": summary})

    if not args.dry_run and not args.no_stock:  # first, so a time-out later still leaves a baseline
        t0 = time.time()
        stock = stock_timers([wl for _, wl in todo], arch, args.stock_timeout)
        print(f"stock TVM: {time.time() - t0:.1f} s for {len(todo)} cases", flush=True)
    else:
        stock = {}
    for section, wl in todo:
        t0 = time.time()
        xs = inputs(wl)
        ref = None if args.dry_run else reference(wl, xs)
        row = {"section": section, "case": label(wl), "workload": wl.key, "flops": wl.flops, "results": {}}
        for name, (sec, note) in ext_candidates(wl, target, xs, ref, args.quick, args.dry_run).items():
            row["results"][name] = {"seconds": sec, "note": note}
        if not args.dry_run:
            sec, note = torch_timer(wl, xs)
            row["results"]["torch"] = {"seconds": sec, "note": note}
        if wl.key in stock:
            row["results"]["stock_tvm"] = {"seconds": stock[wl.key][0], "note": stock[wl.key][1]}
        rows.append(row)
        save()
        print(f"{row['case']}: {time.time() - t0:.1f} s", flush=True)
        for name, r in row["results"].items():
            t = f"{r['seconds'] * 1e3:9.3f} ms {wl.flops / r['seconds'] / 1e12:7.2f} TFLOPS" if r["seconds"] else " " * 31
            print(f"    {name:28s} {t}  {r['note']}", flush=True)
    summary = tensorcore_vs_cublas(rows)
    if summary:
        print(summary)
    print_table(rows)
    save(summary)
    print(f"wrote {path}")


def print_table(rows) -> None:
    """Markdown table: time per call and ratio of each contender to PyTorch."""
    print("\n| case | best ext | ext ms | torch ms | stock TVM ms | ext / torch throughput |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ours = {k: v for k, v in r["results"].items() if ".cuda_" in k and v["seconds"]}
        best = min(ours, key=lambda k: ours[k]["seconds"]) if ours else None
        ms = lambda v: f"{v['seconds'] * 1e3:.3f}" if v and v.get("seconds") else "-"  # noqa: E731
        torch_r, stock_r = r["results"].get("torch"), r["results"].get("stock_tvm")
        ratio = (f"{torch_r['seconds'] / ours[best]['seconds']:.2f}" if best and torch_r and torch_r.get("seconds")
                 else "-")
        print(f"| {r['case']} | {best or '-'} | {ms(ours.get(best))} | {ms(torch_r)} | {ms(stock_r)} | {ratio} |")


def tensorcore_vs_cublas(rows) -> str | None:
    for r in rows:
        if r["case"] == "gemm 4096^3 float16":
            tc, cub = r["results"].get("matmul.cuda_tensorcore", {}), r["results"].get("torch", {})
            if tc.get("seconds") and cub.get("seconds"):
                ratio = cub["seconds"] / tc["seconds"]
                verdict = "PASS" if ratio >= 0.5 else "FAIL"
                return f"fp16 4096^3 tensor-core GEMM: {100 * ratio:.0f}% of cuBLAS throughput ({verdict}, goal >= 50%)"
    return None


if __name__ == "__main__":
    main()
