"""Model import: PyTorch (torch.export) and ONNX to a Relax module ``ext.build`` accepts.

Parameters are bound as constants by default, so constant folding, batch-norm
folding and weight pre-transforms (packing, Winograd filter transforms) happen
at compile time. With ``keep_params_as_input=True`` the weights stay function
parameters (attr ``num_input`` = the number of real inputs) and come back as a
list in ``main``'s order: ``ext.build`` lifts their transforms into
``main_transform_params`` and ``ext.Model`` runs that once per weight set, so
one executable serves any checkpoint of the same architecture. Unsupported
operators raise :class:`UnsupportedOperatorError` naming them.

Example
-------
>>> mod = ext.frontend.from_torch(model.eval(), (torch.randn(1, 3, 224, 224),))  # doctest: +SKIP
>>> ex = ext.build(mod, ext.target.cpu())                                           # doctest: +SKIP
>>> mod, weights = ext.frontend.from_torch(model.eval(), (x,), keep_params_as_input=True)  # doctest: +SKIP
>>> net = ext.Model(ext.build(mod)); net.set_params(weights); y = net(x)              # doctest: +SKIP
"""
from __future__ import annotations

import os
import re
import warnings

from tvm import relax

from .runner import torch_to_numpy
from .torch_complex import complex_constants_as_real
from .torch_fixes import as_pytorch_computes, decompose, exportable_experts
from .torch_importer import Importer


class UnsupportedOperatorError(ValueError):
    """The model uses operators the importer cannot translate; ``operators`` lists them."""

    def __init__(self, frontend: str, operators: list[str]):
        self.operators = sorted(operators)
        super().__init__(f"{frontend} import: unsupported operator(s): {', '.join(self.operators)}")


class MutationError(ValueError):
    """The model writes to an input or a buffer in place (``from_torch(refuse_mutations=True)``)."""


def from_torch(module, example_inputs: tuple, *, dynamic_shapes=None, keep_params_as_input: bool = False,
               refuse_mutations: bool = False):
    """Import a PyTorch ``nn.Module`` (put it in eval mode first) through ``torch.export``.

    Parameters
    ----------
    module : the ``torch.nn.Module``.
    example_inputs : tuple (or list) of example tensors, or one tensor (their shapes become the
        static input shapes); or a dict of keyword arguments (``model(**inputs)``, as for a
        transformers model), which ``main`` then takes positionally in the dict's order.
    keep_params_as_input : keep the weights as parameters of ``main`` after the inputs (attr
        ``num_input``) instead of constants: every ``nn.Parameter`` and every persistent
        floating-point buffer (batch-norm running statistics): what a checkpoint's
        ``state_dict`` holds, so a new checkpoint replaces all of them.
    refuse_mutations : raise ``MutationError`` when the forward writes to an input or a buffer
        in place. By default such writes are left out with a warning naming them: ``main``
        computes the outputs (those read after a write see it) but updates nothing in place.

    Returns
    -------
    A Relax ``IRModule`` whose ``main`` takes the inputs in order and returns the output
    (a single output is not wrapped in a tuple); with ``keep_params_as_input``,
    ``(mod, weights)``: the weights as NumPy arrays in the order ``main`` takes them
    (bfloat16 ones as ``ml_dtypes.bfloat16``). A half-precision model computes in float32
    inside, taking and returning its own dtypes.
    """
    if isinstance(example_inputs, list):  # a list of tensors, as zoo_model returns: the inputs
        example_inputs = tuple(example_inputs)
    if not isinstance(example_inputs, (tuple, dict)):
        example_inputs = (example_inputs,)
    if keep_params_as_input:
        module = _buffers_as_parameters(module)
    half = _half_dtype(module, example_inputs)
    if half is not None:
        # TVM's importer mistypes half precision: a float16 conv2d's result as float32 (then
        # the float16 bias cannot be added), Llama's float16 queries as float32 (a pass that
        # rebuilds the function then fails on its multiply with the float16 rotary table):
        # import the float32 copy and cast at the function's boundary
        return _computed_in_float32(module, example_inputs, half, dynamic_shapes, keep_params_as_input,
                                    refuse_mutations)
    mod, weights = _import(module, example_inputs, dynamic_shapes, keep_params_as_input, refuse_mutations)
    return (mod, [torch_to_numpy(w) for _, w in weights]) if keep_params_as_input else mod


