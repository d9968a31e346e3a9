"""Symbolic dimensions between Relax and workloads.

A ``Workload`` keeps a symbolic dimension as the string TVM prints for it
(``"n"``, ``"b * s"``, ``"n * T.int64(4)"``) so keys, JSON and tuning logs need
no second format. Two places need the expression back:

* ``LowerToCandidates`` types a kernel's ``call_tir`` result in the caller's
  variables (``relax_shape``): the output's symbols are those of the inputs,
  which the kernel binds from the input buffers at run time, so no ``tir_vars``
  are needed;
* kernel builders declare one ``tirx.Var`` per distinct symbolic string
  (``SymbolTable``), so a dimension shared by two inputs is one variable.
"""
from __future__ import annotations

import re
import types

from tvm import relax, tirx

from ..workload import Workload

_SAFE = re.compile(r"^[A-Za-z0-9_ +\-*/%().,]+$")


def _imm(v) -> tirx.IntImm:
    return tirx.IntImm("int64", int(v))


_T = types.SimpleNamespace(int64=_imm, int32=_imm)


def parse_dim(text: str, variables: dict):
    """The PrimExpr a symbolic dimension string stands for, over ``variables`` (name -> Var)."""
    if not isinstance(text, str) or not _SAFE.match(text) or "__" in text:
        raise ValueError(f"symbolic dimension {text!r} is not an integer expression over shape variables")
    scope = dict(variables, T=_T)
    try:
        value = eval(text, {"__builtins__": {}}, scope)  # noqa: S307 - checked characters, names: shape vars only
    except NameError as err:
        raise ValueError(f"symbolic dimension {text!r} uses a variable the inputs do not define ({err})") from None
    except SyntaxError:
        raise ValueError(f"symbolic dimension {text!r} is not an integer expression") from None
    return _imm(value) if isinstance(value, int) else value


def dim_text(expr) -> str:
    """A symbolic dimension as a workload string: TVM's printing with plain integer literals
    (``"s * 4"``, not ``"s * T.int64(4)"``); ``parse_dim`` reads it back."""
    return re.sub(r"T\.int(?:64|32)\((-?\d+)\)", r"\1", str(expr))


def shape_vars(exprs) -> dict:
    """``{name: tirx.Var}`` of every symbolic variable in the shapes of Relax tensor expressions."""
    out: dict = {}
    for e in exprs:
        ty = getattr(e, "ty", None)
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            continue
        for d in ty.shape:
            if not isinstance(d, tirx.IntImm):
                for v in tirx.analysis.undefined_vars(d):
                    out.setdefault(v.name, v)
    return out


def relax_shape(shape, exprs) -> list:
    """``shape`` (ints and symbolic strings) as Relax shape values over the symbols of ``exprs``."""
    variables = shape_vars(exprs)
    return [int(d) if isinstance(d, int) else parse_dim(str(d), variables) for d in shape]


def out_shape(wl: Workload) -> tuple:
    """The output shape of a workload: attr ``out_shape``, or for a symbolic matmul (whose family
    leaves it unset) the broadcast of the batch axes and ``(M, N)``."""
    out = wl.attr("out_shape")
    if out is not None:
        return tuple(out)
    if wl.op != "matmul":
        raise ValueError(f"{wl.op} workload {wl.key} has no out_shape attribute")
    a, b = wl.shapes[0], wl.shapes[1]
    n = b[-2] if wl.attr("transpose_b") else b[-1]
    ba, bb = list(a[:-2]), list(b[:-2])
    nb = max(len(ba), len(bb))
    ba, bb = [1] * (nb - len(ba)) + ba, [1] * (nb - len(bb)) + bb
    batch = [q if p == 1 else p for p, q in zip(ba, bb)]
    return tuple(batch) + ((a[-2],) if len(a) > 1 else ()) + (n,)


class SymbolTable:
    """One int64 ``tirx.Var`` per symbolic dimension string, ints as int64 immediates."""

    def __init__(self):
        self.vars: dict[str, tirx.Var] = {}

    def dim(self, d):
        if isinstance(d, int):
            return _imm(d)
        text = str(d)
        if text not in self.vars:
            # an expression ("b * s") gets one variable of its own: a kernel binds it from the
            # buffer's extent, which it could not do for the factors of a product
            name = text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) else f"sym{len(self.vars)}"
            self.vars[text] = tirx.Var(name, "int64")
        return self.vars[text]

    def shape(self, shape) -> tuple:
        return tuple(self.dim(d) for d in shape)


def flatten_rows(x, nax: int = 1):
    """``(x viewed as (rows, n), rows, n)`` for a tensor whose axes may be symbolic: ``rows`` is the
    product of the leading axes, ``n`` of the ``nax`` trailing ones, each an int or the string of a
    symbolic product (``"b * s"``). The Relax reshape is free at run time."""
    from tvm.sym import Analyzer  # tvm.arith in older TVM

    shape = list(x.ty.shape)
    analyzer = Analyzer()

    def product(dims):
        out = _imm(1)
        for d in dims:
            out = out * d
        out = analyzer.simplify(out)
        return out, (int(out) if isinstance(out, tirx.IntImm) else dim_text(out))

    rows, rows_text = product(shape[:-nax])
    n, n_text = product(shape[-nax:])
    view = x if (len(shape) == 2 and nax == 1) else relax.op.reshape(x, [rows, n])
    return view, rows_text, n_text
