"""LayoutPolicy / CancelLayoutPairs, and what a ResNet basic block compiles to."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.relax_passes.layout_policy import CancelLayoutPairs, LayoutPolicy
from ext.testing import assert_close, run_relax

from conv2d_helpers import conv_ref_nchw

TRANSFORM_KERNELS = ("conv2d.pack_nchwc", "conv2d.winograd_filter", "conv2d.weight_matrix")


def _ops(mod, name=None):
    out = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            out.append(e.op.name)

    relax.analysis.post_order_visit(mod["main"], visit)
    return [o for o in out if name is None or o == name]


def _single(build):
    x = relax.Var("x", relax.TensorType((2, 3, 4, 5), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(x, bb.emit))
        bb.emit_func_output(out)
    return bb.get()


def test_cancels_inverse_permute_pair():
    mod = _single(lambda x, e: relax.op.add(relax.op.permute_dims(e(relax.op.permute_dims(x, [0, 2, 3, 1])),
                                                                  [0, 3, 1, 2]), x))
    assert _ops(CancelLayoutPairs()(mod), "relax.permute_dims") == []


def test_keeps_non_inverse_permute_pair():
    mod = _single(lambda x, e: relax.op.permute_dims(e(relax.op.permute_dims(x, [0, 2, 3, 1])), [0, 2, 3, 1]))
    assert len(_ops(CancelLayoutPairs()(mod), "relax.permute_dims")) == 2


def test_cancels_blocked_layout_transform_pair():
    to_blocked = lambda n, c, h, w: (n, c // 3, h, w, c % 3)  # noqa: E731 - NCHW -> NCHW3c
    back = lambda n, cb, h, w, ci: (n, cb * 3 + ci, h, w)  # noqa: E731
    mod = _single(lambda x, e: relax.op.add(relax.op.layout_transform(e(relax.op.layout_transform(x, to_blocked)),
                                                                      back), x))
    assert _ops(CancelLayoutPairs()(mod), "relax.layout_transform") == []
    other = lambda n, cb, h, w, ci: (n, cb, h, w * 3 + ci)  # noqa: E731 - not the inverse
    odd = _single(lambda x, e: relax.op.layout_transform(e(relax.op.layout_transform(x, to_blocked)), other))
    assert len(_ops(CancelLayoutPairs()(odd), "relax.layout_transform")) == 2


def resnet_block(layout: str, C: int = 16, S: int = 10, seed: int = 0):
    """x -> conv-bn-relu -> conv-bn -> + x -> relu, constant weights; returns (module, NCHW weights)."""
    rng = np.random.default_rng(seed)
    nhwc = layout == "NHWC"
    ws = [rng.uniform(-1, 1, (C, C, 3, 3)).astype("float32") / 12 for _ in range(2)]
    bn = [[rng.uniform(0.5, 1.5, C).astype("float32") for _ in range(4)] for _ in range(2)]
    x = relax.Var("x", relax.TensorType((1, S, S, C) if nhwc else (1, C, S, S), "float32"))
    bb = relax.BlockBuilder()

    def conv_bn(v, i):
        w = ws[i].transpose(0, 2, 3, 1) if nhwc else ws[i]
        y = relax.op.nn.conv2d(v, relax.const(w), padding=1, data_layout=layout,
                               kernel_layout="OHWI" if nhwc else "OIHW")
        y = bb.emit(relax.op.nn.batch_norm(y, *map(relax.const, bn[i]), axis=3 if nhwc else 1, training=False))
        return relax.TupleGetItem(y, 0)

    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(conv_bn(x, 0)))
            y = bb.emit(relax.op.nn.relu(relax.op.add(conv_bn(y, 1), x)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), ws, bn


def block_reference(x, ws, bn):
    def cbn(v, i):
        g, b, m, var = bn[i]
        y = conv_ref_nchw(v, ws[i], pad=(1, 1, 1, 1))
        return (y - m[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * g[:, None, None] + b[:, None, None]

    y = np.maximum(cbn(x, 0), 0)
    return np.maximum(cbn(y, 1) + x, 0)


def test_nhwc_block_converts_to_nchw_once(cpu_target):
    mod, _, _ = resnet_block("NHWC")
    from ext.relax_passes import Canonicalize
    from ext.relax_passes.fold_batchnorm import FoldBatchNorm

    with cpu_target:
        out = LayoutPolicy(cpu_target)(Canonicalize()(FoldBatchNorm()(mod)))
    convs = [c for c in _ops(out) if c == "relax.nn.conv2d"]
    assert len(convs) == 2
    # one transpose into NCHW at the input, one back at the output, none between the convs
    assert len(_ops(out, "relax.permute_dims")) == 2, out.script()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_resnet_block_builds_to_fused_kernels_without_transforms(cpu_target, layout):
    mod, ws, bn = resnet_block(layout)
    ex = ext.build(mod, cpu_target)
    decisions = ext.last_report().find("conv2d")
    assert [d.workload.epilogue for d in decisions] == [("bias", "relu"), ("bias", "residual", "relu")]
    assert all(d.candidate is not None for d in decisions)
    # what the pipeline leaves: no layout-transform or weight-transform kernels between the convs
    with cpu_target:
        lowered = ext.pipeline(cpu_target)(mod)
    kernels = [str(f.attrs["ext.kernel"]) for _, f in lowered.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and "ext.kernel" in f.attrs]
    names = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len([k for k in kernels if k.startswith("conv2d.")]) == 2, kernels
    assert not any(k in TRANSFORM_KERNELS for k in kernels), kernels  # folded at compile time
    between = [n for n in names if "layout_transform" in n or "transpose" in n or "permute" in n]
    assert len(between) == (0 if layout == "NCHW" else 2), names  # NHWC: only the graph's two ends
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (1, 16, 10, 10)).astype("float32")
    got = run_relax(ex, x.transpose(0, 2, 3, 1) if layout == "NHWC" else x)
    if layout == "NHWC":
        got = got.transpose(0, 3, 1, 2)
    # Winograd may run these layers: its bound is 1e-4 of the largest output
    assert_close(got, block_reference(x, ws, bn), rtol=0, atol=1e-4 * 10)
