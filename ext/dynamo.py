"""ext as a TorchDynamo backend: ``torch.compile(model, backend="ext")``.

TorchDynamo runs a model's Python and hands each straight-line piece of tensor work to the
backend as an FX graph; what it cannot trace (a branch on a tensor's value, a print, a call
into a library it does not know) breaks the graph and runs in Python between two compiled
graphs. So a model ``torch.export`` refuses as a whole (Longformer's data-dependent guard, a
``forward`` that prints) still runs, its graphs compiled by ext.

Each graph goes through ``ext.frontend.from_torch`` and ``ext.build`` once:

- Weights. Dynamo passes the module's parameters and buffers as graph inputs; they are bound
  as constants, so weight packing, batch-norm folding and Winograd filter transforms happen at
  compile time. Every call compares their storage and version counters with the ones built
  for: a weight written since (``load_state_dict``, an optimizer step, a new ``nn.Parameter``)
  rebuilds the graph.
- Shapes. Dynamo guards every graph: static sizes call it only with the shapes it was traced
  with, and sizes it marks dynamic (one that changed between calls, or
  ``torch.compile(dynamic=True)``) arrive as symbols, which go to ``torch.export`` as dynamic
  dimensions: one build serves every size dynamo lets through. Should the export specialize
  them, each new shape builds once (cached per shape).
- Inference. The outputs carry no gradient (a warning says so when autograd was on and a
  weight or input required grad); train with PyTorch.
- What ext cannot compile (an operator the importer lacks, a graph that writes to an input or a
  buffer in place, which ext's functions do not do) runs as PyTorch runs it, with a warning
  naming why; ``strict=True`` raises instead.

Options (``torch.compile(model, backend="ext", options={...})``, or ``make_backend(**options)``):
``target`` (default: this CPU), ``strict``, and any keyword of ``ext.build`` (``tuning_log``,
``exact_specials``, ``libraries``, ...).
"""
from __future__ import annotations

import dataclasses
import operator
import warnings

import torch
import tvm

from . import frontend, runner
from .pipeline import build

_VERSION = operator.attrgetter("_version")


class ExtCompileWarning(UserWarning):
    """A graph that runs in PyTorch instead of ext, or outputs without gradients."""


@dataclasses.dataclass(frozen=True)
class _Slot:
    """Where a graph argument comes from: the ``index``-th tensor input (``"input"``), a bound
    weight (``"weight"``), a size of a tensor input (``"size"``: input ``index``, dim ``dim``), or a
    value fixed per build (``"value"``: an int or a float the graph takes as an argument; a new
    value builds again)."""

    kind: str
    index: int = 0
    dim: int = 0


def _is_weight(node, example) -> bool:
    """A placeholder dynamo lifted from the module's parameters or buffers."""
    if isinstance(example, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    while source is not None:
        if "ParamBuffer" in type(source).__name__ or getattr(source, "member", None) in ("_parameters", "_buffers"):
            return True
        source = getattr(source, "base", None)
    return False


def _is_scalar(node) -> bool:
    """A Python float (or int) dynamo passes as a 0-d tensor and reads with ``.item()``
    (``torch.compile(dynamic=True)``: a layer norm's ``eps``)."""
    return bool(getattr(node.meta.get("grapharg"), "pass_arg_as_tensor", False))


def _symbol(size):
    """The symbol of a dynamic size (``s77``), or None for a fixed one."""
    if isinstance(size, torch.SymInt) and not size.node.is_nested_int():
        expr = size.node.expr
        return str(expr) if getattr(expr, "is_Symbol", False) else None
    return None


def _fake(node):
    return node.meta.get("example_value")


def _value(x):
    """A value slot's run-time value, as the build key and the build take it."""
    return x.item() if isinstance(x, torch.Tensor) else x


def _copy(gm, keep: list[int] | None = None, values: dict | None = None):
    """A copy of ``gm`` without dynamo's metadata (its fake tensors carry dynamo's shape
    environment, whose guards ``torch.export`` would call with names it lacks: "name 'L' is not
    defined"), computing only the outputs at ``keep`` when given; ``values`` (placeholder
    position -> number) replace the ``.item()`` reads of scalar arguments by constants."""
    graph = torch.fx.Graph()
    env = graph.graph_copy(gm.graph, {})
    outs = env if isinstance(env, (tuple, list)) else (env,)
    graph.output(env if keep is None else tuple(outs[i] for i in keep))
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for pos, number in (values or {}).items():
        for use in list(placeholders[pos].users):
            if use.op == "call_method" and use.target == "item":
                for user in list(use.users):
                    user.args = torch.fx.node.map_arg(user.args, lambda a, u=use: number if a is u else a)
                    user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda a, u=use: number if a is u else a)
                graph.erase_node(use)
    for node in graph.nodes:
        node.meta = {}
    if keep is not None:  # not for the whole graph: FX takes an unused `x.add_(1)` for dead code
        graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)


