"""ATen-level rewrites of a ``torch.export`` program before TVM's importer translates it.

Each fixes a case where the importer's translation differs from PyTorch (a wrong result, a
wrong shape or a rejected graph), on the exported (decomposed) FX graph, where PyTorch's own
semantics are still at hand. ``as_pytorch_computes`` runs them all; ``exportable_experts``
wraps ``torch.export`` itself. Each has a test in ``tests/test_torch_layers.py`` that fails
without it.
"""
from __future__ import annotations

import contextlib
import math
import operator

#: transformers' mixture-of-experts layers run their experts with ``grouped_mm`` by default:
#: tokens sorted by expert, offsets counted with ``histc``, a custom op over data-dependent
#: groups, none of which TVM's importer takes. ``batched_mm``, transformers' own alternative,
#: gives each (token, chosen expert) pair its expert's matrices by ``take`` and multiplies them
#: in one batched product: the same result from static shapes. ``FuseExpertGather``
#: (``relax_passes/expert_matmul.py``) turns that into a kernel that reads the experts'
#: matrices in place rather than copying one per pair.
EXPORTED_EXPERTS = "batched_mm"


@contextlib.contextmanager
def exportable_experts(module):
    """Switch transformers models with mixture-of-experts layers to ``EXPORTED_EXPERTS`` while
    ``torch.export`` traces them; their own setting is restored afterwards."""
    switched = []
    for sub in module.modules():
        can = getattr(sub, "_can_set_experts_implementation", None)
        if callable(can) and can() and hasattr(sub, "get_experts_implementation"):
            switched.append((sub, sub.get_experts_implementation()))
            sub.set_experts_implementation(EXPORTED_EXPERTS)
    try:
        yield
    finally:
        for sub, original in reversed(switched):
            sub.set_experts_implementation(original)


def decompose(ep):
    """``ep.run_decompositions()``; where PyTorch's own decomposition stops on a ``view`` of a
    tensor its decomposed producer laid out otherwise (GPT-2 with an attention mask and a batch
    above one: the decomposed attention's output is transposed in memory, and ``x.view(-1, C)``
    after it raises "Cannot view a tensor with shape ... and strides ..."), the program's views
    become reshapes, which copy where a view cannot be taken, and it is decomposed again. Only
    then: a reshape does not alias, so a program that mutates through a view would differ."""
    import torch

    try:
        return ep.run_decompositions()
    except ValueError as err:
        if "Cannot view a tensor" not in str(err):
            raise
    views = [n for n in ep.graph_module.graph.nodes
             if n.op == "call_function" and n.target == torch.ops.aten.view.default]
    for node in views:
        node.target = torch.ops.aten.reshape.default
    ep.graph_module.recompile()
    return ep.run_decompositions()


