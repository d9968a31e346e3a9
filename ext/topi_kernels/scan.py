"""Running extremes (``cummax`` / ``cummin``) as one sequential scan per line of the axis.

A scan is a loop carrying its last value: each output element reads its input element and the
output just before it, n steps per line, the lines in parallel. Written as data-parallel Relax
ops (``ceil(log2 n)`` rounds of "compare with the element ``2^r`` before"), every round reads the
last one several times (the value, NaN tests, the comparison), and the fused kernel's inlined
expressions grew with the rounds' product: one ``cummax`` of a 6 x 13 tensor took 9 s to lower.
"""
from __future__ import annotations

from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T


def _prod(dims):
    out = 1
    for d in dims:
        out = out * d
    return out


def cumulative_extreme(data: te.Tensor, axis: int, larger: bool) -> list[te.Tensor]:
    """``(values, indices)`` of ``torch.cummax`` (``larger``) or ``torch.cummin`` along ``axis``.

    As in PyTorch, a later element equal to the running extreme takes its place (the index is
    the last one), and NaN beats every number, a later NaN an earlier one."""
    shape = [int(d) if isinstance(d, tirx.IntImm) else d for d in data.shape]
    n, before, after = shape[axis], _prod(shape[:axis]), _prod(shape[axis + 1:])
    floating = "float" in str(data.dtype)
    lines = before * after  # none when the axis is empty: its first element is not there to write
    if isinstance(n, int):
        lines = lines if n > 0 else 0
    else:
        lines = tirx.Select(n > 0, tirx.const(lines, "int64") if isinstance(lines, int) else lines,
                            tirx.const(0, "int64"))

    def takes_place(new, old):
        wins = new >= old if larger else new <= old
        if floating:  # a NaN takes the place of anything; a NaN's place is taken by NaNs only
            wins = tirx.Or(tirx.isnan(new), tirx.And(tirx.Not(tirx.isnan(old)), wins))
        return wins

    def scan(ins, outs):
        with IRBuilder() as ib:
            x, values, index = (T.buffer_proxy(b) for b in (ins[0], *outs))
            with T.parallel(0, lines) as line:
                first = line // after * n * after + line % after
                values[first] = x[first]
                index[first] = tirx.const(0, "int64")
                with T.serial(1, n) as k:
                    at = first + k * after
                    keep = takes_place(x[at], values[at - after])
                    values[at] = tirx.Select(keep, x[at], values[at - after])
                    index[at] = tirx.Select(keep, tirx.Cast("int64", k), index[at - after])
            return ib.get()

    out_buffers = [tirx.decl_buffer(shape, data.dtype, "values"), tirx.decl_buffer(shape, "int64", "indices")]
    name = "cummax" if larger else "cummin"
    return te.extern([shape, shape], [data], scan, dtype=[data.dtype, "int64"], out_buffers=out_buffers,
                     name=name, tag=name)
