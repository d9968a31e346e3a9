"""Random-graph fuzzing: ext.build on random small Relax graphs (``fuzz_graphs``) against a
float64 NumPy oracle, with stock TVM as the second opinion when they disagree.

The oracle is our own NumPy interpreter of the generated IR, not TVM: a mismatch
between ext and stock TVM is decided by float64 arithmetic, so a stock TVM error
cannot fail ext, and a bug shared by both cannot pass unnoticed.

Tolerance, per output: ``RTOL`` of its largest magnitude (float32 rounding; also
Winograd's 1e-4-of-the-largest-output bound) plus a forward-error probe: the float64
graph is evaluated again with every op's value perturbed by uniform noise of
``NOISE[op]`` of its largest magnitude, and ``PROBE_FACTOR`` times the deviation that
causes at the output is allowed on top. That covers ill-conditioned graphs
(cancellation, layer_norm of a near-constant row, exp of a noisy value) without
loosening well-conditioned ones; a wrong axis, epilogue or operand order is off by
O(1) of the output, far above it.

Each built function also runs twice on the same tensors: a changed input or a second
result that differs from the first is an in-place write where there must be none. A build
slower than ``BUILD_SECONDS_LIMIT`` fails too (compile-time blowups, e.g. nested tanh).

Profiles (tests/conftest.py): ``default`` (deterministic, a few dozen examples) and
``long`` (``pytest --hypothesis-profile=long tests/test_fuzz.py``, 1,000 examples).
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings

import ext
from fuzz_graphs import Graph, conv2d_nchw, graphs

RTOL = 1e-4
NOISE = {"conv2d": 1e-4, "matmul": 1e-5}  # relative to max|value|; other ops get NOISE_DEFAULT
NOISE_DEFAULT = 2e-6
PROBE_FACTOR = 4.0
PROBE_RUNS = 2
ATOL_FLOOR = 1e-6  # inputs are O(1): an output of exact zeros may come back as 1e-7
BUILD_SECONDS_LIMIT = 60.0  # examples build in ~0.1-1 s (stock TVM: ~0.3 s)


def tolerances(graph: Graph, ref: list[np.ndarray]) -> list[float]:
    """Allowed max abs error per output (see the module docstring)."""
    noise = {i: NOISE.get(n.op, NOISE_DEFAULT) for i, n in enumerate(graph.nodes) if n.op not in ("input", "const")}
    dev = [0.0] * len(ref)
    for k in range(PROBE_RUNS):
        noisy = graph.evaluate(np.float64, noise=noise, rng=np.random.default_rng([graph.seed, k]))
        dev = [max(d, float(np.max(np.abs(a - r), initial=0.0))) for d, a, r in zip(dev, noisy, ref)]
    return [RTOL * float(np.max(np.abs(r), initial=0.0)) + PROBE_FACTOR * d + ATOL_FLOOR for r, d in zip(ref, dev)]


def mismatches(outs: list[np.ndarray], ref: list[np.ndarray], tols: list[float]) -> list[str]:
    """One line per output that differs from the oracle by more than its tolerance."""
    if len(outs) != len(ref):
        return [f"{len(outs)} outputs, expected {len(ref)}"]
    bad = []
    for k, (o, r, t) in enumerate(zip(outs, ref, tols)):
        if o.shape != r.shape:
            bad.append(f"output {k}: shape {o.shape} != {r.shape}")
            continue
        if np.isnan(o).any():
            bad.append(f"output {k}: {int(np.isnan(o).sum())} NaN of {o.size}")
            continue
        err = float(np.max(np.abs(o.astype(np.float64) - r), initial=0.0))
        if not err <= t:
            bad.append(f"output {k} {r.shape}: max abs err {err:.3g} > tol {t:.3g} (max |ref| "
                       f"{float(np.max(np.abs(r), initial=0.0)):.3g})")
    return bad


def _as_list(out) -> list[np.ndarray]:
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def _outputs(ex, graph: Graph) -> list[np.ndarray]:
    """Run twice on the same tensors: an in-place write into an input or a constant (weights)
    shows up as a changed input or a second result that differs from the first."""
    import tvm
    from tvm import relax

    arrays = graph.input_arrays()
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in arrays]
    first = _as_list(vm["main"](*args))
    changed = [k for k, (a, t) in enumerate(zip(arrays, args)) if not np.array_equal(a, t.numpy(), equal_nan=True)]
    if changed:
        raise AssertionError(f"the built function wrote into its inputs {changed}")
    second = _as_list(vm["main"](*args))
    if any(not np.array_equal(x, y, equal_nan=True) for x, y in zip(first, second)):
        raise AssertionError("a second call on the same inputs gave a different result (state kept between calls)")
    return first


def ext_outputs(graph: Graph, target) -> list[np.ndarray]:
    start = time.perf_counter()
    ex = ext.build(graph.to_relax(), target)
    secs = time.perf_counter() - start
    if secs > BUILD_SECONDS_LIMIT:  # a compile-time blowup, not machine noise: graphs build in ~1 s
        raise AssertionError(f"ext.build took {secs:.0f} s on a {graph.num_ops()}-op graph")
    return _outputs(ex, graph)


def stock_outputs(graph: Graph, target) -> list[np.ndarray]:
    import tvm
    from tvm import relax

    ex = tvm.compile(graph.to_relax(), target, relax_pipeline=relax.get_default_pipeline(target))
    return _outputs(ex, graph)


def _second_opinion(graph: Graph, target, ref, tols) -> str:
    try:
        bad = mismatches(stock_outputs(graph, target), ref, tols)
    except Exception as e:  # noqa: BLE001 - stock's own failure is information, not the verdict
        return f"stock TVM failed too: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    if bad:
        return "stock TVM ALSO disagrees with float64 (shared TVM bug or oracle bug): " + "; ".join(bad)
    return "stock TVM agrees with float64: the error is ext's"


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(graph=graphs())
def test_ext_matches_float64_oracle(graph: Graph, cpu_target):
    note(graph.repro())
    ref = graph.evaluate(np.float64)
    tols = tolerances(graph, ref)
    try:
        outs = ext_outputs(graph, cpu_target)
    except Exception as e:
        raise AssertionError(f"ext crashed: {type(e).__name__}: {str(e)[-600:]}\n{graph.script()}") from e
    bad = mismatches(outs, ref, tols)
    if bad:
        raise AssertionError("ext differs from float64 NumPy: " + "; ".join(bad) + "\n"
                             + _second_opinion(graph, cpu_target, ref, tols) + "\n" + graph.repro()
                             + "\n# standalone (other data):\n" + graph.script())


@settings(max_examples=max(3, settings().max_examples // 5),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(graph=graphs())
def test_oracle_agrees_with_stock_tvm(graph: Graph, cpu_target):
    """The oracle itself: stock TVM must match it unless ext does and stock is the one wrong."""
    ref = graph.evaluate(np.float64)
    tols = tolerances(graph, ref)
    bad = mismatches(stock_outputs(graph, cpu_target), ref, tols)
    if bad:
        ext_bad = mismatches(ext_outputs(graph, cpu_target), ref, tols)
        assert not ext_bad, ("oracle disagrees with stock TVM and with ext: " + "; ".join(bad) + "\n"
                             + graph.repro())
        pytest.skip("stock TVM's own error (ext agrees with float64): " + "; ".join(bad))


# ------------------------------------------------------------ the oracle's pieces, vs PyTorch

@pytest.mark.parametrize("n,c,h,w,o,k,stride,pad,dil,groups", [
    (1, 3, 7, 5, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 4, 13, 13, 8, (5, 1), (2, 1), (2, 0, 1, 0), (1, 1), 2),
    (1, 6, 9, 11, 12, (3, 3), (1, 2), (2, 2, 2, 2), (2, 2), 6),
    (1, 1, 1, 1, 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
])
def test_oracle_conv2d_matches_torch(n, c, h, w, o, k, stride, pad, dil, groups):
    import torch
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, w))
    wt = rng.standard_normal((o, c // groups, *k))
    got = conv2d_nchw(x, wt, stride, pad, dil, groups)
    xp = torch.nn.functional.pad(torch.from_numpy(x), (pad[1], pad[3], pad[0], pad[2]))
    want = torch.nn.functional.conv2d(xp, torch.from_numpy(wt), stride=stride, dilation=dil, groups=groups).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_oracle_activations_match_torch():
    from fuzz_graphs import _UNARY_NP

    import torch

    x = np.linspace(-9.0, 9.0, 1013)
    t = torch.from_numpy(x)
    F = torch.nn.functional
    want = {"relu": F.relu(t), "gelu": F.gelu(t), "gelu_tanh": F.gelu(t, approximate="tanh"), "silu": F.silu(t),
            "sigmoid": torch.sigmoid(t), "tanh": torch.tanh(t), "exp": torch.exp(t), "pow3": t ** 3, "neg": -t}
    for name, ref in want.items():
        np.testing.assert_allclose(_UNARY_NP[name](x), ref.numpy(), rtol=1e-12, atol=1e-12, err_msg=name)


def test_tolerance_rejects_a_wrong_epilogue():
    """The tolerance must be able to fail: relu instead of gelu on a matmul is caught."""
    from fuzz_graphs import _Builder, _node

    b = _Builder(seed=3)
    x = b.leaf("input", (13, 17))
    w = b.leaf("const", (17, 5), scale=17 ** -0.5)
    y = b.add(_node("gelu", [b.add(_node("matmul", [x, w]))]))
    b.g.outputs = (y,)
    ref = b.g.evaluate(np.float64)
    tols = tolerances(b.g, ref)
    wrong = np.maximum(b.vals[y - 1], 0.0)  # relu(x @ w)
    assert mismatches([ref[0].astype(np.float32)], ref, tols) == []
    assert mismatches([wrong.astype(np.float32)], ref, tols) != []


@settings(max_examples=60)
@given(graph=graphs())
def test_generated_graphs_are_small_and_well_defined(graph: Graph):
    ref = graph.evaluate(np.float64)
    assert 1 <= graph.num_ops() and all(np.all(np.isfinite(r)) for r in ref)
    assert all(np.prod(n.attr("shape", ())) <= 50_000 for n in graph.nodes if n.op == "input")
    assert [a.shape for a in graph.evaluate(np.float32)] == [r.shape for r in ref]
