"""Random small Relax graphs for fuzzing ext against a float64 NumPy oracle.

A graph is a list of ``Node``s in a tiny IR (leaves are inputs and constants) that
can be emitted as a Relax module (``Graph.to_relax``), evaluated by a NumPy
interpreter in float64 or float32 (``Graph.evaluate``) and printed as a standalone
reproduction (``Graph.repro``). Keeping our own IR, instead of walking the Relax
module, makes the oracle independent of TVM and the reproduction readable.

``graphs()`` is the hypothesis strategy. It draws the data seed first and evaluates
values while it builds, so it never emits ``exp`` of a large value or a cube that
overflows: every example is well defined in float32 and the test only has to
judge rounding. The op mix is what ext fuses or schedules: matmul / conv2d anchors
with every epilogue (bias, activations, residuals in both operand orders, SiLU as
``x * sigmoid(x)``, ``y + f(y)``, gelu_new's ``y + c * y**3``), reductions, softmax,
layer_norm, permute_dims, reshape and element-wise chains, on odd and size-1 dims.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

DIMS = (1, 2, 3, 5, 7, 13, 17, 31)
WIDE = (61, 64, 97, 128)  # big enough for matmul.packed / winograd to be picked
MAX_ELEMS = 50_000
MAX_MACS = 8_000_000
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
UNARY = ACTIVATIONS + ("exp", "pow3", "neg")
BINARY = ("add", "multiply", "subtract")
REDUCE = ("sum", "mean", "max", "min")
LN_EPS = 1e-5


@dataclass(frozen=True)
class Node:
    op: str
    args: tuple[int, ...] = ()
    attrs: tuple = ()  # sorted (key, value) pairs, hashable and printable

    def attr(self, key: str, default=None):
        return dict(self.attrs).get(key, default)


def _node(op: str, args=(), **attrs) -> Node:
    return Node(op, tuple(args), tuple(sorted(attrs.items())))


# ---------------------------------------------------------------- NumPy oracle

def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
        return erf(x)
    except ImportError:  # pragma: no cover - scipy comes with xgboost
        return np.vectorize(math.erf, otypes=[x.dtype])(x)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)).astype(x.dtype))


def _gelu_tanh(x):
    c = x.dtype.type(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + x.dtype.type(0.044715) * x ** 3)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


_UNARY_NP = {
    "relu": lambda x: np.maximum(x, 0), "gelu": _gelu, "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x), "sigmoid": _sigmoid, "tanh": np.tanh, "exp": np.exp,
    "pow3": lambda x: x ** 3, "neg": np.negative,
}
_BINARY_NP = {"add": np.add, "multiply": np.multiply, "subtract": np.subtract}


def conv2d_nchw(x, w, strides, padding, dilation, groups):
    """Reference NCHW/OIHW conv2d (padding: top, left, bottom, right)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilation, padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, groups, o // groups, oh, ow), dtype=x.dtype)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            out += np.einsum("ngchw,goc->ngohw", patch.reshape(n, groups, cg, oh, ow), wg[..., i, j])
    return out.reshape(n, o, oh, ow)


def _eval_node(node: Node, vals: list, dtype) -> np.ndarray:
    with np.errstate(over="ignore", under="ignore"):  # exp(-x) -> inf in sigmoid is exact enough
        return _eval_op(node, [vals[i] for i in node.args], dtype)


def _eval_op(node: Node, a: list, dtype) -> np.ndarray:
    op = node.op
    if op in _UNARY_NP:
        return _UNARY_NP[op](a[0])
    if op in _BINARY_NP:
        return _BINARY_NP[op](a[0], a[1])
    if op == "scale":
        return a[0] * dtype(node.attr("c"))
    if op == "add_scalar":
        return a[0] + dtype(node.attr("c"))
    if op == "matmul":
        return np.matmul(a[0], a[1])
    if op == "permute_dims":
        return np.transpose(a[0], node.attr("axes"))
    if op == "reshape":
        return a[0].reshape(node.attr("shape"))
    if op in REDUCE:
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op]
        return fn(a[0], axis=node.attr("axes"), keepdims=node.attr("keepdims"))
    if op == "softmax":
        e = np.exp(a[0] - a[0].max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if op == "layer_norm":
        x, gamma, beta = a
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + dtype(LN_EPS)) * gamma + beta
    if op == "conv2d":
        return conv2d_nchw(a[0], a[1], node.attr("strides"), node.attr("padding"), node.attr("dilation"),
                           node.attr("groups"))
    raise ValueError(f"fuzz oracle: unknown op {op!r}")


