"""Shared helpers of the conv2d tests: workload construction and an independent float64 NumPy reference."""
from __future__ import annotations

import numpy as np

from ext.topi_kernels.conv2d import ConvGeom
from ext.workload import Workload

ACT = {"relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh}


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
    """Direct float64 convolution by shifted slices (NCHW / OIHW)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    OH = (H + pad[0] + pad[2] - dil[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (W + pad[1] + pad[3] - dil[1] * (KW - 1) - 1) // stride[1] + 1
    out = np.zeros((N, O, OH, OW))
    Og = O // groups
    for gi in range(groups):
        xs, ws = xp[:, gi * Cg:(gi + 1) * Cg], w[gi * Og:(gi + 1) * Og]
        for kh in range(KH):
            for kw in range(KW):
                h0, w0 = kh * dil[0], kw * dil[1]
                patch = xs[:, :, h0:h0 + stride[0] * (OH - 1) + 1:stride[0], w0:w0 + stride[1] * (OW - 1) + 1:stride[1]]
                out[:, gi * Og:(gi + 1) * Og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, kh, kw])
    return out


def reference(wl: Workload, xs) -> np.ndarray:
    """The workload's result in float64 (conv, then its epilogue in order)."""
    x, w, *extras = xs
    nhwc = wl.attr("data_layout") == "NHWC"
    if nhwc:
        x, w = x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)
    y = conv_ref_nchw(x, w, wl.attr("strides"), wl.attr("padding"), wl.attr("dilation"), wl.attr("groups"))
    if nhwc:
        y = y.transpose(0, 2, 3, 1)
    extras = [e.astype(np.float64) for e in extras]
    for op in wl.epilogue:
        y = y + extras.pop(0) if op in ("bias", "residual") else ACT[op](y)
    return y


def conv_tol(wl: Workload) -> dict:
    """float32 sums of C/g*KH*KW products of values in [-1, 1]: error grows ~sqrt(K) ulps;
    4e-6 * K is a loose bound (as for matmul)."""
    x, w = wl.shapes[0], wl.shapes[1]
    k = w[1] * w[2] * w[3]
    return dict(rtol=1e-5, atol=4e-6 * max(k, 16))
