#!/usr/bin/env python
"""Do TVM's parallel kernels really run on all threads? A diagnosis of this VM's slow state.

Times one ext-built conv layer (ResNet-18's stride-2 3x3, 56x56x64 -> 28x28x128) in rounds:
on all threads, then with TVM's pool reconfigured to one thread, then on all threads again
(``runtime.config_threadpool`` rebuilds the pool and re-pins its workers); between rounds
PyTorch runs a ResNet-18 on the same cores, as in ``compare_stock.py``. Each line shows where
the calling thread and TVM's worker threads ran.

On the 2-vCPU machine this project is measured on, some rounds come out "SLOW": the
all-threads time equals the one-thread time, so the two halves of every parallel kernel ran
one after the other; the same kernel right after the pool is reconfigured is fast again.
That is the state the README's caveat describes (ext's ResNet-18 at 17-19 ms instead of
11-12 ms). Compute-bound work outside TVM's pool (OpenBLAS, PyTorch) is not affected.

    python scripts/diagnose_threads.py --rounds 20
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (sets TVM_NUM_THREADS)
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from ext.bench import burst  # noqa: E402


def conv_module(x_shape, w, b):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(w), strides=2, padding=1))
            y = bb.emit(relax.op.nn.relu(relax.op.add(y, relax.const(b.reshape(1, -1, 1, 1)))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def placement() -> str:
    """``tid@cpu[allowed]`` for every thread of this process."""
    out = []
    for task in sorted(glob.glob("/proc/self/task/*")):
        try:
            cpu = open(f"{task}/stat").read().rsplit(")", 1)[1].split()[36]
            allowed = open(f"{task}/status").read().split("Cpus_allowed_list:")[1].split()[0]
        except (OSError, IndexError):  # the thread ended, or not Linux
            continue
        out.append(f"{os.path.basename(task)}@{cpu}[{allowed}]")
    return " ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--no-torch", action="store_true", help="do not run PyTorch between rounds")
    args = ap.parse_args(argv)
    threads = int(os.environ["TVM_NUM_THREADS"])
    config = tvm.get_global_func("runtime.config_threadpool")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 64, 56, 56)).astype("float32")
    w = (rng.uniform(-1, 1, (128, 64, 3, 3)) / 24).astype("float32")
    b = rng.uniform(-1, 1, 128).astype("float32")
    vm = relax.VirtualMachine(ext.build(conv_module(x.shape, w, b), ext.target.cpu()), tvm.cpu())
    fn, arg = vm["main"], tvm.runtime.tensor(x)
    other = None
    if not args.no_torch:
        import torch

        from ext.models.resnet import resnet18

        torch.set_num_threads(threads)
        model, xt = resnet18(), torch.randn(1, 3, 224, 224)

        def other():
            with torch.no_grad():
                burst(lambda: model(xt), 0.2)
    print(f"TVM threads: {threads}; times in ms (all threads / one thread / all threads after reconfiguring)")
    slow = 0
    for _ in range(args.rounds):
        time.sleep(0.3)
        where = placement()
        full = burst(lambda: fn(arg), 0.2) * 1e3
        config(1, 1)
        one = burst(lambda: fn(arg), 0.2) * 1e3
        config(1, threads)
        again = burst(lambda: fn(arg), 0.2) * 1e3
        state = "SLOW" if full > 0.75 * one else "ok  "
        slow += state == "SLOW"
        print(f"{state} {full:.3f} / {one:.3f} / {again:.3f}   {where}", flush=True)
        if other:
            other()
    print(f"{slow} of {args.rounds} rounds ran the parallel kernel at one-thread speed")


if __name__ == "__main__":
    main()