def leaf_data(seed: int, index: int, node: Node) -> np.ndarray:
    """Deterministic float64 data of a leaf: ``offset + scale * U(-1, 1)``."""
    rng = np.random.default_rng([seed, index])
    u = rng.uniform(-1.0, 1.0, size=node.attr("shape"))
    return node.attr("offset", 0.0) + node.attr("scale", 1.0) * u


# ---------------------------------------------------------------- the graph

@dataclass
class Graph:
    seed: int
    nodes: list[Node] = field(default_factory=list)
    outputs: tuple[int, ...] = ()

    def inputs(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.op == "input"]

    def input_arrays(self, dtype="float32") -> list[np.ndarray]:
        return [leaf_data(self.seed, i, self.nodes[i]).astype(dtype) for i in self.inputs()]

    def evaluate(self, dtype=np.float64, noise: dict[int, float] | None = None,
                 rng: np.random.Generator | None = None) -> list[np.ndarray]:
        """Run the graph in NumPy at ``dtype``. ``noise`` maps a node to a relative error
        ``r``: its value gets ``U(-r, r) * max|value|`` added (a forward-error probe)."""
        vals: list = []
        for i, n in enumerate(self.nodes):
            if n.op in ("input", "const"):
                v = leaf_data(self.seed, i, n).astype(dtype)
            else:
                v = np.asarray(_eval_node(n, vals, np.dtype(dtype).type), dtype=dtype)
                if noise and i in noise and v.size:
                    r = noise[i] * float(np.max(np.abs(v)))
                    v = v + rng.uniform(-r, r, size=v.shape).astype(dtype)
            vals.append(v)
        return [vals[o] for o in self.outputs]

    def num_ops(self) -> int:
        return sum(n.op not in ("input", "const") for n in self.nodes)

    # ------------------------------------------------------------ Relax

    def to_relax(self):
        """The graph as a Relax IRModule with one function ``main`` (inputs in node order)."""
        from tvm import relax

        params = {i: relax.Var(f"x{i}", relax.TensorType(list(self.nodes[i].attr("shape")), "float32"))
                  for i in self.inputs()}
        bb = relax.BlockBuilder()
        with bb.function("main", list(params.values())):
            with bb.dataflow():
                vals: dict[int, relax.Expr] = {}
                for i, n in enumerate(self.nodes):
                    if n.op == "input":
                        vals[i] = params[i]
                    elif n.op == "const":
                        vals[i] = relax.const(leaf_data(self.seed, i, n).astype("float32"))
                    else:
                        vals[i] = bb.emit(_relax_call(n, [vals[a] for a in n.args]))
                outs = [vals[o] for o in self.outputs]
                out = bb.emit_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
            bb.emit_func_output(out)
        return bb.get()

    def script(self) -> str:
        """A standalone BlockBuilder script (random data, no fuzz_graphs import) that builds
        this graph with ext and runs it: the reproduction to paste into a bug report."""
        ins = self.inputs()
        lines = ["import numpy as np, tvm, ext", "from tvm import relax", "",
                 "rng = np.random.default_rng(0)",
                 "data = lambda *s: rng.uniform(-1, 1, s).astype('float32')",
                 "T = lambda *s: relax.TensorType(list(s), 'float32')",
                 *[f"v{i} = relax.Var('x{i}', T{tuple(self.nodes[i].attr('shape'))})" for i in ins],
                 "bb = relax.BlockBuilder()",
                 f"with bb.function('main', [{', '.join(f'v{i}' for i in ins)}]):",
                 "    with bb.dataflow():"]
        for i, n in enumerate(self.nodes):
            if n.op == "const":
                lines.append(f"        v{i} = relax.const(data{tuple(n.attr('shape'))})")
            elif n.op != "input":
                lines.append(f"        v{i} = bb.emit({_relax_source(n, [f'v{a}' for a in n.args])})")
        outs = [f"v{o}" for o in self.outputs]
        out = outs[0] if len(outs) == 1 else f"relax.Tuple([{', '.join(outs)}])"
        lines += [f"        out = bb.emit_output({out})", "    bb.emit_func_output(out)",
                  "ex = ext.build(bb.get(), ext.target.cpu())",
                  "vm = relax.VirtualMachine(ex, tvm.cpu())",
                  "res = vm['main'](" + ", ".join(f"tvm.runtime.tensor(data{tuple(self.nodes[i].attr('shape'))})"
                                                 for i in ins) + ")"]
        return "\n".join(lines)

    def repro(self) -> str:
        """A script that rebuilds this exact example with ext and compares it to float64."""
        lines = ["import numpy as np, tvm, ext", "from tvm import relax",
                 "from fuzz_graphs import Graph, Node  # tests/fuzz_graphs.py",
                 f"g = Graph(seed={self.seed}, nodes=[", *[f"    {n!r}," for n in self.nodes],
                 f"], outputs={self.outputs!r})",
                 "ex = ext.build(g.to_relax(), ext.target.cpu())",
                 "vm = relax.VirtualMachine(ex, tvm.cpu())",
                 "out = vm['main'](*[tvm.runtime.tensor(a) for a in g.input_arrays()])",
                 "outs = [out] if hasattr(out, 'numpy') else list(out)",
                 "for o, r in zip(outs, g.evaluate(np.float64)):",
                 "    print('max abs err', np.abs(o.numpy() - r).max(), 'max |ref|', np.abs(r).max())"]
        return "\n".join(lines)


