"""Shared helpers of the conv2d tests: workload construction; the float64 NumPy reference and
tolerance are the tuner's (``ext.tuning.references``: one place for both)."""
from __future__ import annotations

import numpy as np

from ext.topi_kernels.conv2d import ConvGeom
from ext.tuning import references as refs
from ext.workload import Workload


def conv_wl(N, C, H, W, O, K, *, stride=1, pad=1, dil=1, groups=1, epilogue=("bias", "relu"), layout="NCHW",
            w_const=True) -> Workload:
    s, d = (stride, stride) if isinstance(stride, int) else stride, (dil, dil) if isinstance(dil, int) else dil
    p = (pad,) * 4 if isinstance(pad, int) else tuple(pad)
    kh, kw = (K, K) if isinstance(K, int) else K
    g = ConvGeom(N, C, H, W, O, kh, kw, s, p, d, groups)
    nhwc = layout == "NHWC"
    out = (N, g.OH, g.OW, O) if nhwc else (N, O, g.OH, g.OW)
    shapes = [(N, H, W, C) if nhwc else (N, C, H, W), (O, kh, kw, C // groups) if nhwc else (O, C // groups, kh, kw)]
    if "bias" in epilogue:
        shapes.append((O,) if nhwc else (1, O, 1, 1))
    if "residual" in epilogue:
        shapes.append(out)
    attrs = dict(strides=s, padding=p, dilation=d, groups=groups, data_layout=layout,
                 kernel_layout="OHWI" if nhwc else "OIHW", out_shape=out, w_const=w_const)
    return Workload("conv2d", shapes, ["float32"] * len(shapes), "float32", attrs=attrs, epilogue=epilogue)


def blocked_wl(N, C, H, W, O, K, *, stride=1, pad=1, dil=1, groups=1, b_in=16, b_out=16,
               epilogue=("bias", "residual", "relu")) -> Workload:
    """A conv2d workload with NCHW{b}c activations on the sides where ``b_in``/``b_out`` are set."""
    p = (pad,) * 4 if isinstance(pad, int) else tuple(pad)
    g = ConvGeom(N, C, H, W, O, K, K, (stride, stride), p, (dil, dil), groups)
    out = (N, O // b_out, g.OH, g.OW, b_out) if b_out else (N, O, g.OH, g.OW)
    shapes = [(N, C // b_in, H, W, b_in) if b_in else (N, C, H, W), (O, C // groups, K, K)]
    for step in epilogue:
        if step in ("bias", "scale"):
            lead = N if step == "scale" else 1
            shapes.append((lead, O // b_out, 1, 1, b_out) if b_out else (lead, O, 1, 1))
        elif step == "residual":
            shapes.append(out)
    data = f"NCHW{b_in}c" if b_in else "NCHW"
    attrs = dict(strides=(stride, stride), padding=p, dilation=(dil, dil), groups=groups, data_layout=data,
                 kernel_layout="OIHW", out_shape=out, w_const=True)
    if (f"NCHW{b_out}c" if b_out else "NCHW") != data:
        attrs["out_layout"] = f"NCHW{b_out}c" if b_out else "NCHW"
    return Workload("conv2d", shapes, ["float32"] * len(shapes), "float32", attrs=attrs, epilogue=epilogue)


def conv_ref_nchw(x, w, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1) -> np.ndarray:
    """Direct float64 convolution (NCHW / OIHW)."""
    return refs.conv_nchw(x.astype(np.float64), w.astype(np.float64), stride, pad, dil, groups)


def reference(wl: Workload, xs) -> np.ndarray:
    """The workload's result in float64 (conv, then its epilogue in order)."""
    return refs.conv2d(wl, xs)


def conv_tol(wl: Workload) -> dict:
    """The tuner's tolerance (``references.conv2d_tol``) as ``assert_close`` keywords."""
    rtol, atol = refs.conv2d_tol(wl)
    return dict(rtol=rtol, atol=atol)
