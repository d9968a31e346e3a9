"""``relax.nn.conv1d`` as a conv2d with a height of 1, so every conv2d candidate and the
conv2d epilogue fusion serve it (Whisper's and wav2vec 2.0's feature extractors had no
candidate and ran through stock lowering: 6.5x and 25x onnxruntime's time).

``conv1d(x, w)`` in any layout (``NCW``, ``NWC``; ``OIW``, ``WIO``...) becomes
``reshape(conv2d(reshape(x), reshape(w)), out)`` with an ``H`` axis of size 1 inserted
before ``W`` in the data, kernel and output layouts (``NCW -> NCHW``, ``OIW -> OIHW``):
strides ``(1, s)``, padding ``(0, left, 0, right)``, dilation ``(1, d)``, same groups.
The reshapes are views; the weight's is folded away with the other constants.

The reshape back to 3-D would hide the conv's bias add and activation from
``FuseEpilogues``, so it is sunk through the element-wise ops that follow
(``add``/``subtract``/``multiply``/``divide`` with a broadcastable operand,
activations, ``clip``): each gets the 4-D twin of its input (the other operand
gains the size-1 axis where it has one) and the 3-D value is a reshape of the 4-D
result. A 3-D value is read only where a non-element-wise op needs it; unused
reshapes go with dead-code elimination. A following conv1d reads the 4-D twin
directly. ``conv1d_transpose`` (``NCW``/``IOW``) becomes a ``conv2d_transpose`` the same way, for
``ConvTransposeToConv2d`` to take next.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .mutate import mutate_functions, static_dims

#: element-wise ops a squeezed conv output is sunk through: one tensor argument
UNARY = {"relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.leakyrelu",
         "relax.sigmoid", "relax.tanh", "relax.exp", "relax.clip", "relax.negative", "relax.erf"}
#: element-wise binary ops (NumPy broadcasting)
BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide"}


def _with_h(layout: str) -> str:
    """``NCW -> NCHW``: ``H`` inserted just before ``W``."""
    i = layout.index("W")
    return layout[:i] + "H" + layout[i:]


@mutator
class _Conv1dToConv2d(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.mod_ = mod
        self.twins: dict = {}  # 4-D var emitted here -> index of its size-1 H axis

    # -- the 4-D twin of a 3-D value -------------------------------------------------------
    def _twin(self, expr):
        """``(var4d, h)`` when ``expr`` is the squeeze of a 4-D value this pass made, else None."""
        if not isinstance(expr, relax.Var):
            return None
        value = self.builder_.lookup_binding(expr)
        if not (isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.reshape"):
            return None
        src = value.args[0]
        if isinstance(src, relax.Var) and src in self.twins:
            return src, self.twins[src]
        return None

    def _emit_twin(self, value4, h: int, shape3: list):
        var4 = self.builder_.emit(value4)
        self.twins[var4] = h
        return relax.op.reshape(var4, shape3)

    @staticmethod
    def _lift(expr, h: int, out_rank: int):
        """``expr`` broadcast against a rank-``out_rank`` value whose 4-D form gains an axis at ``h``:
        the same operand for the 4-D value (None when it cannot be)."""
        shape = static_dims(expr)
        if shape is None or len(shape) > out_rank:
            return None
        after = out_rank - h  # dims of the 3-D value at and after the new axis
        if len(shape) <= after:
            return expr
        at = len(shape) - after
        return relax.op.reshape(expr, shape[:at] + [1] + shape[at:])

    # -- rewrites ------------------------------------------------------------------------
    def _conv1d(self, call):
        a = call.attrs
        x3, w3, out3 = static_dims(call.args[0]), static_dims(call.args[1]), static_dims(call)
        layout, klayout = str(a.data_layout), str(a.kernel_layout)
        out_layout = str(a.out_layout) if a.out_layout else layout
        if None in (x3, w3, out3) or any(sorted(lay) != sorted(ref) for lay, ref in
                                         ((layout, "NCW"), (klayout, "OIW"), (out_layout, "NCW"))):
            return call
        h, kh, oh = layout.index("W"), klayout.index("W"), out_layout.index("W")
        twin = self._twin(call.args[0])
        x4 = twin[0] if twin is not None and twin[1] == h else relax.op.reshape(
            call.args[0], x3[:h] + [1] + x3[h:])
        w4 = relax.op.reshape(call.args[1], w3[:kh] + [1] + w3[kh:])
        pad = [int(p) for p in a.padding]
        left, right = (pad[0], pad[0]) if len(pad) == 1 else (pad[0], pad[1])
        conv = relax.op.nn.conv2d(
            x4, w4, strides=(1, int(a.strides[0])), padding=(0, left, 0, right), dilation=(1, int(a.dilation[0])),
            groups=int(a.groups), data_layout=_with_h(layout), kernel_layout=_with_h(klayout),
            out_layout=_with_h(out_layout), out_dtype=str(call.ty.dtype))
        return self._emit_twin(conv, oh, out3)

    def _conv1d_transpose(self, call):
        """``conv1d_transpose`` (``NCW``/``IOW``) as a ``conv2d_transpose`` with H = 1, which
        ``ConvTransposeToConv2d`` then runs as a conv2d (vocoders' upsampling layers)."""
        a = call.attrs
        x3, w3, out3 = static_dims(call.args[0]), static_dims(call.args[1]), static_dims(call)
        out_layout = str(a.out_layout) if a.out_layout else str(a.data_layout)
        if None in (x3, w3, out3) or (str(a.data_layout), str(a.kernel_layout), out_layout) != ("NCW", "IOW", "NCW"):
            return call
        twin = self._twin(call.args[0])
        x4 = twin[0] if twin is not None and twin[1] == 2 else relax.op.reshape(call.args[0], x3[:2] + [1] + x3[2:])
        pad = [int(p) for p in a.padding]
        left, right = (pad[0], pad[0]) if len(pad) == 1 else (pad[0], pad[1])
        conv = relax.op.nn.conv2d_transpose(
            x4, relax.op.reshape(call.args[1], w3[:2] + [1] + w3[2:]), strides=(1, int(a.strides[0])),
            padding=(0, left, 0, right), output_padding=(0, int(a.output_padding[0])),
            dilation=(1, int(a.dilation[0])), groups=int(a.groups), out_dtype=str(call.ty.dtype))
        return self._emit_twin(conv, 2, out3)

    def _elementwise(self, call, op: str):
        out3 = static_dims(call)
        if out3 is None or len(out3) != 3:
            return call
        tensors = [i for i, arg in enumerate(call.args) if isinstance(getattr(arg, "ty", None), relax.TensorType)]
        twins = {i: self._twin(call.args[i]) for i in tensors}
        hs = {t[1] for t in twins.values() if t is not None}
        if len(hs) != 1 or (op in UNARY and tensors != [0]) or (op in BINARY and len(tensors) != 2):
            return call
        h = hs.pop()
        args = list(call.args)
        for i in tensors:
            if twins[i] is not None:  # the 3-D squeeze of a 4-D value: read the 4-D one
                args[i] = twins[i][0]
            else:
                lifted = self._lift(call.args[i], h, 3)
                if lifted is None:
                    return call
                args[i] = lifted
        value4 = relax.Call(call.op, args, call.attrs, call.ty_args)
        return self._emit_twin(value4, h, out3)

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        op = getattr(call.op, "name", None)
        if op == "relax.nn.conv1d":
            return self._conv1d(call)
        if op == "relax.nn.conv1d_transpose":
            return self._conv1d_transpose(call)
        if op in UNARY or op in BINARY:
            return self._elementwise(call, op)
        return call

    def run(self):
        return mutate_functions(self, self.mod_)


def Conv1dToConv2d() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: conv1d as conv2d with H = 1, squeezes sunk past element-wise ops (module doc)."""
    return tvm.transform.module_pass(lambda mod, _ctx: _Conv1dToConv2d(mod).run(), opt_level=0,
                                     name="ext.Conv1dToConv2d")
