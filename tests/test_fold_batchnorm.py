"""FoldBatchNorm: conv2d [+ bias] -> batch_norm folds into conv2d + bias, numerically equal."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.relax_passes.fold_batchnorm import FoldBatchNorm
from ext.testing import assert_close, run_relax


def _module(with_bias: bool, layout: str = "NCHW", const: bool = True, center=True, scale=True):
    rng = np.random.default_rng(0)
    O, C = 6, 5
    nhwc = layout == "NHWC"
    x = relax.Var("x", relax.TensorType((1, 9, 9, C) if nhwc else (1, C, 9, 9), "float32"))
    w_np = rng.uniform(-1, 1, (O, 3, 3, C) if nhwc else (O, C, 3, 3)).astype("float32")
    stats = [rng.uniform(0.5, 1.5, O).astype("float32") for _ in range(4)]
    params = [x]
    if const:
        w, st = relax.const(w_np), [relax.const(s) for s in stats]
    else:
        w = relax.Var("w", relax.TensorType(w_np.shape, "float32"))
        st = [relax.Var(f"s{i}", relax.TensorType((O,), "float32")) for i in range(4)]
        params += [w, *st]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, w, padding=1, data_layout=layout, kernel_layout="OHWI" if nhwc else "OIHW")
            if with_bias:
                bshape = (O,) if nhwc else (1, O, 1, 1)
                y = relax.op.add(y, relax.const(rng.uniform(-1, 1, bshape).astype("float32")))
            y = bb.emit(relax.op.nn.batch_norm(y, *st, axis=3 if nhwc else 1, epsilon=1e-3, center=center,
                                               scale=scale, training=False))
            out = bb.emit_output(relax.TupleGetItem(y, 0))
        bb.emit_func_output(out)
    return bb.get(), [w_np, *stats]


def _ops(mod):
    return [b.value.op.name for blk in mod["main"].body.blocks for b in blk.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False)])
def test_fold_matches_unfolded(with_bias, layout, center, scale):
    mod, _ = _module(with_bias, layout, center=center, scale=scale)
    folded = relax.transform.FoldConstant()(FoldBatchNorm()(mod))
    assert _ops(folded) == ["relax.nn.conv2d", "relax.add"], _ops(folded)  # weights folded to constants
    x = np.random.default_rng(1).uniform(-1, 1, [int(d) for d in mod["main"].params[0].ty.shape]).astype("float32")
    target = tvm.target.Target("llvm")
    ref = run_relax(tvm.compile(relax.transform.DecomposeOpsForInference()(mod), target), x)
    got = run_relax(tvm.compile(folded, target), x)
    assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_fold_with_weights_as_inputs_keeps_arithmetic():
    mod, params = _module(True, const=False)
    folded = FoldBatchNorm()(mod)
    assert "relax.nn.batch_norm" not in _ops(folded)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 5, 9, 9)).astype("float32")
    target = tvm.target.Target("llvm")
    ref = run_relax(tvm.compile(relax.transform.DecomposeOpsForInference()(mod), target), x, *params)
    assert_close(run_relax(tvm.compile(folded, target), x, *params), ref, rtol=1e-5, atol=1e-5)


def test_conv_bn_relu_becomes_one_kernel(cpu_target):
    mod, _ = _module(True)
    bb_mod = relax.transform.FoldConstant()(FoldBatchNorm()(mod))
    ext.build(mod, cpu_target)
    dec = ext.last_report().find("conv2d")
    assert len(dec) == 1 and dec[0].workload.epilogue == ("bias",) and dec[0].candidate is not None
    assert _ops(bb_mod).count("relax.add") == 1
