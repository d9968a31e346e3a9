"""ATen ops TVM's ``torch.export`` importer has no translation for, written in Relax ops.

Each was an ``UnsupportedOperatorError`` for a plain PyTorch program: ``x.amax(dim)`` /
``amin`` (max-abs scaling, some norms), ``torch.var_mean``, ``x.prod(dim)``, ``torch.fmax`` /
``fmin`` (the NaN-ignoring max), ``torch.hypot``, ``F.rrelu`` in eval mode, ``>>`` / ``<<`` on
integers, ``torch.logcumsumexp``, ``erfc``, ``exp2``, ``signbit``, ``copysign``,
``cummax``/``cummin``, ``ldexp``, ``torch.all``; and ops it translated unlike PyTorch: ``elu``'s scale, an
integer ``clamp`` with one bound, ``torch.any`` of numbers (order statistics and distances: ``torch_stats``; indexing and
layout ops: ``torch_layout_ops``; special functions: ``torch_special``). ``ExtraOps.extra_converters()`` maps their
ATen names to the translations below; the importer adds them to its table.
"""
from __future__ import annotations

import math

import tvm
from tvm import relax

from .relax_passes import running_extremes
from .topi_kernels import scan


def _dims(arg) -> list | None:
    """A ``dim`` argument as a list (None: all axes; ``[]`` means all axes in ATen too)."""
    if arg is None or (isinstance(arg, (list, tuple)) and len(arg) == 0):
        return None
    return list(arg) if isinstance(arg, (list, tuple)) else [arg]


def node_arg(node, i: int, name: str, default=None):
    """Argument ``i`` of an FX node, or its keyword ``name``, or ``default``."""
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def _signbit(x):
    """``x < 0``, -0.0 included (its reciprocal is -inf); a NaN's sign bit is not read."""
    zero = relax.const(0.0, x.ty.dtype)
    negative_zero = relax.op.logical_and(relax.op.equal(x, zero),
                                         relax.op.less(relax.op.divide(relax.const(1.0, x.ty.dtype), x), zero))
    return relax.op.logical_or(relax.op.less(x, zero), negative_zero)


def size_of(expr, axis: int):
    """Axis ``axis`` of a tensor's shape: an int when static, else the symbolic size."""
    d = expr.ty.shape[axis]
    return int(d.value) if hasattr(d, "value") else d


class Emitting:
    """What the importer mixins share: ``_emit`` on the importer's block builder, and a 0-d
    tensor of a size that may be symbolic (the importer's ``_size_tensor`` then)."""

    def _emit(self, expr):
        return self.block_builder.emit(expr)

    def _number(self, value, dtype: str):
        if isinstance(value, (int, float)):
            return relax.const(value, dtype)
        return self._size_tensor(value, dtype)


