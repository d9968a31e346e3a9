"""Benchmark normalization, reduction, element-wise and layout ops: ext vs PyTorch, NumPy, stock TVM.

For each op at BERT-base and ResNet sizes, one process measures, in interleaved
rounds (a short burst per contender, a pause so spinning thread pools park,
then the next contender):

* ``ext``: the module built by ``ext.build`` (VM call, all kernels of the op);
* ``stock``: the same module built by stock TVM untuned (``relax.build``, the
  default pipeline);
* ``torch`` (the faster of all cores and one thread: its OpenMP team can lose
  badly on a loaded 2-core machine; the table says which) and ``numpy``;
* every ext candidate that applies, its kernel alone (``CompiledCandidate``).

Times are the best (minimum) over rounds: the machine is shared, and other
work on the two cores only ever adds time, to whichever contender it hits;
``ext/torch`` and ``stock/ext`` are ratios of those bests (``--stat median``
for medians of per-round ratios instead). The bars of issue 4:
``ext/torch <= 1.25`` and ``stock/ext >= 10``.

Usage::

    flock /tmp/ext-bench.lock .venv/bin/python scripts/bench_ops.py            # all ops
    flock /tmp/ext-bench.lock .venv/bin/python scripts/bench_ops.py --ops softmax layer_norm --rounds 5
    ... --json out.json
"""
from __future__ import annotations

import argparse
import math
import statistics

import ext  # noqa: F401 - sets TVM_NUM_THREADS before any TVM parallel call
import numpy as np
import torch
import tvm
from tvm import relax
from tvm.tirx import IndexMap

from ext import cli
from ext.bench import Contender, calibrate, summarize
from ext.bench import rounds as bench_rounds
from ext.runner import CompiledCandidate
from ext.strategies import candidates

try:
    from scipy.special import erf as np_erf
except ImportError:  # pragma: no cover
    np_erf = np.vectorize(math.erf)

PAUSE_S = 0.003  # let the other runtime's spinning workers park between bursts
BURST_S = 0.002  # seconds per burst (at least MIN_CALLS calls)
MIN_CALLS = 3


# -- op definitions: (name, size label, relax builder, numpy fn, torch fn, input shapes) --------------

def _relax_module(shapes, body):
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *xs))
        bb.emit_func_output(out)
    return bb.get()


