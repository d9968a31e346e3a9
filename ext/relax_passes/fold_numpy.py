"""NumPy twins of Relax ops for constant folding (``fold_constants``): each computes what the
generated code would, bit for bit (IEEE arithmetic, pure data movement, in-range gathers), or
returns None to leave the op to TVM."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

_FLOATS = ("float16", "float32", "float64")


def contiguous(x: np.ndarray) -> np.ndarray:
    """C-contiguous ``x`` of the same shape (``np.ascontiguousarray`` turns 0-d into 1-d)."""
    return x if x.flags.c_contiguous else x.copy(order="C")


def host_array(tensor) -> np.ndarray:
    """A NumPy view of a CPU ``tvm.runtime.Tensor`` through DLPack (no copy; it keeps the tensor
    alive), read-only so that no fold writes into a model's weight; a ``.numpy()`` copy where
    DLPack refuses the tensor. Why: every copy of a weight lands on fresh pages, and this VM
    faults them in at ~0.4 GB/s: BERT-large's 1.3 GB of weights, copied out of their constants
    by the two folds, took 5.5 s of a 37 s build."""
    try:
        view = np.from_dlpack(tensor)
    except (TypeError, ValueError, RuntimeError, BufferError):
        return tensor.numpy()
    view.flags.writeable = False
    return view


def constant(array: np.ndarray) -> relax.Constant:
    """``relax.const`` of ``array`` in its own dtype, copied once (``relax.const(array, dtype)``
    first copies it through ``astype`` even to the same dtype, then into the TVM tensor)."""
    return relax.const(tvm.runtime.tensor(contiguous(array)))


def _reshape(call, x):
    return x.reshape(out_shape(call))


def _permute(call, x):
    axes = call.attrs.axes
    # a view: a folded weight transpose is read once more by its layout transform (the matmul's
    # panel packing copies it anyway), and a constant made of it is copied contiguous (``constant``)
    return np.transpose(x, None if axes is None else [int(a) for a in axes])


def _of_kinds(x: np.ndarray, kinds: str) -> bool:
    """``x``'s dtype is of one of the NumPy dtype ``kinds`` ("f": only the floats of ``_FLOATS``)."""
    return "f" in kinds and x.dtype.name in _FLOATS if x.dtype.kind == "f" else x.dtype.kind in kinds


def _binary(fn, kinds: str = "f"):
    """``fn`` on two operands of one dtype of ``kinds``: IEEE float arithmetic; with "iu" also
    integer arithmetic, which wraps as the generated code does; compares and logical ops."""
    def run(call, a, b):
        return fn(a, b) if a.dtype == b.dtype and _of_kinds(a, kinds) else None
    return run


def _unary(fn, kinds: str = "f"):
    def run(call, a):
        return fn(a) if _of_kinds(a, kinds) else None
    return run


def _astype(call, x):
    """Float to float, and integer or bool to anything (wrapping, or round-to-nearest into a
    float: what the casts compile to). Float to integer is left to TVM: out of range it is
    undefined in LLVM, where NumPy picks a value."""
    out = str(call.ty.dtype)
    if x.dtype.name in _FLOATS:
        return x.astype(out) if out in _FLOATS else None
    return x.astype(out) if x.dtype.kind in "iub" else None


def _where(call, cond, a, b):
    return np.where(cond, a, b) if cond.dtype.kind == "b" and a.dtype == b.dtype else None


def _take(call, x, idx):
    """``take`` with integer indices all in range (pure data movement)."""
    axis = call.attrs.axis
    axis = 0 if axis is None else int(axis)
    if idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0 or idx.max() >= x.shape[axis])):
        return None
    return np.take(x, idx, axis=axis)


def _ints(expr) -> list[int] | None:
    """A tuple argument of integers (IntImm or PrimValue) as ints (None when one is symbolic)."""
    fields = expr.fields if isinstance(expr, relax.Tuple) else []
    vals = [f if isinstance(f, tvm.tirx.IntImm) else getattr(f, "value", None) for f in fields]
    return [int(v) for v in vals] if all(isinstance(v, tvm.tirx.IntImm) for v in vals) else None


