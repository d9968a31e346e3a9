"""FuseExpertGather: ``matmul(take(w, ids), v)`` (mixture-of-experts experts, transformers'
batched_mm) becomes the expert_matmul kernel, which reads ``w[ids[s]]`` in place. Both weight
layouts, odd sizes, symbolic rows, weights bound or passed as parameters, against NumPy."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.relax_passes.expert_matmul import FuseExpertGather, _cols
from ext.testing import assert_close

RTOL = 1e-5


def _module(E, K, N, S, transposed: bool, w_value=None, ids_dtype="int64"):
    """``main(x (S, K), ids (S,)[, w])``: ``take(w, ids)`` then a batched matrix-vector product
    in transformers' layout (``w (E, N, K)``, product ``w_s @ x_s``) or the transposed one
    (``w (E, K, N)``, ``x_s @ w_s``); returns ``(S, N)``. ``w_value``: bind it as a constant."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([S, K], "float32"))
    ids = relax.Var("ids", relax.TensorType([S], ids_dtype))
    wshape = [E, K, N] if transposed else [E, N, K]
    w = relax.const(w_value) if w_value is not None else relax.Var("w", relax.TensorType(wshape, "float32"))
    params = [x, ids] + ([] if w_value is not None else [w])
    with bb.function("main", params):
        with bb.dataflow():
            sel = bb.emit(relax.op.take(w, ids, axis=0, mode="fast"))
            if transposed:
                y = bb.emit(relax.op.matmul(relax.op.expand_dims(x, 1), sel))
            else:
                y = bb.emit(relax.op.matmul(sel, relax.op.expand_dims(x, 2)))
            out = bb.emit_output(relax.op.reshape(y, [S, N]))
        bb.emit_func_output(out)
    return bb.get()


def _reference(x, ids, w, transposed):
    sel = w[ids]
    return np.einsum("sk,skn->sn", x, sel) if transposed else np.einsum("snk,sk->sn", sel, x)


def _data(E, K, N, S, transposed, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((S, K)).astype("float32")
    ids = rng.integers(0, E, S).astype("int64")
    w = rng.standard_normal((E, K, N) if transposed else (E, N, K)).astype("float32")
    return x, ids, w


def _run(ex, *args):
    return relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("E,K,N,S", [(3, 13, 37, 11), (4, 40, 64, 1), (5, 64, 96, 23), (2, 7, 5, 3),
                                     (2, 33, 48, 64), (3, 3, 16, 40)])
def test_bound_weights_match_numpy(cpu_target, transposed, E, K, N, S):
    x, ids, w = _data(E, K, N, S, transposed)
    ex = ext.build(_module(E, K, N, S, transposed, w_value=w), cpu_target)
    assert_close(_run(ex, x, ids), _reference(x, ids, w, transposed), rtol=RTOL, atol=RTOL * 10,
                 what=f"expert matmul E={E} K={K} N={N} S={S}")


@pytest.mark.parametrize("transposed", [False, True])
def test_runtime_weights_and_int32_ids(cpu_target, transposed):
    E, K, N, S = 3, 19, 40, 9
    x, ids, w = _data(E, K, N, S, transposed, seed=1)
    ex = ext.build(_module(E, K, N, S, transposed, ids_dtype="int32"), cpu_target)
    assert_close(_run(ex, x, ids.astype("int32"), w), _reference(x, ids, w, transposed), rtol=RTOL, atol=RTOL * 10,
                 what="expert matmul, weights as an argument")


def test_symbolic_rows(cpu_target):
    E, K, N = 4, 24, 48
    S = tvm.tirx.Var("S", "int64")
    _, _, w = _data(E, K, N, 1, False, seed=2)
    ex = ext.build(_module(E, K, N, S, False, w_value=w), cpu_target)
    for rows in (1, 6, 31):
        x, ids, _ = _data(E, K, N, rows, False, seed=rows)
        assert_close(_run(ex, x, ids), _reference(x, ids, w, False), rtol=RTOL, atol=RTOL * 10,
                     what=f"expert matmul, {rows} rows of a symbolic count")


def test_nan_in_a_row_stays_in_that_row(cpu_target):
    E, K, N, S = 3, 16, 32, 5
    x, ids, w = _data(E, K, N, S, False, seed=3)
    x[2, 5] = np.nan
    got = _run(ext.build(_module(E, K, N, S, False, w_value=w), cpu_target), x, ids)
    assert np.isnan(got[2]).all() and not np.isnan(np.delete(got, 2, axis=0)).any()


def test_every_expert_and_none(cpu_target):
    """All rows on one expert (whole tiles and a tail), and experts no row chose."""
    E, K, N, S = 4, 20, 32, 29
    x, _, w = _data(E, K, N, S, True, seed=4)
    ex = ext.build(_module(E, K, N, S, True, w_value=w), cpu_target)
    for ids in (np.full(S, 3, "int64"), np.arange(S, dtype="int64") % 2):
        assert_close(_run(ex, x, ids), _reference(x, ids, w, True), rtol=RTOL, atol=RTOL * 10, what=f"ids {ids[:4]}")


def test_an_index_out_of_range_raises(cpu_target):
    """The indices are the range-checked copy (CheckTakeIndices runs first): IndexError, no read
    outside the weights."""
    E, K, N, S = 3, 8, 16, 4
    x, ids, w = _data(E, K, N, S, False, seed=5)
    ex = ext.build(_module(E, K, N, S, False, w_value=w), cpu_target)
    ids[1] = E
    with pytest.raises(Exception, match="IndexError|out of range"):
        _run(ex, x, ids)


def test_the_gather_is_gone(cpu_target):
    """After the pass no ``take`` of the weights is left: the product reads them in place."""
    E, K, N, S = 4, 32, 64, 8
    _, _, w = _data(E, K, N, S, False)
    mod = _module(E, K, N, S, False, w_value=w)
    with cpu_target:
        out = FuseExpertGather(cpu_target)(mod)
    text = out.script(show_meta=False)
    assert "R.take" not in text and "expert_matmul" in text
    assert "R.matmul" not in text


def test_other_matmuls_of_a_gather_are_left_alone(cpu_target):
    """A take along another axis, or a product with more than one column per row, stays."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([6, 8, 2], "float32"))
    ids = relax.Var("ids", relax.TensorType([6], "int64"))
    w = relax.Var("w", relax.TensorType([3, 5, 8], "float32"))
    with bb.function("main", [x, ids, w]):
        with bb.dataflow():
            sel = bb.emit(relax.op.take(w, ids, axis=0))
            out = bb.emit_output(relax.op.matmul(sel, x))
        bb.emit_func_output(out)
    mod = bb.get()
    with cpu_target:
        assert "expert_matmul" not in FuseExpertGather(cpu_target)(mod).script(show_meta=False)


@pytest.mark.parametrize("N,lanes,want", [(1024, 8, 16), (48, 8, 16), (40, 8, 8), (37, 8, 1), (96, 16, 32), (100, 8, 10)])
def test_column_chunks_divide_n(N, lanes, want):
    assert _cols(N, lanes) == want and N % want == 0
