"""Symbolic dimensions that stock passes cannot carry: a ceil-mode pool's ``if_then_else``.

Relax infers a ceil-mode pool's output extent on a symbolic input as
``if_then_else((out - 1) * stride >= in + pad_begin, out - 1, out)`` (the last window must
start inside the image). TVM 0.27 represents that ``if_then_else`` as the same ``Call`` node as
a Relax call, and ``FuseOpsByPattern`` visiting a type with one in its shape calls Relax type
inference on it and stops ("Cannot find the FInferType attribute registered to op:
prim.if_then_else"): SqueezeNet, GoogLeNet or EfficientNet exported with a dynamic height and
width did not build. Two rewrites, in this order:

* ``ceil_mode`` dropped where it is exact (``_exact_floor``): a window that starts in the
  padding never exists when ``dilation * (k - 1) + 1 >= pad_end + stride`` (true of every
  ceil-mode pool in the zoo: 3/2, 3/1 with padding 1, 2/2), so the pool equals the floor-mode
  pool with ``stride - 1`` more padding at the end: ``floor((r + s - 1) / s) = ceil(r / s)``
  for the extent, and the added cells are outside every window's count (max, average without
  padding counted). The extent stays an expression of the input's symbols, so branches that
  meet again (a concat) keep provably equal shapes.
* Any extent that still holds a call gets a fresh symbol through ``match_cast`` (checked at
  run time against the call's value), used by everything after it; the op itself keeps the
  call in its type, so ``FuseEpilogues`` leaves it out of every group (``computed_shape``).

A pool whose one window covers the map (EfficientNet's head in ``transformers``:
``AvgPool2d(1280, ceil_mode=True)`` on an ``h // 32`` map) goes first: as at static sizes
(``global_pool``), it is the mean (max) over the spatial axes, taken when its window covers the
map a 224x224 input gives, and checked at run time: the result is ``match_cast`` to extents
``ceil(H / k)``, which are 1 exactly while the window covers the map (a map wider than the
window stops with the VM's shape error instead of a wrong answer), then to 1s; a matmul whose
activation has a symbolic reduction extent and whose weight a static one (the classifier after
a flatten) casts the activation to the weight's extent, which the matmul needs anyway. The
stock pool lowering looped over the 1280x1280 window per output: 60 ms of EfficientNet-B0's 133.

Static shapes are left alone: their extents are numbers.
"""
from __future__ import annotations

from tvm import relax, tirx
from tvm.ir.expr import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from .global_pool import REDUCE
from .symbolic import dim_text

_POOLS = {f"relax.nn.{kind}_pool{d}d": (kind, d) for kind in ("max", "avg") for d in (1, 2, 3)}


def _has_call(expr) -> bool:
    """Whether a PrimExpr holds a call (``if_then_else``, ...) anywhere."""
    if isinstance(expr, Call):
        return True
    return any(isinstance(sub, Expr) and _has_call(sub)
               for sub in (getattr(expr, f, None) for f in ("a", "b", "value", "condition", "true_value", "false_value")))


def computed_shape(ty) -> bool:
    """Whether a type's shape holds a call: ``FuseOpsByPattern`` stops on a group whose input
    or output has one (``fuse_epilogue``'s checks decline it; the op runs on its own)."""
    shape = getattr(ty, "shape", None)
    return isinstance(ty, relax.TensorType) and shape is not None and any(_has_call(d) for d in shape)


def _symbolic(ty) -> bool:
    shape = getattr(ty, "shape", None)
    return shape is not None and any(not isinstance(d, tirx.IntImm) for d in shape)


def _exact_floor(call: relax.Call):
    """The floor-mode pool equal to a ceil-mode ``call`` on a symbolic input, or None."""
    kind, dims = _POOLS[call.op.name]
    a = call.attrs
    if not a.ceil_mode or not _symbolic(call.args[0].ty):
        return None
    sizes, strides, dilation = ([int(v) for v in vals] for vals in (a.pool_size, a.strides, a.dilation))
    padding = [int(v) for v in a.padding]
    begin, end = padding[:dims], padding[dims:]
    if any(d * (k - 1) + 1 < p + s for k, s, d, p in zip(sizes, strides, dilation, end)):
        return None  # a last window could start in the padding: ceil mode drops it
    if kind == "avg" and a.count_include_pad and any(s > 1 for s in strides):
        return None  # the ceil overhang is not counted, the added padding would be
    op = getattr(relax.op.nn, f"{kind}_pool{dims}d")
    return op(call.args[0], sizes, strides, begin + [p + s - 1 for p, s in zip(end, strides)], dilation,
              ceil_mode=False, count_include_pad=bool(a.count_include_pad), layout=str(a.layout),
              out_layout=str(a.out_layout))