def _import(module, example_inputs: tuple, dynamic_shapes, keep_params_as_input: bool, refuse_mutations: bool = False):
    """``(mod, weights)``: the module through ``torch.export`` and TVM's importer, and with
    ``keep_params_as_input`` the weight tensors in the order ``main`` takes them (keyed by
    their names in the state dict: ``[(name, tensor)]``)."""
    import torch

    _register_cache_pytrees(module)
    with torch.no_grad(), exportable_experts(module):
        try:
            ep = torch.export.export(module, (), example_inputs, dynamic_shapes=dynamic_shapes) if isinstance(
                example_inputs, dict) else torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)
        except Exception as err:
            if hasattr(err, "add_note"):  # Python 3.11+: the error stays PyTorch's, with a way on
                err.add_note("ext: torch.export needs the whole forward as one graph; torch.compile(model, "
                             "backend=\"ext\") compiles the pieces between what it cannot trace (README: torch.compile)")
            raise
        ep = decompose(ep)  # the importer's own first step, done here to fix what it imports
    as_pytorch_computes(ep)
    complex_constants_as_real(ep)
    _refuse_side_effects(ep)
    _check_mutations(ep, refuse_mutations)
    try:
        mod = Importer(ep).from_exported_program(ep, keep_params_as_input, True, False, None)
    except AssertionError as err:
        found = re.search(r"Unsupported function types \[(.*)\]", str(err))
        if found:
            ops = [s.strip().strip("'\"") for s in found.group(1).split(",") if s.strip()]
            raise UnsupportedOperatorError("PyTorch", ops) from None
        raise
    if not keep_params_as_input:
        return mod, []
    by_arg = {spec.arg.name: spec.target for spec in ep.graph_signature.input_specs if spec.target}
    mod = _without_params_attr(mod)
    return mod, [(by_arg[p.name], ep.state_dict[by_arg[p.name]]) for p in _weight_vars(mod)]


def _refuse_side_effects(ep) -> None:
    """Ops with side effects (``torch.linalg.inv``'s and ``solve``'s error checks,
    ``aten._linalg_check_errors``) reach the program as ``with_effects`` calls threaded by
    tokens, which TVM's importer stops at with "Unsupported input kind: InputKind.TOKEN":
    refused by name, with the ops beside them the importer has no translation for."""
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    effects = sorted({str(n.args[1]) for n in calls if "with_effects" in str(n.target)})
    if effects:
        table = Importer(ep).create_convert_map()
        missing = sorted({n.target.__name__ for n in calls if "with_effects" not in str(n.target)
                          and getattr(n.target, "__module__", None) != "_operator"
                          and n.target.__name__ not in table})
        raise UnsupportedOperatorError("PyTorch", [f"{e} (an op with side effects)" for e in effects] + missing)


def _check_mutations(ep, refuse: bool) -> None:
    """What the program writes in place (functionalized by the export into extra outputs, which
    TVM's importer drops): ``MutationError`` naming it when ``refuse``, else a warning."""
    kinds = ("BUFFER_MUTATION", "USER_INPUT_MUTATION")
    written = [f"{spec.target} ({spec.kind.name.lower().replace('_', ' ')})"
               for spec in ep.graph_signature.output_specs if spec.kind.name in kinds]
    if not written:
        return
    message = (f"the forward writes in place to {', '.join(written)}; ext's function computes its outputs "
               "without updating them")
    if refuse:
        raise MutationError(message)
    warnings.warn(message, stacklevel=4)


def _is_half(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)


def _dtype_name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def _register_cache_pytrees(module) -> None:
    """transformers' caches (``DynamicCache``, ``EncoderDecoderCache``: what a decoder called with
    its default ``use_cache=True`` returns) as pytree nodes, so ``torch.export`` flattens them into
    their key and value tensors, outputs of ``main`` after the logits; unregistered, the export
    failed ("Found DynamicCache in output, which is not a known type")."""
    try:
        from transformers import PreTrainedModel
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:  # no transformers, or one without its exporter
        return
    for sub in module.modules():
        if isinstance(sub, PreTrainedModel):
            register_cache_pytrees_for_model(sub)
            return


