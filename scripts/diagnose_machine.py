#!/usr/bin/env python
"""Is the machine itself slow right now? A diagnosis of this VM's slow state.

Times, in rounds: one ext-built conv layer (ResNet-18's stride-2 3x3, 56x56x64 ->
28x28x128) on all threads and with TVM's pool set to one thread, a single-threaded 256^3
SGEMM (NumPy's OpenBLAS) pinned to each CPU in turn, and the same SGEMM on all threads.
Between rounds PyTorch runs a ResNet-18 on the same cores, as in ``compare_stock.py``.

On the 2-vCPU machine this project is measured on, stretches of seconds come out slow in
which every *parallel* run loses while single-threaded runs do not: the all-threads SGEMM
fell from ~180 to ~121 GFLOPS with the one-thread SGEMM unchanged at ~103 on either CPU, and
ext's ResNet-50 took 48.7-50.1 ms instead of 36-38 ms in the same rounds. The two vCPUs are
then slower together than apart, as if the host ran them on one physical core; nothing in
the process causes it. ext's kernels lose up to 2x in that state, PyTorch and onnxruntime
5-10%. That is the README's caveat; a benchmark run that falls into it shows it in its
median, not in its fastest round.

    python scripts/diagnose_machine.py --rounds 20
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

from ext import cli  # noqa: E402
from ext.bench import burst  # noqa: E402
from ext.models.conv import conv_bias_relu  # noqa: E402


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


def sgemm_gflops(cpu: int | None, cpus: list[int], n: int = 256) -> float:
    """n^3 SGEMM GFLOPS: on one thread pinned to ``cpu``, or on every thread (``cpu=None``)."""
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    c = np.empty_like(a)
    if cpu is None:
        secs = burst(lambda: np.matmul(a, a, out=c), 0.1)
        time.sleep(0.3)  # OpenBLAS's threads stop spinning
        return 2.0 * n ** 3 / secs / 1e9
    os.sched_setaffinity(0, {cpu})
    try:
        with threadpool_limits(1):
            secs = burst(lambda: np.matmul(a, a, out=c), 0.1)
    finally:
        os.sched_setaffinity(0, set(cpus))
    return 2.0 * n ** 3 / secs / 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.common_args(ap, rounds=12, json=False, rounds_help="measurement rounds")
    ap.add_argument("--no-torch", action="store_true", help="do not run PyTorch between rounds")
    args = ap.parse_args(argv)
    threads = int(os.environ["TVM_NUM_THREADS"])
    config = tvm.get_global_func("runtime.config_threadpool")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 64, 56, 56)).astype("float32")
    w = (rng.uniform(-1, 1, (128, 64, 3, 3)) / 24).astype("float32")
    b = rng.uniform(-1, 1, 128).astype("float32")
    vm = relax.VirtualMachine(ext.build(conv_bias_relu(x.shape, w, b, 2, 1), ext.target.cpu()), tvm.cpu())
    fn, arg = vm["main"], tvm.runtime.tensor(x)
    run_torch = None
    if not args.no_torch:
        import torch

        from ext.models.resnet import resnet18

        torch.set_num_threads(threads)
        model, xt = resnet18(), torch.randn(1, 3, 224, 224)
        run_torch = torch.no_grad()(lambda: burst(lambda: model(xt), 0.2))
    cpus = sorted(os.sched_getaffinity(0))
    print(f"TVM threads: {threads}; conv ms on all threads / on one; single-thread SGEMM GFLOPS per CPU")
    speeds = []
    for _ in range(args.rounds):
        time.sleep(0.3)
        where = placement()
        full = burst(lambda: fn(arg), 0.2) * 1e3
        config(1, 1)
        one = burst(lambda: fn(arg), 0.2) * 1e3
        config(1, threads)
        time.sleep(0.3)  # TVM's worker stops spinning
        gf = {c: sgemm_gflops(c, cpus) for c in cpus}
        together = sgemm_gflops(None, cpus)
        scaling = together / max(gf.values())
        speeds.append(scaling)
        cells = " ".join(f"cpu{c} {g:.0f}" for c, g in gf.items())
        print(f"{'SLOW' if scaling < 1.4 else 'ok  '} conv {full:.3f} / {one:.3f} ms   SGEMM GFLOPS {cells}, "
              f"all {together:.0f} ({scaling:.2f}x)   {where}", flush=True)
        if run_torch:
            run_torch()
    slow = sum(s < 1.4 for s in speeds)
    print(f"{slow} of {args.rounds} rounds: all threads together under 1.4x one thread's SGEMM speed")


if __name__ == "__main__":
    main()