class _Bound(torch.nn.Module):
    """The graph with its weights bound, its size arguments read off the tensor inputs and its
    value arguments fixed: what ``torch.export`` traces. ``forward`` takes the graph's tensor
    inputs that are not weights, in order, and returns its tensor outputs."""

    def __init__(self, gm, slots: list[_Slot], weights: list, tensor_outputs: list[int], values: dict):
        super().__init__()
        self.gm, self.slots, self.tensor_outputs, self.values = gm, slots, tensor_outputs, values
        for i, w in enumerate(weights):
            self.register_buffer(f"w{i}", w.detach())

    def forward(self, *xs):
        args = []
        for pos, s in enumerate(self.slots):
            if s.kind == "input":
                args.append(xs[s.index])
            elif s.kind == "weight":
                args.append(getattr(self, f"w{s.index}"))
            elif s.kind == "size":
                args.append(xs[s.index].shape[s.dim])
            else:
                args.append(self.values[pos])
        outs = self.gm(*args)
        return tuple(outs[i] for i in self.tensor_outputs)


def to_tvm(x: torch.Tensor):
    """A tensor the VM reads in place (DLPack), copied first when not contiguous or 64-byte aligned."""
    x = x.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    if x.data_ptr() % 64:
        x = x.clone()
    return tvm.runtime.from_dlpack(x)