def _ln(x, g, b):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_max_pool(x, k=3, s=2, pad=1, ceil=False):
    """Max pooling of NCHW ``x`` (``-inf`` padding)."""
    h, w = x.shape[2:]
    oh, ow = ((-(-(d + 2 * pad - k) // s) if ceil else (d + 2 * pad - k) // s) + 1 for d in (h, w))
    xp = np.full(x.shape[:2] + ((oh - 1) * s + k, (ow - 1) * s + k), -np.inf, x.dtype)
    xp[:, :, pad:pad + h, pad:pad + w] = x[:, :, :xp.shape[2] - pad, :xp.shape[3] - pad]
    return np.max([xp[:, :, i:i + s * oh:s, j:j + s * ow:s] for i in range(k) for j in range(k)], axis=0)


NCHW16C = IndexMap.from_func(lambda n, c, h, w: (n, c // 16, h, w, c % 16))


def ops():
    F = torch.nn.functional
    tgelu = lambda x: 0.5 * x * (1 + np_erf(x / math.sqrt(2)))  # noqa: E731
    return [
        ("softmax", "12x128x128 (BERT)", [(12, 128, 128)],
         lambda bb, x: bb.emit(relax.op.nn.softmax(x)), _np_softmax, lambda x: torch.softmax(x, -1)),
        ("softmax", "6x1500x1500 (Whisper)", [(6, 1500, 1500)],
         lambda bb, x: bb.emit(relax.op.nn.softmax(x)), _np_softmax, lambda x: torch.softmax(x, -1)),
        ("softmax", "1x1000 (ResNet fc)", [(1, 1000)],
         lambda bb, x: bb.emit(relax.op.nn.softmax(x)), _np_softmax, lambda x: torch.softmax(x, -1)),
        ("layer_norm", "128x768 (BERT)", [(128, 768), (768,), (768,)],
         lambda bb, x, g, b: bb.emit(relax.op.nn.layer_norm(x, g, b, axes=[-1])), _ln,
         lambda x, g, b: F.layer_norm(x, (768,), g, b)),
        ("layer_norm+dropout", "128x768 (BERT)", [(128, 768), (768,), (768,)],
         lambda bb, x, g, b: bb.emit(relax.TupleGetItem(bb.emit(relax.op.nn.dropout(
             bb.emit(relax.op.nn.layer_norm(x, g, b, axes=[-1])), 0.1)), 0)), _ln,
         lambda x, g, b: F.dropout(F.layer_norm(x, (768,), g, b), 0.1, training=False)),
        ("mean(2,3)", "1x512x7x7 (ResNet pool)", [(1, 512, 7, 7)],
         lambda bb, x: bb.emit(relax.op.mean(x, [2, 3])), lambda x: x.mean((2, 3)), lambda x: x.mean((2, 3))),
        ("sum(1)", "1x512x7x7", [(1, 512, 7, 7)],
         lambda bb, x: bb.emit(relax.op.sum(x, [1])), lambda x: x.sum(1), lambda x: x.sum(1)),
        ("sum(-1)", "4096x4096", [(4096, 4096)],
         lambda bb, x: bb.emit(relax.op.sum(x, [-1])), lambda x: x.sum(-1), lambda x: x.sum(-1)),
        ("sum(0)", "4096x4096", [(4096, 4096)],
         lambda bb, x: bb.emit(relax.op.sum(x, [0])), lambda x: x.sum(0), lambda x: x.sum(0)),
        ("sum(all)", "4096x4096", [(4096, 4096)],
         lambda bb, x: bb.emit(relax.op.sum(x)), lambda x: x.sum(), lambda x: x.sum()),
        ("max(-1)", "4096x4096", [(4096, 4096)],
         lambda bb, x: bb.emit(relax.op.max(x, [-1])), lambda x: x.max(-1), lambda x: x.amax(-1)),
        ("add+relu", "1x64x56x56 (ResNet)", [(1, 64, 56, 56)] * 2,
         lambda bb, x, y: bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(x, y)))),
         lambda x, y: np.maximum(x + y, 0), lambda x, y: torch.relu(x + y)),
        ("add+gelu", "128x3072 (BERT FFN)", [(128, 3072), (3072,)],
         lambda bb, x, b: bb.emit(relax.op.nn.gelu(bb.emit(relax.op.add(x, b)))),
         lambda x, b: tgelu(x + b), lambda x, b: F.gelu(x + b)),
        ("add (residual)", "128x768 (BERT)", [(128, 768)] * 2,
         lambda bb, x, y: bb.emit(relax.op.add(x, y)), lambda x, y: x + y, lambda x, y: x + y),
        ("NCHW->NHWC", "1x64x56x56", [(1, 64, 56, 56)],
         lambda bb, x: bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1])),
         lambda x: np.ascontiguousarray(x.transpose(0, 2, 3, 1)), lambda x: x.permute(0, 2, 3, 1).contiguous()),
        ("NHWC->NCHW", "1x56x56x64", [(1, 56, 56, 64)],
         lambda bb, x: bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2])),
         lambda x: np.ascontiguousarray(x.transpose(0, 3, 1, 2)), lambda x: x.permute(0, 3, 1, 2).contiguous()),
        ("NCHW->NCHW16c", "1x64x56x56", [(1, 64, 56, 56)],
         lambda bb, x: bb.emit(relax.op.layout_transform(x, index_map=NCHW16C)),
         lambda x: np.ascontiguousarray(x.reshape(1, 4, 16, 56, 56).transpose(0, 1, 3, 4, 2)),
         lambda x: x.reshape(1, 4, 16, 56, 56).permute(0, 1, 3, 4, 2).contiguous()),
        ("max_pool 3x3/2", "1x64x112x112 (ResNet)", [(1, 64, 112, 112)],
         lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 1)), _np_max_pool,
         lambda x: F.max_pool2d(x, 3, 2, 1)),
        ("max_pool 3x3/2", "1x4x112x112x16 (NCHW16c)", [(1, 4, 112, 112, 16)],
         lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 1, layout="NCHW16c")),
         lambda x: _np_max_pool(x.transpose(0, 1, 4, 2, 3).reshape(1, 64, 112, 112)).reshape(
             1, 4, 16, 56, 56).transpose(0, 1, 3, 4, 2),
         lambda x: F.max_pool2d(x.reshape(1, 4, 112, 1792), (3, 48), (2, 32), (1, 16))),  # torch: same taps
        ("max_pool 3x3/2 ceil", "1x64x111x111 (SqueezeNet)", [(1, 64, 111, 111)],
         lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 0, ceil_mode=True)),
         lambda x: _np_max_pool(x, pad=0, ceil=True), lambda x: F.max_pool2d(x, 3, 2, 0, ceil_mode=True)),
        ("heads (0,2,1,3)", "1x128x12x64 (BERT)", [(1, 128, 12, 64)],
         lambda bb, x: bb.emit(relax.op.permute_dims(x, [0, 2, 1, 3])),
         lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3)), lambda x: x.permute(0, 2, 1, 3).contiguous()),
    ]


