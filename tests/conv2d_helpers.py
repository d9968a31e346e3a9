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
