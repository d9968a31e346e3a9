"""TVM's ``torch.export`` importer with the range facts of symbolic shapes put to use.

``torch.export`` records a range for every symbolic size (``Dim("seq", min=2, max=64)``), and
its graph slices and reshapes with those symbols. The stock importer translates each call
without the ranges, and two cases then break models with a symbolic sequence length:

* ``x[:, :seq]`` of a fixed-size buffer (``position_ids[:, :seq]`` of 512 rows) becomes
  ``strided_slice`` with the end clipped: shape ``min(seq, 512)``, which the following add with a
  ``seq``-long tensor cannot match, so the sum lost its shape and the next conv failed
  (SqueezeBERT, ConvBERT). When the recorded range proves ``0 <= start <= end <= size`` the
  slice is emitted with ``assume_inbound``: shape ``end - start``.
* A reshape whose target equals the input's shape is skipped; the stock check compared the two
  shapes with Python ``==``, which is not a truth value for symbolic sizes (GPTBigCode's
  ``view``). Here the check is structural.
* ``torch.sym_min`` / ``sym_max`` of sizes (DeBERTa's ``min(seq, 16)``) translate to
  ``tirx.min`` / ``max``; the stock table lacks them, and ``scalar_tensor`` of such a size is
  a 0-d tensor holding it (the stock one made only constants). ``torch.empty`` of a symbolic
  size is zeros of that size (the stock one passed the size's graph nodes through).

Every conv and matmul is translated with a float32 result (``out_dtype="float32"``), whatever
its operands: a float64 model failed to import (its conv's float32 result plus the float64 bias),
a half one had its matmuls typed float32, and an integer ``matmul`` gave floats. While the
importer is built and translates, those ops take their result dtype from their operands, as
PyTorch does (``operand_dtype_results``).

One translation is wrong for static shapes too: ``F.interpolate(mode="nearest")`` became a
``half_pixel`` resize rounded to the nearest pixel, where PyTorch takes ``floor(dst * in / out)``
(``asymmetric``, ``floor``); the two agree on whole up-scales only (7x9 -> 10x13: half the
pixels differed). It is translated as PyTorch computes it.

``Importer(ep).from_exported_program(ep, ...)`` is the stock entry's translation step; the
decomposition ``from_torch`` runs itself first.
"""
from __future__ import annotations

import contextlib

import numpy as np
import tvm
from tvm import relax
from tvm_ffi import structural_equal
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from .torch_fft import ComplexFFT
from .torch_layout_ops import LayoutOps
from .torch_ops import ExtraOps
from .torch_special import SpecialOps
from .torch_stats import StatsOps
from .torch_strided import StridedOps
from .torch_resize import ExactResize


def _value_range(arg, ranges):
    """(lower, upper) of a slice bound: an int, a symbolic size node, or None (unknown)."""
    if isinstance(arg, int):
        return arg, arg
    val = getattr(arg, "meta", {}).get("val")
    expr = getattr(getattr(val, "node", None), "expr", None)
    if expr is None:
        return None
    from torch.utils._sympy.value_ranges import bound_sympy

    try:
        found = bound_sympy(expr, ranges)
        return int(found.lower), int(found.upper)
    except (TypeError, ValueError, OverflowError):  # unbounded (int_oo) or not an integer range
        return None


def _symbolic(value) -> bool:
    """A size expression with symbols (not a constant, not a tensor)."""
    return tvm.ir.is_prim_expr(value) and not isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm))


#: the ops the stock converters call with ``out_dtype="float32"``
_FLOAT32_RESULT_OPS = ((relax.op.nn, ("conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose")),
                       (relax.op.linear_algebra, ("matmul",)))


@contextlib.contextmanager
def operand_dtype_results():
    """Within: the ops of ``_FLOAT32_RESULT_OPS`` called with ``out_dtype="float32"`` infer their
    result dtype from their operands instead. Converters bound while it is active (the stock
    table's ``partial(matmul, out_dtype="float32")``) keep the wrapper."""
    saved = [(module, name, getattr(module, name)) for module, names in _FLOAT32_RESULT_OPS for name in names]

    def operand_dtype(op):
        def call(*args, out_dtype=None, **kwargs):
            return op(*args, out_dtype=None if out_dtype == "float32" else out_dtype, **kwargs)
        return call

    for module, name, op in saved:
        setattr(module, name, operand_dtype(op))
    try:
        yield
    finally:
        for module, name, op in saved:
            setattr(module, name, op)


