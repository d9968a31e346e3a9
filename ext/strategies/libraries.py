"""Vendor-library candidates: OpenBLAS and PyTorch (MKL / oneDNN) on CPU,
cuBLAS / cuDNN through a CUDA build of PyTorch on CUDA.

Each entry calls a packed function of ``ext.libraries`` for the anchor op
(``PackedCall``: ``LowerToCandidates`` emits ``relax.call_dps_packed``) and,
when the workload has an epilogue, one small element-wise kernel of ours
after it: ``D = epilogue(C, bias, residual)`` (one read of ``C``, one write of
``D``; left unscheduled so the pipeline fuses and schedules it like any other
element-wise op). Each candidate declines with a reason when its library is
absent here or the dtype / layout is one it does not take.

=================  =======  =========  =================================
name               targets  library    packed function
=================  =======  =========  =================================
matmul.openblas    llvm     openblas   ``ext.lib.openblas.matmul``
matmul.onednn      llvm     onednn     ``ext.lib.torch.matmul`` (MKL sgemm)
matmul.cublas      cuda     cublas     ``ext.lib.torch.matmul``
conv2d.onednn      llvm     onednn     ``ext.lib.torch.conv2d``
conv2d.cudnn       cuda     cudnn      ``ext.lib.torch.conv2d``
=================  =======  =========  =================================

Cost of the library path beyond the GEMM itself: the VM -> Python call and
DLPack views (an empty packed call through the VM: ~1.4 us; a 64x64x64 GEMM
through OpenBLAS ~2x our direct kernel, see ``scripts/bench_libraries.py``),
plus the epilogue pass over the output.

Selection. By plevel the libraries are ``unsuited`` on CPU: on this machine
class (2 shared Zen 4 cores) ext's kernels won all 16 GEMM and conv cases of
``scripts/bench_libraries.py`` (OpenBLAS at its own threading 1.0x (a tie, on a
batched 12x64x128x64) to 83x slower, PyTorch 6x to 2000x; both suffer far more
than TVM's pool when the cores are shared), so
``libraries=True`` builds the same kernels as ``libraries=False`` unless a
tuning log or ``libraries="measure"`` (build-time timing,
``ext.libraries.measure``) shows a library winning.

The one case a library was measured winning by default -- a GEMV whose weight is
passed with every call (OpenBLAS 78 us against 339 us on 1x2048x1000, issue
14) -- lost because ext's kernel packed that weight on every call. Such weights
now go to ``matmul.stream`` (``strategies/matmul.py``), which reads them in
place in one pass over memory as the library does, on all cores where the
library runs on one; so the libraries stay unsuited there too. A weight
parameter of a function with ``num_input`` is no such case: it is packed once
per weight set (``ext.Model``), as a constant is.
"""
from __future__ import annotations

import dataclasses

from tvm import te, tirx

from ..target import target_kind
from ..libraries import blas, torch_ops
from ..topi_kernels import epilogue as ep
from ..workload import Workload
from .registry import PLEVEL, Candidate, PackedCall, register
from ..topi_kernels import i64 as _i64


@dataclasses.dataclass(frozen=True)
class LibraryConfig:
    """The library chooses its own blocking; ``threads`` caps its thread count per call
    (0: the library's own setting, normally every core)."""

    threads: int = 0


#: below this many flops a library runs on one thread by default: its thread team's
#: barriers cost more than they save (PyTorch's OpenMP team: ~30 ms per call on a loaded
#: 2-core machine, see ext/libraries/torch_ops.py)
SINGLE_THREAD_FLOPS = 2 ** 27


def epilogue_func(wl: Workload, anchor_shape, num_inputs: int, name: str):
    """PrimFunc ``(C, *extras, D)`` applying ``wl.epilogue`` to the library's output ``C``, or None."""
    if not wl.epilogue:
        return None
    shape = tuple(_i64(d) for d in anchor_shape)
    C = te.placeholder(shape, dtype=wl.out_dtype, name="C")
    extras = [te.placeholder(tuple(_i64(d) for d in s), dtype=dt, name=f"E{i}")
              for i, (s, dt) in enumerate(zip(wl.shapes[num_inputs:], wl.dtypes[num_inputs:]))]
    D = ep.fused_output(shape, lambda *idx: C[idx], wl.epilogue, extras, wl.out_dtype)
    func = te.create_prim_func([C, *extras, D]).without_attr("global_symbol")
    return func.with_attr("ext.kernel", name + ".epilogue")


def _cores(target) -> int:
    return int(target.attrs.get("num-cores", 1)) if target_kind(target).cpu else 0


def _space(wl, target):
    cores = _cores(target)
    return [LibraryConfig(1), LibraryConfig(cores)] if cores > 1 else [LibraryConfig(0)]


def _default(wl, target):
    cores = _cores(target)
    if cores <= 1:
        return LibraryConfig(0)
    return LibraryConfig(1 if wl.flops < SINGLE_THREAD_FLOPS else cores)


def _one_thread(wl, target):
    return [_one_thread_default(wl, target)]


def _one_thread_default(wl, target):
    return LibraryConfig(1 if _cores(target) else 0)


def library_candidate(name: str, targets: tuple, library: str, check, build, suits=None,
                      threads: str = "any") -> Candidate:
    """A table entry for a library call (``needs_python``; one knob, ``threads``).

    ``threads="one"`` pins a CPU library to one thread. Measured on the 2-core machine: a
    library's thread team and TVM's pool, both spin-waiting, slow each other down whichever
    ran last (a 1x4096x1024 GEMV of ours went from 0.42 ms to 3.5-6.8 ms after multi-threaded
    OpenBLAS calls, and OpenBLAS from 0.65 to 13.9 ms after ours); PyTorch's OpenMP team took
    ~30 ms per 64x64x64 GEMM and once livelocked a benchmark round for over ten minutes.
    """
    space, default = (_space, _default) if threads == "any" else (_one_thread, _one_thread_default)
    return register(Candidate(name, targets, PLEVEL.LIBRARY, check, LibraryConfig, space=space,
                              default=default, build=build, suits=suits, needs_python=True,
                              library=library))


