"""ATen ops TVM's ``torch.export`` importer has no translation for, written in Relax ops.

Each was an ``UnsupportedOperatorError`` for a plain PyTorch program: ``x.amax(dim)`` /
``amin`` (max-abs scaling, some norms), ``torch.var_mean``, ``x.prod(dim)``, ``torch.fmax`` /
``fmin`` (the NaN-ignoring max), ``torch.hypot``, ``F.rrelu`` in eval mode, ``scatter_add``
(segment sums, graph networks), ``>>`` / ``<<`` on integers, ``torch.logcumsumexp``,
``F.adaptive_max_pool2d`` and ``torch.cdist``. ``ExtraOps.extra_converters()`` maps their
ATen names to the translations below; the importer adds them to its table.
"""
from __future__ import annotations

import math

import numpy as np
from tvm import relax


def _dims(arg) -> list | None:
    """A ``dim`` argument as a list (None: all axes; ``[]`` means all axes in ATen too)."""
    if arg is None or (isinstance(arg, (list, tuple)) and len(arg) == 0):
        return None
    return list(arg) if isinstance(arg, (list, tuple)) else [arg]


def _triple(value, default) -> list:
    """A 3-D conv argument (an int or a list of one or three) as three ints."""
    if value is None:
        value = default
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return [int(v) for v in (value * 3 if len(value) == 1 else value)]


def _arg(node, i: int, name: str, default=None):
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def _signbit(x):
    """``x < 0``, -0.0 included (its reciprocal is -inf); a NaN's sign bit is not read."""
    zero = relax.const(0.0, x.ty.dtype)
    negative_zero = relax.op.logical_and(relax.op.equal(x, zero),
                                         relax.op.less(relax.op.divide(relax.const(1.0, x.ty.dtype), x), zero))
    return relax.op.logical_or(relax.op.less(x, zero), negative_zero)


