"""Workload identity, JSON round-trip, flops."""
from __future__ import annotations

import pytest

from ext.workload import Workload


def make(**kw):
    base = dict(op="matmul", shapes=((64, 32), (32, 16), (16,)), dtypes=("float32",) * 3, out_dtype="float32",
                attrs={"transpose_b": False, "out_shape": (64, 16)}, epilogue=("bias", "relu"))
    base.update(kw)
    return Workload(**base)


def test_hashable_and_key_stable():
    a, b = make(), make(attrs={"out_shape": [64, 16], "transpose_b": False})  # order/list-vs-tuple free
    assert a == b and hash(a) == hash(b) and a.key == b.key
    assert len({a, b, make(epilogue=("bias",))}) == 2
    assert a.key == "matmul|float32[64,32];float32[32,16];float32[16]->float32|out_shape=(64,16),transpose_b=False|bias+relu"


def test_json_round_trip():
    wl = make()
    assert Workload.from_json(wl.to_json()) == wl
    import json

    assert Workload.from_json(json.dumps(wl.to_json())) == wl
    with pytest.raises(ValueError, match="lacks field"):
        Workload.from_json({"op": "matmul"})


def test_flops_counts_anchor_and_epilogue():
    wl = make()
    assert wl.flops == 2 * 64 * 16 * 32 + 2 * 64 * 16
    assert make(shapes=(("n", 32), (32, 16), (16,))).is_static is False


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown epilogue"):
        make(epilogue=("bias", "swish2"))
    with pytest.raises(ValueError, match="shapes but"):
        make(dtypes=("float32",))


@pytest.mark.parametrize("data_layout, kernel_layout, x, w", [
    ("NCHW", "OIHW", (1, 7, 11, 13), (5, 7, 3, 2)),
    ("NHWC", "OHWI", (1, 11, 13, 7), (5, 3, 2, 7)),
    ("NHWC", "HWIO", (1, 11, 13, 7), (3, 2, 7, 5)),  # flops.py once read HWIO's W and I as KH and KW
])
def test_conv_flops_read_every_kernel_layout(data_layout, kernel_layout, x, w):
    out = (1, 5, 9, 12) if data_layout == "NCHW" else (1, 9, 12, 5)
    wl = Workload("conv2d", [x, w], ["float32"] * 2, "float32",
                  attrs={"data_layout": data_layout, "kernel_layout": kernel_layout, "out_shape": out, "groups": 1})
    assert wl.flops == 2 * (5 * 9 * 12) * 7 * 3 * 2


def test_conv_dims_rejects_unknown_layouts():
    from ext.workload import conv_dims

    wl = Workload("conv2d", [(1, 7, 11, 13), (5, 7, 3, 3)], ["float32"] * 2, "float32",
                  attrs={"kernel_layout": "OIXY", "out_shape": (1, 5, 9, 11)})
    with pytest.raises(ValueError, match="kernel layout 'OIXY'"):
        conv_dims(wl)
