"""Order statistics and distances TVM's ``torch.export`` importer lacks or translates unlike
PyTorch, written in Relax ops: ``kthvalue``, ``median`` (NaN as PyTorch places it),
``nanmedian``, ``searchsorted`` (1-D and batched), ``bucketize`` (a NaN past every boundary),
``histc``, ``dist``, ``cdist``, ``pdist``. ``StatsOps.stats_converters()`` maps their ATen names
to the translations below; the importer adds them to its table.
"""
from __future__ import annotations

import math

import numpy as np
from tvm import relax

from .torch_ops import Emitting, node_arg, size_of


class StatsOps(Emitting):
    """Importer mixin: the order statistics and distances of the module doc."""

    def stats_converters(self) -> dict:
        return {
            "dist.default": self._dist,
            "_cdist_forward.default": self._cdist,
            "_pdist_forward.default": self._pdist,
            "kthvalue.default": self._kthvalue,
            "searchsorted.Tensor": self._searchsorted,
            "bucketize.Tensor": self._bucketize_nan_last,
            "median.dim": self._median,
            "median.default": self._median,
            "nanmedian.dim": self._nanmedian,
            "nanmedian.default": self._nanmedian,
            "histc.default": self._histc,
        }

    def _dist(self, node):
        """``torch.dist(a, b, p)``: the p-norm of ``a - b`` over all elements (a 0-d tensor)."""
        a, b = self.env[node.args[0]], self.env[node.args[1]]
        diff = self._emit(relax.op.reshape(self._emit(relax.op.subtract(a, b)), [-1]))
        return self._emit(_p_norm(diff, float(node_arg(node, 2, "p", 2.0)), a.ty.dtype))

    def _kthvalue(self, node):
        """``(values, indices)`` of the k-th smallest along ``dim`` (1-based k): an argsort, read
        at ``k - 1``; NaN counts as the largest (NaNLastSort orders the argsort)."""
        x, k = self.env[node.args[0]], node.args[1]
        dim, keep = node_arg(node, 2, "dim", -1), bool(node_arg(node, 3, "keepdim", False))
        order = self._emit(relax.op.argsort(x, axis=dim, dtype="int64"))
        index = self._emit(relax.op.strided_slice(order, [dim], [k - 1], [k]))
        return self._order_result(x, index, dim, keep, whole=False)

    def _searchsorted(self, node):
        """``searchsorted(sorted, values)`` (``right`` as given; ``side="right"`` too). A 1-D sorted
        sequence: a bucketize of the values. A batched one (rows of the last axis, the leading
        axes as the values'): each value's count of the entries of its row below it (at or
        below it with ``right``), a NaN value past every entry. A ``sorter`` does not import."""
        seq, values = self.env[node.args[0]], self.env[node.args[1]]
        right = bool(node.kwargs.get("right", False)) or node.kwargs.get("side") == "right"
        out_int32 = bool(node.kwargs.get("out_int32", False))
        if node.kwargs.get("sorter") is not None:
            raise NotImplementedError("searchsorted: a sorter argument does not import (sort the sequence first)")
        if len(seq.ty.shape) == 1:
            return self._nan_last_bucket(values, seq, out_int32, right)
        below = (relax.op.less_equal if right else relax.op.less)(
            self._emit(relax.op.expand_dims(seq, [-2])), self._emit(relax.op.expand_dims(values, [-1])))
        dtype = "int32" if out_int32 else "int64"
        count = self._emit(relax.op.sum(self._emit(relax.op.astype(self._emit(below), dtype)), axis=[-1]))
        if "float" not in str(values.ty.dtype):
            return count
        end = relax.const(int(seq.ty.shape[-1]), dtype)
        return self._emit(relax.op.where(relax.op.isnan(values), end, count))

    def _bucketize_nan_last(self, node):
        values, seq = self.env[node.args[0]], self.env[node.args[1]]
        return self._nan_last_bucket(values, seq, bool(node.kwargs.get("out_int32", False)),
                                     bool(node.kwargs.get("right", False)))

    def _nan_last_bucket(self, values, seq, out_int32: bool, right: bool):
        """``bucketize`` with a NaN value past every boundary, as PyTorch places it (TVM's
        binary search put it in bucket 0)."""
        buckets = relax.op.bucketize(values, seq, out_int32, right)
        if "float" not in str(values.ty.dtype):
            return self._emit(buckets)
        end = relax.const(int(seq.ty.shape[0]), "int32" if out_int32 else "int64")
        return self._emit(relax.op.where(relax.op.isnan(values), end, buckets))

    def _order_operand(self, node):
        """``(x, dim, keepdim, whole)`` of a ``median``/``nanmedian`` node: ``.default`` reads all
        elements (``x`` flattened, ``whole``), ``.dim`` one axis."""
        x = self.env[node.args[0]]
        if node.target.__name__.endswith("default"):
            return self._emit(relax.op.reshape(x, [-1])), 0, False, True
        return x, node_arg(node, 1, "dim", -1), bool(node_arg(node, 2, "keepdim", False)), False

    def _order_result(self, x, index, dim: int, keep: bool, whole: bool):
        """The value at ``index`` (kept axis ``dim``); ``(values, indices)`` unless ``whole``."""
        values = relax.op.gather_elements(x, index, axis=dim)
        if not keep:
            values, index = relax.op.squeeze(values, [dim]), relax.op.squeeze(index, [dim])
        if whole:
            return self._emit(values)
        return self._emit(relax.Tuple([self._emit(values), self._emit(index)]))

    def _median(self, node):
        """PyTorch's median: the lower middle of the sorted values, NaN (and the first NaN's index)
        for a row holding one. ``median.default`` reads all elements, ``median.dim`` returns
        ``(values, indices)``."""
        x, dim, keep, whole = self._order_operand(node)
        n = size_of(x, dim)
        order = self._emit(relax.op.argsort(x, axis=dim, dtype="int64"))
        middle = self._emit(relax.op.full_like(relax.op.strided_slice(order, [dim], [0], [1]),
                                               self._number((n - 1) // 2, "int64")))
        index = self._emit(relax.op.gather_elements(order, middle, axis=dim))
        if "float" in str(x.ty.dtype):  # the first NaN, found directly: a NaN ties +inf in the sort key
            nan = self._emit(relax.op.astype(relax.op.isnan(x), "int32"))
            has_nan = relax.op.greater(relax.op.max(nan, [dim], keepdims=True), relax.const(0, "int32"))
            index = self._emit(relax.op.where(has_nan, relax.op.argmax(nan, dim, keepdims=True), index))
        return self._order_result(x, index, dim, keep, whole)

    def _cdist(self, node):
        """``cdist(x1 (.., M, D), x2 (.., N, D), p)``: ``(sum |x1_i - x2_j|^p)^(1/p)``, computed
        directly (PyTorch's matrix-product form for p = 2 differs in rounding only)."""
        a, b, p = self.env[node.args[0]], self.env[node.args[1]], node.args[2]
        return self._emit(_p_norm(relax.op.subtract(relax.op.expand_dims(a, -2), relax.op.expand_dims(b, -3)),
                                  p, a.ty.dtype))

    def _pdist(self, node):
        """``pdist(x (N, D), p)``: the p-norm distance of every pair of rows ``i < j``, in row
        order (``N (N - 1) / 2`` values), read from constant pair indices."""
        x, p = self.env[node.args[0]], float(node_arg(node, 1, "p", 2.0))
        n = size_of(x, 0)
        if not isinstance(n, int):
            raise ValueError("pdist: the number of rows must be static (it sets the output's size); "
                             f"got the symbolic {n}")
        first, second = np.triu_indices(n, 1)
        rows = [relax.op.take(x, relax.const(i.astype("int64")), axis=0) for i in (first, second)]
        return self._emit(_p_norm(relax.op.subtract(*rows), p, x.ty.dtype))

    def _histc(self, node):
        """``histc(x, bins, min, max)``: counts of the values in ``bins`` equal bins over
        ``[min, max]`` (the data's own range when both are 0, widened by 1 each way when it is a
        single value), values outside and NaN not counted; the last bin holds ``max``. A value's
        bin is ``floor((x - min) * bins / (max - min))`` in the input's dtype, as PyTorch computes it."""
        x = self._emit(relax.op.reshape(self.env[node.args[0]], [-1]))
        dt = x.ty.dtype
        bins = int(node_arg(node, 1, "bins", 100))
        lo, hi = float(node_arg(node, 2, "min", 0)), float(node_arg(node, 3, "max", 0))
        if lo == hi:
            lo_e, hi_e = relax.op.min(x), relax.op.max(x)
            same = relax.op.equal(lo_e, hi_e)
            lo_e = self._emit(relax.op.where(same, relax.op.subtract(lo_e, relax.const(1.0, dt)), lo_e))
            hi_e = self._emit(relax.op.where(same, relax.op.add(hi_e, relax.const(1.0, dt)), hi_e))
        else:
            lo_e, hi_e = relax.const(lo, dt), relax.const(hi, dt)
        scaled = relax.op.divide(relax.op.multiply(relax.op.subtract(x, lo_e), relax.const(float(bins), dt)),
                                 relax.op.subtract(hi_e, lo_e))
        index = relax.op.minimum(relax.op.astype(relax.op.floor(scaled), "int64"), relax.const(bins - 1, "int64"))
        inside = relax.op.logical_and(relax.op.greater_equal(x, lo_e), relax.op.less_equal(x, hi_e))
        index = self._emit(relax.op.where(inside, index, relax.const(-1, "int64")))
        hits = relax.op.equal(relax.op.expand_dims(index, 1), relax.op.arange(0, bins, 1, "int64"))
        return self._emit(relax.op.sum(relax.op.astype(hits, dt), [0]))

    def _nanmedian(self, node):
        """The median of the values that are not NaN (NaN where all are): the lower middle of
        the sorted non-NaN values, read from a stable argsort in which NaN sorts as +inf."""
        x, dim, keep, whole = self._order_operand(node)
        nan = relax.op.isnan(x)
        order = self._emit(relax.op.argsort(relax.op.where(nan, relax.const(math.inf, x.ty.dtype), x),
                                            axis=dim, dtype="int64"))
        count = relax.op.sum(relax.op.astype(relax.op.logical_not(nan), "int64"), [dim], keepdims=True)
        middle = relax.op.maximum(relax.op.floor_divide(relax.op.subtract(count, relax.const(1, "int64")),
                                                        relax.const(2, "int64")), relax.const(0, "int64"))
        index = self._emit(relax.op.gather_elements(order, middle, axis=dim))
        return self._order_result(x, index, dim, keep, whole)


def _p_norm(diff, p: float, dt: str):
    """``(sum |diff|^p)^(1/p)`` over the last axis (p = inf: the largest ``|diff|``)."""
    diff = relax.op.abs(diff)
    if p == math.inf:
        return relax.op.max(diff, [-1])
    if p == 2:
        return relax.op.sqrt(relax.op.sum(relax.op.multiply(diff, diff), [-1]))
    if p == 1:
        return relax.op.sum(diff, [-1])
    if p == 0:
        return relax.op.sum(relax.op.astype(relax.op.not_equal(diff, relax.const(0.0, dt)), dt), [-1])
    powered = relax.op.sum(relax.op.power(diff, relax.const(float(p), dt)), [-1])
    return relax.op.power(powered, relax.const(1.0 / p, dt))
