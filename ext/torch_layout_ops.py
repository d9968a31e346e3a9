"""ATen indexing and layout ops TVM's ``torch.export`` importer lacks or translates unlike
PyTorch, written in Relax ops: ``index_put`` beyond one index tensor per axis (``x[idx] = v``,
``index_add``, ``index_copy``, ``x[mask] = v``), ``scatter_add``, ``scatter_reduce``, ``Tensor.unfold``,
``F.adaptive_max_pool2d``, max-pool indices (``max_unpool2d``; the stock indices were zeros),
``nn.Bilinear`` (``_trilinear``), ``nn.EmbeddingBag`` and transposed 3-D convolutions
(``as_strided``: ``torch_strided``).
``LayoutOps.layout_converters()`` maps their ATen names; ``_index_put`` and ``_convolution``
override the stock methods of the same names.
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from .torch_ops import Emitting, node_arg, size_of


def _ints(value, n: int, default=None) -> list:
    """A conv or pool argument (an int or a list of one or ``n``; None: ``default``) as ``n`` ints."""
    if value is None:
        value = default
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return [int(v) for v in (value * n if len(value) == 1 else value)]


def _window(node) -> tuple:
    """``(kernel, stride, padding)`` of a 2-D pool node (an empty or missing stride: the kernel)."""
    k = _ints(node_arg(node, 1, "kernel_size"), 2)
    return k, _ints(node_arg(node, 2, "stride", None) or k, 2), _ints(node_arg(node, 3, "padding", 0), 2)


def _reads_indices(node) -> bool:
    """Whether a ``(values, indices)`` node's indices have a reader."""
    return any(getattr(u.target, "__name__", "") == "getitem" and u.args[1] == 1 and u.users for u in node.users)


