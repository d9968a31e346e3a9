"""Index checks before ``take``: an index out of range is an ``IndexError``, not a segfault.

Both importers translate an embedding lookup or a ``Gather`` with runtime indices to
``relax.take(table, ids, mode="fast")``, which reads ``table[ids]`` unchecked: a token id past the
vocabulary (a tokenizer with a larger vocabulary than the model's) read outside the table and
crashed the process, and a negative one returned whatever memory held. PyTorch raises an
``IndexError`` for both (negative positions of indexing ops are wrapped before this, by
``torch_fixes`` and the ONNX importer).

``CheckTakeIndices`` (CPU) gives each such ``take`` a small kernel that copies the indices and
asserts ``0 <= i < size`` for each; the VM call then raises
``IndexError: ext: an index of take(...) is out of range [0, N)``. The copy reads the indices
once (token ids: a few hundred bytes). Constant indices are checked at compile time by
constant folding and left alone.
"""
from __future__ import annotations

import tvm
from tvm import relax, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm_ffi import structural_map

from .mutate import mutate_functions


def _check_func(shape, dtype: str, size: int, axis: int, data_shape, scalars=()):
    """PrimFunc ``checked = idx`` that asserts ``0 <= idx < size`` element by element; ``scalars``:
    the symbolic sizes its shape uses but cannot define (``n + 1``), passed as scalar arguments
    after the indices."""
    idx = te.placeholder(shape, dtype, "idx")
    out = te.compute(shape, lambda *i: idx(*i), name="checked")
    func = te.create_prim_func([idx, *scalars, out])
    message = (f"ext: index out of range: take from a tensor of shape {[int(d) if isinstance(d, tirx.IntImm) else str(d) for d in data_shape]} along axis "
               f"{axis} got an index outside [0, {size}) (an embedding id past the vocabulary?)")

    def guard(store):
        value = store.value
        ok = tirx.all(value >= tirx.const(0, dtype), value < tirx.const(size, dtype))
        # the FFI constructor directly: tirx.AssertStmt's Python wrapper passes (kind, condition)
        # to it in the wrong order in TVM 0.27
        check = tirx._ffi_api.AssertStmt(ok, tvm.ir.StringImm("IndexError"), [tvm.ir.StringImm(message)], None)
        return tirx.SeqStmt([check, store])

    body = structural_map(func.body, [(tirx.BufferStore, guard)])
    # opaque (op_pattern 8) and scheduled: FuseOps would fuse it with its consumers and the
    # fallback schedule then vectorized the assert (a vector branch condition LLVM rejects)
    return func.with_body(body).with_attr("tirx.is_scheduled", True).with_attr("op_pattern", 8) \
        .without_attr("global_symbol")


def _needs_check(call) -> tuple | None:
    """(index shape, index dtype, size, axis, data shape, scalars) of a ``take`` to check, or None
    (``scalars``: the index shape's symbolic sizes its shape does not define, ``_check_func``)."""
    if str(call.attrs.mode) != "fast":
        return None
    data, idx = call.args
    if isinstance(idx, tvm.ir.expr.Constant):
        return None
    dty, ity = data.ty, idx.ty
    if not (isinstance(dty, relax.TensorType) and isinstance(ity, relax.TensorType)) or dty.shape is None \
            or ity.shape is None or not str(ity.dtype).startswith("int"):
        return None
    axis = int(call.attrs.axis) if call.attrs.axis is not None else None
    if axis is None:  # take over the flattened data
        return None
    size = dty.shape[axis % len(dty.shape)]
    if not isinstance(size, tirx.IntImm):
        return None
    definable = relax.analysis.definable_tir_vars_in_type(ity)
    scalars = tuple(v for v in relax.analysis.tir_vars_in_type(ity) if not any(v.same_as(d) for d in definable))
    return tuple(ity.shape), str(ity.dtype), int(size), axis, tuple(dty.shape), scalars


@mutator
class _Check(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.mod_, self.made = mod, {}

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        key = _needs_check(call) if getattr(call.op, "name", None) == "relax.take" else None
        if key is None:
            return call
        shape, dtype, size, axis, data_shape, scalars = key
        name = (str(list(shape)), dtype, size, axis, str(data_shape))
        if name not in self.made:
            func = _check_func(list(shape), dtype, size, axis, data_shape, scalars)
            self.made[name] = self.builder_.add_func(func, "ext_check_take")
        args = [call.args[1], *(relax.expr.prim_value(v) for v in scalars)]
        checked = self.builder_.emit(relax.call_tir(self.made[name], args, relax.TensorType(shape, dtype)))
        return relax.Call(call.op, [call.args[0], checked], call.attrs)

    def run(self):
        return mutate_functions(self, self.mod_)


def CheckTakeIndices() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    """Module pass: ``take(x, ids)`` -> ``take(x, check(ids))`` (see the module docstring)."""
    return tvm.transform.module_pass(lambda mod, _ctx: _Check(mod).run(), opt_level=0, name="ext.CheckTakeIndices")