def as_pytorch_computes(ep) -> None:
    """Rewrite the ATen calls that TVM's importer translates unlike PyTorch, in place on the
    exported graph:

    * ``cumsum`` of a bool tensor gets PyTorch's implicit ``dtype=int64``. The importer typed it
      bool: the sum saturated instead of counting, constants multiplied with it became bools,
      and LLVM codegen rejected the bool add. transformers 5 runs such a cumsum (a
      packed-sequence check) whenever a decoder gets no attention mask.
    * ``cat`` drops empty 1-D inputs next to higher-rank ones, as PyTorch does (legacy rule);
      the importer rejected the mixed ranks. transformers' ``DynamicCache`` starts each layer's
      keys and values as ``torch.tensor([])``, so every decoder with ``use_cache=True`` failed.
    * Integer index tensors of ``index.Tensor`` (``x[..., idx]``) count from the end where
      negative, as in Python: each is wrapped by ``remainder(idx, size)`` first. The importer
      passed them to ``take`` as they were, which read outside the tensor (Falcon's multi-query
      attention selects its key and value heads as ``qkv[..., [-2], :]``: every output NaN).
    * ``index.Tensor`` with several index tensors and full slices (``None``) among them moves
      the indexed axes to the front first (``permute``), then puts the broadcast index
      dimensions where PyTorch does; the importer's general case broadcast slices against the
      indices and failed (``F.unfold``, e.g. ConvBERT's span-based convolution).
    * ``arange`` with a negative step becomes ``start + step * arange(n)``: Relax's ``arange``
      got the length wrong for some (``arange(16, -16, -1)``: 34 elements, not 32; Funnel
      Transformer's relative positions).
    * ``div(x, n, rounding_mode=...)`` of a floating-point tensor by a Python int divides by
      ``float(n)``: the importer made ``n`` an int32 constant and Relax rejected the mixed
      ``floor_divide`` (DETR's sine position embedding).
    * ``grid_sample``'s grid goes in as ``[N, 2, H, W]``: the importer passed PyTorch's
      ``[N, H, W, 2]`` grid to Relax's ``grid_sample``, whose shape inference and kernel read
      ``[N, 2, H, W]`` (a wrong shape; Deformable DETR's attention failed to import).
    * ``.item()`` of a 0-d tensor computed from a symbolic size by ``+ - *`` (DeBERTa's relative
      attention span ``min(seq, 16)``, as ``scalar_tensor`` arithmetic, then slice bounds) is
      that arithmetic on the size itself: ``torch.export`` gave the item a fresh unbounded
      symbol, which the importer cannot translate. The runtime assertions left on such symbols
      go too (the importer passes ``_assert_scalar`` through unchecked anyway).
    * ``repeat`` by a symbolic count of axes of size 1 is that ``expand``: Relax's ``tile``
      takes only fixed counts (DeBERTa's relative positions, ``arange(seq).repeat(seq, 1)``).
    * Arithmetic with a floating-point result (``/``, ``*``, ``+``, ``-``, ``**``, ``where``,
      ``log``, ``sqrt``, ``exp``...) casts each tensor operand of another dtype (integer, bool)
      to the result's dtype first, as PyTorch's type promotion computes. The importer divided
      int64 tensors as integers (``arange(8) / 2`` came out truncated: a silent wrong answer),
      rejected ``log`` of int64 (DeBERTa-v2's log-bucketed relative positions failed to import)
      and mixed dtypes in ``where``.
    * ``topk(..., sorted=False)`` becomes ``sorted=True``: PyTorch leaves the order of an
      unsorted top-k unspecified, so the sorted order is one it may return; the importer
      rejected unsorted top-k outright (DeepSeek-V3's expert-group routing failed to import).
    """
    import torch

    _items_as_symbols(ep.graph)

    for node in list(ep.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is torch.ops.aten.index.Tensor:
            _wrap_negative_indices(ep.graph, node)
            _index_leading_axes(ep.graph, node)
        elif node.target is torch.ops.aten.arange.start_step:
            _arange_counting_up(ep.graph, node)
        elif node.target is torch.ops.aten.repeat.default:
            _repeat_as_expand(node)
        elif node.target is torch.ops.aten.grid_sampler_2d.default:
            _grid_channels_first(ep.graph, node)
        elif node.target is torch.ops.aten.topk.default and len(node.args) > 4 and not node.args[4]:
            node.args = (*node.args[:4], True, *node.args[5:])
        elif node.target is torch.ops.aten.div.Tensor_mode and isinstance(node.args[1], int):
            val = getattr(node.args[0], "meta", {}).get("val")
            if val is not None and val.dtype.is_floating_point:  # the importer made the int an int32 constant
                node.args = (node.args[0], float(node.args[1]), *node.args[2:])
        elif node.target in _promoting(torch):
            _promote_to_result(ep.graph, node, _promoting(torch)[node.target])
        if node.target is torch.ops.aten.cumsum.default:
            val = getattr(node.args[0], "meta", {}).get("val")
            if getattr(val, "dtype", None) == torch.bool and node.kwargs.get("dtype") is None:
                node.kwargs = {**node.kwargs, "dtype": torch.int64}
        elif node.target is torch.ops.aten.cat.default:
            vals = [getattr(a, "meta", {}).get("val") for a in node.args[0]]
            if any(v is None for v in vals) or max(v.dim() for v in vals) < 2:
                continue
            kept = [a for a, v in zip(node.args[0], vals) if not (v.dim() == 1 and v.shape[0] == 0)]
            if kept and len(kept) < len(vals):
                node.args = (kept, *node.args[1:])


_PROMOTING: dict = {}


def _promoting(torch) -> dict:
    """ATen op -> positions of its tensor operands that take the result's dtype (the ops whose
    floating-point result PyTorch computes in that dtype whatever their operands' dtypes)."""
    if not _PROMOTING:
        aten = torch.ops.aten
        unary = ("log", "log2", "log10", "log1p", "exp", "exp2", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
                 "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf",
                 "reciprocal")
        for name in unary:
            if hasattr(aten, name):
                _PROMOTING[getattr(aten, name).default] = (0,)
        for op in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.pow.Tensor_Tensor,
                   aten.maximum.default, aten.minimum.default, aten.atan2.default):
            _PROMOTING[op] = (0, 1)
        for op in (aten.add.Scalar, aten.sub.Scalar, aten.mul.Scalar, aten.div.Scalar, aten.rsub.Scalar,
                   aten.pow.Tensor_Scalar):
            _PROMOTING[op] = (0,)
        _PROMOTING[aten.where.self] = (1, 2)
    return _PROMOTING