# -- timing --------------------------------------------------------------------------------------------

def _contender(fn=None, timer=None, setup=None) -> Contender:
    """A contender timed in bursts of as many calls as fit in ~BURST_S (at least MIN_CALLS)."""
    return calibrate(Contender(fn=fn, timer=timer, setup=setup), BURST_S, min_calls=MIN_CALLS)


def _vm_timer(ex, args):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](*args)
    return lambda n: vm.time_evaluator("main", tvm.cpu(), number=n, repeat=1)(*args).mean


def _kernel_timer(cc, inputs):
    """``n -> seconds per call`` of one candidate's kernel alone (timers cached per ``n``)."""
    cache = {}

    def timer(n):
        if n not in cache:
            cache[n] = cc.timer(inputs, number=n, repeat=1)
        return cache[n]()

    return timer


def _check(name, got, want, rtol=1e-4, atol=1e-4):
    got = got.numpy() if hasattr(got, "numpy") else got
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        raise AssertionError(f"{name}: result differs from NumPy (max abs err {np.abs(got - want).max():.3g})")


def bench_op(spec, rounds, target, stat="min", cores=None):
    name, size, shapes, body, np_fn, torch_fn = spec
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=s).astype("float32") for s in shapes]
    mod = _relax_module(shapes, body)
    want = np_fn(*xs)
    targs = [tvm.runtime.tensor(x) for x in xs]
    ex = ext.build(mod, target)
    report = ext.last_report()
    # float32 sums of up to 16M values: the error grows with the count summed
    _check(f"{name} ext", relax.VirtualMachine(ex, tvm.cpu())["main"](*targs), want,
           atol=1e-4 * max(1.0, math.sqrt(xs[0].size) / 10))
    stock = relax.build(mod, target)
    tx = [torch.from_numpy(x) for x in xs]
    cores = cores or ext.target.usable_cores()
    contenders = {"ext": _contender(timer=_vm_timer(ex, targs)), "stock": _contender(timer=_vm_timer(stock, targs)),
                  "torch": _contender(lambda: torch_fn(*tx), setup=lambda: torch.set_num_threads(cores)),
                  "torch1": _contender(lambda: torch_fn(*tx), setup=lambda: torch.set_num_threads(1)),
                  "numpy": _contender(lambda: np_fn(*xs))}
    picks = []
    for d in report.decisions:
        picks.append(d.name)
        for cand, verdict in candidates(d.workload, target):
            if not verdict:
                continue
            cc = CompiledCandidate(cand, d.workload, cand.default_config(d.workload, target), target)
            kin = [np.ascontiguousarray(x).reshape(s) for x, s in zip(xs, d.workload.shapes)]
            contenders[cand.name] = _contender(timer=_kernel_timer(cc, kin))
    by = bench_rounds(contenders, rounds, settle=PAUSE_S, rotate=True)  # rotate who goes first
    pick = min if stat == "min" else statistics.median
    med = {name: pick(ts) for name, ts in by.items()}
    # PyTorch's best configuration: its OpenMP team suffers on a loaded 2-core box, one thread may win
    best_torch = min(("torch", "torch1"), key=lambda k: med[k])
    med["torch"], by["torch"] = med.pop(best_torch), by[best_torch]
    med.pop("torch1", None)
    if stat == "min":
        ratio = lambda a, b: med[a] / med[b]  # noqa: E731
    else:
        # medians of per-round ratios over every round (no busy round dropped)
        ratio = lambda a, b: summarize({a: by[a], b: by[b]}, b, busy=None)[a]["ratio"]  # noqa: E731
    return {"op": name, "size": size, "pick": "+".join(picks) or "fallback (fused element-wise)",
            "torch_threads": 1 if best_torch == "torch1" else cores,
            "us": {k: v * 1e6 for k, v in med.items()},
            "ext/torch": ratio("ext", "torch"), "stock/ext": ratio("stock", "ext"), "ext/numpy": ratio("ext", "numpy")}