def _relax_source(n: Node, a: list[str]) -> str:
    """The Relax call of ``n`` as Python source (for standalone reproductions)."""
    unary = {"relu": "nn.relu", "gelu": "nn.gelu", "gelu_tanh": "nn.gelu_tanh", "silu": "nn.silu",
             "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "neg": "negative"}
    c = f"relax.const({n.attr('c')!r}, 'float32')"
    src = {
        "pow3": f"power({a[0]}, relax.const(3.0, 'float32'))", "scale": f"multiply({a[0]}, {c})",
        "add_scalar": f"add({a[0]}, {c})", "matmul": f"matmul({', '.join(a)})",
        "permute_dims": f"permute_dims({a[0]}, {list(n.attr('axes') or ())})",
        "reshape": f"reshape({a[0]}, {list(n.attr('shape') or ())})",
        "softmax": f"nn.softmax({a[0]}, axis=-1)",
        "layer_norm": f"nn.layer_norm({', '.join(a)}, axes=[-1], epsilon={LN_EPS})",
        "conv2d": (f"nn.conv2d({', '.join(a)}, strides={list(n.attr('strides') or ())}, "
                   f"padding={list(n.attr('padding') or ())}, dilation={list(n.attr('dilation') or ())}, "
                   f"groups={n.attr('groups')})"),
    }
    if n.op in unary:
        return f"relax.op.{unary[n.op]}({a[0]})"
    if n.op in BINARY:
        return f"relax.op.{n.op}({', '.join(a)})"
    if n.op in REDUCE:
        return f"relax.op.{n.op}({a[0]}, axis={list(n.attr('axes'))}, keepdims={n.attr('keepdims')})"
    return "relax.op." + src[n.op]


def _relax_call(n: Node, a: list):
    from tvm import relax

    op = relax.op
    f32 = lambda c: relax.const(c, "float32")  # noqa: E731
    unary = {"relu": op.nn.relu, "gelu": op.nn.gelu, "gelu_tanh": op.nn.gelu_tanh, "silu": op.nn.silu,
             "sigmoid": op.sigmoid, "tanh": op.tanh, "exp": op.exp, "neg": op.negative}
    if n.op in unary:
        return unary[n.op](a[0])
    if n.op == "pow3":
        return op.power(a[0], f32(3.0))
    if n.op in BINARY:
        return getattr(op, n.op)(a[0], a[1])
    if n.op == "scale":
        return op.multiply(a[0], f32(n.attr("c")))
    if n.op == "add_scalar":
        return op.add(a[0], f32(n.attr("c")))
    if n.op == "matmul":
        return op.matmul(a[0], a[1])
    if n.op == "permute_dims":
        return op.permute_dims(a[0], list(n.attr("axes")))
    if n.op == "reshape":
        return op.reshape(a[0], list(n.attr("shape")))
    if n.op in REDUCE:
        return getattr(op, n.op)(a[0], axis=list(n.attr("axes")), keepdims=n.attr("keepdims"))
    if n.op == "softmax":
        return op.nn.softmax(a[0], axis=-1)
    if n.op == "layer_norm":
        return op.nn.layer_norm(a[0], a[1], a[2], axes=[-1], epsilon=LN_EPS)
    if n.op == "conv2d":
        return op.nn.conv2d(a[0], a[1], strides=list(n.attr("strides")), padding=list(n.attr("padding")),
                            dilation=list(n.attr("dilation")), groups=n.attr("groups"))
    raise ValueError(f"fuzz graph: unknown op {n.op!r}")


# ---------------------------------------------------------------- generation

class _Builder:
    """Appends nodes and keeps their float64 values, so steps can look at magnitudes."""

    def __init__(self, seed: int):
        self.g = Graph(seed)
        self.vals: list[np.ndarray] = []
        self.anchors: list[int] = []  # matmul / conv2d outputs (epilogue targets)

    def add(self, node: Node) -> int:
        i = len(self.g.nodes)
        self.g.nodes.append(node)
        if node.op in ("input", "const"):
            v = leaf_data(self.g.seed, i, node)
        else:
            v = _eval_node(node, self.vals, np.float64)
        self.vals.append(np.asarray(v, dtype=np.float64))
        return i

    def truncate(self, n: int) -> None:
        del self.g.nodes[n:], self.vals[n:]
        self.anchors = [a for a in self.anchors if a < n]

    def leaf(self, kind: str, shape, scale=1.0, offset=0.0) -> int:
        return self.add(_node(kind, shape=tuple(int(s) for s in shape), scale=float(scale), offset=float(offset)))

    def shape(self, i: int) -> tuple[int, ...]:
        return self.vals[i].shape

    def amax(self, i: int) -> float:
        v = self.vals[i]
        return float(np.max(np.abs(v))) if v.size else 0.0


def _dim(draw, wide_ok=False) -> int:
    pool = DIMS + WIDE if wide_ok else DIMS
    return draw(st.sampled_from(pool))


def _weight_kind(draw) -> str:
    return draw(st.sampled_from(["const", "const", "input"]))


def _matmul(draw, b: _Builder, x: int) -> int | None:
    """``x @ W`` with W (K, N), (N, K) transposed, or batched (B, K, N) / (B, N, K)."""
    xs = b.shape(x)
    if len(xs) < 2:
        return None
    k, n = xs[-1], _dim(draw, wide_ok=True)
    if math.prod(xs[:-1]) * n > MAX_ELEMS or math.prod(xs[:-1]) * n * k > MAX_MACS:
        return None
    batched = len(xs) == 3 and draw(st.booleans())
    lead = (xs[0],) if batched else ()
    transposed = draw(st.booleans())
    wshape = lead + ((n, k) if transposed else (k, n))
    w = b.leaf(_weight_kind(draw), wshape, scale=1.0 / math.sqrt(k))
    if transposed:
        axes = (0, 2, 1) if batched else (1, 0)
        w = b.add(_node("permute_dims", [w], axes=axes))
    y = b.add(_node("matmul", [x, w]))
    b.anchors.append(y)
    return y


def _conv_input(draw, b: _Builder) -> int:
    if draw(st.integers(0, 3)) == 0:  # ResNet-like layer: where Winograd / blocked kernels get picked
        return b.leaf("input", (1, draw(st.sampled_from([32, 61, 64])), 14, 14))
    n = draw(st.sampled_from([1, 1, 2]))
    c = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 17, 32, 64]))
    hw = [h for h in (1, 3, 5, 7, 8, 13, 14, 17, 28) if n * c * h * h <= MAX_ELEMS]
    h = draw(st.sampled_from(hw))
    w = draw(st.sampled_from([h, h, *[d for d in (1, 5, 7, 13) if n * c * h * d <= MAX_ELEMS]]))
    return b.leaf("input", (n, c, h, w), scale=draw(st.sampled_from((1.0,) * 6 + (30.0, 300.0))))


