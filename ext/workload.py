"""``Workload``: one operator instance, independent of any target.

A workload names the op family (``"matmul"``, ``"conv2d"``...), the shapes and
dtypes of its inputs in call order, the output dtype, attributes (strides,
transposes, layouts...) and the fused epilogue (``("bias", "relu",
"residual")``). It is immutable and hashable, has a stable string ``key`` (used
by tuning logs and reports) and round-trips through JSON.

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
from typing import Any

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
EPILOGUE_OPS = ("bias", "residual") + ACTIVATIONS


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
        bad = [e for e in self.epilogue if e not in EPILOGUE_OPS]
        if bad:
            raise ValueError(f"{self.op}: unknown epilogue ops {bad} (known: {EPILOGUE_OPS})")

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
        acts = [e for e in self.epilogue if e in ACTIVATIONS]
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


def conv_dims(wl: Workload) -> dict:
    """Sizes of a conv2d workload by letter, in whatever layouts it names: ``N C H W`` of the
    data (``data_layout``, default NCHW) and ``O I KH KW`` of the weight (``kernel_layout``,
    default OIHW; OHWI and HWIO alike). The one place layouts are parsed."""
    layout, klayout = str(wl.attr("data_layout", "NCHW")), str(wl.attr("kernel_layout", "OIHW"))
    x, w = wl.shapes[0], wl.shapes[1]
    if sorted(layout) != sorted("NCHW") or len(x) != 4:
        raise ValueError(f"conv2d data layout {layout!r} with shape {tuple(x)}: expected a permutation of NCHW")
    if sorted(klayout) != sorted("OIHW") or len(w) != 4:
        raise ValueError(f"conv2d kernel layout {klayout!r} with shape {tuple(w)}: expected a permutation of OIHW")
    d, k = dict(zip(layout, x)), dict(zip(klayout, w))
    return {"N": d["N"], "C": d["C"], "H": d["H"], "W": d["W"], "O": k["O"], "I": k["I"], "KH": k["H"], "KW": k["W"]}
