"""The ``ext`` compilation pipeline and ``ext.build``.

Stages (a flat, named sequence)::

    ExpandRunningExtremes  (not CPU) cummax/cummin host scans as data-parallel Relax ops
    FoldBatchNorm      conv2d [+ bias] -> batch_norm folded into the conv's weights and a bias
    Canonicalize       DecomposeOpsForInference, NaN-safe compares/max/min/sorts, bool arithmetic
                       on int8, FoldConstant, CSE, DCE
    LayoutPolicy       CPU: conv2d to NCHW (blocking happens inside kernels); cancel transpose pairs
    CheckTakeIndices   (CPU) runtime indices of take (embeddings, Gather) asserted in range: IndexError
    FuseExpertGather   (CPU) matmul(take(w, ids), v) (mixture-of-experts, batched_mm) reads w[ids]
                       in place instead of copying a matrix per row
    SettleComputedDims a ceil-mode pool on a symbolic size as an exact floor-mode pool, or its
                       extent a fresh symbol: stock fusion stops on the if_then_else it infers
    FuseEpilogues      anchor + bias + activation + residual -> "ext.*" composites
    LowerToCandidates  composite -> Workload -> Selector -> call_tir(kernel), report (with a row per
                       op left to stock lowering, and a ``failed`` row per composite ext failed on)
    library dispatch   the backend's DispatchSampling, DispatchSortScan (sort, topk, cumsum...)
    FoldConstants      weight packing of constants happens here, at compile time (stock
                       FoldConstant after it only when a call on constants is left)
    LiftWeightTransforms  weights passed as parameters (attr ``num_input``): their transforms move
                       to ``main_transform_params``, run once per weight set (``ext.Model``)
    LowerElementwiseMath  (CPU) exp/sigmoid/tanh/gelu/silu as vectorizable polynomials
    stock legalize     LegalizeOps (a reshape of a symbolic shape stays a view: ``symbolic_views``),
                       AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR
    UseInplaceCalls    (CPU) fused element-wise kernels write over an input that dies there
    FallbackSchedule   ext's CPU fallback / dlight on CUDA for unscheduled kernels
    stock lowering     dataflow lowering and VM finalization

Then ``tvm.compile`` lowers the kernels with the target kind's TIR pipeline (CPU: ``"ext_cpu"``,
``ext.tir_lowering``: small buffers on the stack, not the workspace pool).

``relax.build(mod, target, relax_pipeline="ext", tir_pipeline="ext_cpu")`` works after ``import ext``.
"""
from __future__ import annotations

import os

import tvm
from tvm import relax

from . import relax_passes as rp
from .relax_passes.nan_order import LowerArgExtremes
from .relax_passes.elemwise_math import LowerElementwiseMath
from .relax_passes.block_channels import BlockChannels, block_channels
from .relax_passes.checked_take import CheckTakeIndices
from .relax_passes.computed_dims import SettleComputedDims
from .relax_passes.fold_batchnorm import FoldBatchNorm
from .relax_passes.fold_constants import FoldRemainingConstants
from .relax_passes.fold_pad import FoldPadIntoConv
from .relax_passes.layout_policy import LayoutPolicy
from .relax_passes.lift_params import LiftWeightTransforms, param_specs
from .relax_passes.merge_groups import MergeNarrowGroups
from .relax_passes.inplace import UseInplaceCalls
from .relax_passes.kv_append import FuseCacheAppend
from .relax_passes.expert_matmul import FuseExpertGather
from .relax_passes.noalias import MarkNoAlias
from .relax_passes.running_extremes import ExpandRunningExtremes
from .relax_passes.symbolic_views import legalize_passes
from .progress import BuildProgress, stage
from .strategies.conv2d import lanes
from .strategies.report import SelectionReport
from .strategies.select import Selector
from .target import describe, normalize, target_kind

_LAST: dict = {"report": None}


def _backend(target):
    return target_kind(target).backend_module()


