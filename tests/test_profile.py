"""ext.profile: per-symbol time is the median over runs, so one preempted call does not land on a kernel."""
from __future__ import annotations

import pytest

from ext.profile import candidate_of, format_rows, profile


class _FakeVM:
    """Calls the instrument around scripted kernel calls; ``durations[run]`` = [(symbol, seconds)]."""

    def __init__(self, durations):
        self.durations, self.run, self.now, self.instrument = durations, -1, 0.0, None

    def clock(self):
        return self.now

    def set_instrument(self, fn):
        self.instrument = fn

    def __getitem__(self, name):
        assert name == "main"
        return self._main

    def _main(self):
        self.run += 1
        for symbol, seconds in self.durations[self.run]:
            if self.instrument:
                self.instrument(None, symbol, True, None)
            self.now += seconds
            if self.instrument:
                self.instrument(None, symbol, False, None)


def test_profile_takes_the_median_run_per_symbol():
    typical = [("matmul_packed", 1e-3), ("vm.builtin.alloc_tensor", 2e-6), ("matmul_packed", 1e-3)]
    outlier = [("matmul_packed", 1e-3), ("vm.builtin.alloc_tensor", 5e-3), ("matmul_packed", 1e-3)]
    vm = _FakeVM([typical] + [typical, outlier, typical, typical, typical])  # warm-up run first
    rows = {r["symbol"]: r for r in profile(vm, [], runs=5, clock=vm.clock)}
    assert rows["matmul_packed"]["calls"] == 2
    assert rows["matmul_packed"]["ms"] == pytest.approx(2.0)
    assert rows["vm.builtin.alloc_tensor"]["ms"] == pytest.approx(0.002)  # the 5 ms call is one run of five
    assert rows["matmul_packed"]["candidate"] == "matmul.packed"
    assert rows["vm.builtin.alloc_tensor"]["candidate"] == "vm"
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)
    assert "matmul_packed" in format_rows(list(rows.values()))


def test_a_symbol_missing_from_some_runs_counts_zero_there():
    base = [("conv2d_winograd", 1e-3)]
    vm = _FakeVM([base, base + [("rare_kernel", 1e-3)], base, base])
    rows = {r["symbol"]: r for r in profile(vm, [], runs=3, clock=vm.clock)}
    assert rows["rare_kernel"]["ms"] == 0.0 and rows["conv2d_winograd"]["ms"] == pytest.approx(1.0)
    assert candidate_of("fused_add_relu") == "fallback"