def _conv2d(draw, b: _Builder, x: int) -> int | None:
    xs = b.shape(x)
    if len(xs) != 4:
        return None
    n, c, h, w = xs
    kind = draw(st.sampled_from(["dense", "dense", "depthwise", "grouped"]))
    if kind == "depthwise":
        groups, o = c, c * draw(st.sampled_from([1, 1, 2]))
    elif kind == "grouped":
        divs = [g for g in (2, 3, 4, 8) if c % g == 0]
        if not divs:
            return None
        groups = draw(st.sampled_from(divs))
        o = groups * draw(st.sampled_from([1, 2, 3]))
    else:
        groups, o = 1, draw(st.sampled_from([1, 3, 5, 8, 16, 17, 32, 64]))
    if c >= 32 and h >= 14 and draw(st.booleans()):  # Winograd's case: 3x3, stride 1, 'same'
        groups, o = 1, draw(st.sampled_from([32, 64]))
        kh = kw = 3
        stride, dil, pad = (1, 1), (1, 1), (1, 1, 1, 1)
    else:
        kh, kw, stride, dil, pad = _conv_window(draw)
    return _conv_emit(draw, b, x, o, groups, (kh, kw), stride, dil, pad)


def _conv_window(draw):
    kh = draw(st.sampled_from([1, 3, 3, 5, 7]))
    kw = draw(st.sampled_from([kh, kh, kh, 1, 3]))
    stride = draw(st.sampled_from([(1, 1), (1, 1), (2, 2), (1, 2)]))
    dil = draw(st.sampled_from([(1, 1), (1, 1), (1, 1), (2, 2)]))
    if draw(st.booleans()):
        pad = (dil[0] * (kh // 2), dil[1] * (kw // 2)) * 2
    else:
        pad = tuple(draw(st.integers(0, k // 2)) for k in (kh, kw, kh, kw))
    return kh, kw, stride, dil, pad


def _conv_emit(draw, b: _Builder, x: int, o: int, groups: int, k, stride, dil, pad) -> int | None:
    n, c, h, w = b.shape(x)
    kh, kw = k
    oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + pad[1] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    if oh < 1 or ow < 1 or n * o * oh * ow > MAX_ELEMS or n * o * oh * ow * (c // groups) * kh * kw > MAX_MACS:
        return None
    fan_in = (c // groups) * kh * kw
    wt = b.leaf(_weight_kind(draw), (o, c // groups, kh, kw), scale=1.0 / math.sqrt(fan_in))
    y = b.add(_node("conv2d", [x, wt], strides=stride, padding=pad, dilation=dil, groups=groups))
    b.anchors.append(y)
    return y


def _bias(draw, b: _Builder, y: int) -> int:
    s = b.shape(y)
    if len(s) == 4 and draw(st.booleans()):  # conv channel bias (1, C, 1, 1) or (C, 1, 1)
        bshape = draw(st.sampled_from([(1, s[1], 1, 1), (s[1], 1, 1)]))
    else:
        bshape = (s[-1],) if s else ()
    bias = b.leaf(_weight_kind(draw), bshape, scale=0.5)
    args = [y, bias] if draw(st.booleans()) else [bias, y]
    return b.add(_node("add", args))


def _same_shape_other(draw, b: _Builder, y: int) -> int:
    """A residual operand: an earlier value of the same shape (multi-consumer) or a new input."""
    same = [i for i in range(len(b.vals)) if i != y and b.shape(i) == b.shape(y)
            and b.g.nodes[i].op not in ("const",)]
    if same and draw(st.booleans()):
        return draw(st.sampled_from(same))
    return b.leaf("input", b.shape(y))


def _residual(draw, b: _Builder, y: int) -> int:
    r = _same_shape_other(draw, b, y)
    args = [y, r] if draw(st.booleans()) else [r, y]
    return b.add(_node("add", args))


def _activation(draw, b: _Builder, y: int) -> int | None:
    act = draw(st.sampled_from(ACTIVATIONS))
    return b.add(_node(act, [y]))


def _silu_mul(draw, b: _Builder, y: int) -> int:
    s = b.add(_node("sigmoid", [y]))
    return b.add(_node("multiply", [y, s] if draw(st.booleans()) else [s, y]))


def _self_residual(draw, b: _Builder, y: int) -> int | None:
    """``y + f(y)`` (either order): the residual depends on the anchor itself."""
    f = draw(st.sampled_from(ACTIVATIONS + ("pow3",)))
    if f == "pow3" and b.amax(y) > 20:
        return None
    fy = b.add(_node(f, [y]))
    return b.add(_node("add", [y, fy] if draw(st.booleans()) else [fy, y]))


def _gelu_new(draw, b: _Builder, y: int) -> int | None:
    """HF gelu_new: ``0.5 * y * (1 + tanh(sqrt(2/pi) * (y + 0.044715 * y**3)))``."""
    if b.amax(y) > 20:
        return None
    cube = b.add(_node("pow3", [y]))
    inner = b.add(_node("add", [y, b.add(_node("scale", [cube], c=0.044715))]))
    t = b.add(_node("tanh", [b.add(_node("scale", [inner], c=math.sqrt(2.0 / math.pi)))]))
    half = b.add(_node("scale", [y], c=0.5))
    return b.add(_node("multiply", [half, b.add(_node("add_scalar", [t], c=1.0))]))


def _unary(draw, b: _Builder, y: int) -> int | None:
    op = draw(st.sampled_from(UNARY))
    if op == "exp" and np.max(b.vals[y], initial=-np.inf) > 12:
        return None
    if op == "pow3" and b.amax(y) > 20:
        return None
    return b.add(_node(op, [y]))


def _binary(draw, b: _Builder, y: int) -> int | None:
    op = draw(st.sampled_from(BINARY))
    s = b.shape(y)
    choice = draw(st.sampled_from(["same", "row", "scalar"]))
    if choice == "same":
        other = _same_shape_other(draw, b, y)
    elif choice == "row" and s:
        bshape = tuple(d if j >= len(s) - 1 or draw(st.booleans()) else 1 for j, d in enumerate(s))
        other = b.leaf(_weight_kind(draw), bshape)
    else:
        other = b.leaf("const", (), scale=1.0, offset=0.0)
    if op == "multiply" and b.amax(y) * max(b.amax(other), 1.0) > 1e4:
        return None
    return b.add(_node(op, [y, other] if draw(st.booleans()) else [other, y]))


def _reduce(draw, b: _Builder, y: int) -> int | None:
    s = b.shape(y)
    if not s:
        return None
    op = draw(st.sampled_from(REDUCE))
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(s) - 1), min_size=1, max_size=len(s)))))
    keepdims = draw(st.booleans())
    if not keepdims and len(axes) == len(s):
        keepdims = True  # keep rank >= 1 so later steps have an axis to work on
    return b.add(_node(op, [y], axes=axes, keepdims=keepdims))


def _softmax(draw, b: _Builder, y: int) -> int | None:
    return b.add(_node("softmax", [y])) if b.shape(y) else None


def _layer_norm(draw, b: _Builder, y: int) -> int | None:
    s = b.shape(y)
    if not s:
        return None
    gamma = b.leaf("const", (s[-1],), scale=0.5, offset=1.0)
    beta = b.leaf("const", (s[-1],), scale=0.5)
    return b.add(_node("layer_norm", [y, gamma, beta]))


def _permute(draw, b: _Builder, y: int) -> int | None:
    s = b.shape(y)
    if len(s) < 2:
        return None
    axes = tuple(draw(st.permutations(range(len(s)))))
    if axes == tuple(range(len(s))):
        axes = axes[1:] + axes[:1]
    return b.add(_node("permute_dims", [y], axes=axes))


def _reshape(draw, b: _Builder, y: int) -> int | None:
    s = list(b.shape(y))
    if not s:
        return None
    how = draw(st.sampled_from(["merge", "split", "unsqueeze", "squeeze"]))
    if how == "merge" and len(s) >= 2:
        j = draw(st.integers(0, len(s) - 2))
        new = s[:j] + [s[j] * s[j + 1]] + s[j + 2:]
    elif how == "split":
        j = draw(st.integers(0, len(s) - 1))
        f = [p for p in range(2, s[j]) if s[j] % p == 0]
        if not f:
            return None
        p = draw(st.sampled_from(f))
        new = s[:j] + [p, s[j] // p] + s[j + 1:]
    elif how == "unsqueeze" and len(s) < 4:
        j = draw(st.integers(0, len(s)))
        new = s[:j] + [1] + s[j:]
    elif how == "squeeze" and 1 in s and len(s) > 1:
        j = s.index(1)
        new = s[:j] + s[j + 1:]
    else:
        return None
    return b.add(_node("reshape", [y], shape=tuple(new)))


def _epilogue_chain(draw, b: _Builder, y: int) -> int | None:
    """What FuseEpilogues looks for: ``[bias] [act] [residual]`` (or ResNet's ``[bias]
    [residual] [act]``), the activation possibly spelled out (``x * sigmoid(x)``, gelu_new,
    ``y + f(y)``). Each part is optional, so partial and empty-looking chains occur too."""
    act = draw(st.sampled_from((None, _activation, _activation, _activation, _silu_mul, _self_residual,
                                _gelu_new)))
    parts = [_bias if draw(st.booleans()) else None, act, _residual if draw(st.booleans()) else None]
    if act is not None and parts[2] is not None and draw(st.booleans()):
        parts[1], parts[2] = parts[2], parts[1]
    out = y
    for part in parts:
        if part is not None:
            nxt = part(draw, b, out)
            if nxt is None:
                return None
            out = nxt
    return out if out != y else None


EPILOGUE_STEPS = (_epilogue_chain, _epilogue_chain, _epilogue_chain, _bias, _activation, _residual, _silu_mul,
                  _self_residual, _gelu_new)
GENERAL_STEPS = (_unary, _binary, _reduce, _softmax, _layer_norm, _permute, _reshape, _matmul, _conv2d)


def _start(draw, b: _Builder) -> int:
    kind = draw(st.sampled_from(["matmul", "matmul", "big_matmul", "batched", "conv2d", "conv2d", "tensor"]))
    if kind == "conv2d":
        return _conv_input(draw, b)
    if kind == "big_matmul":  # above matmul.direct's size limit: the packed kernel
        shape = (draw(st.sampled_from(WIDE)), draw(st.sampled_from(WIDE)))
    elif kind == "batched":
        shape = (draw(st.sampled_from([1, 2, 3, 5])), _dim(draw, True), _dim(draw, True))
    elif kind == "matmul":
        shape = (_dim(draw, True), _dim(draw, True))
    else:
        rank = draw(st.integers(1, 4))
        shape = tuple(_dim(draw) for _ in range(rank))
    while math.prod(shape) > MAX_ELEMS // 4:  # shrink the largest dim (the last may already be 1)
        i = max(range(len(shape)), key=lambda d: shape[d])
        shape = shape[:i] + (max(1, shape[i] // 3),) + shape[i + 1:]
    # now and then large inputs, so activations see their saturated tails
    return b.leaf("input", shape, scale=draw(st.sampled_from((1.0,) * 6 + (30.0, 300.0))))


@st.composite
def graphs(draw, min_steps: int = 2, max_steps: int = 6) -> Graph:
    """A random small graph: a start tensor, then ``min_steps..max_steps`` steps, each an
    anchor, an epilogue of the latest anchor or a general op on the latest (or an earlier) value."""
    b = _Builder(draw(st.integers(0, 2 ** 20)))
    cur = _start(draw, b)
    steps, attempts = draw(st.integers(min_steps, max_steps)), 0
    done = 0
    while done < steps and attempts < 4 * steps:
        attempts += 1
        if done == 0 and len(b.shape(cur)) in (2, 3, 4) and draw(st.integers(0, 3)) > 0:
            step = _conv2d if len(b.shape(cur)) == 4 and draw(st.integers(0, 3)) > 0 else _matmul
        elif b.anchors and b.anchors[-1] == cur or (b.anchors and draw(st.integers(0, 2)) == 0):
            step = draw(st.sampled_from(EPILOGUE_STEPS + GENERAL_STEPS[:3]))
        else:
            step = draw(st.sampled_from(GENERAL_STEPS))
        if draw(st.integers(0, 5)) == 0:  # branch from an earlier computed value: multi-consumer
            computed = [i for i, n in enumerate(b.g.nodes) if n.op not in ("input", "const")]
            src = draw(st.sampled_from(computed)) if computed else cur
        else:
            src = cur
        n0 = len(b.g.nodes)
        out = step(draw, b, src)
        if out is None or not np.all(np.isfinite(b.vals[out])) or b.amax(out) > 1e6:
            b.truncate(n0)  # declined, or too large to stay well conditioned in float32
            continue
        cur, done = out, done + 1
    if done == 0:
        cur = b.add(_node("relu", [cur]))
    outs = [cur]
    computed = [i for i, n in enumerate(b.g.nodes) if n.op not in ("input", "const") and i != cur]
    if computed and draw(st.integers(0, 3)) == 0:  # also return an intermediate (multi-consumer)
        outs.append(draw(st.sampled_from(computed)))
    b.g.outputs = tuple(outs)
    return b.g
