"""Schedule helpers shared by every target's schedules."""
from __future__ import annotations

import re

import tvm_ffi
from tvm import s_tir, te, tirx
from tvm.ir.expr import Expr
from tvm.s_tir.dlight.analysis import normalize_prim_func


def create_schedule(tensors: list[te.Tensor]) -> s_tir.Schedule:
    """A schedule over ``te.create_prim_func(tensors)`` (inputs then output)."""
    return s_tir.Schedule(te.create_prim_func(tensors))


def finish(sch: s_tir.Schedule, name: str | None = None):
    """The scheduled PrimFunc, marked so dlight, FuseOps and FuseTIR leave it alone."""
    return mark_scheduled(sch.mod["main"], name)


def mark_scheduled(func, name: str | None = None):
    """``func`` (a schedule's result or a kernel written as TIR) marked as ``finish`` marks it."""
    func = func.without_attr("global_symbol")
    func = func.with_attr("tirx.is_scheduled", True).with_attr("op_pattern", 8)
    return func.with_attr("ext.kernel", name) if name else func


def try_step(fn, *args):
    """``fn(*args)``, or None when TVM rejects the step (ScheduleError and friends): for
    best-effort schedules whose result is never less correct, only sometimes not faster."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - any rejected step is skipped
        return None


def unscheduled(func) -> bool:
    """A PrimFunc no candidate scheduled (no ``tirx.is_scheduled`` attribute)."""
    from tvm import tirx

    return isinstance(func, tirx.PrimFunc) and not (func.attrs and func.attrs.get("tirx.is_scheduled", False))


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


#: inlining a chain of selects (relu, clip, the NaN and range tests of exp) nests them: LLVM
#: codegen binds every let to its value in TVM's simplifier, which then re-simplifies each
#: select's condition with the whole chain substituted, about 3x the work per nesting level
#: (8 chained relus built in 7 s, 10 in minutes). Schedules that inline element-wise
#: chains keep a producer as a block of its own (one more pass over memory, a quick build)
#: where inlining it would nest more selects than this.
MAX_SELECT_DEPTH = 6

_CHILDREN = ("a", "b", "value", "condition", "true_value", "false_value", "body", "args", "indices", "base", "stride")


def _expr_children(e) -> list:
    """The sub-expressions of a TIR node (``_CHILDREN``, lists flattened)."""
    out = []
    for name in _CHILDREN:
        child = getattr(e, name, None)
        if isinstance(child, Expr):
            out.append(child)
        elif isinstance(child, (list, tvm_ffi.Array)):
            out.extend(c for c in child if isinstance(c, Expr))
    return out


def select_depth(expr) -> int:
    """The most selects nested along one path of ``expr``, a let's variable counting as the
    selects of its value (as TVM's simplifier sees it once the let is bound)."""
    memo: dict[int, int] = {}
    bound: dict[int, int] = {}

    def visit(e) -> int:
        key = e.__chandle__() if hasattr(e, "__chandle__") else id(e)
        if key in memo:
            return memo[key]
        if isinstance(e, tirx.Var):
            return bound.get(key, 0)
        if isinstance(e, tirx.Let):
            bound[e.var.__chandle__()] = visit(e.value)
        depth = max([visit(c) for c in _expr_children(e)], default=0)
        memo[key] = depth + isinstance(e, tirx.Select)
        return memo[key]

    return visit(expr)


#: inlining copies a producer's expression into its consumers once per read; when the copies
#: would print longer than this, the producer stays a block of its own. Chains that read a
#: value twice (gelu_new: tanh(y) and tanh(y)**3) otherwise double per level, and LLVM took
#: 15 s on three levels of vectorized tanh and minutes on four (stock: 0.3 s, scalar); on
#: CUDA, erfinv's three Newton steps (each reading the last ~50 times) took 5 minutes in dlight
MAX_INLINED_CHARS = 6000
#: a producer read once is inlined while its expression prints shorter than this many times the limit
SINGLE_READ_FACTOR = 4


def _store_depth(block) -> int:
    body = block.body
    return select_depth(body.value) if isinstance(body, tirx.BufferStore) else 0


def _nests_too_deep(sch: s_tir.Schedule, block_rv) -> bool:
    """Would inlining ``block_rv`` nest more than ``MAX_SELECT_DEPTH`` selects in a consumer?"""
    own = _store_depth(sch.get(block_rv))
    return own > 0 and any(own + _store_depth(sch.get(c)) > MAX_SELECT_DEPTH for c in sch.get_consumers(block_rv))


def _reads(stmt, buffer_name: str) -> int:
    return len(re.findall(rf"(?<![\w.]){re.escape(buffer_name)}\[", str(stmt)))


def copies_big_expression(sch: s_tir.Schedule, block_rv) -> bool:
    """Would inlining ``block_rv`` copy its expression past ``MAX_INLINED_CHARS``? Read once,
    the expression is not copied but its indices are: each reshape inlined into the next puts
    the consumer's index into a ``//`` and a ``%`` of the producer's, doubling it (reshapes with
    element-wise ops between them, which one kernel fuses: 20 of them took 23 s to build), so a
    producer already ``SINGLE_READ_FACTOR`` times the limit stays a block of its own too."""
    block = sch.get(block_rv)
    name = block.writes[0].source.name
    copies = sum(_reads(sch.get(c).body, name) for c in sch.get_consumers(block_rv))
    size = len(str(block.body))
    return size * copies > MAX_INLINED_CHARS * (1 if copies > 1 else SINGLE_READ_FACTOR)


#: LLVM codegen binds each let to its value in its simplifier, which reads every use of the
#: variable as the value: a kernel costs as if its lets were expanded. A producer stays a block
#: of its own where its consumer, with it inlined and every let expanded, would pass this many
#: nodes. A sigmoid (ext's let-bound exp) is 915 nodes reading its input 70 times: two nested
#: expand to 6.5e4 nodes (0.4 s to build), three to 4.5e6 (7.8 s), eight took 15.8 s
MAX_EXPANDED_NODES = 1_000_000


def _loaded_buffer(e):
    """The name of the buffer a load reads (TVM 0.27's loads name it ``source``), else None."""
    if not hasattr(e, "indices"):
        return None
    src = getattr(e, "source", None)
    src = getattr(e, "buffer", None) if src is None else src
    name = getattr(src, "name", None)
    return name if isinstance(name, str) else None


def expanded_size(node, buffer_name: str | None = None) -> tuple[int, int]:
    """``(nodes, reads)`` of an expression or store ``node`` with every let expanded: how many
    nodes, and how many loads of ``buffer_name``, a simplifier that substitutes let variables
    by their values meets (counted over the DAG, without building it)."""
    memo: dict[int, tuple[int, int]] = {}
    bound: dict[int, tuple[int, int]] = {}

    def visit(e) -> tuple[int, int]:
        key = e.__chandle__()
        if key in memo:
            return memo[key]
        if isinstance(e, tirx.Var):
            return bound.get(key, (1, 0))
        if isinstance(e, tirx.Let):
            bound[e.var.__chandle__()] = visit(e.value)
            memo[key] = visit(e.body)
            return memo[key]
        size, reads = 1, int(buffer_name is not None and _loaded_buffer(e) == buffer_name)
        for c in _expr_children(e):
            s, r = visit(c)
            size, reads = size + s, reads + r
        memo[key] = (size, reads)
        return memo[key]

    return visit(node)


def _expands_too_far(sch: s_tir.Schedule, block_rv) -> bool:
    """Would inlining ``block_rv`` make a consumer pass ``MAX_EXPANDED_NODES`` with its lets
    expanded?"""
    block = sch.get(block_rv)
    own, _ = expanded_size(block.body)
    name = block.writes[0].source.name
    for c in sch.get_consumers(block_rv):
        size, reads = expanded_size(sch.get(c).body, name)
        if size + reads * own > MAX_EXPANDED_NODES:
            return True
    return False


def inline_injective_guarded(sch: s_tir.Schedule) -> None:
    """Inline every injective producer block of ``sch`` into its consumers, except where the
    copies would grow past ``MAX_INLINED_CHARS``, nest more than ``MAX_SELECT_DEPTH`` selects or
    expand past ``MAX_EXPANDED_NODES``: those stay blocks of their own (one more pass over
    memory, a quick build)."""
    infos = normalize_prim_func(sch) or []
    for info in infos[:-1]:  # the last block writes the output
        if info.is_injective() and not copies_big_expression(sch, info.block_rv) \
                and not _nests_too_deep(sch, info.block_rv) and not _expands_too_far(sch, info.block_rv):
            try_step(sch.compute_inline, info.block_rv)


# -- GPU helpers (shared by every family's cuda/ schedules) ------------------------------------

WARP_SIZE = 32


def inline_producers(sch: s_tir.Schedule, block) -> None:
    """Inline the chains of element-wise producers of ``block`` (zero padding, gathers) into it."""
    changed = True
    while changed:
        changed = False
        for prod in sch.get_producers(block):
            try:
                sch.compute_inline(prod)
                changed = True
            except Exception:  # not inlinable (a reduction, an input): keep it
                pass


def cooperative_fetch(sch: s_tir.Schedule, block, threads: tuple, vector: int, under=None) -> None:
    """Spread the copy loops of a cache-read ``block`` over a thread block.

    ``threads`` is ``((extent, "threadIdx.y"), (extent, "threadIdx.x"), ...)``, outermost first; the
    innermost ``vector`` elements of each thread are vectorized (1: scalar copies). ``under``: the
    loop the block was computed at (its own loops are those below it).
    """
    loops = sch.get_loops(block)
    if under is not None:
        at = [i for i, lp in enumerate(loops) if sch.get(lp).same_as(sch.get(under))][0]
        own = loops[at + 1:]
    else:
        own = loops[-len(sch.get(block).writes[0].region):]
    fused = sch.fuse(*own) if len(own) > 1 else own[0]
    factors = [None] + [t for t, _ in threads] + ([vector] if vector > 1 else [])
    parts = sch.split(fused, factors)
    for loop, (_, tag) in zip(parts[1:], threads):
        sch.bind(loop, tag)
    if vector > 1:
        sch.vectorize(parts[-1])


def bind_elementwise(sch: s_tir.Schedule, block, threads: int = 256, vector: int = 1) -> None:
    """One thread per element (``vector`` per thread) over all loops of ``block``."""
    fused = sch.fuse(*sch.get_loops(block))
    if vector > 1:
        bx, tx, v = sch.split(fused, [None, threads, vector])
        sch.vectorize(v)
    else:
        bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def reindex_block(sch: s_tir.Schedule, name: str, index_fn, ndim: int) -> None:
    """Give block ``name`` (``ndim`` iteration axes) the iteration space ``index_fn(*axes)``
    (a bijective affine map), e.g. a 4-D conv output as the GEMM's 2-D ``(row, col)``."""
    from tvm import tirx

    index_map = tirx.IndexMap.from_func(lambda *i: list(index_fn(*i)), ndim=ndim, index_dtype="int64")
    sch.transform_block_layout(sch.get_sblock(name), index_map)


def schedule_rows_gpu(sch: s_tir.Schedule, threads: int) -> None:
    """One thread block per row for a row-wise kernel (softmax, layer_norm, row reductions).

    Every block of the function is indexed by the row first. The last block (the output) gets
    ``blockIdx.x`` = row and ``threads`` threads striding its other loops; element-wise
    intermediates are inlined; each reduction block is computed per row with its reduction loop
    bound to ``threadIdx.x``, which TVM lowers to a warp-shuffle tree (plus a shared-memory
    stage across warps when ``threads > 32``). Row statistics live in shared memory.
    """
    blocks = all_blocks(sch)
    out = blocks[-1]
    for b in blocks[:-1]:
        if not _is_reduction(sch, b):
            try:
                sch.compute_inline(b)
            except Exception:  # keep blocks that cannot be inlined
                pass
    loops = sch.get_loops(out)
    row = loops[0]
    rest = sch.fuse(*loops[1:]) if len(loops) > 2 else loops[1]
    _, tx = sch.split(rest, [None, threads])
    sch.bind(row, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    for b in reversed([b for b in all_blocks(sch)[:-1] if _is_reduction(sch, b)]):
        sch.compute_at(b, row, preserve_unit_loops=True)
        sch.set_scope(b, 0, "shared")
        red = sch.get_loops(b)[-1]
        _, rtx = sch.split(red, [None, threads])
        sch.bind(rtx, "threadIdx.x")


def all_blocks(sch: s_tir.Schedule) -> list:
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def _is_reduction(sch: s_tir.Schedule, block) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)