# -- matmul ------------------------------------------------------------------------------------

NOT_FASTER = ("measured slower than ext's kernels on every case of scripts/bench_libraries.py; "
              "a tuning log or libraries='measure' may still pick it")

#: below this many flops the library loses to our kernels: a call through Python costs a few
#: microseconds (measured by scripts/bench_libraries.py) while our kernels finish in as many
MATMUL_MIN_FLOPS = 2 ** 21


def _matmul_check(wl: Workload, dtypes=blas.DTYPES) -> str | None:
    if len(set(wl.dtypes[:2])) != 1 or wl.dtypes[0] not in dtypes or wl.out_dtype != wl.dtypes[0]:
        return f"takes {'/'.join(dtypes)} operands of one dtype, got {'/'.join(wl.dtypes[:2])} -> {wl.out_dtype}"
    if min(len(wl.shapes[0]), len(wl.shapes[1])) < 2:
        return "needs operands of rank >= 2"
    if any(d == 0 for s in wl.shapes for d in s):
        return "zero-size dimension"
    if wl.attr("out_shape") is None:
        return "workload has no out_shape"
    return None


def _matmul_build(func_name: str, name: str):
    def build(wl: Workload, cfg, target) -> PackedCall:
        out = tuple(int(d) for d in wl.attr("out_shape"))
        return PackedCall(func_name, 2, out, wl.out_dtype, (int(bool(wl.attr("transpose_b"))), cfg.threads),
                          epilogue_func(wl, out, 2, name))

    return build


def _matmul_suits(wl: Workload, target) -> str | None:
    if wl.flops < MATMUL_MIN_FLOPS:
        return f"{wl.flops / 1e6:.2f} MFLOP: the library call's overhead outweighs the work"
    if wl.attr("b_const") is False and len(wl.shapes[0]) == 2:
        return ("run-time weight: ext's matmul.stream reads it in place on every core (many rows: packed per "
                "call); a tuning log or libraries='measure' may still pick the library")
    return NOT_FASTER


def _openblas_check(wl, target):
    return blas.unavailable_reason() or _matmul_check(wl)


def _torch_check(device):
    def check(wl, target):
        return torch_ops.unavailable_reason(device) or _matmul_check(wl, torch_ops.DTYPES)

    return check


library_candidate("matmul.openblas", ("llvm",), "openblas", _openblas_check,
                  _matmul_build(blas.FUNC, "matmul.openblas"), _matmul_suits, threads="one")
library_candidate("matmul.onednn", ("llvm",), "onednn", _torch_check("cpu"),
                  _matmul_build(torch_ops.MATMUL, "matmul.onednn"), _matmul_suits, threads="one")
library_candidate("matmul.cublas", ("cuda",), "cublas", _torch_check("cuda"),
                  _matmul_build(torch_ops.MATMUL, "matmul.cublas"), threads="one")


# -- conv2d ------------------------------------------------------------------------------------

#: the layouts PyTorch's convolution reads in place (NHWC as a channels-last view)
CONV_LAYOUTS = (("NCHW", "OIHW"), ("NHWC", "OHWI"))


def _conv_check(device):
    def check(wl: Workload, target) -> str | None:
        why = torch_ops.unavailable_reason(device)
        if why:
            return why
        if len(set(wl.dtypes[:2])) != 1 or wl.dtypes[0] not in torch_ops.DTYPES or wl.out_dtype != wl.dtypes[0]:
            return (f"takes {'/'.join(torch_ops.DTYPES)} operands of one dtype, "
                    f"got {'/'.join(wl.dtypes[:2])} -> {wl.out_dtype}")
        lay = (wl.attr("data_layout", "NCHW"), wl.attr("kernel_layout", "OIHW"))
        if lay not in CONV_LAYOUTS:
            return f"layout {'/'.join(lay)} not handled (needs NCHW/OIHW or NHWC/OHWI)"
        if wl.attr("out_layout", lay[0]) != lay[0]:
            return f"output layout {wl.attr('out_layout')} differs from the data's {lay[0]}"
        if any(d == 0 for s in wl.shapes for d in s):
            return "zero-size dimension"
        if any(len(s) != 4 for s in wl.shapes[:2]) or wl.attr("out_shape") is None:
            return "needs 4-D data and weight and an out_shape"
        return None

    return check


def _conv_build(name: str):
    def build(wl: Workload, cfg, target) -> PackedCall:
        out = tuple(int(d) for d in wl.attr("out_shape"))
        (sh, sw), pad = wl.attr("strides", (1, 1)), wl.attr("padding", (0, 0, 0, 0))
        dh, dw = wl.attr("dilation", (1, 1))
        statics = (int(sh), int(sw), *(int(p) for p in pad), int(dh), int(dw), int(wl.attr("groups", 1)),
                   str(wl.attr("data_layout", "NCHW")), cfg.threads)
        return PackedCall(torch_ops.CONV2D, 2, out, wl.out_dtype, statics, epilogue_func(wl, out, 2, name))

    return build


def _conv_suits(wl: Workload, target) -> str | None:
    return NOT_FASTER


library_candidate("conv2d.onednn", ("llvm",), "onednn", _conv_check("cpu"), _conv_build("conv2d.onednn"),
                  _conv_suits, threads="one")
library_candidate("conv2d.cudnn", ("cuda",), "cudnn", _conv_check("cuda"), _conv_build("conv2d.cudnn"), threads="one")
