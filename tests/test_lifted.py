"""Stock rewrites run with the large constants lifted out (``relax_passes/lifted.py``)."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ext.relax_passes.lifted import MIN_LIFTED_ELEMENTS, LiftedPass


def _count(func, op_name: str) -> int:
    n = 0

    def visit(e):
        nonlocal n
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == op_name:
            n += 1

    relax.analysis.post_order_visit(func.body, visit)
    return n


def _module(weight: np.ndarray):
    x = relax.Var("x", relax.TensorType([64, 128], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(weight)
            w2 = bb.emit(relax.op.reshape(relax.op.reshape(w, (128, 64)), (64, 128)))  # a no-op pair
            y = bb.emit(relax.op.reshape(relax.op.reshape(x, (32, 256)), (16, 512)))
            out = bb.emit_output(relax.op.add(relax.op.reshape(y, (64, 128)), w2))
        bb.emit_func_output(out)
    return bb.get()


def test_lifted_reshape_removal_matches_the_stock_pass_and_keeps_the_weight():
    weight = np.random.default_rng(0).standard_normal((64, 128)).astype("float32")
    assert weight.size >= MIN_LIFTED_ELEMENTS  # so it is lifted
    mod = _module(weight)
    stock = relax.transform.RemoveRedundantReshape()(mod)
    lifted = LiftedPass(relax.transform.RemoveRedundantReshape())(mod)
    assert _count(lifted["main"], "relax.reshape") == _count(stock["main"], "relax.reshape") < \
        _count(mod["main"], "relax.reshape")
    assert len(lifted["main"].params) == 1  # the lifted weight is bound back
    xs = np.random.default_rng(1).standard_normal((64, 128)).astype("float32")
    target = tvm.target.Target({"kind": "llvm"})
    run = lambda m: relax.VirtualMachine(relax.build(m, target), tvm.cpu())["main"](tvm.runtime.tensor(xs)).numpy()
    np.testing.assert_array_equal(run(lifted), run(mod))
    np.testing.assert_array_equal(run(lifted), xs + weight)
