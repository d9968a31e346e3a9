#!/usr/bin/env python
"""Compile time: ext.build cold (empty cache) and warm (new process, cache filled) against
stock TVM's default pipeline, each build in a fresh process of the same kind.

    python scripts/bench_build.py                           # resnet18 resnet50 encoder
    python scripts/bench_build.py --models resnet50 densenet121 --repeats 3

Models are the built-in ones (``ext.models.torch_model``) or zoo names (``ext.models.zoo``).
Every contender imports the same module (torch.export, weights bound as constants) and
only the build call is timed; the cold build's cache write (deferred to process exit by
``ext.cache``) is timed apart and shown in its own column. Prints a markdown table of the median over ``--repeats``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ext import cli  # noqa: E402

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
import ext, tvm
from tvm import relax
name, mode = {name!r}, {mode!r}
from ext.models import TORCH_MODELS, torch_model
if name in TORCH_MODELS:
    module, inputs = torch_model(name)
else:
    from ext.models import zoo
    module, inputs = zoo.zoo_model(name)
mod = ext.frontend.from_torch(module, inputs)
target = ext.target.cpu()
t0 = time.perf_counter()
if mode == "stock":
    tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
    stages = []
else:
    ext.build(mod, target, verbose=False)
    stages = ext.last_report().stages
seconds = time.perf_counter() - t0
t1 = time.perf_counter()
ext.cache.wait()  # the deferred cache write (at exit otherwise): reported apart, not part of the build
print(json.dumps({{"seconds": seconds, "write_s": time.perf_counter() - t1, "stages": stages, "cached": bool(ext.last_report() and ext.last_report().cached)}}))
"""


def build_once(name: str, mode: str, cache_dir: str) -> dict:
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    env = dict(os.environ, EXT_CACHE_DIR=cache_dir, EXT_CACHE="1")
    out = subprocess.run([sys.executable, "-c", _CHILD.format(root=root, name=name, mode=mode)], env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{name} {mode}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="*", default=["resnet18", "resnet50", "encoder"])
    p.add_argument("--repeats", type=cli.count(1), default=3, help="cold/warm/stock builds per model (median)")
    cli.common_args(p, rounds=None)
    args = p.parse_args()
    rows = []
    print("| model | stock TVM s | ext cold s | cold / stock | ext warm s | warm / stock | cache write s | cold stages (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        cold, warm, stock, writes, stages = [], [], [], [], None
        for _ in range(args.repeats):  # interleaved: a slow spell of the VM hits all three alike
            with tempfile.TemporaryDirectory() as cache_dir:
                stock.append(build_once(name, "stock", cache_dir)["seconds"])
                c = build_once(name, "ext", cache_dir)
                w = build_once(name, "ext", cache_dir)
                assert not c["cached"] and w["cached"], (c, w)
                cold.append(c["seconds"])
                writes.append(c["write_s"])
                warm.append(w["seconds"])
                stages = stages or c["stages"]
        s, c, w = (statistics.median(v) for v in (stock, cold, warm))
        st = ", ".join(f"{n} {t:.1f}" for n, t, _ in stages)
        wr = statistics.median(writes)
        print(f"| {name} | {s:.2f} | {c:.2f} | {c / s:.2f} | {w:.2f} | {w / s:.2f} | {wr:.2f} | {st} |", flush=True)
        rows.append({"model": name, "stock_s": stock, "cold_s": cold, "warm_s": warm, "write_s": writes,
                     "stages": stages})
    cli.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
