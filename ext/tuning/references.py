"""NumPy references the tuner checks every measured candidate against.

``REFERENCES[op] = (reference(wl, inputs) -> float64 array, tolerance(wl) -> (rtol, atol))``
for each op family's ``Workload`` convention (see ``ext/relax_passes/families``).
Inputs are the workload's inputs in call order, drawn uniformly from [-1, 1].
Tolerances: float32 sums of ``k`` products of such values drift by about
``sqrt(k)`` ulps; ``4e-6 * k`` is a loose bound (performance notes), so a
kernel that is off by a real mistake (a dropped term, a wrong index) fails.
Families without an entry are checked against another of their candidates
(``measure._reference``). The tests use these same references and tolerances
(``tests/test_candidates.py`` runs every registered CPU candidate against them).
"""
from __future__ import annotations

import math

import numpy as np

from ..workload import Workload, channel_block, parse_activation


def _erf(v):
    return np.vectorize(math.erf, otypes=[np.float64])(v)


ACTIVATIONS = {
    "relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh,
    "silu": lambda v: v / (1 + np.exp(-v)), "gelu": lambda v: 0.5 * v * (1 + _erf(v / np.sqrt(2))),
    "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))),
    # PyTorch's definitions (hardswish(-inf) = -inf * 0 = NaN as in torch); np.clip keeps NaN
    "hardsigmoid": lambda v: np.clip(v + 3, 0, 6) / 6, "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
    "clip": lambda v, lo, hi: np.clip(v, lo, hi), "leaky_relu": lambda v, a: np.where(v < 0, a * v, v),
}


def activation(name: str):
    """NumPy ``f(v)`` for an epilogue activation name (``"relu"``, ``"clip:0:6"``)."""
    base, params = parse_activation(name)
    return lambda v: ACTIVATIONS[base](v, *params)


def _epilogue(wl: Workload, y, extras):
    extras = list(extras)
    for op in wl.epilogue:
        if op in ("bias", "residual"):
            y = y + extras.pop(0)
        elif op == "scale":
            y = y * extras.pop(0)
        else:
            y = activation(op)(y)
    return y


def matmul(wl: Workload, xs):
    a, b, *extras = [x.astype("float64") for x in xs]
    if wl.attr("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    return _epilogue(wl, a @ b, extras).reshape(wl.attr("out_shape"))


def matmul_tol(wl: Workload):
    return 1e-5, 4e-6 * max(int(wl.shapes[0][-1]), 16)


def conv_nchw(x, w, strides, padding, dilation, groups):
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


def unblock(x: np.ndarray) -> np.ndarray:
    """NCHW{b}c ``(N, C/b, H, W, b)`` -> NCHW."""
    n, q, h, w, b = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, q * b, h, w)


