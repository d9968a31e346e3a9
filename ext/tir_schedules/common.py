"""Schedule helpers shared by every target's schedules."""
from __future__ import annotations

from tvm import s_tir, te


def create_schedule(tensors: list[te.Tensor]) -> s_tir.Schedule:
    """A schedule over ``te.create_prim_func(tensors)`` (inputs then output)."""
    return s_tir.Schedule(te.create_prim_func(tensors))


def finish(sch: s_tir.Schedule, name: str | None = None):
    """The scheduled PrimFunc, marked so dlight, FuseOps and FuseTIR leave it alone."""
    func = sch.mod["main"].without_attr("global_symbol")
    func = func.with_attr("tirx.is_scheduled", True).with_attr("op_pattern", 8)
    return func.with_attr("ext.kernel", name) if name else func


def has_block(sch: s_tir.Schedule, name: str) -> bool:
    try:
        sch.get_sblock(name)
        return True
    except Exception:
        return False


def extent(sch: s_tir.Schedule, loop) -> int:
    return int(sch.get(loop).extent)


def pick_divisor(n: int, upper: int) -> int:
    """Largest divisor of ``n`` that is <= ``upper`` (at least 1)."""
    for d in range(min(n, upper), 0, -1):
        if n % d == 0:
            return d
    return 1


def param_shape(func, index: int) -> tuple[int, ...]:
    """Static shape of a PrimFunc parameter buffer (TVM 0.27 keeps it in the param's type)."""
    return tuple(int(d) for d in func.params[index].ty.shape)


def param_dtype(func, index: int) -> str:
    return str(func.params[index].ty.dtype)