def _strided_slice(call, x):
    """Python slicing clamps begin/end to the axis like TOPI's strided_slice; the caller checks
    the result's shape against the call's static one."""
    parts = [_ints(a) for a in call.args[1:]]
    if len(parts) < 3 or any(p is None for p in parts):
        return None
    axes, begin, end = parts[:3]
    strides = parts[3] if len(parts) > 3 else [1] * len(axes)
    index = [slice(None)] * x.ndim
    for ax, b, e, st in zip(axes, begin, end, strides):
        index[ax] = slice(b, e, st)
    return contiguous(x[tuple(index)])


def _full(call, fill):
    """``full(shape, fill)`` of a one-element fill of the output's dtype. Also a workaround: the
    stock legalization of ``full`` raises TypeError on an infinite or NaN fill (TOPI tests
    ``"float" in dtype`` on a DataType), the causal mask ``torch.full((M, N), -inf)``."""
    out = str(call.ty.dtype)
    if fill.size != 1 or fill.dtype.name != out:
        return None
    return np.full(out_shape(call), fill.reshape(()), dtype=out)


#: ops whose tuple arguments are static parameters (the tensor is their first argument)
TUPLE_PARAMS = ("relax.strided_slice",)

#: op -> f(call, *numpy inputs) -> numpy result or None (None: not exact here, leave to TVM)
NUMPY = {
    "relax.add": _binary(np.add, "fiu"), "relax.subtract": _binary(np.subtract, "fiu"),
    "relax.multiply": _binary(np.multiply, "fiu"), "relax.divide": _binary(np.divide),
    "relax.sqrt": _unary(np.sqrt), "relax.negative": _unary(np.negative),
    "relax.reshape": _reshape, "relax.expand_dims": _reshape, "relax.squeeze": _reshape,
    "relax.flatten": _reshape, "relax.permute_dims": _permute, "relax.astype": _astype,
    "relax.broadcast_to": lambda call, x: contiguous(np.broadcast_to(x, out_shape(call))),
    "relax.strided_slice": _strided_slice, "relax.full": _full,
    # index arithmetic of position grids (DETR-style sine embeddings, relative positions):
    # integer and bool operands only, where every result is exact
    "relax.equal": _binary(np.equal, "iub"), "relax.not_equal": _binary(np.not_equal, "iub"),
    "relax.less": _binary(np.less, "iub"), "relax.less_equal": _binary(np.less_equal, "iub"),
    "relax.greater": _binary(np.greater, "iub"), "relax.greater_equal": _binary(np.greater_equal, "iub"),
    "relax.logical_and": _binary(np.logical_and, "b"), "relax.logical_or": _binary(np.logical_or, "b"),
    "relax.logical_not": _unary(np.logical_not, "b"), "relax.isnan": _unary(np.isnan),
    "relax.where": _where, "relax.take": _take,
}


CREATION_LIMIT = 1 << 16  # elements of an input-free op's output the folder evaluates


def _concat(call, fields):
    return np.concatenate(fields, axis=int(call.attrs.axis)) if len({f.dtype for f in fields}) == 1 else None


def _index_tensor(call, data, indices):
    """``data[i0, i1, ...]`` with broadcast index tensors, as NumPy's advanced indexing; only
    when every index is in range (what the op does outside it is not NumPy's wrap-around)."""
    if not all(i.dtype.kind in "iu" for i in indices) or len(indices) > data.ndim:
        return None
    if any(i.size and (i.min() < 0 or i.max() >= data.shape[k]) for k, i in enumerate(indices)):
        return None
    return contiguous(data[tuple(indices)])


#: op taking a tuple of tensors -> f(call, *arguments: an array, or a list for the tuple)
NUMPY_TUPLE = {"relax.concat": _concat, "relax.index_tensor": _index_tensor}


def out_shape(call) -> tuple:
    return tuple(int(d) for d in call.ty.shape)