def _global_window(call: relax.Call):
    """A 2-D pool on a symbolic NCHW map whose one window covers the map at a 224x224 input, as
    the reduction over H and W with its extents checked at run time (see module doc); or None."""
    _, dims = _POOLS[call.op.name]
    a, x = call.attrs, call.args[0]
    shape = getattr(x.ty, "shape", None)
    if dims != 2 or str(a.layout) != "NCHW" or str(a.out_layout) != "NCHW" or shape is None or len(shape) != 4:
        return None
    (kh, kw), (sh, sw) = ([int(v) for v in vals] for vals in (a.pool_size, a.strides))
    if any(int(p) for p in a.padding) or any(int(d) != 1 for d in a.dilation) or not _symbolic(x.ty):
        return None
    if not all(s <= k for s, k in ((sh, kh), (sw, kw))) or not (a.ceil_mode or (sh, sw) == (1, 1)):
        return None  # one output pixel would not mean one window over the whole map
    H, W = shape[2], shape[3]
    from ..strategies.dynamic import representative

    sides = [representative(dim_text(d)) for d in (H, W)]
    if None in sides or sides[0] > kh or sides[1] > kw:
        return None
    one = [(H + kh - 1) // kh, (W + kw - 1) // kw]  # 1 while the window covers the map
    reduce = REDUCE[call.op.name](x, axis=[2, 3], keepdims=True)
    return reduce, relax.TensorType([shape[0], shape[1], *one], x.ty.dtype)


@mutator
class _Dims(PyExprMutator):
    def __init__(self, mod=None):
        super().__init__(mod)
        self.fresh: dict = {}  # the printed extent -> its symbol (one per distinct extent)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        pool = getattr(call.op, "name", None) in _POOLS
        whole = _global_window(call) if pool else None
        if whole is not None:  # the check, then the extents as the 1s they are (a GEMV after it)
            reduce, checked_ty = whole
            checked = self.builder_.match_cast(self.builder_.emit(reduce), checked_ty)
            n, c = checked_ty.shape.values[:2]
            return self.builder_.match_cast(checked, relax.TensorType([n, c, 1, 1], checked_ty.dtype))
        if getattr(call.op, "name", None) == "relax.matmul":
            call = self._static_reduction(call)
        floor = _exact_floor(call) if pool else None
        call = call if floor is None else floor
        ty = self.builder_.normalize(call).ty
        if not computed_shape(ty):
            return call
        dims = [self.fresh.setdefault(str(d), tirx.Var(f"dim{len(self.fresh)}", str(d.ty))) if _has_call(d) else d
                for d in ty.shape]
        return self.builder_.match_cast(self.builder_.emit(call), relax.TensorType(dims, ty.dtype))

    def _static_reduction(self, call: relax.Call) -> relax.Call:
        """``matmul(a, w)`` whose ``a`` has a symbolic reduction extent and ``w`` a static one
        (a classifier after the flatten of a global window above, ``(n, c * e_h * e_w)``): the
        extents are equal whenever the matmul runs, so ``a`` is ``match_cast`` to ``w``'s and
        the GEMM/GEMV candidates see a static K."""
        a, w = call.args
        a_shape, w_shape = (getattr(getattr(v, "ty", None), "shape", None) for v in (a, w))
        if a_shape is None or w_shape is None or len(w_shape) != 2 or len(a_shape) < 2:
            return call
        k = w_shape[0]
        if isinstance(a_shape[-1], tirx.IntImm) or not isinstance(k, tirx.IntImm):
            return call
        cast = self.builder_.match_cast(a, relax.TensorType([*list(a_shape)[:-1], k], a.ty.dtype))
        return relax.Call(call.op, [cast, w], call.attrs)


@relax.transform.function_pass(opt_level=0, name="ext.SettleComputedDims")
class SettleComputedDims:
    def transform_function(self, func, mod, ctx):
        if not isinstance(func, relax.Function) or not relax.analysis.defined_symbolic_vars(func):
            return func
        return _Dims(mod).visit_expr(func)


__all__ = ["SettleComputedDims", "computed_shape"]
