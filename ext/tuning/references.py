"""NumPy references the tuner checks every measured candidate against.

``REFERENCES[op] = (reference(wl, inputs) -> float64 array, tolerance(wl) -> (rtol, atol))``
for each op family's ``Workload`` convention (see ``ext/relax_passes/families``).
Inputs are the workload's inputs in call order, drawn uniformly from [-1, 1].
Tolerances: float32 sums of ``k`` products of such values drift by about
``sqrt(k)`` ulps; ``4e-6 * k`` is a loose bound (performance notes), so a
kernel that is off by a real mistake (a dropped term, a wrong index) fails.
Families without an entry are checked against another of their candidates
(``measure._reference``).
"""
from __future__ import annotations

import math

import numpy as np

from ..workload import Workload


def _erf(v):
    return np.vectorize(math.erf, otypes=[np.float64])(v)


ACTIVATIONS = {
    "relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh,
    "silu": lambda v: v / (1 + np.exp(-v)), "gelu": lambda v: 0.5 * v * (1 + _erf(v / np.sqrt(2))),
    "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))),
}


def _epilogue(wl: Workload, y, extras):
    extras = list(extras)
    for op in wl.epilogue:
        y = y + extras.pop(0) if op in ("bias", "residual") else ACTIVATIONS[op](y)
    return y


def matmul(wl: Workload, xs):
    a, b, *extras = [x.astype("float64") for x in xs]
    if wl.attr("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    return _epilogue(wl, a @ b, extras).reshape(wl.attr("out_shape"))


def matmul_tol(wl: Workload):
    return 1e-5, 4e-6 * max(int(wl.shapes[0][-1]), 16)


def _conv_nchw(x, w, strides, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = padding if len(padding) == 4 else (padding[0], padding[1], padding[0], padding[1])
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                h0, w0 = i * dilation[0], j * dilation[1]
                patch = xs[:, :, h0:h0 + strides[0] * (oh - 1) + 1:strides[0], w0:w0 + strides[1] * (ow - 1) + 1:strides[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


def conv2d(wl: Workload, xs):
    x, w, *extras = [v.astype("float64") for v in xs]
    layout, klayout = wl.attr("data_layout", "NCHW"), wl.attr("kernel_layout", "OIHW")
    if layout != "NCHW":
        x = x.transpose([layout.index(c) for c in "NCHW"])
    if klayout != "OIHW":
        w = w.transpose([klayout.index(c) for c in "OIHW"])
    y = _conv_nchw(x, w, wl.attr("strides", (1, 1)), wl.attr("padding", (0, 0, 0, 0)),
                   wl.attr("dilation", (1, 1)), wl.attr("groups", 1))
    if layout != "NCHW":
        y = y.transpose(["NCHW".index(c) for c in layout])
    return _epilogue(wl, y, extras)


def conv2d_tol(wl: Workload):
    w, klayout = wl.shapes[1], wl.attr("kernel_layout", "OIHW")
    k = math.prod(d for d, c in zip(w, klayout) if c != "O")
    return 1e-5, 4e-6 * max(k, 16)


def softmax(wl: Workload, xs):
    x = xs[0].astype("float64")
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layer_norm(wl: Workload, xs):
    x, g, b = [v.astype("float64") for v in xs]
    mu = x.mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(x.var(-1, keepdims=True) + wl.attr("eps", 1e-5))
    if wl.attr("scale", True):
        y = y * g
    if wl.attr("center", True):
        y = y + b
    return y


def reduce(wl: Workload, xs):
    x = xs[0].astype("float64").reshape(wl.shapes[0])  # (O, R, I)
    fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[wl.attr("kind")]
    return fn(x, axis=1).reshape(wl.attr("out_shape"))


def _rows_tol(wl: Workload):
    return 1e-5, 1e-5 * math.sqrt(max(int(wl.shapes[0][-1]), 16))


def reduce_tol(wl: Workload):
    return 1e-5, 4e-6 * max(int(wl.shapes[0][1]), 16)


REFERENCES = {
    "matmul": (matmul, matmul_tol),
    "conv2d": (conv2d, conv2d_tol),
    "softmax": (softmax, _rows_tol),
    "layer_norm": (layer_norm, _rows_tol),
    "reduce": (reduce, reduce_tol),
}
