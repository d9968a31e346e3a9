"""Per-kernel time attribution for a built Relax executable (``--profile`` in the scripts).

Uses the VM's instrument hook: every VM call is timed (wall clock, CPU kernels
are synchronous) and attributed to its symbol; symbols map back to candidate
names (ext kernels are named after their candidate: ``matmul_packed``,
``conv2d_winograd_in1`` for an input transform), stock fused kernels to
``fallback`` and VM builtins to ``vm``.
"""
from __future__ import annotations

import statistics
import time

from .strategies import REGISTRY


#: kernels a graph pass emits itself, outside the registry (a reading order, not a tiling)
PASS_KERNELS = ("expert_matmul", "expert_route", "kv_append")


def candidate_of(symbol: str) -> str:
    """The candidate a kernel symbol belongs to (``fallback`` / ``vm`` otherwise)."""
    if symbol.startswith("vm.builtin") or symbol.startswith("vm."):
        return "vm"
    for stem in PASS_KERNELS:
        if symbol.startswith(stem):
            return stem
    best = ""
    for cand in REGISTRY:
        stem = cand.name.replace(".", "_")
        if symbol == stem or symbol.startswith(stem + "_") or symbol.startswith(stem):
            best = cand.name if len(cand.name) > len(best) else best
    return best or "fallback"


def profile(vm, args, runs: int = 5, clock=time.perf_counter) -> list[dict]:
    """Run ``vm["main"](*args)`` ``runs`` times and return per-symbol rows sorted by time.

    Each row: ``symbol``, ``candidate``, ``calls`` (per run), ``ms`` (per run: the median over
    the runs of the symbol's time in that run), ``share``. The median, not the mean: on a
    shared machine one preempted call adds milliseconds to whichever symbol it hits (a 1.5 us
    ``vm.builtin.alloc_tensor`` once showed 156 us per call in a mean over 10 runs).
    """
    per_run: list[dict[str, list]] = []
    starts: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *rest):
        now = clock()
        if before_run:
            starts[symbol] = now
        else:
            entry = per_run[-1].setdefault(symbol, [0, 0.0])
            entry[0] += 1
            entry[1] += now - starts.pop(symbol, now)
        return 0  # VMInstrumentReturnKind.NO_OP: keep running

    vm["main"](*args)  # warm-up, not recorded
    vm.set_instrument(instrument)
    try:
        for _ in range(runs):
            per_run.append({})
            vm["main"](*args)
    finally:
        vm.set_instrument(None)
    symbols = {s for run in per_run for s in run}
    stats = {}
    for s in symbols:  # a run without the symbol counts as zero calls, zero time
        calls, secs = zip(*(run.get(s, (0, 0.0)) for run in per_run))
        stats[s] = statistics.median(calls), statistics.median(secs)
    total = sum(t for _, t in stats.values()) or 1.0
    rows = [{"symbol": s, "candidate": candidate_of(s), "calls": c, "ms": t * 1e3, "share": t / total}
            for s, (c, t) in stats.items()]
    return sorted(rows, key=lambda r: -r["ms"])


def format_rows(rows: list[dict], limit: int = 25) -> str:
    lines = ["| kernel | candidate | calls | ms | share |", "|---|---|---|---|---|"]
    for r in rows[:limit]:
        lines.append(f"| {r['symbol']} | {r['candidate']} | {r['calls']:.0f} | {r['ms']:.3f} | {r['share'] * 100:.1f}% |")
    if len(rows) > limit:
        rest = rows[limit:]
        lines.append(f"| ({len(rest)} more) | | {sum(r['calls'] for r in rest):.0f} | "
                     f"{sum(r['ms'] for r in rest):.3f} | {sum(r['share'] for r in rest) * 100:.1f}% |")
    return "\n".join(lines)
