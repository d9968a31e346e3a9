"""``Workload``: one operator instance, independent of any target.

A workload names the op family (``"matmul"``, ``"conv2d"``...), the shapes and
dtypes of its inputs in call order, the output dtype, attributes (strides,
transposes, layouts...) and the fused epilogue (``("bias", "relu",
"residual")``). It is immutable and hashable, has a stable string ``key`` (used
by tuning logs and reports) and round-trips through JSON.

Epilogue steps are strings, so keys, JSON, tuning logs and reports need no
second format: ``bias``/``scale``/``residual`` take the next input tensor (add,
multiply, add); an activation with parameters spells them after colons,
``clip:0:6`` (ReLU6), ``leaky_relu:0.01`` (``activation_name`` writes them,
``parse_activation`` reads them back).

Example
-------
>>> from ext.workload import Workload
>>> wl = Workload("matmul", ((64, 32), (32, 16), (16,)), ("float32",) * 3, "float32",
...               epilogue=("bias", "relu"))
>>> wl.key
'matmul|float32[64,32];float32[32,16];float32[16]->float32|bias+relu'
>>> Workload.from_json(wl.to_json()) == wl
True
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

#: activation name -> number of parameters it takes (``clip:LO:HI``, ``leaky_relu:ALPHA``)
ACTIVATION_PARAMS = {"relu": 0, "gelu": 0, "gelu_tanh": 0, "silu": 0, "sigmoid": 0, "tanh": 0,
                     "hardswish": 0, "hardsigmoid": 0, "clip": 2, "leaky_relu": 1}
ACTIVATIONS = tuple(ACTIVATION_PARAMS)
#: steps that take the next input tensor: added (bias, residual) or multiplied (scale)
TENSOR_STEPS = ("bias", "scale", "residual")
EPILOGUE_OPS = TENSOR_STEPS + ACTIVATIONS


def _num(v: float) -> str:
    """A parameter as written in a name: shortest round-tripping form, no trailing ``.0``, no ``+``
    (keys join steps with ``+``): ``6``, ``0.1``, ``-inf``, ``1e30``."""
    text = repr(float(v)).replace("e+", "e")
    return text[:-2] if text.endswith(".0") else text


def activation_name(base: str, *params: float) -> str:
    """``activation_name("clip", 0.0, 6.0) == "clip:0:6"``; checks the base and the parameter count."""
    if base not in ACTIVATION_PARAMS:
        raise ValueError(f"unknown activation {base!r} (known: {ACTIVATIONS})")
    if len(params) != ACTIVATION_PARAMS[base]:
        raise ValueError(f"activation {base!r} takes {ACTIVATION_PARAMS[base]} parameters, got {len(params)}")
    return ":".join([base, *(_num(p) for p in params)])


def parse_activation(name: str) -> tuple[str, tuple[float, ...]]:
    """``"clip:0:6" -> ("clip", (0.0, 6.0))``; ValueError naming the problem for a bad name."""
    base, *raw = str(name).split(":")
    if base not in ACTIVATION_PARAMS:
        raise ValueError(f"unknown activation {base!r} in {name!r} (known: {ACTIVATIONS})")
    if len(raw) != ACTIVATION_PARAMS[base]:
        raise ValueError(f"activation {name!r}: {base} takes {ACTIVATION_PARAMS[base]} parameters, got {len(raw)}")
    try:
        params = tuple(float(p) for p in raw)
    except ValueError:
        raise ValueError(f"activation {name!r}: parameters must be numbers") from None
    if any(p != p for p in params):
        raise ValueError(f"activation {name!r}: NaN parameter")
    if base == "clip" and params[0] > params[1]:
        raise ValueError(f"activation {name!r}: clip bounds out of order ({params[0]} > {params[1]})")
    return base, params


def is_activation(step: str) -> bool:
    return str(step) not in TENSOR_STEPS


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    return value


@dataclasses.dataclass(frozen=True)
class Workload:
    """One operator instance.

    Parameters
    ----------
    op : op family name.
    shapes : input shapes in call order (ints; symbolic dims as strings).
    dtypes : input dtypes in call order.
    out_dtype : dtype of the result.
    attrs : op attributes as a dict or sorted (key, value) pairs.
    epilogue : element-wise ops fused after the anchor, in order.
    """

    op: str
    shapes: tuple
    dtypes: tuple
    out_dtype: str = "float32"
    attrs: tuple = ()
    epilogue: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "shapes", tuple(tuple(s) for s in self.shapes))
        object.__setattr__(self, "dtypes", tuple(str(d) for d in self.dtypes))
        object.__setattr__(self, "attrs", _freeze(dict(self.attrs)))
        object.__setattr__(self, "epilogue", tuple(self.epilogue))
        if len(self.shapes) != len(self.dtypes):
            raise ValueError(f"{self.op}: {len(self.shapes)} shapes but {len(self.dtypes)} dtypes")
        bad = [e for e in self.epilogue if not isinstance(e, str)
               or (e not in TENSOR_STEPS and e.split(":")[0] not in ACTIVATION_PARAMS)]
        if bad:
            raise ValueError(f"{self.op}: unknown epilogue ops {bad} (known: {EPILOGUE_OPS})")
        for e in self.epilogue:
            if is_activation(e):
                try:
                    parse_activation(e)
                except ValueError as err:
                    raise ValueError(f"{self.op}: {err}") from None

    # -- accessors -----------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == name:
                return v
        return default

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for s in self.shapes for d in s)

    @property
    def activation(self) -> str | None:
        acts = [e for e in self.epilogue if is_activation(e)]
        return acts[0] if acts else None

    # -- identity --------------------------------------------------------------
    @property
    def key(self) -> str:
        ins = ";".join(f"{d}[{','.join(map(str, s))}]" for s, d in zip(self.shapes, self.dtypes))
        parts = [self.op, f"{ins}->{self.out_dtype}"]
        if self.attrs:
            parts.append(",".join(f"{k}={_fmt(v)}" for k, v in self.attrs))
        if self.epilogue:
            parts.append("+".join(self.epilogue))
        return "|".join(parts)

    def __str__(self) -> str:
        return self.key

    def to_json(self) -> dict:
        return {"op": self.op, "shapes": [list(s) for s in self.shapes], "dtypes": list(self.dtypes),
                "out_dtype": self.out_dtype, "attrs": {k: _thaw(v) for k, v in self.attrs},
                "epilogue": list(self.epilogue)}

    @classmethod
    def from_json(cls, data: dict | str) -> "Workload":
        if isinstance(data, str):
            data = json.loads(data)
        try:
            return cls(data["op"], data["shapes"], data["dtypes"], data.get("out_dtype", "float32"),
                       data.get("attrs", {}), data.get("epilogue", ()))
        except KeyError as err:
            raise ValueError(f"workload JSON lacks field {err}: {data!r}") from None

    # -- cost ------------------------------------------------------------------
    @property
    def flops(self) -> float:
        """Floating-point operations (multiply-add = 2), anchor plus epilogue."""
        from .flops import count  # per-family formulas live beside each other

        return count(self)

    def with_(self, **changes) -> "Workload":
        return dataclasses.replace(self, **changes)


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(_fmt(x) for x in v) + ")"
    return str(v)


def _thaw(v: Any) -> Any:
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


def numel(shape) -> int:
    return math.prod(int(d) for d in shape)


def channel_block(layout: str) -> int:
    """The channel block ``b`` of a blocked activation layout ``"NCHW{b}c"`` (0 for a plain one)."""
    m = re.fullmatch(r"NCHW(\d+)c", str(layout))
    return int(m.group(1)) if m else 0


def conv_dims(wl: Workload) -> dict:
    """Sizes of a conv2d workload by letter, in whatever layouts it names: ``N C H W`` of the
    data (``data_layout``, default NCHW; or blocked ``NCHW{b}c``, shape ``(N, C/b, H, W, b)``)
    and ``O I KH KW`` of the weight (``kernel_layout``, default OIHW; OHWI and HWIO alike).
    The one place layouts are parsed."""
    layout, klayout = str(wl.attr("data_layout", "NCHW")), str(wl.attr("kernel_layout", "OIHW"))
    x, w = wl.shapes[0], wl.shapes[1]
    b = channel_block(layout)
    if b and len(x) == 5 and x[4] == b:
        x, layout = (x[0], x[1] * b, x[2], x[3]), "NCHW"
    if sorted(layout) != sorted("NCHW") or len(x) != 4:
        raise ValueError(f"conv2d data layout {layout!r} with shape {tuple(x)}: expected a permutation of NCHW")
    if sorted(klayout) != sorted("OIHW") or len(w) != 4:
        raise ValueError(f"conv2d kernel layout {klayout!r} with shape {tuple(w)}: expected a permutation of OIHW")
    d, k = dict(zip(layout, x)), dict(zip(klayout, w))
    return {"N": d["N"], "C": d["C"], "H": d["H"], "W": d["W"], "O": k["O"], "I": k["I"], "KH": k["H"], "KW": k["W"]}