def _values(example_inputs) -> tuple:
    """The example tensors in the order ``main`` takes them (a dict's: its own order)."""
    return tuple(example_inputs.values()) if isinstance(example_inputs, dict) else example_inputs


def _half_dtype(module, example_inputs) -> str | None:
    """"float16"/"bfloat16" when the model's weights or inputs are half precision."""
    half = [t for t in (*module.parameters(), *module.buffers(), *_values(example_inputs)) if _is_half(t)]
    return _dtype_name(half[0]) if half else None


def _computed_in_float32(module, example_inputs, half: str, dynamic_shapes, keep_params_as_input: bool,
                         refuse_mutations: bool = False):
    """The half-precision ``module`` imported as its float32 copy, wrapped so ``main`` takes and
    returns half tensors where the original does (float32 math: more accurate, and on a CPU
    without half arithmetic what the kernels would do anyway; an output the original returns
    in float32, such as upcast logits, stays float32). Weights kept as parameters
    keep their own dtype too: the casts of weights go to the weight transform."""
    import copy

    widened = [x.float() if _is_half(x) else x for x in _values(example_inputs)]
    wide_inputs = dict(zip(example_inputs, widened)) if isinstance(example_inputs, dict) else tuple(widened)
    mod, wide_weights = _import(copy.deepcopy(module).float(), wide_inputs, dynamic_shapes, keep_params_as_input,
                                refuse_mutations)
    state = module.state_dict()
    weights = [state.get(name, w) for name, w in wide_weights]  # the checkpoint's own dtypes
    inner = mod["main"]
    # main's own parameters where the dtypes agree; a half parameter's cast binds the float32
    # parameter's variable itself, so the body (and its symbolic sizes) reads on unchanged
    params = [relax.Var(p.name, relax.TensorType(p.ty.shape, _dtype_name(x))) if _is_half(x) else p
              for p, x in zip(inner.params, (*_values(example_inputs), *weights))]
    bb = relax.BlockBuilder()
    # the attrs go along: num_input, and the symbols' bounds (a sort's lowering needs them)
    attrs = {k: inner.attrs[k] for k in inner.attrs.keys() if k != "global_symbol"} if inner.attrs else None
    with bb.function("main", params, attrs=attrs):
        with bb.dataflow():
            for p, v in zip(inner.params, params):
                if not v.same_as(p):
                    bb.emit_normalized(relax.VarBinding(p, bb.normalize(relax.op.astype(v, "float32"))))
            for block in inner.body.blocks:
                for binding in block.bindings:
                    bb.emit_normalized(binding)
            out = bb.emit_output(_narrow(bb, inner.body.body, _output_dtypes(module, example_inputs), half))
        bb.emit_func_output(out)
    mod = mod.clone()  # with the module's other functions
    mod["main"] = bb.get()["main"]
    mod = relax.transform.DeadCodeElimination()(mod)
    return (mod, [torch_to_numpy(w) for w in weights]) if keep_params_as_input else mod


def _narrow(bb, expr, want: list | None, half: str):
    """``expr`` (a tensor or nested tuples of them) with each float32 tensor cast to the dtype
    ``want`` gives its position (the original's outputs' dtypes, flattened in order; consumed),
    or to ``half`` where ``want`` is None."""
    ty = expr.ty
    if isinstance(ty, relax.TupleType):
        return bb.emit(relax.Tuple([_narrow(bb, bb.emit(relax.TupleGetItem(expr, i)), want, half)
                                    for i in range(len(ty.fields))]))
    dtype = half if want is None else want.pop(0) if want else None
    if isinstance(ty, relax.TensorType) and ty.dtype == "float32" and dtype not in (None, "float32"):
        return bb.emit(relax.op.astype(expr, dtype))
    return expr