def table(rows):
    head = f"{'op':<20}{'size':<24}{'ext pick':<28}{'ext us':>9}{'torch':>9}{'numpy':>9}{'stock':>10}" \
           f"{'ext/torch':>10}{'stock/ext':>10}  candidates (kernel alone, us)"
    lines = [head, "-" * len(head)]
    for r in rows:
        us = r["us"]
        cands = ", ".join(f"{k}={v:.1f}" for k, v in us.items() if k not in ("ext", "stock", "torch", "numpy"))
        cands = f"[torch {r['torch_threads']}T] " + cands
        lines.append(f"{r['op']:<20}{r['size']:<24}{r['pick'][:27]:<28}{us['ext']:>9.1f}{us['torch']:>9.1f}"
                     f"{us['numpy']:>9.1f}{us['stock']:>10.1f}{r['ext/torch']:>10.2f}{r['stock/ext']:>10.1f}  {cands}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", nargs="*", help="op names to run (default: all), e.g. softmax layer_norm sum(-1)")
    cli.common_args(p, rounds=15, threads=True, rounds_help="interleaved rounds per op")
    p.add_argument("--stat", choices=("min", "median"), default="min",
                   help="per-contender statistic over rounds (default: min)")
    args = p.parse_args(argv)
    cli.apply_threads(args)
    cores = args.threads or ext.target.usable_cores()  # PyTorch's "all cores" contender
    torch.set_num_threads(cores)
    target = ext.target.cpu()
    specs = [s for s in ops() if not args.ops or s[0] in args.ops]
    if not specs:
        p.error(f"no op matches {args.ops}; known: {sorted({s[0] for s in ops()})}")
    print(f"# {ext.target.describe(target)}, torch {torch.__version__} threads={torch.get_num_threads()}, "
          f"{args.rounds} rounds, statistic: {args.stat}")
    rows = []
    for spec in specs:
        rows.append(bench_op(spec, args.rounds, target, args.stat, cores))
        print(f"  {rows[-1]['op']} {rows[-1]['size']}: ext {rows[-1]['us']['ext']:.1f} us", flush=True)
    print(table(rows))
    cli.write_json(args.json, rows)


if __name__ == "__main__":
    main()