def _promote_to_result(graph, node, positions) -> None:
    """Cast the tensor operands at ``positions`` whose dtype is not the node's floating-point
    result dtype to that dtype (an ``_to_copy`` before the node)."""
    import torch

    out = node.meta.get("val")
    if out is None or not getattr(out, "dtype", torch.int64).is_floating_point:
        return
    args = list(node.args)
    for pos in positions:
        arg = args[pos] if pos < len(args) else None
        val = getattr(arg, "meta", {}).get("val")
        if not isinstance(val, torch.Tensor) or val.dtype == out.dtype:
            continue
        with graph.inserting_before(node):
            cast = graph.call_function(torch.ops.aten._to_copy.default, (arg,), {"dtype": out.dtype})
        cast.meta["val"] = val.to(out.dtype)
        args[pos] = cast
    node.args = tuple(args)


def _wrap_negative_indices(graph, node) -> None:
    """``index.Tensor(x, [.., idx, ..])``: each integer ``idx`` on an axis of static size ``n``
    becomes ``remainder(idx, n)`` (the same index for ``-n <= idx < n``)."""
    import torch

    val = getattr(node.args[0], "meta", {}).get("val")
    if val is None:
        return
    indices = list(node.args[1])
    for axis, idx in enumerate(indices):
        iv = getattr(idx, "meta", {}).get("val") if idx is not None else None
        size = val.shape[axis] if axis < val.dim() else None
        if iv is None or iv.dtype in (torch.bool, torch.uint8) or not isinstance(size, int):
            continue
        with graph.inserting_before(node):
            wrapped = graph.call_function(torch.ops.aten.remainder.Scalar, (idx, size))
        wrapped.meta["val"] = iv
        indices[axis] = wrapped
    node.args = (node.args[0], indices, *node.args[2:])


def _index_leading_axes(graph, node) -> None:
    """``x[:, i, j]``-style ``index.Tensor`` as ``permute`` + index of leading axes (+ ``permute``).

    PyTorch: the index tensors broadcast to ``B``; adjacent indexed axes are replaced by ``B``
    in place, non-adjacent ones put ``B`` first. Indexing the permuted tensor's leading axes
    gives ``B`` first, so only the adjacent case permutes back."""
    import torch

    x, indices = node.args[0], list(node.args[1])
    val = getattr(x, "meta", {}).get("val")
    pos = [i for i, idx in enumerate(indices) if idx is not None]
    if val is None or len(pos) < 2 or len(pos) == len(indices):
        return  # the importer's take (one index) and index_tensor (no slice) cases are right
    ivals = [getattr(indices[i], "meta", {}).get("val") for i in pos]
    if any(v is None or v.dtype == torch.bool for v in ivals):
        return
    nd = val.dim()
    perm = pos + [i for i in range(nd) if i not in pos]
    bshape = list(torch.broadcast_shapes(*(v.shape for v in ivals)))
    rest = [val.shape[i] for i in perm[len(pos):]]

    def meta(shape):
        return torch.empty(shape, dtype=val.dtype, device="meta")

    with graph.inserting_before(node):
        xp = graph.call_function(torch.ops.aten.permute.default, (x, perm))
        xp.meta["val"] = meta([val.shape[i] for i in perm])
        out = graph.call_function(torch.ops.aten.index.Tensor, (xp, [indices[i] for i in pos]))
        out.meta["val"] = meta(bshape + rest)
        b, k = len(bshape), pos[0]
        if pos == list(range(k, k + len(pos))) and k > 0:
            back = list(range(b, b + k)) + list(range(b)) + list(range(b + k, b + len(rest)))
            out = graph.call_function(torch.ops.aten.permute.default, (out, back))
            out.meta["val"] = meta(rest[:k] + bshape + rest[k:])
    node.replace_all_uses_with(out)
    graph.erase_node(node)