class LayoutOps(Emitting):
    """Importer mixin: the translations in the module doc."""

    def layout_converters(self) -> dict:
        return {"scatter_add.default": self._scatter_add, "adaptive_max_pool2d.default": self._adaptive_max_pool2d,
                "_trilinear.default": self._trilinear, "unfold.default": self._unfold_windows,
                "_embedding_bag.default": self._embedding_bag,
                "_embedding_bag_forward_only.default": self._embedding_bag,
                "scatter_reduce.two": self._scatter_reduce}

    def _scatter_add(self, node):
        x, dim, index, src = self.env[node.args[0]], node.args[1], self.env[node.args[2]], self.env[node.args[3]]
        return self._emit(relax.op.scatter_elements(x, index, src, axis=dim, reduction="add"))

    def _scatter_reduce(self, node):
        """``scatter_reduce`` (graph networks' neighbour aggregation): sum, prod, amax, amin on any
        dtype, mean on floats; ``include_self=False`` first overwrites the positions the index
        reaches with the reduction's identity (mean: zero, and a count that leaves ``self`` out)."""
        x, dim, index, src = self.env[node.args[0]], node.args[1], self.env[node.args[2]], self.env[node.args[3]]
        how, include_self = node_arg(node, 4, "reduce"), bool(node_arg(node, 5, "include_self", True))
        dt = str(x.ty.dtype)
        floating = dt.startswith(("float", "bfloat"))
        if how == "mean" and not floating:
            raise NotImplementedError(f"scatter_reduce mean of {dt}: integer means do not import")
        kinds = {"sum": ("add", 0), "prod": ("mul", 1), "amax": ("max", "-inf"), "amin": ("min", "inf"),
                 "mean": ("add", 0)}
        if how not in kinds:
            raise NotImplementedError(f"scatter_reduce {how!r} does not import")
        op, identity = kinds[how]

        def fill(value, like):
            if isinstance(value, str):
                value = float(value) if floating else (np.iinfo(dt).min if value == "-inf" else np.iinfo(dt).max)
            # a broadcast constant: full_like's legalization fails on an infinite fill value
            return relax.op.broadcast_to(relax.const(value, str(like.ty.dtype)), relax.get_shape_of(like))

        def scatter(base, values, reduction):
            return self._emit(relax.op.scatter_elements(base, index, values, axis=dim, reduction=reduction))

        base = x if include_self else scatter(x, self._emit(fill(identity, src)), "update")
        out = scatter(base, src, op)
        if how != "mean":
            return out
        ones = self._emit(fill(1.0, x))
        count = ones if include_self else scatter(ones, self._emit(fill(0.0, src)), "update")
        return self._emit(relax.op.divide(out, scatter(count, self._emit(fill(1.0, src)), "add")))

    def _embedding_bag(self, node):
        """``nn.EmbeddingBag`` (DLRM's sparse features): the rows of ``weight`` at ``indices``
        (times ``per_sample_weights``), reduced per bag by ``mode`` 0 sum, 1 mean, 2 max; bag
        ``b`` holds positions ``offsets[b]`` up to the next offset (the last to the end, or to
        ``offsets[-1]`` with ``include_last_offset``). Each position's bag is a bucketize of its
        number among the offsets, the reduction one scatter; an empty bag gives zeros, as in
        PyTorch. Returns ``(out, out, out, out)``: the three bookkeeping outputs must not be read."""
        weight, indices, offsets = (self.env[n] for n in node.args[:3])
        mode = node_arg(node, 4, "mode", 0)
        per_sample = node_arg(node, 6, "per_sample_weights")
        include_last = bool(node_arg(node, 7, "include_last_offset", False))
        padding_idx = node_arg(node, 8, "padding_idx", -1)
        for user in node.users:
            if getattr(user.target, "__name__", "") == "getitem" and user.args[1] != 0 and user.users:
                raise NotImplementedError("_embedding_bag: only the bags' values import (not offset2bag or sizes)")
        if padding_idx is not None and padding_idx >= 0:
            raise NotImplementedError("_embedding_bag with a padding_idx does not import")
        n, dim = int(indices.ty.shape[0]), int(weight.ty.shape[1])
        bags = int(offsets.ty.shape[0]) - (1 if include_last else 0)
        dt = str(weight.ty.dtype)
        rows = relax.op.take(weight, indices, axis=0)
        if per_sample is not None:
            rows = relax.op.multiply(rows, relax.op.expand_dims(self.env[per_sample], 1))
        position = relax.op.arange(0, n, 1, str(offsets.ty.dtype))
        bag = relax.op.subtract(relax.op.bucketize(position, offsets, False, True), relax.const(1, "int64"))
        if include_last:  # positions at or past the last offset belong to no bag: dropped below
            bag = relax.op.minimum(bag, relax.const(bags, "int64"))
        bag = self._emit(relax.op.broadcast_to(relax.op.expand_dims(bag, 1), [n, dim]))
        reduce = {0: "add", 1: "add", 2: "max"}[int(mode)]
        start = relax.const(float("-inf") if reduce == "max" else 0.0, dt)
        out = relax.op.scatter_elements(relax.op.full([bags + 1, dim], start, dt), bag, rows, axis=0, reduction=reduce)
        out = self._emit(relax.op.strided_slice(out, [0], [0], [bags]))
        if int(mode) == 1:
            counts = relax.op.scatter_elements(relax.op.zeros([bags + 1, dim], dt), bag,
                                               relax.op.ones([n, dim], dt), axis=0, reduction="add")
            counts = relax.op.strided_slice(counts, [0], [0], [bags])
            out = relax.op.divide(out, relax.op.maximum(counts, relax.const(1.0, dt)))
        elif int(mode) == 2:  # an empty bag stayed -inf
            out = relax.op.where(relax.op.isinf(out), relax.const(0.0, dt), out)
        out = self._emit(out)
        return self._emit(relax.Tuple([out, out, out, out]))

    def _adaptive_max_pool2d(self, node):
        """PyTorch's windows ``[floor(i H / oh), ceil((i + 1) H / oh))``: a max pool when they tile
        the image evenly, else one max per window (``oh * ow`` of them, at most 256); returns
        ``(values, indices)`` and the indices must not be read."""
        x, (oh, ow) = self.env[node.args[0]], node.args[1]
        if _reads_indices(node):
            raise NotImplementedError("adaptive_max_pool2d: the indices (return_indices=True) do not import")
        H, W = (int(d) for d in list(x.ty.shape)[-2:])
        if H % oh == 0 and W % ow == 0:
            out = self._emit(relax.op.nn.max_pool2d(x, (H // oh, W // ow), (H // oh, W // ow)))
        elif oh * ow <= 256:
            rows = []
            for i in range(oh):
                cells = [relax.op.max(relax.op.strided_slice(
                    x, [len(x.ty.shape) - 2, len(x.ty.shape) - 1], [i * H // oh, j * W // ow],
                    [-(-(i + 1) * H // oh), -(-(j + 1) * W // ow)]), [-2, -1], keepdims=True) for j in range(ow)]
                rows.append(relax.op.concat(cells, axis=-1))
            out = self._emit(relax.op.concat(rows, axis=-2))
        else:
            raise NotImplementedError(f"adaptive_max_pool2d to {oh}x{ow} from {H}x{W}: uneven windows, too many")
        return self._emit(relax.Tuple([out, out]))

    def _max_pool2d_with_indices(self, node):
        """``(values, indices)``: the stock converter returned zeros for the indices (max_unpool2d
        then scattered every value to pixel 0). An index is ``h * W + w`` of the window's max in
        the input plane, the first in window order, a NaN taken as PyTorch takes it (each NaN
        replaces the max); a window of ``-inf`` keeps its first pixel inside the image. Computed
        only when the indices are read (tap by tap: ``KH * KW`` compare-and-select steps)."""
        x = self.env[node.args[0]]
        k, stride, pad = _window(node)
        dil = _ints(node_arg(node, 4, "dilation", 1), 2)
        ceil = bool(node_arg(node, 5, "ceil_mode", False))
        values = self._emit(relax.op.nn.max_pool2d(x, k, stride, pad, dil, ceil_mode=ceil))
        if not _reads_indices(node):
            return self._emit(relax.Tuple([values, values]))
        return self._emit(relax.Tuple([values, window_argmax(self._emit, x, values, k, stride, pad, dil)]))

    def _avg_pool2d(self, node):
        """``divisor_override``: the window's sum over that number, which the stock translation
        ignored (it divided by the window count). The sum is the average over the pixels inside
        the image times their count (a constant per output position)."""
        divisor = node_arg(node, 6, "divisor_override", None)
        if not divisor:
            return super()._avg_pool2d(node)
        x = self.env[node.args[0]]
        (k, stride, pad), ceil = _window(node), bool(node_arg(node, 4, "ceil_mode", False))
        avg = self._emit(relax.op.nn.avg_pool2d(x, k, stride, pad, ceil_mode=ceil, count_include_pad=False,
                                                layout="NCHW"))
        size = [size_of(x, d) for d in (-2, -1)] + [size_of(avg, d) for d in (-2, -1)]
        if not all(isinstance(d, int) for d in size):
            raise NotImplementedError("avg_pool2d with divisor_override needs static sizes")
        inside = [np.minimum(np.arange(o) * s - p + kk, n) - np.maximum(np.arange(o) * s - p, 0)
                  for n, o, s, p, kk in zip(size[:2], size[2:], stride, pad, k)]
        scale = np.outer(*inside).astype(str(x.ty.dtype)) / np.array(divisor, str(x.ty.dtype))
        return self._emit(relax.op.multiply(avg, relax.const(scale)))

    def _max_pool1d_with_indices(self, node):
        return self._pool_values_only(node, super()._max_pool1d_with_indices, "max_pool1d")

    def _max_pool3d_with_indices(self, node):
        return self._pool_values_only(node, super()._max_pool3d_with_indices, "max_pool3d")

    def _pool_values_only(self, node, stock, name: str):
        """The stock pool, whose indices are zeros: refused when they are read."""
        if _reads_indices(node):
            raise NotImplementedError(f"{name} indices (return_indices=True) do not import; max_pool2d's do")
        return stock(node)

    def _index_put(self, node):
        """``x[i0, i1, ...] = v`` (``index_put``, also ``index_add``/``index_copy`` decomposed):
        index tensors for fewer axes than ``x`` has (``x[idx] = v``: the stock translation
        required one per axis), full slices (None) anywhere, negative indices counted from the
        end, and a bool mask with a one-element value (``x[x > 0] = 0``: a ``where``). Each
        axis gets a full index tensor placed where PyTorch's indexing result puts it (the
        broadcast index dimensions where the index tensors are when adjacent, first when not),
        then Relax's ``index_put`` takes them all."""
        x, indices, values = self.env[node.args[0]], list(node.args[1]), self.env[node.args[2]]
        accumulate = bool(node_arg(node, 3, "accumulate", False))
        shape = [size_of(x, j) for j in range(len(x.ty.shape))]  # the tensor's sizes may be symbolic
        if any(not hasattr(d, "value") for i in indices if i is not None for d in self.env[i].ty.shape):
            return super()._index_put(node)  # index tensors of symbolic shape
        indices += [None] * (len(shape) - len(indices))
        given = [j for j, i in enumerate(indices) if i is not None]
        masks = [j for j in given if self.env[indices[j]].ty.dtype == "bool"]
        if masks:
            return self._masked_put(x, given, [self.env[indices[j]] for j in given], values, accumulate)
        idx = {j: self._emit(self._wrapped_index(self.env[indices[j]], shape[j])) for j in given}
        batch = list(np.broadcast_shapes(*[tuple(int(d) for d in idx[j].ty.shape) for j in given]))
        adjacent = given == list(range(given[0], given[-1] + 1))
        front = given[0] if adjacent else 0  # where the broadcast index dimensions go
        rest = [j for j in range(len(shape)) if j not in idx]
        axes = ([(j, pos) for j, pos in zip(rest, [*range(front), *range(front + len(batch), len(shape) + len(batch))])]
                if adjacent else [(j, len(batch) + k) for k, j in enumerate(rest)])
        rank = len(shape) - len(given) + len(batch)
        full = {}
        for j in given:
            dims = [int(d) for d in idx[j].ty.shape]
            full[j] = relax.op.reshape(idx[j], [1] * front + [1] * (len(batch) - len(dims)) + dims
                                       + [1] * (rank - front - len(batch)))
        for j, pos in axes:
            full[j] = relax.op.reshape(relax.op.arange(0, shape[j], 1, "int64"), [1] * pos + [shape[j]] + [1] * (rank - pos - 1))
        out_shape = [1] * rank
        for j, pos in axes:
            out_shape[pos] = shape[j]
        out_shape[front:front + len(batch)] = batch
        values = relax.op.broadcast_to(relax.op.astype(values, x.ty.dtype), out_shape)
        indices = relax.Tuple([self._emit(full[j]) for j in range(len(shape))])
        return self._emit(relax.op.index_put(x, indices, self._emit(values), accumulate))

    def _wrapped_index(self, index, size):
        """An integer index tensor with its negative entries counted from the end."""
        index = relax.op.astype(index, "int64") if index.ty.dtype != "int64" else index
        return relax.op.where(relax.op.less(index, relax.const(0, "int64")),
                              relax.op.add(index, self._number(size, "int64")), index)

    def _masked_put(self, x, given, indices, values, accumulate):
        """``x[mask] = v`` with one bool mask over consecutive leading-or-inner axes and a
        one-element ``v``: ``where(mask, v, x)`` (``x + where(mask, v, 0)`` accumulating). A
        value per selected element depends on the data and is refused."""
        if len(given) != 1 or int(np.prod([int(d) for d in values.ty.shape])) != 1:
            raise NotImplementedError("index_put with a bool mask: only one mask and a single value import "
                                      "(x[mask] = v); a value per selected element depends on the data")
        mask, axis = indices[0], given[0]
        trailing = len(x.ty.shape) - axis - len(mask.ty.shape)
        mask = relax.op.reshape(mask, [int(d) for d in mask.ty.shape] + [1] * trailing) if trailing else mask
        value = relax.op.reshape(relax.op.astype(values, x.ty.dtype), [])
        if accumulate:
            return self._emit(relax.op.add(x, relax.op.where(mask, value, relax.const(0, x.ty.dtype))))
        return self._emit(relax.op.where(mask, value, x))

    def _convolution(self, node):
        """A transposed 3-D convolution (3-D U-Nets' up-convolutions; the stock translation took
        1-D and 2-D only) as the textbook stride-1 ``conv3d`` of the input dilated by the stride,
        with the flipped kernel, its in/out axes swapped per group, padded by ``d (k - 1) - p``
        (plus the output padding after): ext's conv3d path then runs it. Others: stock."""
        args = list(node.args) + [None] * (9 - len(node.args))
        x = self.env[args[0]]
        if not args[6] or len(x.ty.shape) != 5:
            return super()._convolution(node)
        w = self.env[args[1]]
        bias = self.env[args[2]] if args[2] is not None else None
        stride, padding, dilation, out_pad = (_ints(a, 3, dflt) for a, dflt in
                                              ((args[3], 1), (args[4], 0), (args[5], 1), (args[7], 0)))
        groups = args[8] or 1
        N, C, *size = (int(d) for d in x.ty.shape)
        _, Og, *k = (int(d) for d in w.ty.shape)
        lo = [d * (kk - 1) - p for d, kk, p in zip(dilation, k, padding)]
        if min(lo) < 0:
            raise NotImplementedError(f"conv_transpose3d with padding {padding} above the dilated kernel's reach")
        if stride != [1, 1, 1]:  # s - 1 zeros after each voxel, the last voxel's dropped
            spread = relax.op.reshape(x, [N, C, size[0], 1, size[1], 1, size[2], 1])
            spread = relax.op.nn.pad(spread, [0, 0] * 3 + [0, stride[0] - 1, 0, 0, 0, stride[1] - 1, 0, 0,
                                                            0, stride[2] - 1])
            spread = relax.op.reshape(spread, [N, C] + [n * st for n, st in zip(size, stride)])
            x = relax.op.strided_slice(spread, [2, 3, 4], [0, 0, 0], [(n - 1) * st + 1 for n, st in zip(size, stride)])
        kernel = relax.op.flip(relax.op.flip(relax.op.flip(w, 2), 3), 4)
        kernel = relax.op.reshape(relax.op.permute_dims(relax.op.reshape(kernel, [groups, C // groups, Og, *k]),
                                                        [0, 2, 1, 3, 4, 5]), [groups * Og, C // groups, *k])
        y = relax.op.nn.conv3d(x, kernel, strides=1, padding=lo + [a + b for a, b in zip(lo, out_pad)],
                               dilation=dilation, groups=groups)
        if bias is not None:
            y = relax.op.add(y, relax.op.reshape(bias, [1, -1, 1, 1, 1]))
        return self._emit(y)

    def _trilinear(self, node):
        """``_trilinear(a, b, c, expand_a, expand_b, expand_c, sum_dims)`` (``nn.Bilinear``): each
        operand takes the axes of a common rank that its ``expand`` list does not name; the
        product of the three, summed over ``sum_dims``, as one einsum."""
        operands = [self.env[n] for n in node.args[:3]]
        expands, sum_dims = node.args[3:6], set(node.args[6])
        rank = len(operands[0].ty.shape) + len(expands[0])
        letters = "abcdefghijklmnopqrstuvwxyz"[:rank]
        terms = ["".join(letters[d] for d in range(rank) if d not in set(e)) for e in expands]
        out = "".join(letters[d] for d in range(rank) if d not in sum_dims)
        return self._emit(relax.op.einsum(operands, ",".join(terms) + "->" + out))

    def _unfold_windows(self, node):
        """``x.unfold(dim, size, step)``: the windows along ``dim`` (framing a signal), that axis
        replaced by the window count and the window's ``size`` elements last, read by one take."""
        x, dim, size, step = self.env[node.args[0]], node.args[1], node.args[2], node.args[3]
        shape = [int(d) for d in x.ty.shape]
        dim %= len(shape)
        count = (shape[dim] - size) // step + 1
        index = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
        windows = relax.op.take(x, relax.const(index.astype("int64")), axis=dim)
        windows = relax.op.reshape(windows, shape[:dim] + [count, size] + shape[dim + 1:])
        order = [*range(dim + 1), *range(dim + 2, len(shape) + 1), dim + 1]
        return self._emit(relax.op.permute_dims(windows, order))


def window_argmax(emit, x, values, k, stride, top_left, dil):
    """The index ``h * W + w`` in its plane of each ``k`` window's max (max pooling's indices),
    ``values`` being the pooled maxima: the first pixel inside the image equal to the max (a
    window of ``-inf`` keeps its first pixel), or where the max is NaN the last NaN in window
    order (PyTorch takes each NaN it meets). Two chains of selects over strided slices of the
    ``-inf``-padded input, each step reading the chain once, so the fused kernel stays linear in
    the ``KH * KW`` taps (a compare-and-select chain that read its running max twice per step
    doubled with every tap once inlined: a 3 x 2 window never finished building). ``top_left``:
    the padding before the rows and columns. Static sizes only."""
    rank = len(x.ty.shape)
    dims = [size_of(x, d) for d in range(rank)] + [size_of(values, -2), size_of(values, -1)]
    if not all(isinstance(d, int) for d in dims):
        raise NotImplementedError("max pool indices need static sizes")
    H, W, OH, OW = dims[-4:]
    rows = [np.arange(OH) * stride[0] - top_left[0] + i * dil[0] for i in range(k[0])]
    cols = [np.arange(OW) * stride[1] - top_left[1] + j * dil[1] for j in range(k[1])]
    # the padded image every tap reads: -inf around it, wide enough for the last window
    hp, wp = rows[-1][-1] + 1 + top_left[0], cols[-1][-1] + 1 + top_left[1]
    xp = emit(relax.op.nn.pad(x, [0, 0] * (rank - 2) + [top_left[0], max(0, hp - H - top_left[0]),
                                                        top_left[1], max(0, wp - W - top_left[1])],
                              pad_value=float("-inf")))
    taps = []  # (tap, its in-plane index, inside the image)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            inside = ((r >= 0) & (r < H))[:, None] & ((c >= 0) & (c < W))[None, :]
            taps.append((emit(relax.op.strided_slice(
                xp, [rank - 2, rank - 1], [i * dil[0], j * dil[1]],
                [i * dil[0] + (OH - 1) * stride[0] + 1, j * dil[1] + (OW - 1) * stride[1] + 1], stride)),
                relax.const((r[:, None] * W + c[None, :]).astype("int64")), relax.const(inside)))
    found = taps[0][1]
    for tap, at, inside in reversed(taps):  # backwards: the first match in window order wins
        found = emit(relax.op.where(relax.op.logical_and(inside, relax.op.equal(tap, values)), at, found))
    nan_at = found
    for tap, at, _ in taps:  # forwards: the last NaN wins
        nan_at = emit(relax.op.where(relax.op.isnan(tap), at, nan_at))
    return emit(relax.op.where(relax.op.isnan(values), nan_at, found))
