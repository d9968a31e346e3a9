"""The timing harness (ext.bench) on fake clocks, and the scripts' shared argument parser (ext.cli).

Why: every benchmark number and the build-time library race go through these few
functions; a wrong dropped-round rule or a rotation off by one would silently skew every
comparison, so the statistics are pinned here on scripted times, not on a real clock.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from ext import bench, cli
from ext.libraries import measure

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-12


class FakeClock:
    """A clock that only moves when a fake kernel "runs"."""

    def __init__(self):
        self.t = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.t

    def kernel(self, name: str, costs):
        """A callable costing the next value of ``costs`` (an iterable) or ``costs`` itself per call."""
        it = iter(costs) if isinstance(costs, (list, tuple)) else None

        def run():
            self.calls.append(name)
            self.t += next(it) if it is not None else costs

        return run


def test_burst_adaptive_stops_at_min_seconds_after_one_warmup():
    clock = FakeClock()
    secs = bench.burst(clock.kernel("a", 0.003), min_seconds=0.01, clock=clock)
    assert len(clock.calls) == 1 + 4  # warm-up untimed, then 4 calls reach 12 ms >= 10 ms
    assert abs(secs - 0.003) < TOL


def test_burst_fixed_number_and_cap():
    clock = FakeClock()
    # the warm-up call (5 s) is not timed: the 7 timed calls cost 1 ms each
    secs = bench.burst(clock.kernel("a", [5.0] + [0.001] * 7), number=7, clock=clock)
    assert len(clock.calls) == 8 and abs(secs - 0.001) < TOL
    clock = FakeClock()
    bench.burst(clock.kernel("a", 1e-9), min_seconds=1.0, max_iters=13, clock=clock)
    assert len(clock.calls) == 1 + 13


@pytest.mark.parametrize("kw, word", [({"number": 0}, "number"), ({"max_iters": 0}, "max_iters")])
def test_burst_rejects_bad_counts(kw, word):
    with pytest.raises(ValueError, match=word):
        bench.burst(lambda: None, **kw)


def _order(calls: list[str], per_burst: int) -> list[str]:
    """Contender order of the bursts from a call log (``per_burst`` calls each, warm-up included)."""
    return calls[::per_burst]


@pytest.mark.parametrize("rotate, expect", [
    (False, ["a", "b", "c"] * 3),
    (True, ["a", "b", "c", "b", "c", "a", "c", "a", "b"]),
])
def test_rounds_order_and_raw_times(rotate, expect):
    clock = FakeClock()
    fns = {n: clock.kernel(n, cost) for n, cost in (("a", 0.002), ("b", 0.003), ("c", 0.005))}
    times = bench.rounds(fns, 3, settle=0.0, rotate=rotate, number=2, clock=clock)
    assert _order(clock.calls, 3) == expect
    assert list(times) == ["a", "b", "c"]
    for name, cost in (("a", 0.002), ("b", 0.003), ("c", 0.005)):
        assert len(times[name]) == 3 and all(abs(t - cost) < TOL for t in times[name])


def test_rounds_rejects_nothing_to_time():
    with pytest.raises(ValueError, match="no contenders"):
        bench.rounds({}, 3)
    with pytest.raises(ValueError, match="at least 1 round"):
        bench.rounds({"a": lambda: None}, 0)


def test_summarize_drops_busy_reference_rounds():
    # round 2: the reference ran 3x its best (the machine was busy) -> dropped
    times = {"ref": [1.0, 1.0, 3.0, 1.0, 1.0], "x": [2.0, 2.2, 1.0, 2.4, 2.6]}
    s = bench.summarize(times, "ref")["x"]
    assert s["kept"] == 4
    assert abs(s["ratio"] - 2.3) < TOL and abs(s["median_s"] - 2.3) < TOL
    assert abs(s["ratio_all"] - 2.2) < TOL and abs(s["median_all_s"] - 2.2) < TOL
    assert s["best_s"] == 1.0 and abs(s["best_ratio"] - 1.0 / 3.0) < TOL
    assert s["spread"] == (2.0, 2.6)
    kept = [2.0, 2.2, 2.4, 2.6]
    assert abs(s["q20_s"] - np.quantile(kept, 0.2)) < TOL and abs(s["q80_s"] - np.quantile(kept, 0.8)) < TOL
    # busy=None keeps every round: the statistic bench_ops --stat median reports
    assert abs(bench.summarize(times, "ref", busy=None)["x"]["ratio"] - 2.2) < TOL


def test_summarize_keeps_at_least_half_unless_told_not_to():
    ref = [1.0, 2.0, 2.0, 2.0, 9.0]
    times = {"ref": ref, "x": [3.0, 4.0, 6.0, 8.0, 90.0]}
    # only round 0 is within 1.5x: the fastest half (3 of 5 rounds: 0, 1, 2) is kept instead
    half = bench.summarize(times, "ref")["x"]
    assert half["kept"] == 3 and abs(half["ratio"] - 3.0) < TOL and abs(half["median_s"] - 4.0) < TOL
    # bench_conv2d's rule: rounds within 1.25x of the best reference round, however few
    calm = bench.summarize(times, "ref", busy=1.25, keep_half=False)["x"]
    assert calm["kept"] == 1 and abs(calm["ratio"] - 3.0) < TOL and abs(calm["median_s"] - 3.0) < TOL
    # two of five within 1.5x is still under half: (5 + 1) // 2 = 3 rounds are kept
    assert bench.kept_rounds([1.0, 1.2, 2.0, 2.5, 9.0]) == [0, 1, 2]
    # exactly 1.5x the best is not busy
    assert bench.kept_rounds([2.0, 3.0, 3.0001, 2.0, 2.0], keep_half=False) == [0, 1, 3, 4]


@pytest.mark.parametrize("times, ref, word", [
    ({"a": [1.0]}, "b", "not a contender"),
    ({"a": [1.0, 2.0], "b": [1.0]}, "a", "rounds"),
    ({"a": [], "b": []}, "a", "rounds"),
])
def test_summarize_rejects_malformed_times(times, ref, word):
    with pytest.raises(ValueError, match=word):
        bench.summarize(times, ref)


def test_interleaved_is_summarize_of_rounds():
    clock = FakeClock()
    fns = {"ref": clock.kernel("ref", 0.004), "x": clock.kernel("x", 0.006)}
    res = bench.interleaved(fns, "ref", rounds=5, settle=0.0, number=3, clock=clock)
    assert abs(res["x"]["ratio"] - 1.5) < 1e-9 and abs(res["ref"]["median_s"] - 0.004) < 1e-12
    with pytest.raises(ValueError, match="not a contender"):
        bench.interleaved(fns, "numpy", rounds=1)


def test_contender_timer_setup_and_calibrate():
    log = []

    def timer(n):
        log.append(n)
        return 1e-4  # seconds per call

    c = bench.calibrate(bench.Contender(timer=timer, setup=lambda: log.append("setup")), seconds=0.002)
    assert c.number == 20 and log == ["setup", 1, 1]  # setup, warm-up call, one timed call
    log.clear()
    times = bench.rounds({"t": c}, 2, settle=0.0)
    assert times == {"t": [1e-4, 1e-4]} and log == ["setup", 1, 20] * 2
    slow = bench.calibrate(bench.Contender(timer=lambda n: 1.0), seconds=0.002, min_calls=3)
    assert slow.number == 3
    with pytest.raises(ValueError, match="number of calls"):
        bench.rounds({"t": bench.Contender(timer=timer)}, 1, settle=0.0)
    with pytest.raises(ValueError, match="exactly one"):
        bench.Contender()


def test_library_race_rotates_and_returns_raw_rounds(monkeypatch):
    monkeypatch.setattr(measure, "SETTLE_S", 0.0)
    order = []
    calls = {n: (lambda n=n: order.append(n)) for n in ("ours", "lib@1", "lib@all")}
    times = measure.race(calls, rounds=3, min_seconds=0.0)
    assert set(times) == set(calls) and all(len(ts) == 3 for ts in times.values())
    starts = order[::2]  # min_seconds=0: a warm-up and one timed call per burst
    assert starts == ["ours", "lib@1", "lib@all", "lib@1", "lib@all", "ours", "lib@all", "ours", "lib@1"]


# -- ext.cli -----------------------------------------------------------------------------------------


def test_parse_shape_accepts_and_names_the_bad_field():
    assert cli.parse_shape("7x13x5") == (7, 13, 5) and cli.parse_shape(" 1X1X3 ") == (1, 1, 3)
    assert cli.parse_shape("3x5", names="MN") == (3, 5)
    assert cli.format_shape((7, 13, 5)) == "7x13x5"
    for text, word in (("64xax9", "N is 'a'"), ("0x5x5", "M is '0'"), ("7x13x-5", "K is '-5'"),
                       ("64x64", "2 fields, expected 3"), ("7x13x5x3", "4 fields"), ("", "1 fields"),
                       ("7x\u00b2x5", "N is '\u00b2'"), ("7x1.5x5", "N is '1.5'")):
        with pytest.raises(ValueError, match=word):
            cli.parse_shape(text)


def _parser(**kw):
    ap = argparse.ArgumentParser(prog="t")
    ap.add_argument("--shapes", nargs="+", type=cli.parse_shape, default=[(7, 13, 5)])
    return cli.common_args(ap, **kw)


def test_common_args_flags_and_errors(capsys):
    args = _parser(rounds=9, threads=True, plot=True, quick="small").parse_args([])
    assert (args.rounds, args.threads, args.json, args.plot, args.quick) == (9, 0, None, None, False)
    args = _parser().parse_args(["--shapes", "3x5x7", "11x13x17", "--rounds", "1", "--json", "o.json"])
    assert args.shapes == [(3, 5, 7), (11, 13, 17)] and args.rounds == 1 and args.json == "o.json"
    assert not hasattr(args, "threads") and not hasattr(args, "plot")
    for argv, word in ((["--shapes", "64xbx3"], "N is 'b'"), (["--rounds", "0"], "must be >= 1, got 0"),
                       (["--rounds", "two"], "not a whole number")):
        with pytest.raises(SystemExit):
            _parser().parse_args(argv)
        assert word in capsys.readouterr().err
    assert _parser(min_rounds=0).parse_args(["--rounds", "0"]).rounds == 0


def test_apply_threads_sets_tvm_and_blas(monkeypatch):
    limits = []
    monkeypatch.setitem(sys.modules, "threadpoolctl", types.SimpleNamespace(threadpool_limits=limits.append))
    monkeypatch.setenv("TVM_NUM_THREADS", "5")
    assert cli.apply_threads(argparse.Namespace(threads=0)) == 5 and limits == []
    assert cli.apply_threads(None) == 5
    assert cli.apply_threads(argparse.Namespace(threads=3)) == 3
    assert os.environ["TVM_NUM_THREADS"] == "3" and limits == [3]
    monkeypatch.setenv("TVM_NUM_THREADS", "two")
    with pytest.raises(SystemExit, match="TVM_NUM_THREADS='two'"):
        cli.apply_threads(None)


def test_write_json(tmp_path):
    path = tmp_path / "a" / "b.json"
    assert cli.write_json(None, {"x": 1}) is None
    assert cli.write_json(str(path), {"x": (1, 2)}) == str(path)
    assert json.loads(path.read_text()) == {"x": [1, 2]}


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_libraries_cases_parse_or_name_the_problem():
    lib = _script("bench_libraries")
    assert lib.parse_case("7x13x5:t:b3:plain") == (7, 13, 5, True, 3, True)
    assert lib.parse_case("7x13x5") == (7, 13, 5, False, None, False)
    assert lib.parse_conv("conv:c3h31o16k3") == (3, 31, 16, 3, 1)
    for case, word in (("7x0x5", "N is '0'"), ("7x13x5:q", "unknown suffix 'q'"),
                       ("conv:c3h0o16k3", "h is 0"), ("conv:c3h31", "expected conv:")):
        with pytest.raises(ValueError, match=word):
            lib.check_case(case)
