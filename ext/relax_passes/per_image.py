"""Per-image kernels over a symbolic batch: a static kernel built for one image, looped.

A conv net imported with a symbolic batch (``torch.export.Dim``) gives conv workloads whose
only symbolic extent is the batch. The static candidates (Winograd, the in-place 1x1 GEMM,
depthwise...) decline symbolic shapes, and ``conv2d.direct_nchwc_dyn`` alone ran ResNet-50
2.2x slower than the static build. Yet a conv's images are independent: the static kernel
chosen for the same layer at batch 1 is the right kernel for every image.

:func:`batch_free_workload` says when that holds (every symbol is the leading axis of the
operands that carry it, and of the output, and plays the ``batch`` role); the selector then
chooses for the one-image workload (tuning records and reports of batch-1 builds apply) and
:func:`per_image` wraps the built kernel: the same body, unchanged, inside a serial loop over
the images, its batched buffers re-pointed to image ``i`` (``let A.data = &A_n[i, 0, ...]``).
The kernel's own threads still split each image. Weight transforms have no batch and stay as
they are; a candidate that transforms a batched operand is not wrapped.
"""
from __future__ import annotations

from tvm import s_tir, tirx

from ..strategies._symbolic import symbolic_roles
from ..workload import Workload

#: families whose batch is the leading axis of the data, the residual and the output
FAMILIES = ("conv2d", "pool2d")


def batch_free_workload(wl: Workload) -> tuple[Workload, list[int], str] | None:
    """``(one-image workload, batched input indices, symbol)`` when ``wl``'s only symbolic
    extent is a batch it can be looped over, else None."""
    if wl.op not in FAMILIES or wl.is_static:
        return None
    roles = symbolic_roles(wl)
    if len(roles) != 1:
        return None
    (sym, role), = roles.items()
    if role != {"batch"}:
        return None
    out = wl.attr("out_shape")
    if out is None or out[0] != sym or any(sym in map(str, s[1:]) for s in wl.shapes) or sym in map(str, out[1:]):
        return None
    batched = [i for i, s in enumerate(wl.shapes) if s and s[0] == sym]
    if not batched or batched[0] != 0:
        return None
    shapes = [(1,) + tuple(s[1:]) if i in batched else s for i, s in enumerate(wl.shapes)]
    one = wl.with_(shapes=tuple(tuple(s) for s in shapes), attrs=dict(wl.attrs, out_shape=(1,) + tuple(out[1:])))
    return one, batched, sym


def per_image(func: tirx.PrimFunc, batched: list[int], name: str = "n") -> tirx.PrimFunc:
    """``func`` (one image; its parameters in call order, the output last) looped over a
    symbolic batch ``name``: parameters ``batched`` and the output get a leading extent ``n``.

    TVM 0.27's parameters are buffers themselves; the one-image buffer stays the name the body
    uses, declared inside the loop over image ``i`` with its data at ``&whole[i, 0, ...]``."""
    n = tirx.Var(name, "int64")
    img = tirx.Var("image", "int64")
    params, views = [], []
    last = len(func.params) - 1
    for i, buf in enumerate(func.params):
        if i not in batched and i != last:
            params.append(buf)
            continue
        if int(buf.shape[0]) != 1:
            raise ValueError(f"per_image: parameter {i} ({buf.name}) has {buf.shape[0]} images, expected 1")
        whole = tirx.decl_buffer([n] + list(buf.shape[1:]), buf.dtype, name=f"{buf.name}_n")
        params.append(whole)
        first = tirx.BufferLoad(whole, [img] + [tirx.const(0, "int64")] * (len(buf.shape) - 1))
        views.append(tirx.DeclBuffer(buf, data=tirx.address_of(first)))
    loop = tirx.For(img, tirx.const(0, "int64"), n, tirx.ForKind.SERIAL, tirx.SeqStmt(views + [func.body]))
    root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", loop))  # Relax's analyses want one
    return tirx.PrimFunc(params, root, func.ret_type, func.attrs)