class ExtraOps:
    """Importer mixin: translations for the ATen ops in the module doc."""

    def extra_converters(self) -> dict:
        reduce = {"amax.default": relax.op.max, "amin.default": relax.op.min}
        table = {name: (lambda node, fn=fn: self._reduce(node, fn)) for name, fn in reduce.items()}
        table.update({
            "prod.dim_int": lambda node: self._reduce(node, relax.op.prod),
            "var_mean.correction": self._var_mean,
            "fmax.default": lambda node: self._fminmax(node, relax.op.maximum),
            "fmin.default": lambda node: self._fminmax(node, relax.op.minimum),
            "hypot.default": self._hypot,
            "rrelu_with_noise_functional.default": self._rrelu,
            "scatter_add.default": self._scatter_add,
            "__rshift__.Scalar": lambda node: self._shift(node, relax.op.right_shift),
            "__lshift__.Scalar": lambda node: self._shift(node, relax.op.left_shift),
            "bitwise_right_shift.Tensor_Scalar": lambda node: self._shift(node, relax.op.right_shift),
            "bitwise_left_shift.Tensor_Scalar": lambda node: self._shift(node, relax.op.left_shift),
            "logcumsumexp.default": self._logcumsumexp,
            "adaptive_max_pool2d.default": self._adaptive_max_pool2d,
            "_cdist_forward.default": self._cdist,
            "_trilinear.default": self._trilinear,
            "unfold.default": self._unfold_windows,
            "elu.default": self._elu,
            "erfc.default": lambda node: self._unary(node, lambda x: relax.op.subtract(
                relax.const(1.0, x.ty.dtype), relax.op.erf(x))),
            "exp2.default": lambda node: self._unary(node, lambda x: relax.op.exp(
                relax.op.multiply(x, relax.const(math.log(2.0), x.ty.dtype)))),
            "signbit.default": lambda node: self._unary(node, _signbit),
            "copysign.Tensor": self._copysign,
            "copysign.Scalar": self._copysign,
            "dist.default": self._dist,
            "kthvalue.default": self._kthvalue,
            "searchsorted.Tensor": self._searchsorted,
            "bucketize.Tensor": self._bucketize_nan_last,
            "median.dim": self._median,
            "median.default": self._median,
        })
        for name, stock in (("clamp.default", self._clamp), ("clamp_min.default", self._clamp_min),
                            ("clamp_max.default", self._clamp_max)):
            table[name] = lambda node, stock=stock: self._integer_clamp(node, stock)
        return table

    def _emit(self, expr):
        return self.block_builder.emit(expr)

    def _reduce(self, node, fn):
        x = self.env[node.args[0]]
        return self._emit(fn(x, _dims(_arg(node, 1, "dim")), bool(_arg(node, 2, "keepdim", False))))

    def _var_mean(self, node):
        """``(var, mean)`` with ``correction`` (default 1, Bessel) over ``dim``."""
        x = self.env[node.args[0]]
        dims, keep = _dims(_arg(node, 1, "dim")), bool(node.kwargs.get("keepdim", False))
        correction = node.kwargs.get("correction")
        correction = 1 if correction is None else correction
        shape = [int(d) for d in x.ty.shape]
        n = math.prod(shape[d] for d in (range(len(shape)) if dims is None else dims))
        var = self._emit(relax.op.variance(x, dims, keepdims=keep))
        if correction:
            var = self._emit(relax.op.multiply(var, relax.const(n / max(n - correction, 0) if n > correction
                                                                else float("nan"), x.ty.dtype)))
        return self._emit(relax.Tuple([var, self._emit(relax.op.mean(x, dims, keepdims=keep))]))

    def _fminmax(self, node, fn):
        """``fmax``/``fmin``: a NaN operand yields the other one (NaN only when both are)."""
        a, b = (self.env[n] for n in node.args[:2])
        both = self._emit(fn(a, b))
        return self._emit(relax.op.where(relax.op.isnan(a), b, relax.op.where(relax.op.isnan(b), a, both)))

    def _hypot(self, node):
        a, b = (self.env[n] for n in node.args[:2])
        return self._emit(relax.op.sqrt(relax.op.add(relax.op.multiply(a, a), relax.op.multiply(b, b))))

    def _rrelu(self, node):
        """Eval mode: a leaky ReLU with the mean slope ``(lower + upper) / 2``; returns ``(y, noise)``."""
        x, noise = self.env[node.args[0]], self.env[node.args[1]]
        lower, upper = _arg(node, 2, "lower", 1 / 8), _arg(node, 3, "upper", 1 / 3)
        if _arg(node, 4, "training", False):
            raise NotImplementedError("rrelu in training mode draws random slopes; export the model in eval mode")
        y = self._emit(relax.op.nn.leakyrelu(x, (lower + upper) / 2))
        return self._emit(relax.Tuple([y, noise]))

    def _scatter_add(self, node):
        x, dim, index, src = self.env[node.args[0]], node.args[1], self.env[node.args[2]], self.env[node.args[3]]
        return self._emit(relax.op.scatter_elements(x, index, src, axis=dim, reduction="add"))

    def _shift(self, node, fn):
        x, by = self.env[node.args[0]], node.args[1]
        return self._emit(fn(x, relax.const(by, x.ty.dtype)))

    def _logcumsumexp(self, node):
        """``log(cumsum(exp(x - m))) + m`` with ``m`` the axis' max where finite (0 otherwise:
        a -inf row stays -inf, a +inf gives +inf)."""
        x, dim = self.env[node.args[0]], node.args[1]
        dt = x.ty.dtype
        m = self._emit(relax.op.max(x, [dim], keepdims=True))
        finite = relax.op.logical_not(relax.op.logical_or(relax.op.isinf(m), relax.op.isnan(m)))
        m = self._emit(relax.op.where(finite, m, relax.const(0.0, dt)))
        total = relax.op.cumsum(relax.op.exp(relax.op.subtract(x, m)), axis=dim)
        return self._emit(relax.op.add(relax.op.log(total), m))

    def _adaptive_max_pool2d(self, node):
        """PyTorch's windows ``[floor(i H / oh), ceil((i + 1) H / oh))``: a max pool when they tile
        the image evenly, else one max per window (``oh * ow`` of them, at most 256); returns
        ``(values, indices)`` and the indices must not be read."""
        x, (oh, ow) = self.env[node.args[0]], node.args[1]
        for user in node.users:
            if getattr(user.target, "__name__", "") == "getitem" and user.args[1] == 1 and user.users:
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

    def _integer_clamp(self, node, stock):
        """An integer tensor clamped on one side: Relax's ``clip`` takes the missing side as an
        infinity and fails to lower it for integers; bound by ``maximum``/``minimum`` instead.
        The other cases take the stock translation ``stock``."""
        x = self.env[node.args[0]]
        if "float" in str(x.ty.dtype):
            return stock(node)
        name = node.target.__name__.split(".")[0]
        lo = _arg(node, 1, "min") if name in ("clamp", "clamp_min") else None
        hi = _arg(node, 2, "max") if name == "clamp" else _arg(node, 1, "max") if name == "clamp_max" else None
        if not all(b is None or isinstance(b, (int, float)) for b in (lo, hi)):
            return stock(node)
        for bound, fn in ((lo, relax.op.maximum), (hi, relax.op.minimum)):
            if bound is not None and math.isfinite(bound):
                x = self._emit(fn(x, relax.const(int(bound) if x.ty.dtype != "bool" else bool(bound), x.ty.dtype)))
        return x

    def _unary(self, node, fn):
        return self._emit(fn(self.env[node.args[0]]))

    def _elu(self, node):
        """``scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))``: SELU and CELU export
        as this ELU; the stock translation dropped ``scale`` and ``input_scale`` (SELU was off
        by 5%)."""
        x = self.env[node.args[0]]
        dt = x.ty.dtype
        alpha, scale, input_scale = (float(_arg(node, i, name, 1.0)) for i, name in
                                     enumerate(("alpha", "scale", "input_scale"), start=1))
        scaled = x if input_scale == 1.0 else relax.op.multiply(x, relax.const(input_scale, dt))
        negative = relax.op.multiply(relax.op.subtract(relax.op.exp(scaled), relax.const(1.0, dt)),
                                     relax.const(alpha * scale, dt))
        positive = x if scale == 1.0 else relax.op.multiply(x, relax.const(scale, dt))
        return self._emit(relax.op.where(relax.op.greater(x, relax.const(0.0, dt)), positive, negative))

    def _copysign(self, node):
        a, b = self.env[node.args[0]], node.args[1]
        b = self.env[b] if b in self.env else relax.const(float(b), a.ty.dtype)
        magnitude = relax.op.abs(a)
        return self._emit(relax.op.where(_signbit(b), relax.op.negative(magnitude), magnitude))

    def _dist(self, node):
        """``torch.dist(a, b, p)``: the p-norm of ``a - b`` over all elements (a 0-d tensor)."""
        a, b = self.env[node.args[0]], self.env[node.args[1]]
        p = float(_arg(node, 2, "p", 2.0))
        diff = relax.op.abs(relax.op.subtract(a, b))
        if p == math.inf:
            return self._emit(relax.op.max(diff))
        if p == 0:
            return self._emit(relax.op.sum(relax.op.astype(relax.op.not_equal(diff, relax.const(0.0, a.ty.dtype)),
                                                           a.ty.dtype)))
        total = relax.op.sum(relax.op.power(diff, relax.const(p, a.ty.dtype)))
        return self._emit(relax.op.power(total, relax.const(1.0 / p, a.ty.dtype)))

    def _kthvalue(self, node):
        """``(values, indices)`` of the k-th smallest along ``dim`` (1-based k): an argsort, read
        at ``k - 1``; NaN counts as the largest (NaNLastSort orders the argsort)."""
        x, k = self.env[node.args[0]], node.args[1]
        dim, keep = _arg(node, 2, "dim", -1), bool(_arg(node, 3, "keepdim", False))
        order = self._emit(relax.op.argsort(x, axis=dim, dtype="int64"))
        index = self._emit(relax.op.strided_slice(order, [dim], [k - 1], [k]))
        values = relax.op.gather_elements(x, index, axis=dim)
        if not keep:
            values, index = relax.op.squeeze(values, [dim]), relax.op.squeeze(index, [dim])
        return self._emit(relax.Tuple([self._emit(values), self._emit(index)]))

    def _searchsorted(self, node):
        """``searchsorted(sorted 1-D, values)``: a bucketize of the values (``right`` as given;
        ``side="right"`` too). A batched sorted sequence or a ``sorter`` does not import."""
        seq, values = self.env[node.args[0]], self.env[node.args[1]]
        right = bool(node.kwargs.get("right", False)) or node.kwargs.get("side") == "right"
        if len(seq.ty.shape) != 1 or node.kwargs.get("sorter") is not None:
            raise NotImplementedError("searchsorted: only a 1-D sorted sequence without a sorter imports")
        return self._nan_last_bucket(values, seq, bool(node.kwargs.get("out_int32", False)), right)

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

    def _median(self, node):
        """PyTorch's median: the lower middle of the sorted values, NaN (and the first NaN's index)
        for a row holding one. ``median.default`` reads all elements, ``median.dim`` returns
        ``(values, indices)``."""
        x = self.env[node.args[0]]
        whole = node.target.__name__.endswith("default")
        if whole:
            x, dim, keep = self._emit(relax.op.reshape(x, [-1])), 0, False
        else:
            dim, keep = _arg(node, 1, "dim", -1), bool(_arg(node, 2, "keepdim", False))
        n = int(x.ty.shape[dim])
        order = self._emit(relax.op.argsort(x, axis=dim, dtype="int64"))
        middle = self._emit(relax.op.full_like(relax.op.strided_slice(order, [dim], [0], [1]),
                                               relax.const((n - 1) // 2, "int64")))
        index = self._emit(relax.op.gather_elements(order, middle, axis=dim))
        if "float" in str(x.ty.dtype):  # the first NaN, found directly: a NaN ties +inf in the sort key
            nan = self._emit(relax.op.astype(relax.op.isnan(x), "int32"))
            has_nan = relax.op.greater(relax.op.max(nan, [dim], keepdims=True), relax.const(0, "int32"))
            index = self._emit(relax.op.where(has_nan, relax.op.argmax(nan, dim, keepdims=True), index))
        values = relax.op.gather_elements(x, index, axis=dim)
        if not keep:
            values, index = relax.op.squeeze(values, [dim]), relax.op.squeeze(index, [dim])
        if whole:
            return self._emit(values)
        return self._emit(relax.Tuple([self._emit(values), self._emit(index)]))

    def _index_put(self, node):
        """``x[i0, i1, ...] = v`` (``index_put``, also ``index_add``/``index_copy`` decomposed):
        index tensors for fewer axes than ``x`` has (``x[idx] = v``: the stock translation
        required one per axis), full slices (None) anywhere, negative indices counted from the
        end, and a bool mask with a one-element value (``x[x > 0] = 0``: a ``where``). Each
        axis gets a full index tensor placed where PyTorch's indexing result puts it (the
        broadcast index dimensions where the index tensors are when adjacent, first when not),
        then Relax's ``index_put`` takes them all."""
        x, indices, values = self.env[node.args[0]], list(node.args[1]), self.env[node.args[2]]
        accumulate = bool(_arg(node, 3, "accumulate", False))
        shape = [int(d) for d in x.ty.shape] if all(hasattr(d, "value") for d in x.ty.shape) else None
        if shape is None:
            return super()._index_put(node)
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

    def _wrapped_index(self, index, size: int):
        """An integer index tensor with its negative entries counted from the end."""
        index = relax.op.astype(index, "int64") if index.ty.dtype != "int64" else index
        return relax.op.where(relax.op.less(index, relax.const(0, "int64")),
                              relax.op.add(index, relax.const(size, "int64")), index)

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
        stride, padding, dilation, out_pad = (_triple(a, dflt) for a, dflt in
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

    def _cdist(self, node):
        """``cdist(x1 (.., M, D), x2 (.., N, D), p)``: ``(sum |x1_i - x2_j|^p)^(1/p)``, computed
        directly (PyTorch's matrix-product form for p = 2 differs in rounding only)."""
        a, b, p = self.env[node.args[0]], self.env[node.args[1]], node.args[2]
        diff = relax.op.abs(relax.op.subtract(relax.op.expand_dims(a, -2), relax.op.expand_dims(b, -3)))
        dt = a.ty.dtype
        if p == math.inf:
            return self._emit(relax.op.max(diff, [-1]))
        if p == 2:
            return self._emit(relax.op.sqrt(relax.op.sum(relax.op.multiply(diff, diff), [-1])))
        if p == 1:
            return self._emit(relax.op.sum(diff, [-1]))
        powered = relax.op.sum(relax.op.power(diff, relax.const(float(p), dt)), [-1])
        return self._emit(relax.op.power(powered, relax.const(1.0 / p, dt)))
