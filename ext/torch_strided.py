"""``as_strided`` with any strides and offset (``StridedOps``, an importer mixin overriding the
stock ``_as_strided``, which took contiguous strides only): Longformer's overlapping chunks of a
transposed tensor. A contiguous view stays a reshape; anything else is one gather kernel over the
input's elements in storage order.
"""
from __future__ import annotations

from tvm import relax, te, tirx

from .torch_ops import Emitting, node_arg


def _contiguous(size, stride) -> bool:
    """Whether ``stride`` is the row-major stride of ``size`` (dims of one element aside); False
    when either holds a run-time value."""
    running = 1
    for n, s in reversed(list(zip(size, stride))):
        if not isinstance(n, int) or not isinstance(s, int):
            return False
        if n != 1 and s != running:
            return False
        running *= n
    return True


class StridedOps(Emitting):
    """Importer mixin: ``as_strided`` (see the module doc)."""

    def _as_strided(self, node):
        """``x.as_strided(size, stride, offset)``: one gather kernel computing each element's
        position in ``x``'s storage, so overlapping windows cost no index table. The storage is
        rebuilt from the value: ``x``'s dims in the order of its strides (the program's
        ``x`` may be a permuted view: Longformer chunks a transposed tensor), which needs ``x``
        dense and non-overlapping from offset 0; anything else is refused by name."""
        x, size, stride = self.env[node.args[0]], node.args[1], node.args[2]
        offset = node_arg(node, 3, "storage_offset", 0) or 0
        ordered = self._storage_order(x, node.args[0].meta.get("val"))
        if ordered is x and not offset and _contiguous(size, stride):  # a reshape: a view, no kernel
            return self._emit(relax.op.reshape(x, list(size)))
        flat = self._emit(relax.op.reshape(ordered, [-1]))
        numel, dims = flat.ty.shape[0], [offset, *size, *stride]
        if all(isinstance(v, (int, tirx.IntImm)) for v in (numel, *dims)):
            last = int(offset) + sum((int(n) - 1) * int(s) for n, s in zip(size, stride))
            if min(int(n) for n in size) > 0 and not 0 <= last < int(numel):
                # a view into more of a storage than x holds: elements the program does not have
                raise NotImplementedError(f"as_strided{tuple(size)} with strides {tuple(stride)} and offset "
                                          f"{offset} reads element {last} of an input of {int(numel)}")
        sizes = [self._prim(d) for d in size]
        steps = [self._prim(s) for s in stride]

        def gather(data):
            def element(*i):
                at = self._prim(offset)
                for k, step in zip(i, steps):
                    at = at + k.astype("int64") * step
                return data[at]
            return te.compute(sizes, element, name="as_strided")

        return self.block_builder.emit_te(gather, flat)

    def _storage_order(self, x, val):
        """``x`` permuted into the order its elements lie in storage (``val``: its fake tensor)."""
        if val is None:
            return x
        shape, strides = list(val.shape), list(val.stride())
        if not all(isinstance(v, int) for v in (*shape, *strides, val.storage_offset())):
            if val.is_contiguous():
                return x
            raise NotImplementedError("as_strided of a non-contiguous input with run-time sizes")
        order = sorted(range(len(shape)), key=lambda d: -strides[d])
        running, dense = 1, val.storage_offset() == 0
        for d in reversed(order):
            dense &= shape[d] == 1 or strides[d] == running
            running *= shape[d]
        if not dense:
            raise NotImplementedError(f"as_strided of a view with strides {tuple(strides)} (shape {tuple(shape)}, "
                                      f"offset {val.storage_offset()}): not one dense storage")
        return x if order == sorted(order) else self._emit(relax.op.permute_dims(x, order))

    @staticmethod
    def _prim(value):
        """A size, stride or offset (an int or a symbolic size) as an int64 TIR expression."""
        return tirx.const(int(value), "int64") if isinstance(value, (int, tirx.IntImm)) else tirx.Cast("int64", value)
