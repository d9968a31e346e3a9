"""Complex tensors in ``torch.export`` graphs, carried as their real and imaginary parts.

Relax has no complex dtype. A complex value here is a pair of real tensors (the imaginary part
None while it is zero), recorded per FX node in ``ComplexParts._parts``; the node's own Relax
value is its real part. The ops below act on the pairs:

* made complex: ``_to_copy`` to a complex dtype, ``view_as_complex`` (the last axis of 2 holds
  the parts), ``polar(abs, angle)``, and the FFTs of ``torch_fft``;
* element-wise: ``mul``/``add``/``sub`` of complex and real operands or Python numbers, ``div``
  by a real operand, ``abs`` (the magnitude, a real tensor), ``conj``, ``full_like`` /
  ``zeros_like``;
* linear, applied to each part by the stock translation: layout (``view``/``reshape``,
  ``unsqueeze``, ``squeeze``, ``expand``, ``permute``, ``transpose``, ``slice``, ``select``,
  ``index``, ``flip``, ``roll``, ``repeat``, ``cat``/``stack``), ``neg``, ``sum``, ``mean`` and a
  zero ``constant_pad_nd``; ``einsum``/``matmul``/``bmm`` of two complex operands as four real
  products (Fourier neural operators' spectral weights);
* made real again: ``view_as_real`` (stacks the parts; ``.real`` reads the real part alone).

Rotary position embeddings written with complex numbers (Meta's Llama reference code:
``view_as_complex(x) * polar(1, angles)`` then ``view_as_real``) are this chain. An op outside
these lists reading a complex value is refused at import with its name (reading the real part
alone would be a silent wrong answer).
"""
from __future__ import annotations

from tvm import relax

from .torch_ops import Emitting, node_arg

COMPLEX_DTYPES = {"complex64": "float32", "complex128": "float64"}

#: ops whose complex operands are mapped part by part with the stock translation
LAYOUT = ("view.default", "reshape.default", "_unsafe_view.default", "unsqueeze.default", "squeeze.dim",
          "squeeze.dims", "squeeze.default", "expand.default", "permute.default", "transpose.int",
          "slice.Tensor", "select.int", "clone.default", "alias.default", "contiguous.default",
          "cat.default", "stack.default", "flip.default", "roll.default", "repeat.default", "index.Tensor",
          "neg.default", "sum.dim_IntList", "mean.dim", "constant_pad_nd.default")
#: ops linear in each of two operands: with both complex, four real products
BILINEAR = ("einsum.default", "matmul.default", "bmm.default", "mm.default")
ARITHMETIC = ("mul.Tensor", "mul.Scalar", "add.Tensor", "sub.Tensor")