def pipeline(target=None, tuning_log=None, *, report: SelectionReport | None = None, libraries: bool | str = True,
             history=None, model=None, exact_specials: bool = False) -> tvm.transform.Pass:
    """The ext pipeline as a Relax module pass.

    Parameters
    ----------
    target : the target (defaults to ``Target.current()`` when the pass runs).
    tuning_log : path of a JSONL tuning log; its best records pick kernels.
    report : a ``SelectionReport`` to fill (a fresh one otherwise; see ``last_report()``).
    libraries : allow vendor-library candidates (True), turn them off (False), or
        ``"measure"``: time each applicable library against ext's own pick at build
        time and keep the faster (cached; see ``ext.libraries.measure``).
    exact_specials : no tile-transform candidates (Winograd, FFT): a NaN or infinite input
        element gives NaN/inf exactly where PyTorch does (see ``build``).
    """

    def run(mod, _ctx):
        tgt = normalize(target if target is not None else tvm.target.Target.current())
        hist, mdl = history, model
        if tuning_log is not None and hist is None:
            from .tuning.apply import load_history

            hist, mdl = load_history(tuning_log, tgt, model=mdl)
        if hist is None:
            from .tuning.apply import current_history

            hist, mdl = current_history(tgt, hist, mdl)
        rep = report if report is not None else SelectionReport(describe(tgt))
        _LAST["report"] = rep
        if hasattr(hist, "skipped"):  # a tuning log: how many of its records it could not trust
            rep.note_tuning_log(hist.skipped())
        if libraries == "measure":
            from .libraries.measure import LibraryTimings

            hist = LibraryTimings(tgt, inner=hist)
        selector = Selector(tgt, history=hist, model=mdl, libraries=bool(libraries), exact_specials=exact_specials)
        backend = _backend(tgt)
        cpu_target = target_kind(tgt).cpu
        with tgt:
            seq = tvm.transform.Sequential([
                stage("graph", ([] if cpu_target else [ExpandRunningExtremes()])  # host scans: data-parallel ops
                      + [FoldBatchNorm(), rp.Canonicalize(), FoldPadIntoConv(), LayoutPolicy(tgt)]
                      + ([MergeNarrowGroups(lanes(tgt)), FuseCacheAppend(tgt), CheckTakeIndices(), FuseExpertGather(tgt)]
                         if cpu_target else [])
                      + ([BlockChannels(tgt, selector)] if cpu_target and block_channels() else [])
                      + [SettleComputedDims(), rp.FuseEpilogues(cpu=cpu_target, target=tgt)]),
                # library dispatch: sort/topk/cumsum/sampling, which VM codegen can't emit itself
                stage("select", [rp.LowerToCandidates(selector, rep)] + backend.library_dispatch_passes(tgt)),
                # weights passed as parameters (attr num_input): their transforms move to main_transform_params
                # one transform per weight (an unrolled RNN's steps share it), then folded
                stage("weights", [relax.transform.EliminateCommonSubexpr(), relax.transform.DeadCodeElimination(),
                                  rp.FoldConstants(), FoldRemainingConstants(), LiftWeightTransforms()]),
                stage("legalize", ([LowerElementwiseMath(), LowerArgExtremes()] if cpu_target else []) + legalize_passes(backend.legalize_passes(tgt))
                      + ([UseInplaceCalls()] if cpu_target else []) + [rp.FallbackSchedule(tgt)]),
                # MarkNoAlias last: VMShapeLower's shape functions would cost every kernel its noalias
                stage("lower", backend.dataflow_lower_passes(tgt) + backend.finalize_passes(tgt) + [MarkNoAlias()]),
            ], name="ext.pipeline")
            return seq(mod)

    return tvm.transform.module_pass(run, opt_level=0, name="ext.pipeline")


@relax.register_pipeline("ext")
def _registered_pipeline(**kwargs):
    return pipeline(**kwargs)