class Importer(ComplexFFT, ExtraOps, StatsOps, SpecialOps, LayoutOps, StridedOps, ExactResize, ExportedProgramImporter):
    """The stock importer, with symbolic slices and reshapes translated by their ranges."""

    def __init__(self, ep):
        with operand_dtype_results():
            super().__init__()
        self._ranges = dict(getattr(ep, "range_constraints", {}) or {})

    def from_exported_program(self, *args, **kwargs):
        with operand_dtype_results():
            return super().from_exported_program(*args, **kwargs)

    def create_convert_map(self):
        table = super().create_convert_map()
        table.update(self.fft_converters())  # FNet: see torch_fft
        table.update(self.extra_converters())  # amax, var_mean, median...: see torch_ops
        table.update(self.stats_converters())  # median, searchsorted, cdist...: see torch_stats
        table.update(self.special_converters())  # lgamma, digamma, erfinv, i0...: see torch_special
        table.update(self.layout_converters())  # scatter_add, unfold, _trilinear: see torch_layout_ops
        for name, fn in (("sym_min", tvm.tirx.min), ("sym_max", tvm.tirx.max)):  # size arithmetic
            table[name] = lambda node, fn=fn: fn(*self.retrieve_args(node))
        table["min.dim"] = self._min_dim
        table["triu_indices.default"] = lambda node: self._tri_indices(node, np.triu_indices)
        table["tril_indices.default"] = lambda node: self._tri_indices(node, np.tril_indices)
        table.update(self.complex_converters(table))  # last: wraps the entries above (torch_complex)
        return table

    def _select(self, node):
        """``x.select(dim, i)`` (``x[:, -1]``): the stock translation is ``take(x, i)`` with
        ``i`` as written, and a negative ``i`` read before the tensor (``rnn(x)[0][:, -1]``
        returned whatever memory held). A negative position counts from the end, as in Python."""
        x, dim, index = self.env[node.args[0]], node.args[1], node.args[2]
        shape = getattr(x.ty, "shape", None)
        if not isinstance(index, int) or index >= 0 or shape is None:
            return super()._select(node)
        size = shape[dim % len(shape)]
        if isinstance(size, tvm.tirx.IntImm):
            if index < -int(size):
                raise IndexError(f"select: index {index} is out of range for a dimension of size {int(size)}")
            return self.block_builder.emit(relax.op.take(x, relax.const(index + int(size), "int64"), dim))
        end = index + 1 if index < -1 else 2**62  # strided_slice counts a negative begin from the end
        row = self.block_builder.emit(relax.op.strided_slice(x, [dim], [index], [end]))
        return self.block_builder.emit(relax.op.squeeze(row, [dim]))

    def _tri_indices(self, node, numpy_fn):
        """``torch.triu_indices(row, col, offset)`` / ``tril_indices``: sizes known at export, so
        the ``(2, n)`` index pairs are a constant (DLRM's feature-interaction gather)."""
        row, col = node.args[0], node.args[1]
        offset = node.args[2] if len(node.args) > 2 else node.kwargs.get("offset", 0)
        if not all(isinstance(v, int) for v in (row, col, offset)):
            raise ValueError(f"{node.target}: symbolic sizes are not supported (row={row}, col={col})")
        import torch

        dtype = self._convert_data_type(node.kwargs.get("dtype", torch.int64), self.env)
        return relax.const(np.stack(numpy_fn(row, offset, col)).astype(dtype))

    def _min_dim(self, node):
        """``torch.min(x, dim)``, which the stock table lacks: values and indices of the smallest
        top-1, as its ``max.dim`` takes the largest (values read alone become a ``min``:
        ``relax_passes/top_one.py``)."""
        x, dim = self.env[node.args[0]], node.args[1]
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        bb = self.block_builder
        top = bb.emit(relax.op.topk(x, k=1, axis=dim, largest=False, ret_type="both", dtype="int64"))
        fields = [bb.emit(relax.TupleGetItem(top, i)) for i in (0, 1)]
        if not keepdim:
            fields = [bb.emit(relax.op.squeeze(f, axis=[dim])) for f in fields]
        return bb.emit(relax.Tuple(fields))

    def _upsample_impl(self, x, size, scale_factor, method: str, align_corners: bool):
        if method != "nearest_neighbor":
            return super()._upsample_impl(x, size, scale_factor, method, align_corners)
        # the stock call does the size arithmetic; its binding is dead code afterwards (DCE drops it)
        out = super()._upsample_impl(x, size, scale_factor, method, align_corners)
        call = self.block_builder.lookup_binding(out)
        return self.block_builder.emit(relax.op.image.resize2d(
            x, call.args[1], layout="NCHW", method="nearest_neighbor", coordinate_transformation_mode="asymmetric",
            rounding_method="floor"))

    def _size_tensor(self, value, dtype: str):
        """A 0-d ``dtype`` tensor holding the symbolic size ``value``."""
        bb = self.block_builder
        vec = bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr([value])))
        return bb.emit(relax.op.astype(bb.emit(relax.op.reshape(vec, [])), dtype))

    def _empty(self, node):
        """``torch.empty(size)`` as zeros, with symbolic sizes: the stock translation passed the
        size's graph nodes to Relax as they were (DeepSeek-V3's expert routing with a symbolic
        length failed to import)."""
        import torch

        size = self.retrieve_args(node)[0]
        size = list(size) if isinstance(size, (list, tuple)) else [size]
        dtype = self._convert_data_type(node.kwargs.get("dtype", torch.get_default_dtype()), self.env)
        return self.block_builder.emit(relax.op.zeros(relax.ShapeExpr(size), dtype))

    def _scalar_tensor(self, node):
        value = self.retrieve_args(node)[0]
        if not _symbolic(value):
            return super()._scalar_tensor(node)
        import torch

        return self._size_tensor(value, self._convert_data_type(node.kwargs.get("dtype", torch.get_default_dtype()),
                                                                self.env))

    def _clamp(self, node):
        args = list(self.retrieve_args(node)) + [None, None]
        x, low, high = args[0], node.kwargs.get("min", args[1]), node.kwargs.get("max", args[2])
        if not (_symbolic(low) or _symbolic(high)):
            return super()._clamp(node)
        bb, dtype = self.block_builder, x.ty.dtype
        for bound, op in ((low, relax.op.maximum), (high, relax.op.minimum)):
            if bound is not None:
                bound = self._size_tensor(bound, dtype) if _symbolic(bound) else (
                    bound if isinstance(bound, relax.Expr) else relax.const(bound, dtype))
                x = bb.emit(op(x, bound))
        return x

    def _slice(self, node):
        args = list(node.args) + [None] * (5 - len(node.args))
        dim, start, end, step = (args[1] or 0), args[2], args[3], (1 if args[4] is None else args[4])
        x = self.env[args[0]]
        shape = x.ty.shape if isinstance(x.ty, relax.TensorType) else None
        size = shape[dim % len(shape)] if shape is not None and isinstance(dim, int) else None
        static = isinstance(size, tvm.tirx.IntImm)
        if static and (end is None or (isinstance(end, int) and end >= int(size))):
            end = int(size)  # to the end (HF's ``x[:, max(0, L - n):]``)
        bounds = (_value_range(0 if start is None else start, self._ranges), _value_range(end, self._ranges))
        if (step == 1 and static and None not in bounds and not (isinstance(start, int) and isinstance(end, int))
                and 0 <= bounds[0][0] and bounds[0][1] <= bounds[1][0] and bounds[1][1] <= int(size)):
            begin, stop = (0 if v is None else v if isinstance(v, int) else self._in_range(self.env[v]) for v in (start, end))
            return self.block_builder.emit(relax.op.strided_slice(x, [dim % len(shape)], [begin], [stop], [1],
                                                                  assume_inbound=True))
        tail = self._tail_slice(x, size, dim, start, end, step, bounds[0])
        return tail if tail is not None else super()._slice(node)

    def _in_range(self, expr):
        """A size expression simplified with its symbols' export ranges: ``max(2048 - n, 0)`` with
        ``n`` in 2..64 is ``2048 - n``, so that a slice from it is ``n`` long (not an expression
        TVM cannot compare with ``n``, which cost an add of the slice its shape)."""
        if not _symbolic(expr):
            return expr
        from tvm.sym import Analyzer, ConstIntBound

        analyzer = Analyzer()
        names = {getattr(sym, "name", str(sym)): rng for sym, rng in self._ranges.items()}
        for var in tvm.tirx.analysis.undefined_vars(expr):
            rng = names.get(var.name)
            try:
                analyzer.update(var, ConstIntBound(int(rng.lower), int(rng.upper)))
            except (AttributeError, TypeError, ValueError, OverflowError):  # unbounded: leave it
                pass
        simple = analyzer.simplify(expr)
        # only where the ranges settle every min/max: a half-settled form can hide a length TVM proved
        # from the original (DeBERTa's rows ``[16 - min(n, 16), 16 + min(n, 16))`` are ``2 * min(n, 16)``)
        return simple if not any(f in str(simple) for f in ("T.min(", "T.max(")) else expr

    def _tail_slice(self, x, size, dim, start, end, step, start_range):
        """``x[..., -n:]`` with a symbolic ``n`` of known range on a static dimension (MPT's ALiBi
        bias, ``alibi[:, -seq:, -seq:]``): the stock translation begins at ``max(size - n, 0)``,
        which TVM cannot simplify, and an add with the sliced tensor lost its shape (the build
        then failed). Where ``n <= size`` always, the slice is the last ``n`` entries; where
        ``n >= size`` always, it is the whole dimension."""
        if not (step == 1 and isinstance(size, tvm.tirx.IntImm) and start_range is not None and start_range[1] < 0
                and not isinstance(start, int) and (end is None or (isinstance(end, int) and end >= int(size)))):
            return None
        low, high = -start_range[1], -start_range[0]  # the range of n
        if low >= int(size):
            return x
        if high > int(size):
            return None
        axis = dim % len(x.ty.shape)
        return self.block_builder.emit(relax.op.strided_slice(x, [axis], [size + self.env[start]], [size], [1],
                                                              assume_inbound=True))

    def _reshape(self, node):
        import torch

        args = self.retrieve_args(node)
        x = args[0]
        dims = args[1] if isinstance(args[1], (torch.Size, tuple, list)) else args[1:]
        shape = self.shape_of(x)
        if shape is not None and len(shape) == len(dims) and all(
                structural_equal(a, tvm.tirx.IntImm("int64", b) if isinstance(b, int) else b)
                for a, b in zip(shape, dims)):
            return x
        return self._emit_torch_reshape(x, dims)