class ComplexParts(Emitting):
    """Importer mixin (before ``ExportedProgramImporter`` in the bases): complex values as
    part pairs and the ops in the module doc. ``complex_users`` lists what may read one."""

    #: ATen names allowed to read a complex value (a subclass such as ``ComplexFFT`` adds its own)
    complex_users = frozenset(LAYOUT + BILINEAR + ARITHMETIC + ("div.Tensor", "full_like.default", "abs.default", "_conj.default",
                                                                 "conj_physical.default", "view_as_real.default"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parts: dict = {}  # fx node -> (real, imaginary or None)

    def _record(self, node, real, imag):
        """``node`` is the complex ``real + i imag``; every use must be one the mixins translate."""
        for user in node.users:
            name = getattr(user.target, "__name__", str(user.target))
            if name not in self.complex_users:
                raise NotImplementedError(f"{name} of the complex value {node.name}: it does not import "
                                          f"(complex values import through {', '.join(sorted(self.complex_users))})")
        self._parts[node] = (real, imag)
        return real

    # -- made complex ------------------------------------------------------------------------

    def _to_copy(self, node):
        dtype = str(node.kwargs.get("dtype", "")).replace("torch.", "")
        if dtype not in COMPLEX_DTYPES:
            return super()._to_copy(node)
        if node.args[0] in self._parts:
            return self._record(node, *self._parts[node.args[0]])
        x = self.env[node.args[0]]
        real = x if str(x.ty.dtype) == COMPLEX_DTYPES[dtype] else self._emit(relax.op.astype(x, COMPLEX_DTYPES[dtype]))
        return self._record(node, real, None)

    def _view_as_complex(self, node):
        x = self.env[node.args[0]]
        axis = len(x.ty.shape) - 1
        real, imag = (self._emit(relax.op.squeeze(relax.op.strided_slice(x, [axis], [i], [i + 1]), [axis]))
                      for i in (0, 1))
        return self._record(node, real, imag)

    def _polar(self, node):
        magnitude, angle = self.env[node.args[0]], self.env[node.args[1]]
        return self._record(node, self._emit(relax.op.multiply(magnitude, relax.op.cos(angle))),
                            self._emit(relax.op.multiply(magnitude, relax.op.sin(angle))))

    # -- element-wise ------------------------------------------------------------------------

    def _operand(self, arg, like):
        """``(real, imag or None)`` of an argument: a complex node, a real node or a number."""
        if arg in self._parts:
            return self._parts[arg]
        if isinstance(arg, (int, float)):
            return relax.const(float(arg), str(like.ty.dtype)), None
        if isinstance(arg, complex):
            dt = str(like.ty.dtype)
            return relax.const(arg.real, dt), relax.const(arg.imag, dt)
        return self.env[arg], None

    def _complex_arithmetic(self, node, stock):
        if not any(a in self._parts for a in node.args[:2]):
            return stock(node)
        like = next(self._parts[a][0] for a in node.args[:2] if a in self._parts)
        (ar, ai), (br, bi) = (self._operand(a, like) for a in node.args[:2])
        op = node.target.__name__.split(".")[0]
        if op == "mul":
            real = relax.op.multiply(ar, br)
            if ai is not None and bi is not None:
                real = relax.op.subtract(real, relax.op.multiply(ai, bi))
            imag_terms = [relax.op.multiply(ai, br)] if ai is not None else []
            imag_terms += [relax.op.multiply(ar, bi)] if bi is not None else []
            imag = None if not imag_terms else imag_terms[0] if len(imag_terms) == 1 else relax.op.add(*imag_terms)
            return self._record(node, self._emit(real), None if imag is None else self._emit(imag))
        alpha = node.kwargs.get("alpha", 1)
        if alpha != 1:
            br, bi = (None if p is None else relax.op.multiply(p, relax.const(float(alpha), str(like.ty.dtype)))
                      for p in (br, bi))
        fn = relax.op.add if op == "add" else relax.op.subtract
        imag = (fn(ai, bi) if bi is not None else ai) if ai is not None else (
            None if bi is None else (bi if op == "add" else relax.op.negative(bi)))
        return self._record(node, self._emit(fn(ar, br)), None if imag is None else self._emit(imag))

    def _complex_abs(self, node, stock):
        parts = self._parts.get(node.args[0])
        if parts is None:
            return stock(node)
        real, imag = parts
        if imag is None:
            return self._emit(relax.op.abs(real))
        return self._emit(relax.op.sqrt(relax.op.add(relax.op.multiply(real, real), relax.op.multiply(imag, imag))))

    def _conj(self, node, stock):
        parts = self._parts.get(node.args[0])
        if parts is None:
            return stock(node)
        real, imag = parts
        return self._record(node, real, None if imag is None else self._emit(relax.op.negative(imag)))

    # -- layout, part by part ----------------------------------------------------------------

    def _part_wise(self, node, stock):
        """``stock`` applied to the real parts, then to the imaginary parts (zeros where a complex
        input has none), of the complex inputs of ``node``."""
        complex_args = [a for a in _node_args(node) if a in self._parts]
        if not complex_args:
            return stock(node)
        name = node.target.__name__
        if name == "constant_pad_nd.default" and node_arg(node, 2, "value", 0) != 0:
            raise NotImplementedError(f"constant_pad_nd of the complex value {complex_args[0].name} with a "
                                      "nonzero fill: it does not import")
        if name in BILINEAR and len(complex_args) == 2:
            return self._bilinear(node, stock, *complex_args)
        saved = {a: self.env[a] for a in complex_args}
        real = stock(node)
        if all(self._parts[a][1] is None for a in complex_args):
            return self._record(node, real, None)
        for a in complex_args:
            r, i = self._parts[a]
            self.env[a] = i if i is not None else self._emit(relax.op.zeros_like(r))
        imag = stock(node)
        self.env.update(saved)
        return self._record(node, real, imag)

    def _bilinear(self, node, stock, a, b):
        """``(ar + i ai) (br + i bi)`` through ``stock``: ``ar br - ai bi`` and ``ar bi + ai br``."""
        saved = {a: self.env[a], b: self.env[b]}
        (ar, ai), (br, bi) = self._parts[a], self._parts[b]

        def product(x, y):
            self.env[a], self.env[b] = x, y
            return stock(node)

        real, imag = product(ar, br), None
        if ai is not None and bi is not None:
            real = self._emit(relax.op.subtract(real, product(ai, bi)))
        terms = ([product(ar, bi)] if bi is not None else []) + ([product(ai, br)] if ai is not None else [])
        if terms:
            imag = terms[0] if len(terms) == 1 else self._emit(relax.op.add(*terms))
        self.env.update(saved)
        return self._record(node, real, imag)

    def _complex_divide(self, node, stock):
        """A complex value divided by a real tensor or number: each part divided."""
        a, b = node.args[:2]
        if a not in self._parts and b not in self._parts:
            return stock(node)
        if b in self._parts:
            raise NotImplementedError(f"div by the complex value {b.name}: it does not import")
        real, imag = self._parts[a]
        divisor = self._operand(b, real)[0]
        return self._record(node, self._emit(relax.op.divide(real, divisor)),
                            None if imag is None else self._emit(relax.op.divide(imag, divisor)))

    def _complex_full_like(self, node, stock):
        """``full_like`` (``zeros_like``) of a complex value: a real fill (imaginary part zero)."""
        parts = self._parts.get(node.args[0])
        if parts is None:
            return stock(node)
        value = complex(node.args[1])
        real = parts[0]
        imag = None if value.imag == 0 else self._emit(relax.op.full_like(real, relax.const(value.imag, str(real.ty.dtype))))
        return self._record(node, self._emit(relax.op.full_like(real, relax.const(value.real, str(real.ty.dtype)))), imag)

    def complex_converters(self, table: dict) -> dict:
        """Entries for the importer's table, wrapping the stock ones in ``table``."""
        out = {"view_as_complex.default": self._view_as_complex, "polar.default": self._polar,
               "view_as_real.default": self._view_as_real}
        for name in LAYOUT + BILINEAR:
            if name in table:
                out[name] = lambda node, stock=table[name]: self._part_wise(node, stock)
        out["div.Tensor"] = lambda node, stock=table["div.Tensor"]: self._complex_divide(node, stock)
        out["full_like.default"] = lambda node, stock=table["full_like.default"]: self._complex_full_like(node, stock)
        for name in ARITHMETIC:
            if name in table:
                out[name] = lambda node, stock=table[name]: self._complex_arithmetic(node, stock)
        out["abs.default"] = lambda node, stock=table["abs.default"]: self._complex_abs(node, stock)
        for name in ("_conj.default", "conj_physical.default"):
            out[name] = lambda node, stock=table.get(name, self._identity): self._conj(node, stock)
        return out

    def _identity(self, node):
        return self.env[node.args[0]]

    # -- made real ---------------------------------------------------------------------------

    def _view_as_real(self, node):
        parts = self._parts.get(node.args[0])
        if parts is None:
            raise NotImplementedError(f"view_as_real of {node.args[0].name}: not a complex value this importer made")
        real, imag = parts
        rank = len(real.ty.shape)
        if all(_reads_part(u, rank, 0) for u in node.users):  # ``.real``: the imaginary part goes unused
            return self._emit(relax.op.expand_dims(real, -1))
        return self._emit(relax.op.stack([real, relax.op.zeros_like(real) if imag is None else imag], axis=-1))


def complex_constants_as_real(ep) -> None:
    """Every complex weight, buffer or constant of ``ep`` (Llama's precomputed ``freqs_cis``)
    stored as its ``view_as_real`` (a float tensor with a last axis of 2) and read through a
    ``view_as_complex``: TVM's importer types each input before translating and has no complex
    dtype. In place on ``ep``."""
    import torch

    kinds = torch.export.graph_signature.InputKind
    stores = {kinds.PARAMETER: ep.state_dict, kinds.BUFFER: None, kinds.CONSTANT_TENSOR: ep.constants}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for spec in ep.graph_signature.input_specs:
        if spec.kind not in stores:
            continue
        store = stores[spec.kind]
        if store is None:
            store = ep.constants if spec.target in ep.constants else ep.state_dict
        value = store.get(spec.target)
        if value is None or not value.is_complex():
            continue
        store[spec.target] = torch.view_as_real(value).clone()
        node = placeholders[spec.arg.name]
        complex_val = node.meta.get("val")
        if complex_val is not None:
            node.meta["val"] = torch.view_as_real(complex_val)
        with ep.graph.inserting_after(node):
            read = ep.graph.call_function(torch.ops.aten.view_as_complex.default, (node,))
        read.meta["val"] = complex_val
        node.replace_all_uses_with(read, delete_user_cb=lambda user: user is not read)
    ep.graph_module.recompile()


def _reads_part(user, rank: int, part: int) -> bool:
    """``user`` is ``select(view_as_real(z), -1, part)``."""
    return (getattr(user.target, "__name__", "") == "select.int" and len(user.args) == 3
            and user.args[1] in (-1, rank) and user.args[2] == part)


def _node_args(node) -> list:
    """The FX nodes among ``node``'s arguments (one level into lists: ``cat``'s tensors)."""
    out = []
    for a in node.args:
        for b in (a if isinstance(a, (list, tuple)) else [a]):
            if hasattr(b, "users"):
                out.append(b)
    return out


__all__ = ["COMPLEX_DTYPES", "ComplexParts", "complex_constants_as_real"]