class ExtraOps(Emitting):
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
            "__rshift__.Scalar": lambda node: self._shift(node, relax.op.right_shift),
            "__lshift__.Scalar": lambda node: self._shift(node, relax.op.left_shift),
            "bitwise_right_shift.Tensor_Scalar": lambda node: self._shift(node, relax.op.right_shift),
            "bitwise_left_shift.Tensor_Scalar": lambda node: self._shift(node, relax.op.left_shift),
            "logcumsumexp.default": self._logcumsumexp,
            **{f"{name}.{form}": (lambda node, fn=fn: self._truth(node, fn))
               for name, fn in (("any", relax.op.max), ("all", relax.op.min)) for form in ("default", "dim", "dims")},
            "cummax.default": lambda node: self._cumulative_extreme(node, larger=True),
            "cummin.default": lambda node: self._cumulative_extreme(node, larger=False),
            "elu.default": self._elu,
            "erfc.default": lambda node: self._unary(node, lambda x: relax.op.subtract(
                relax.const(1.0, x.ty.dtype), relax.op.erf(x))),
            "exp2.default": lambda node: self._unary(node, lambda x: relax.op.exp(
                relax.op.multiply(x, relax.const(math.log(2.0), x.ty.dtype)))),
            "signbit.default": lambda node: self._unary(node, _signbit),
            "copysign.Tensor": self._copysign,
            "copysign.Scalar": self._copysign,
            "ldexp.Tensor": self._ldexp,
            "sort.stable": self._sort,  # argsort is a stable sort (std::stable_sort; ties keep their order)
            "group_norm.default": lambda node: self._group_norm_of(node, 2, 3, node_arg(node, 1, "num_groups"),
                                                                   node_arg(node, 4, "eps", 1e-5)),
            "native_group_norm.default": lambda node: self._group_norm_of(node, 1, 2, node.args[6], node.args[7]),
        })
        for name, stock in (("clamp.default", self._clamp), ("clamp_min.default", self._clamp_min),
                            ("clamp_max.default", self._clamp_max)):
            table[name] = lambda node, stock=stock: self._integer_clamp(node, stock)
        return table

    def _div(self, node):
        """A Python number divisor takes the tensor's dtype: the stock ``relax.const(3)`` was int32,
        and ``(x * 10).long() // 3`` (an int64 tensor) failed to build."""
        x, y = self.env.get(node.args[0], node.args[0]), node.args[1]
        if not (isinstance(y, (int, float)) and isinstance(getattr(x, "ty", None), relax.TensorType)):
            return super()._div(node)
        dt = str(x.ty.dtype)
        floating = dt.startswith(("float", "bfloat"))
        if isinstance(y, float) and not floating:
            return super()._div(node)  # an int tensor over a float: the stock promotion
        mode = node_arg(node, 2, "rounding_mode", None)
        if mode is None and not floating:  # true division of integers
            x, dt, floating = self._emit(relax.op.astype(x, "float32")), "float32", True
        c = relax.const(y, dt)
        if mode == "floor":
            return self._emit(relax.op.floor_divide(x, c))
        out = self._emit(relax.op.divide(x, c))
        return self._emit(relax.op.trunc(out)) if mode == "trunc" and floating else out

    def _group_norm_of(self, node, w_at: int, b_at: int, groups: int, eps: float):
        """Group norm; a missing weight or bias (``affine=False``, ``F.group_norm(x, g)``) is ones
        or zeros: the stock converter passed None on, and the build crashed on a null node."""
        x = self.env[node.args[0]]
        dt, c = x.ty.dtype, size_of(x, 1)

        def given(at, fill):
            arg = node.args[at] if len(node.args) > at else None
            return self.env[arg] if arg is not None else relax.op.full((c,), relax.const(fill, dt), dt)

        return self._emit(relax.op.nn.group_norm(x, given(w_at, 1.0), given(b_at, 0.0), num_groups=int(groups),
                                                 channel_axis=1, axes=list(range(2, len(x.ty.shape))),
                                                 epsilon=float(eps)))

    def _reduce(self, node, fn):
        x = self.env[node.args[0]]
        return self._emit(fn(x, _dims(node_arg(node, 1, "dim")), bool(node_arg(node, 2, "keepdim", False))))

    def _truth(self, node, fn):
        """``torch.any`` / ``torch.all`` (``fn``: max / min) of ``x != 0`` as int8, then bool: the
        stock ``any`` took the max of the values themselves (a float result, False for
        ``[-1, -2]``) and had no ``all``. NaN counts as true, as in PyTorch."""
        x = self.env[node.args[0]]
        if str(x.ty.dtype) != "bool":
            x = relax.op.not_equal(x, relax.const(0, x.ty.dtype))
        flags = relax.op.astype(x, "int8")
        picked = fn(flags, _dims(node_arg(node, 1, "dim")), bool(node_arg(node, 2, "keepdim", False)))
        return self._emit(relax.op.astype(picked, "bool"))

    def _var_mean(self, node):
        """``(var, mean)`` with ``correction`` (default 1, Bessel) over ``dim``."""
        x = self.env[node.args[0]]
        dims, keep = _dims(node_arg(node, 1, "dim")), bool(node.kwargs.get("keepdim", False))
        correction = node.kwargs.get("correction")
        correction = 1 if correction is None else correction
        n = math.prod(size_of(x, d) for d in (range(len(x.ty.shape)) if dims is None else dims))
        var = self._emit(relax.op.variance(x, dims, keepdims=keep))
        if correction and isinstance(n, int):
            var = self._emit(relax.op.multiply(var, relax.const(n / max(n - correction, 0) if n > correction
                                                                else float("nan"), x.ty.dtype)))
        elif correction:  # a symbolic count: n / (n - correction) at run time (0 / 0 -> NaN below)
            dt = x.ty.dtype
            var = self._emit(relax.op.divide(relax.op.multiply(var, self._number(n, dt)),
                                             self._number(n - correction, dt)))
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
        lower, upper = node_arg(node, 2, "lower", 1 / 8), node_arg(node, 3, "upper", 1 / 3)
        if node_arg(node, 4, "training", False):
            raise NotImplementedError("rrelu in training mode draws random slopes; export the model in eval mode")
        y = self._emit(relax.op.nn.leakyrelu(x, (lower + upper) / 2))
        return self._emit(relax.Tuple([y, noise]))

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

    def _cumulative_extreme(self, node, larger: bool):
        """``cummax`` / ``cummin``: ``(values, indices)`` by one sequential scan per line of the
        axis (``topi_kernels.scan``: ties take the later index, NaN beats every number)."""
        x, dim = self.env[node.args[0]], node.args[1]
        if x.ty.ndim == 0:  # a 0-d tensor is its own running extreme, at index 0
            return self._emit(relax.Tuple([x, relax.op.zeros((), "int64")]))
        dim %= x.ty.ndim
        out = self.block_builder.emit_te(scan.cumulative_extreme, x, dim, larger)
        gv = self.block_builder.lookup_binding(out).args[0]
        func = self.block_builder.get()[gv]  # marked: targets other than the CPU expand it (running_extremes)
        func = func.with_attr(running_extremes.KIND_ATTR, "max" if larger else "min")
        self.block_builder.update_func(gv, func.with_attr(running_extremes.AXIS_ATTR, dim))
        return out

    # PyTorch passes an omitted pool stride as ``[]`` (the kernel size); the stock translations
    # took only None for that and gave Relax an empty stride (max_pool3d failed to build)
    def _max_pool1d_impl(self, x, kernel_size, stride=None, *args, **kwargs):
        return super()._max_pool1d_impl(x, kernel_size, stride or None, *args, **kwargs)

    def _max_pool2d_impl(self, x, kernel_size, stride=None, *args, **kwargs):
        return super()._max_pool2d_impl(x, kernel_size, stride or None, *args, **kwargs)

    def _max_pool3d_impl(self, x, kernel_size, stride=None, *args, **kwargs):
        return super()._max_pool3d_impl(x, kernel_size, stride or None, *args, **kwargs)

    def _integer_clamp(self, node, stock):
        """An integer tensor clamped on one side: Relax's ``clip`` takes the missing side as an
        infinity and fails to lower it for integers; bound by ``maximum``/``minimum`` instead.
        The other cases take the stock translation ``stock``."""
        x = self.env[node.args[0]]
        if "float" in str(x.ty.dtype):
            return stock(node)
        name = node.target.__name__.split(".")[0]
        lo = node_arg(node, 1, "min") if name in ("clamp", "clamp_min") else None
        hi = node_arg(node, 2, "max") if name == "clamp" else node_arg(node, 1, "max") if name == "clamp_max" else None
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
        alpha, scale, input_scale = (float(node_arg(node, i, name, 1.0)) for i, name in
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

    def _ldexp(self, node):
        """``x * 2**e``, float like PyTorch (an integer ``x`` gives float32)."""
        x, e = self.env[node.args[0]], self.env[node.args[1]]
        dt = x.ty.dtype if str(x.ty.dtype).startswith(("float", "bfloat")) else "float32"
        x = x if x.ty.dtype == dt else relax.op.astype(x, dt)
        return self._emit(relax.op.multiply(x, relax.op.power(relax.const(2.0, dt), relax.op.astype(e, dt))))