def _grid_channels_first(graph, node) -> None:
    """``grid_sampler_2d(x, grid, ...)`` with ``grid`` permuted to ``[N, 2, H, W]`` (the layout
    Relax's ``grid_sample`` takes; the two coordinates keep PyTorch's x, y order)."""
    import torch

    grid = node.args[1]
    val = getattr(grid, "meta", {}).get("val")
    if val is None or val.dim() != 4 or val.shape[-1] != 2:
        return
    with graph.inserting_before(node):
        first = graph.call_function(torch.ops.aten.permute.default, (grid, [0, 3, 1, 2]))
    first.meta["val"] = torch.empty([val.shape[0], 2, val.shape[1], val.shape[2]], dtype=val.dtype, device="meta")
    node.args = (node.args[0], first, *node.args[2:])


_SCALAR_MATH = {"add.Tensor": operator.add, "sub.Tensor": operator.sub, "mul.Tensor": operator.mul}


def _symbolic(graph, arg, made: dict):
    """``arg`` (a 0-d integer tensor node or a number) as a size-arithmetic node or int, or None."""
    import torch

    if isinstance(arg, int) and not isinstance(arg, bool):
        return arg
    if arg in made:
        return made[arg]
    if getattr(arg, "op", None) != "call_function":
        return None
    if arg.target is torch.ops.aten.scalar_tensor.default:
        value = arg.args[0]
        ok = isinstance(value, int) or (getattr(value, "op", None) == "call_function"
                                        and isinstance(value.meta.get("val"), torch.SymInt))
        made[arg] = value if ok else None
        return made[arg]
    fn = _SCALAR_MATH.get(getattr(arg.target, "__name__", ""))
    terms = [_symbolic(graph, a, made) for a in arg.args] if fn is not None and len(arg.args) == 2 else [None]
    if any(t is None for t in terms):
        made[arg] = None
        return None
    with graph.inserting_after(max((t for t in terms if not isinstance(t, int)), key=_position, default=arg)):
        out = graph.call_function(fn, tuple(terms))
    out.meta["val"] = fn(*[t if isinstance(t, int) else t.meta["val"] for t in terms])
    made[arg] = out
    return out


def _position(node) -> int:
    return next(i for i, n in enumerate(node.graph.nodes) if n is node)


def _items_as_symbols(graph) -> None:
    """``_local_scalar_dense(t)`` -> the size arithmetic ``t`` was computed by (see above)."""
    import torch

    made: dict = {}
    items = [n for n in graph.nodes if n.target is torch.ops.aten._local_scalar_dense.default]
    replaced = False
    for node in items:
        expr = _symbolic(graph, node.args[0], made)
        if expr is not None and not isinstance(expr, int):
            node.replace_all_uses_with(expr)
            replaced = True
    if not replaced:
        return
    for node in [n for n in graph.nodes if n.target is torch.ops.aten._assert_scalar.default]:
        graph.erase_node(node)
    graph.eliminate_dead_code()


def _repeat_as_expand(node) -> None:
    """``repeat(x, counts)`` with symbolic counts -> ``expand`` when only axes of size 1 repeat."""
    import torch

    val, counts = node.args[0].meta.get("val"), list(node.args[1])
    if val is None or all(isinstance(c, int) for c in counts) or len(counts) < val.dim():
        return
    lead = len(counts) - val.dim()
    dims = [1] * lead + list(val.shape)
    if any(not (isinstance(c, int) and c == 1) and not (isinstance(d, int) and d == 1) for c, d in zip(counts, dims)):
        return
    node.target = torch.ops.aten.expand.default
    node.args = (node.args[0], [c if (i < lead or (isinstance(d, int) and d == 1)) else -1
                                for i, (c, d) in enumerate(zip(counts, dims))])


def _arange_counting_up(graph, node) -> None:
    """``arange(start, end, step < 0)`` (static numbers) as ``start + step * arange(0, n, 1)``."""
    import torch

    start, end, step = (list(node.args) + [1])[:3]
    if not all(isinstance(v, (int, float)) for v in (start, end, step)) or step >= 0:
        return
    val = node.meta.get("val")
    if val is None:
        return
    n = max(0, math.ceil((end - start) / step))
    with graph.inserting_before(node):  # the result's dtype throughout (a float step on int64 was truncated)
        up = graph.call_function(torch.ops.aten.arange.start_step, (0, n, 1), {**node.kwargs, "dtype": val.dtype})
        scaled = graph.call_function(torch.ops.aten.mul.Tensor, (up, step))
        out = graph.call_function(torch.ops.aten.add.Tensor, (scaled, start))
    for new in (up, scaled, out):
        new.meta["val"] = torch.empty((n,), dtype=val.dtype, device="meta")
    node.replace_all_uses_with(out)
    graph.erase_node(node)
