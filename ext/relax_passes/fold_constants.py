"""Constant folding without one LLVM build per folded operation.

Stock ``relax.transform.FoldConstant`` legalizes every operation whose inputs
are all constants and builds each resulting PrimFunc as its own LLVM module:
203 builds (16.6 s of a 35 s ResNet-18 build) for batch-norm folding
arithmetic and for the weight transforms of ext's kernels (packing, Winograd
filter transforms). ``FoldConstants`` computes the same constants in rounds:

1. element-wise arithmetic, re-layouts and casts are evaluated with NumPy
   (``NUMPY``: IEEE add/subtract/multiply/divide/sqrt, integer and bool index
   arithmetic (wrapping add/subtract/multiply, compares, logical ops, ``where``,
   in-range ``take``, integer casts) and pure data movement, so the results
   equal what the generated code computes, bit for bit), and so
   are the index grids an export decomposes gathers into, which stock folding
   leaves to run time: ``arange`` of integral bounds, ``concat``, ``index_tensor``
   with in-range indices (``NUMPY_TUPLE``) and ``full``; and ``shape_to_tensor`` of
   ``shape_of`` a tensor with a static shape (constant or not), which starts the index
   arithmetic an ONNX export does on shapes (RWKV's: 1,000 ops that stock FoldConstant
   built one LLVM module each for, 45 of a 52 s build);
2. every other operation with constant inputs (``call_tir`` to a weight
   transform, or a Relax op after legalization) joins one batch, and the batch is
   compiled as ONE module, for the same generic ``llvm`` target stock uses;
3. results become constants, which may make further bindings constant: repeat.

Compiled transforms are cached in-process by structural hash, so a second
build of a similar model reuses them. Anything that cannot be evaluated
(symbolic shapes, a PrimFunc scheduled for a GPU, an op that fails to
legalize) is left in place for the stock ``FoldConstant`` that runs after.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm_ffi import structural_hash

from ..topi_kernels import host
from .fold_numpy import CREATION_LIMIT, NUMPY, NUMPY_TUPLE, TUPLE_PARAMS, constant, contiguous, host_array, out_shape

_Const = tvm.ir.expr.Constant


def _static_tensor_type(ty) -> bool:
    return (isinstance(ty, relax.TensorType) and ty.shape is not None
            and all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values))


_BUILT: dict = {}  # structural hash of a PrimFunc -> (runtime module, symbol): kept for the process


def _build_batch(funcs: dict) -> dict:
    """Compile every PrimFunc of ``{key: func}`` not yet cached as one LLVM module.

    A function that does not build alone (e.g. scheduled for a GPU) is dropped;
    returns ``{key: callable}`` for those that built.
    """
    todo = {k: f for k, f in funcs.items() if k not in _BUILT}
    if todo:
        names = {k: f"ext_fold_{i}" for i, k in enumerate(todo)}
        target = tvm.target.Target({"kind": "llvm"})  # what stock FoldConstant evaluates with
        try:
            mod = tvm.IRModule({names[k]: f.with_attr("global_symbol", names[k]) for k, f in todo.items()})
            rt = tvm.compile(mod, target=target)
            for k in todo:
                _BUILT[k] = (rt, names[k])
        except Exception:  # one bad function spoils the batch: build the others one by one
            for k, f in todo.items():
                try:
                    rt = tvm.compile(tvm.IRModule({"f": f.with_attr("global_symbol", "f")}), target=target)
                    _BUILT[k] = (rt, "f")
                except Exception:
                    _BUILT[k] = None
    return {k: _BUILT[k] for k in funcs if _BUILT.get(k) is not None}


def _legalized(call) -> tuple | None:
    """``(PrimFunc, constant inputs)`` of a Relax op call whose legalization is one ``call_tir``."""
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        bb.emit_func_output(bb.emit(call))
    try:
        mod = relax.transform.LegalizeOps()(bb.get())
    except Exception:
        return None
    bindings = [b for blk in mod["main"].body.blocks for b in blk.bindings]
    if len(bindings) != 1 or not isinstance(bindings[0].value, relax.Call):
        return None
    value = bindings[0].value
    if value.op != tvm.ir.Op.get("relax.call_tir") or len(value.args) != 2:
        return None
    args = list(value.args[1].fields)
    if not all(isinstance(a, _Const) for a in args):
        return None
    return mod[value.args[0]], args


class _Folder:
    def __init__(self, mod: tvm.IRModule):
        self.mod = mod
        self.consts: dict = {}  # relax.Var -> numpy array
        self._arrays: dict = {}  # relax constant -> its read-only numpy view, made once (rounds revisit weights)
        self.shapes: dict = {}  # relax.Var bound to shape_of(a static tensor) -> its dims

    def _shape(self, expr) -> list | None:
        """The dims of a static shape: a ``ShapeExpr`` of integers or a variable bound to
        ``shape_of`` a tensor of static shape (ONNX's ``Shape`` -> index arithmetic -> ``Slice``)."""
        if isinstance(expr, relax.ShapeExpr):
            vals = list(expr.values)
            return [int(v) for v in vals] if all(isinstance(v, tvm.tirx.IntImm) for v in vals) else None
        return self.shapes.get(expr)

    def _value(self, expr):
        if isinstance(expr, _Const):
            return self._array(expr)
        if isinstance(expr, relax.Var):
            return self.consts.get(expr)
        return None

    def _array(self, const):
        if not hasattr(const.value, "numpy"):
            return None
        if const not in self._arrays:
            self._arrays[const] = host_array(const.value)
        return self._arrays[const]

    def _inputs(self, exprs) -> list | None:
        vals = [self._value(e) for e in exprs]
        return None if any(v is None for v in vals) else vals

    def round(self, func: relax.Function) -> bool:
        """One pass over ``func``'s bindings; True when something new was folded."""
        pending, before = [], len(self.consts)
        for block in func.body.blocks:
            for b in block.bindings:
                if not isinstance(b, relax.VarBinding) or b.var in self.consts:
                    continue
                self._visit(b.var, b.value, pending)
        self._run_batch(pending)
        return len(self.consts) > before

    def _visit(self, var, value, pending: list) -> None:
        if isinstance(value, _Const):
            if hasattr(value.value, "numpy"):
                self.consts[var] = self._array(value)
            return
        if isinstance(value, relax.Var) and value in self.consts:
            self.consts[var] = self.consts[value]
            return
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            return
        name = value.op.name
        if name == "relax.shape_of":  # of any tensor with a static shape, constant or not
            if _static_tensor_type(value.args[0].ty):
                self.shapes[var] = [int(d) for d in value.args[0].ty.shape.values]
            return
        if not _static_tensor_type(value.ty):
            return
        if name == "relax.shape_to_tensor":
            dims = self._shape(value.args[0])
            if dims is not None:
                self.consts[var] = np.array(dims, dtype=str(value.ty.dtype))
            return
        if name == "relax.call_tir":
            if len(value.args) != 2 or not isinstance(value.args[1], relax.Tuple):
                return
            inputs = self._inputs(value.args[1].fields)
            func = self.mod[value.args[0]]
            if inputs is not None and isinstance(func, tvm.tirx.PrimFunc):
                out = host.run(func, inputs)  # a NumPy twin of a weight transform, when it has one
                if out is not None and out.shape == out_shape(value) and out.dtype.name == str(value.ty.dtype):
                    self.consts[var] = out
                else:
                    pending.append((var, func, inputs, value.ty))
            return
        tensors = [i for i, a in enumerate(value.args) if isinstance(a.ty, relax.TensorType)]
        static_tuples = name in TUPLE_PARAMS
        if static_tuples:
            tensors = tensors[:1]
        elif any(isinstance(a.ty, relax.TupleType) for a in value.args):
            self._visit_tuple_call(var, value, pending)  # concat, index_tensor: a tuple of tensors
            return
        if not tensors:
            self._visit_creation(var, value)  # arange: static arguments only
            return
        inputs = self._inputs([value.args[i] for i in tensors])
        if inputs is None:
            return
        scalar_operand = any(isinstance(a.ty, tvm.ir.PrimType) for a in value.args)  # add(x, prim_value)
        if name in NUMPY and not scalar_operand:
            out = NUMPY[name](value, *inputs)
            if out is not None and out.shape == out_shape(value) and out.dtype.name == str(value.ty.dtype):
                self.consts[var] = out
                return
        if static_tuples:
            return  # not evaluated here: left to stock FoldConstant
        args = list(value.args)
        for i, v in zip(tensors, inputs):
            args[i] = constant(v)
        self._legalize(var, relax.Call(value.op, args, value.attrs, value.ty_args), value.ty, pending)

    def _legalize(self, var, call, ty, pending: list) -> None:
        leg = _legalized(call)
        if leg is not None:
            pending.append((var, leg[0], [host_array(c.value) for c in leg[1]], ty))

    def _visit_tuple_call(self, var, value, pending: list) -> None:
        """An op taking a tuple of tensors (``concat``, ``index_tensor``): folded when every field
        and every other tensor argument is constant."""
        args, arrays = [], []
        for a in value.args:
            if isinstance(a.ty, relax.TupleType):
                if not isinstance(a, relax.Tuple) or not all(isinstance(f.ty, relax.TensorType) for f in a.fields):
                    return
                vals = self._inputs(a.fields)
                if vals is None:
                    return
                args.append(relax.Tuple([constant(v) for v in vals]))
                arrays.append(vals)
            elif isinstance(a.ty, relax.TensorType):
                vals = self._inputs([a])
                if vals is None:
                    return
                args.append(constant(vals[0]))
                arrays.append(vals[0])
            else:
                args.append(a)
        twin = NUMPY_TUPLE.get(value.op.name)
        out = twin(value, *arrays) if twin is not None else None
        if out is not None and out.shape == out_shape(value) and out.dtype.name == str(value.ty.dtype):
            self.consts[var] = out
            return
        self._legalize(var, relax.Call(value.op, args, value.attrs, value.ty_args), value.ty, pending)

    def _visit_creation(self, var, value) -> None:
        """``arange`` of static integral bounds (the index grids of an export's decompositions,
        e.g. a bicubic resize of a position embedding): exact in any dtype up to 2^24 elements.
        Bigger grids stay run-time work rather than bytes in the binary (``CREATION_LIMIT``)."""
        if value.op.name != "relax.arange" or int(np.prod(out_shape(value))) > CREATION_LIMIT:
            return
        bounds = [getattr(a, "value", None) for a in value.args]
        if len(bounds) != 3 or not all(isinstance(b, (int, float)) and float(b).is_integer() for b in bounds):
            return
        start, end, step = (int(b) for b in bounds)
        out = np.arange(start, end, step).astype(str(value.ty.dtype))
        if out.shape == out_shape(value):
            self.consts[var] = out

    def _run_batch(self, pending: list) -> None:
        keys = [structural_hash(f) for _, f, _, _ in pending]
        built = _build_batch(dict(zip(keys, (f for _, f, _, _ in pending))))
        for key, (var, _, inputs, ty) in zip(keys, pending):
            if key not in built:
                continue
            rt, symbol = built[key]
            out = tvm.runtime.empty(tuple(int(d) for d in ty.shape), str(ty.dtype), tvm.cpu())
            rt[symbol](*[tvm.runtime.tensor(contiguous(i)) for i in inputs], out)
            self.consts[var] = host_array(out)


@mutator
class _Substitute(PyExprMutator):
    """Uses of folded variables become constants; their bindings are dropped."""

    def __init__(self, mod, consts: dict):
        super().__init__(mod)
        self.consts = {var: constant(v) for var, v in consts.items()}

    def visit_var_(self, op):
        return self.consts.get(op, op)

    def visit_dataflow_var_(self, op):
        return self.consts.get(op, op)

    def visit_var_binding_(self, binding) -> None:
        if binding.var not in self.consts:
            super().visit_var_binding_(binding)


def FoldConstants() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Fold constant bindings of every Relax function (see module doc)."""

    def transform(mod, _ctx):
        folder = _Folder(mod)
        funcs = [(gv, f) for gv, f in mod.functions_items()
                 if isinstance(f, relax.Function) and not (f.attrs and "Composite" in f.attrs)]
        for _gv, func in funcs:
            while folder.round(func):
                pass
        if not folder.consts:
            return mod
        sub = _Substitute(mod, folder.consts)
        for gv, func in funcs:
            sub.builder_.update_func(gv, sub.visit_expr(func))
        return sub.builder_.get()

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.FoldConstants")


def _leaves(expr):
    if isinstance(expr, relax.Tuple):
        for f in expr.fields:
            yield from _leaves(f)
    else:
        yield expr


def has_constant_call(mod: tvm.IRModule) -> bool:
    """Does a Relax function call an op on constants only (flattening tuple arguments), the
    only thing stock ``FoldConstant`` can fold?"""
    found = []

    def visit(e):
        if not found and isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            leaves = [x for a in e.args for x in _leaves(a) if not isinstance(x, tvm.ir.GlobalVar)]
            if any(isinstance(x, _Const) for x in leaves) and all(
                    isinstance(x, _Const) or type(x).__name__ in ("PrimValue", "ShapeExpr", "StringImm", "DataTypeImm")
                    for x in leaves):
                found.append(e)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function) and not (func.attrs and "Composite" in func.attrs):
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


def FoldRemainingConstants() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Stock ``FoldConstant`` for what ``FoldConstants`` left, run only when a call on constants
    remains: on a graph with nothing to fold it still took 1.7 s (an LSTM unrolled over 64 steps)."""

    def transform(mod, _ctx):
        return relax.transform.FoldConstant()(mod) if has_constant_call(mod) else mod

    return tvm.transform.module_pass(transform, opt_level=0, name="ext.FoldRemainingConstants")