def block(x: np.ndarray, b: int) -> np.ndarray:
    """NCHW -> NCHW{b}c."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def conv2d(wl: Workload, xs):
    x, w, *extras = [v.astype("float64") for v in xs]
    layout, klayout = wl.attr("data_layout", "NCHW"), wl.attr("kernel_layout", "OIHW")
    out_layout = wl.attr("out_layout", layout)
    if channel_block(layout):
        x = unblock(x)
    elif layout != "NCHW":
        x = x.transpose([layout.index(c) for c in "NCHW"])
    if klayout != "OIHW":
        w = w.transpose([klayout.index(c) for c in "OIHW"])
    y = conv_nchw(x, w, wl.attr("strides", (1, 1)), wl.attr("padding", (0, 0, 0, 0)),
                   wl.attr("dilation", (1, 1)), wl.attr("groups", 1))
    if channel_block(out_layout):
        y = block(y, channel_block(out_layout))
    elif out_layout != "NCHW":
        y = y.transpose(["NCHW".index(c) for c in out_layout])
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


def _nchw(wl: Workload, layout: str, x):
    if layout == "NCHW":
        return x
    if sorted(layout) != sorted("NCHW"):
        raise ValueError(f"pool2d reference: layout {layout!r} is not a permutation of NCHW ({wl.key})")
    return x.transpose([layout.index(c) for c in "NCHW"])


def pool2d(wl: Workload, xs):
    """Max or average pooling (``ceil_mode`` windows may run past the padding; an average
    counts the padded window when ``count_include_pad``, else the image part, as PyTorch).
    A blocked ``NCHW{b}c`` layout is un-blocked before and re-blocked after."""
    layout = str(wl.attr("layout", "NCHW"))
    b = channel_block(layout)
    if b:
        out = unblock(np.empty(wl.attr("out_shape"), "int8")).shape
        y = pool2d(wl.with_(attrs={**dict(wl.attrs), "layout": "NCHW", "out_shape": out}), [unblock(xs[0])])
        return block(y, b)
    x = _nchw(wl, layout, xs[0].astype("float64"))
    N, C, H, W = x.shape
    (kh, kw), (sh, sw), (dh, dw) = wl.attr("pool_size"), wl.attr("strides", (1, 1)), wl.attr("dilation", (1, 1))
    pt, pl, pb, pr = wl.attr("padding", (0, 0, 0, 0))
    oh, ow = (_nchw(wl, layout, np.empty(wl.attr("out_shape"), "int8"))).shape[2:]
    hn, wn = max(H + pt + pb, (oh - 1) * sh + (kh - 1) * dh + 1), max(W + pl + pr, (ow - 1) * sw + (kw - 1) * dw + 1)
    pads = ((pt, hn - H - pt), (pl, wn - W - pl))
    is_max = wl.attr("kind") == "max"
    xp = np.pad(x, ((0, 0), (0, 0)) + pads, constant_values=-np.inf if is_max else 0.0)
    inside = np.zeros((hn, wn))
    if wl.attr("count_include_pad"):
        inside[:H + pt + pb, :W + pl + pr] = 1
    else:
        inside[pt:pt + H, pl:pl + W] = 1
    acc, count = np.full((N, C, oh, ow), -np.inf if is_max else 0.0), np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            rows, cols = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            acc = np.maximum(acc, xp[:, :, rows, cols]) if is_max else acc + xp[:, :, rows, cols]
            count += inside[rows, cols]
    y = acc if is_max else acc / np.maximum(count, 1)
    return y if layout == "NCHW" else y.transpose(["NCHW".index(c) for c in layout])


def pool2d_tol(wl: Workload):
    kh, kw = wl.attr("pool_size")
    return (0.0, 0.0) if wl.attr("kind") == "max" else (1e-5, 1e-6 * max(kh * kw, 16))


def _source(o, in_size: int, out_size: int, mode: str):
    """Input coordinates of output indices ``o`` (float64) in a resize coordinate mode."""
    scale = in_size / out_size
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return np.zeros_like(o, "float64") if mode == "pytorch_half_pixel" and out_size == 1 else (o + 0.5) * scale - 0.5
    if mode == "align_corners":
        return o * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros_like(o, "float64")
    if mode == "asymmetric":
        return o * scale
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) * scale
    raise ValueError(f"resize2d reference: coordinate mode {mode!r} not handled ({', '.join(RESIZE_MODES)})")


RESIZE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")


def _nearest(x, mode: str, rounding: str):
    rounding = rounding or ("round" if mode == "align_corners" else "floor")
    pick = {"round": np.round, "round_prefer_floor": lambda v: np.ceil(v - 0.5),
            "round_prefer_ceil": lambda v: np.floor(v + 0.5), "floor": lambda v: np.floor(v + 1e-5),
            "ceil": lambda v: np.ceil(v - 1e-5)}[rounding]
    return pick(x)


def resize2d(wl: Workload, xs):
    """Linear (the 2x2 neighbours of the floor, clamped, blended by the fractions) or nearest
    (the rounded coordinate, clamped) resize of NCHW ``x`` to ``out_shape``."""
    x = xs[0].astype("float64")
    H, W = x.shape[2:]
    OH, OW = wl.attr("out_shape")[2:]
    mode = wl.attr("coordinate_transformation_mode")
    ys, xs_ = _source(np.arange(OH, dtype="float64"), H, OH, mode), _source(np.arange(OW, dtype="float64"), W, OW, mode)
    if wl.attr("method") == "nearest_neighbor":
        rounding = wl.attr("rounding_method")
        iy = np.clip(_nearest(ys, mode, rounding), 0, H - 1).astype(int)
        ix = np.clip(_nearest(xs_, mode, rounding), 0, W - 1).astype(int)
        return x[:, :, iy][:, :, :, ix]
    y0, x0 = np.floor(ys), np.floor(xs_)
    fy, fx = (ys - y0)[:, None], (xs_ - x0)[None, :]
    r0, r1 = np.clip(y0, 0, H - 1).astype(int), np.clip(y0 + 1, 0, H - 1).astype(int)
    c0, c1 = np.clip(x0, 0, W - 1).astype(int), np.clip(x0 + 1, 0, W - 1).astype(int)
    top = x[:, :, r0][:, :, :, c0] * (1 - fx) + x[:, :, r0][:, :, :, c1] * fx
    bottom = x[:, :, r1][:, :, :, c0] * (1 - fx) + x[:, :, r1][:, :, :, c1] * fx
    return top * (1 - fy) + bottom * fy


def layout_transform(wl: Workload, xs):
    """The batched transpose ``(B, R, S, E) -> (B, S, R, E)`` (``topi_kernels/layout.py``)."""
    return xs[0].astype("float64").transpose(0, 2, 1, 3).reshape(wl.attr("out_shape"))


def attention(wl: Workload, xs):
    """``softmax(where(keep > 0, q k^T * scale, fill) + mask) v`` in float64
    (``relax_passes.families.attention``)."""
    q, k, v = (x.astype("float64") for x in xs[:3])
    kt = k.transpose(0, 2, 1) if wl.attr("k_layout") == "nk" else k
    s = q @ kt
    scale = wl.attr("scale")
    if scale is not None:
        s = s / scale if wl.attr("scale_op") == "divide" else s * scale

    def spread(t):  # a (G, Mm, Nn) operand over the B batches
        return np.repeat(t.astype("float64"), q.shape[0] // t.shape[0], axis=0)

    fill = wl.attr("fill")
    extra = list(xs[3:])
    if fill is not None:
        s = np.where(spread(extra.pop()) > 0, s, fill)
    if extra:
        s = s + spread(extra[0])
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


REFERENCES = {
    "matmul": (matmul, matmul_tol),
    "conv2d": (conv2d, conv2d_tol),
    "softmax": (softmax, _rows_tol),
    "layer_norm": (layer_norm, _rows_tol),
    "reduce": (reduce, reduce_tol),
    "pool2d": (pool2d, pool2d_tol),
    "layout_transform": (layout_transform, lambda wl: (0.0, 0.0)),
    # float32 coordinates against float64 ones: a fraction off by ~1e-7 of the input's range
    "resize2d": (resize2d, lambda wl: (1e-5, 1e-5)),
    "attention": (attention, lambda wl: (1e-5, 2e-6 * max(wl.shapes[0][2], 16))),
}