class CompiledGraph:
    """One dynamo graph compiled by ext; called as dynamo calls the graph. ``builds`` counts its
    ``ext.build`` calls, ``eager_reason`` says why it runs in PyTorch (None: it does not)."""

    def __init__(self, gm, example_inputs, target=None, strict: bool = False, **build_kwargs):
        self.gm, self.target, self.strict, self.build_kwargs = gm, target, strict, build_kwargs
        nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(nodes) != len(example_inputs):
            raise ValueError(f"graph has {len(nodes)} placeholders but {len(example_inputs)} example inputs")
        self.weights, self.inputs, self.slots, sizes = [], [], [], {}  # weights: placeholder positions
        self.symbolic_dims = []  # per tensor input: the dims dynamo made symbolic
        for pos, (node, x) in enumerate(zip(nodes, example_inputs)):
            if isinstance(x, torch.Tensor) and _is_weight(node, x):
                self.slots.append(_Slot("weight", index=len(self.weights)))
                self.weights.append(pos)
            elif isinstance(x, torch.Tensor) and not _is_scalar(node):
                fake = _fake(node)
                shape = fake.shape if isinstance(fake, torch.Tensor) else ()
                for d, size in enumerate(shape):
                    sizes.setdefault(_symbol(size), (len(self.inputs), d))
                self.symbolic_dims.append([d for d, size in enumerate(shape) if _symbol(size)])
                self.slots.append(_Slot("input", index=len(self.inputs)))
                self.inputs.append(pos)
            else:
                self.slots.append(None)  # a size or a number: below, once every input's sizes are known
        sizes.pop(None, None)
        self.dynamic = bool(sizes)
        for pos, (node, x) in enumerate(zip(nodes, example_inputs)):
            if self.slots[pos] is None:
                found = sizes.get(_symbol(_fake(node))) if isinstance(x, torch.SymInt) else None
                self.slots[pos] = _Slot("size", *found) if found else _Slot("value")
        self.value_positions = [pos for pos, s in enumerate(self.slots) if s.kind == "value"]
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.single = not isinstance(out_node.args[0], (tuple, list))
        outs = (out_node.args[0],) if self.single else out_node.args[0]
        self.tensor_outputs = [i for i, o in enumerate(outs)
                               if isinstance(o, torch.fx.Node) and isinstance(_fake(o), torch.Tensor)]
        self.other_outputs = [i for i in range(len(outs)) if i not in self.tensor_outputs]
        self.rest = _copy(gm, self.other_outputs) if self.other_outputs else None  # sizes, run in Python
        self.n_outputs = len(outs)
        self.eager_reason = None
        self.models: dict = {}  # build key -> ext.Model
        self.symbolic_failed = False
        self.builds = 0
        self.state = None  # built on the first call: an export inside dynamo's compile would run in
        # its tracing context (shape environment, guards named after its sources)

    # -- building ---------------------------------------------------------------------------------

    def _weights_state(self, args) -> tuple:
        """The weights' data pointers and version counters: what a build bound (65 us for
        MobileNetV2's 262 tensors; through their storages, 130)."""
        weights = [args[p] for p in self.weights]
        return tuple(map(torch.Tensor.data_ptr, weights)), tuple(map(_VERSION, weights))

    def _key(self, args) -> tuple:
        """What a build is for: the value arguments, and the input shapes unless symbolic."""
        values = tuple(_value(args[p]) for p in self.value_positions)
        if self.dynamic and not self.symbolic_failed:
            return values
        return values, tuple((tuple(args[p].shape), args[p].dtype) for p in self.inputs)

    def _model_for(self, args):
        model = self.models.get(self._key(args))
        if model is None:
            model = self._compile(args)
            self.models[self._key(args)] = model  # keyed after: a symbolic export that failed changes the key
        return model

    def _compile(self, args):
        values = {p: _value(args[p]) for p in self.value_positions}
        weights = [args[p] for p in self.weights]
        bound = _Bound(_copy(self.gm, values=values), self.slots, weights, self.tensor_outputs, values).eval()
        examples = tuple(args[p].detach() for p in self.inputs)
        mod = None
        if self.dynamic and not self.symbolic_failed:
            # only dynamo's symbolic dims: a dim marked AUTO that the export then fixed reached the
            # importer as a symbol named after its value ("2"), and shapes stopped matching
            dims = tuple({d: torch.export.Dim.AUTO for d in ds} or None for ds in self.symbolic_dims)
            try:
                mod = frontend.from_torch(bound, examples, dynamic_shapes=(dims,), refuse_mutations=True)  # *xs: one argument
            except (frontend.MutationError, frontend.UnsupportedOperatorError):
                raise
            except Exception:  # noqa: BLE001 - sizes the export cannot keep symbolic: one build per shape
                self.symbolic_failed = True
        if mod is None:
            mod = frontend.from_torch(bound, examples, refuse_mutations=True)
        self.builds += 1
        return runner.Model(build(mod, self.target, **{"verbose": False, **self.build_kwargs}))

    def _build(self, args) -> None:
        """(Re)build for the current weights; on failure run in PyTorch (``strict``: raise)."""
        self.state, self.eager_reason = self._weights_state(args), None
        self.models.clear()
        try:
            self._model_for(args)
        except Exception as err:  # noqa: BLE001 - the graph runs in PyTorch; the reason is shown
            if self.strict:
                raise
            first = str(err).splitlines()[0] if str(err) else ""
            self.eager_reason = f"{type(err).__name__}: {first}"
            warnings.warn(f"ext: a graph of {len(self.gm.graph.nodes)} nodes runs in PyTorch: {self.eager_reason}",
                          ExtCompileWarning, stacklevel=3)

    # -- running ----------------------------------------------------------------------------------

    def __call__(self, *args):
        if self.state is None or (self.weights and self._weights_state(args) != self.state):
            self._build(args)
        if self.eager_reason is not None:
            return self.gm(*args)
        inputs = [args[p] for p in self.inputs]
        if torch.is_grad_enabled() and any(args[p].requires_grad for p in (*self.inputs, *self.weights)):
            warnings.warn("ext: compiled graphs compute without autograd; their outputs carry no gradient "
                          "(run the model under torch.no_grad() or torch.inference_mode())",
                          ExtCompileWarning, stacklevel=2)
        got = self._model_for(args)(*(to_tvm(x) for x in inputs))
        results = [None] * self.n_outputs
        tensors = [got] if isinstance(got, tvm.runtime.Tensor) else list(got)
        for i, t in zip(self.tensor_outputs, tensors):
            results[i] = torch.from_dlpack(t)
        if self.rest is not None:
            for i, v in zip(self.other_outputs, self.rest(*args)):
                results[i] = v
        return results[0] if self.single else tuple(results)


def make_backend(**options):
    """A dynamo backend compiling with ``options`` (``target``, ``strict``, ``ext.build``'s
    keywords). Its ``graphs`` list holds every ``CompiledGraph`` it made, in order: their
    ``builds`` and ``eager_reason`` say what ran where."""

    def compile_graph(gm, example_inputs, **kwargs):
        graph = CompiledGraph(gm, list(example_inputs), **{**options, **(kwargs.get("options") or {})})
        compile_graph.graphs.append(graph)
        return graph

    compile_graph.graphs = []
    return compile_graph


#: ``torch.compile(model, backend="ext")`` (the ``torch_dynamo_backends`` entry point), or
#: ``backend=ext.dynamo.backend``
backend = make_backend()