def _output_dtypes(module, example_inputs) -> list | None:
    """The dtypes of ``module``'s outputs (flattened in order), found by running it on fake
    tensors (no arithmetic); None where that fails (every float32 result of the float32 copy
    is then taken for a half one)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_flatten, tree_map

    # what a forward stores on its modules (a cache of rotary tables, say) would be fake tensors
    # afterwards: every module's attributes, parameters and buffers are put back as they were
    saved = [(sub, dict(sub.__dict__), dict(sub._parameters), dict(sub._buffers)) for sub in module.modules()]
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
            fake = tree_map(lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t, example_inputs)
            out = module(**fake) if isinstance(fake, dict) else module(*fake)
        leaves = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        return [_dtype_name(t) for t in leaves]
    except Exception:  # noqa: BLE001 - a model fake tensors cannot run: see the docstring
        return None
    finally:
        for sub, attrs, params, buffers in saved:
            sub.__dict__.clear()
            sub.__dict__.update(attrs)
            for table, values in ((sub._parameters, params), (sub._buffers, buffers)):
                table.clear()
                table.update(values)


def _buffers_as_parameters(module):
    """A copy of ``module`` whose persistent floating-point buffers are (frozen) parameters:
    TVM's importer binds buffers as constants even with ``keep_params_as_input``, which would
    freeze a model's batch-norm statistics into the executable. Non-persistent buffers (a
    rotary table, a causal mask: derived, not in a checkpoint's ``state_dict``) stay constants;
    as parameters ``torch.export`` refuses them (they are not in its state dict)."""
    import copy

    import torch

    module = copy.deepcopy(module)
    for sub in module.modules():
        for name, buf in list(sub._buffers.items()):
            if buf is not None and buf.is_floating_point() and name not in sub._non_persistent_buffers_set:
                del sub._buffers[name]
                sub.register_parameter(name, torch.nn.Parameter(buf, requires_grad=False))
    return module


def _weight_vars(mod) -> list:
    from .relax_passes.lift_params import weight_params

    return weight_params(mod["main"])


def _without_params_attr(mod):
    """``main`` without the frontends' ``params`` attr (the weights' values: ext returns them
    instead, and they must not be part of the module the build cache hashes)."""
    func = mod["main"]
    if func.attrs and "params" in func.attrs:
        mod["main"] = func.without_attr("params")
    return mod


def from_onnx(model, shape_dict: dict | None = None, opset: int | None = None, *, keep_params_as_input: bool = False):
    """Import an ONNX model (a path or a loaded ``onnx.ModelProto``); initializers become constants,
    or with ``keep_params_as_input`` parameters of ``main`` after the graph inputs (attr
    ``num_input``): then returns ``(mod, weights)``, the initializers as NumPy arrays in the
    order ``main`` takes them."""
    import onnx
    import tvm
    from tvm.relax.frontend.onnx import from_onnx as _from_onnx

    from .onnx_fixes import integer_initializers_as_constants, prepare
    from .onnx_quantized import qdq_form
    from .onnx_importer import converters

    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(str(model))
    model = qdq_form(prepare(model, shape_dict))  # prepare copies: the caller's model stays as it was
    if keep_params_as_input:
        model = integer_initializers_as_constants(model)
    try:
        with converters():
            mod = _from_onnx(model, shape_dict=shape_dict, opset=opset, keep_params_in_input=keep_params_as_input)
    except tvm.error.OpNotImplemented as err:
        text = str(err).split("frontend ONNX:", 1)[-1].splitlines()[0]
        raise UnsupportedOperatorError("ONNX", [s.strip() for s in text.split(",") if s.strip()]) from None
    if not keep_params_as_input:
        return mod
    func = mod["main"]
    values = [t.numpy() for t in (func.attrs["params"] if func.attrs and "params" in func.attrs else [])]
    mod = _without_params_attr(mod)
    if func.attrs is None or "num_input" not in func.attrs:
        mod["main"] = mod["main"].with_attr("num_input", len(func.params) - len(values))
    weight_vars = _weight_vars(mod)
    shapes = [tuple(int(d) for d in v.ty.shape) for v in weight_vars]
    if len(values) != len(weight_vars) or any(v.shape != s for v, s in zip(values, shapes)):
        raise ValueError(f"ONNX import: the importer's {len(values)} initializers do not line up with main's "
                         f"{len(weight_vars)} weight parameters")
    return mod, values