def build(mod: tvm.IRModule, target=None, *, tuning_log=None, report: str | os.PathLike | None = None,
          libraries: bool | str = True, cache: bool = True, verbose: bool = True, exact_specials: bool = False):
    """Compile a Relax module with ext's kernels.

    Parameters
    ----------
    mod : the Relax IRModule (weights bound as constants get pre-packed at compile time). When
        ``main`` has the attr ``num_input`` (``ext.frontend`` with ``keep_params_as_input=True``),
        its parameters past the first ``num_input`` are weights: their transforms are lifted into
        ``main_transform_params``, and ``ext.Model(ex)`` runs them once per ``set_params``.
    target : ``ext.target.cpu()`` (default), ``ext.target.cuda(...)``, a Target or a dict.
    tuning_log : JSONL tuning log whose best records override the heuristics.
    report : path to write the selection report JSON to.
    libraries : allow vendor-library candidates (True), turn them off (False), or
        ``"measure"``: time each applicable library against ext's own pick at build
        time and keep the faster (cached; see ``ext.libraries.measure``).
    cache : look the build up in (and add it to) the on-disk cache ``ext.cache``
        (``$EXT_CACHE_DIR``, default ``~/.cache/ext``; ``EXT_CACHE=0`` turns it off).
    verbose : print one line per stage when the build runs past 2 s.
    exact_specials : leave out the tile-transform candidates (Winograd, FFT convs). They turn a
        NaN or infinite input element into NaN at every output of its tiles (20 outputs per
        channel around one pixel of a 3x3 conv, where PyTorch has 9); with this, NaN and
        infinities land exactly where PyTorch's do, at the direct kernels' speed.

    Returns
    -------
    A ``tvm.runtime.Executable``; run it with ``relax.VirtualMachine(ex, dev)``, or, with
    weights as parameters, ``ext.Model(ex)`` (``set_params(weights)`` once, then ``model(*inputs)``).
    ``ext.last_report()`` (and ``ex.ext_report``) is the ``SelectionReport`` of this
    build, with the seconds per stage in ``report.stages``. Export with
    ``ext.export_library(ex, path)``: it refuses, naming the candidates, when a
    vendor-library call needs this Python process.

    Example
    -------
    >>> ex = ext.build(mod, ext.target.cpu(), report="report.json")  # doctest: +SKIP
    """
    import time

    from . import cache as build_cache
    from .target import cpu
    from .tuning.apply import current_history

    tgt = normalize(target) if target is not None else cpu()
    specs = param_specs(mod)  # weights passed as parameters: checked here, used by ext.Model
    if tuning_log is not None and not os.path.exists(tuning_log):  # fail here, not deep inside the pass
        raise FileNotFoundError(f"tuning log {os.fspath(tuning_log)!r} does not exist")
    start = time.perf_counter()
    # an apply_history_best context is state the key cannot see: such builds bypass the cache
    parts = None
    if cache and build_cache.enabled() and current_history(tgt)[0] is None:
        build_cache.flush_if_full()
        parts = build_cache.key_parts(mod, tgt, tuning_log=tuning_log, libraries=libraries,
                                      exact_specials=exact_specials)
        hit = build_cache.load(parts)
        if hit is not None:
            ex, rep = hit
            rep.cached, rep.stages = True, [("cache hit", round(time.perf_counter() - start, 3), 0)]
            return _finish(ex, rep, report, specs, tgt)
    rep = SelectionReport(describe(tgt))
    progress = BuildProgress(verbose)
    ctx = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=ctx.opt_level, config=dict(ctx.config),
                                   instruments=list(ctx.instruments) + [progress]):
        ex = relax.build(mod, tgt, relax_pipeline=pipeline(tgt, tuning_log, report=rep, libraries=libraries,
                                                               exact_specials=exact_specials),
                         tir_pipeline=target_kind(tgt).tir_pipeline)
        progress.add("codegen", time.perf_counter() - start - sum(s[1] for s in progress.stages), 0)
    rep.stages = progress.stages
    if parts is not None and not any(d.candidate is not None and d.candidate.needs_python for d in rep):
        build_cache.store_later(parts, ex, rep)
    return _finish(ex, rep, report, specs, tgt)


def _finish(ex, rep: SelectionReport, report_path, specs: dict, tgt):
    _LAST["report"] = rep
    ex.ext_params, ex.ext_target_kind = specs, target_kind(tgt).name  # for ext.Model
    ex.ext_report = rep  # ext.export_library checks it for candidates that need this Python process
    if report_path is not None:
        rep.save(report_path)
    return ex


def last_report() -> SelectionReport | None:
    """The selection report of the most recent ext build in this process."""
    return _LAST["report"]
