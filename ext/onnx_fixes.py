"""ONNX-level rewrites before TVM's ONNX importer translates a model.

Exporters write shape arithmetic into the graph: ``Shape -> Gather -> Concat -> Reshape``,
pads and masks computed from sizes, ``ConstantOfShape`` of a computed shape. TVM's importer
folds some of it and rejects the rest: "Dynamic pads are not supported yet" (RWKV, Funnel,
MobileBERT), a ``ConstantOfShape`` of the empty shape (every transformers encoder exported with
an attention mask computed from the input: BERT-likes, RoFormer, BigBird, ...), reshapes of
tensors whose shape it lost (Swin V2, DeBERTa).

``fold_static_shapes`` evaluates, once at import, every node whose value is known before any
input arrives: its inputs are initializers, constants or already-folded values, or it is
``Shape``/``Size`` of a tensor whose shape is fully static after ONNX shape inference. Each
such node becomes a ``Constant`` (evaluated by ONNX's reference implementation, which is the
specification), then nodes nothing reads any more are dropped. What depends on input values or
on symbolic sizes is left to the importer as it was. An ``If`` on a known condition becomes
the branch it takes.

``grid_in_data_type``: ONNX's ``GridSample`` may take a grid of another floating type than its
data (PyTorch's exporter gives Deformable DETR a float64 grid); Relax's ``grid_sample`` then
failed to build (float64 times float32). The grid is cast to the data's type.

``integer_initializers_as_constants``: with the weights kept as parameters, TVM's importer
makes every initializer a parameter, the integer ones too. PyTorch's dynamo exporter writes
a reshape's target shape as an initializer, and a reshape to a parameter's values has no
static shape (BERT from that exporter failed to import: "Reshape expects the input tensor to
have known shape"). Integer and bool initializers (shapes, axes, indices: no checkpoint holds
them) become ``Constant`` nodes; floating-point ones stay parameters.

``prepare(model, input_shapes)`` runs the first two; ``ext.frontend.from_onnx`` calls it, and
the third where the weights are kept as parameters.
"""
from __future__ import annotations

#: operators never evaluated at import: random, or with side effects of their own
NOT_FOLDED = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
              "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "Optional"}
#: a folded value larger than this many elements stays a computation (the importer folds it too)
MAX_FOLDED_ELEMENTS = 1 << 20
#: passes of fold + shape inference at most; a pass stops the loop when it folds nothing. A
#: chain of layers whose padding is computed from the previous layer's shape (EnCodec's
#: encoder: Shape -> Ceil -> Pad per conv) takes a pass per layer: 8 left 5 Ceil nodes of
#: shape arithmetic for the importer, which rejects Ceil on a size
MAX_ROUNDS = 256


def prepare(model, input_shapes: dict | None = None):
    """``model`` with ``grid_in_data_type`` and ``fold_static_shapes`` applied (a copy)."""
    return grid_in_data_type(fold_static_shapes(model, input_shapes))


def integer_initializers_as_constants(model):
    """``model`` (in place) with its non-floating-point initializers as ``Constant`` nodes."""
    import onnx

    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    graph = model.graph
    fixed = [t for t in graph.initializer if t.data_type not in floats]
    if not fixed:
        return model
    names = {t.name for t in fixed}
    nodes = [onnx.helper.make_node("Constant", [], [t.name], value=t) for t in fixed]
    _keep(graph.initializer, lambda t: t.name not in names)
    _keep(graph.input, lambda v: v.name not in names)  # IR < 4 lists initializers as inputs
    nodes.extend(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def grid_in_data_type(model):
    """``GridSample(X, grid)`` with ``grid`` cast to ``X``'s element type where they differ
    (in place; types from ONNX shape inference)."""
    import onnx

    if not any(n.op_type == "GridSample" for n in model.graph.node):
        return model  # nothing to cast: no shape inference pass over the model
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - no types known: nothing to compare
        return model
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    nodes = []
    for node in model.graph.node:
        data, grid = (types.get(node.input[0]), types.get(node.input[1])) if node.op_type == "GridSample" else (0, 0)
        if data and grid and data != grid:
            cast = node.input[1] + "_as_data_type"
            nodes.append(onnx.helper.make_node("Cast", [node.input[1]], [cast], to=data))
            node.input[1] = cast
        nodes.append(node)
    _keep(model.graph.node, lambda n: False)
    model.graph.node.extend(nodes)
    return model


def fold_static_shapes(model, input_shapes: dict | None = None):
    """A copy of ``model`` (an ``onnx.ModelProto``) with its input-independent values folded;
    ``input_shapes`` (``{input name: shape}``, as ``from_onnx``'s ``shape_dict``) fixes the
    integer sizes it gives first."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # in memory: no 2 GB serialization limit
    model = copy
    for inp in model.graph.input:
        for dim, size in zip(inp.type.tensor_type.shape.dim, (input_shapes or {}).get(inp.name, ())):
            if isinstance(size, int):
                dim.dim_value = size
    for _ in range(MAX_ROUNDS):  # a folded shape lets shape inference find the next static shapes
        if not _fold_once(model):
            break
    return model


def _fold_once(model) -> int:
    """Fold what is known in one pass over ``model`` (in place); the number of nodes folded."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - without inferred shapes only constants fold
        inferred = model
    static = {vi.name: _static_shape(vi) for vi in (*inferred.graph.input, *inferred.graph.value_info,
                                                    *inferred.graph.output)}
    known = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=17)
    nodes, folded = [], 0
    for node in graph.node:
        branch = _taken_branch(node, known)
        if branch is not None:  # an If on a known condition: the branch's nodes in its place
            nodes.extend(branch)
            folded += 1
            continue
        values = _evaluate(node, known, static, opset)
        if values is None:
            nodes.append(node)
            continue
        known.update(zip(node.output, values))
        if node.op_type != "Constant":
            folded += 1
        nodes.extend(onnx.helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(v), name))
                     for name, v in zip(node.output, values) if name)
    if folded:
        del graph.node[:]
        graph.node.extend(_live(nodes, {o.name for o in graph.output}))
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        read |= set().union(*[_outer_reads(n) for n in graph.node])
        unread = {t.name for t in graph.initializer if t.name not in read}
        _keep(graph.initializer, lambda t: t.name not in unread)
        _keep(graph.input, lambda v: v.name not in unread)
    return folded


def _keep(field, want) -> None:
    """Keep the items of a repeated protobuf field that ``want`` accepts."""
    items = [x for x in field if want(x)]
    del field[:]
    field.extend(items)


def _static_shape(value_info):
    t = value_info.type.tensor_type
    if not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim):
        return None
    return [d.dim_value for d in t.shape.dim]


def _evaluate(node, known: dict, static: dict, opset: int):
    """The node's output values when they are known before the inputs arrive, else None."""
    import numpy as np

    if node.domain not in ("", "ai.onnx") or node.op_type in NOT_FOLDED or any(a.g.node or a.graphs
                                                                                  for a in node.attribute):
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] not in known:
        shape = static.get(node.input[0])
        if shape is None:
            return None
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        attrs = {a.name: a.i for a in node.attribute}
        return [np.array(shape, dtype=np.int64)[attrs.get("start", 0):attrs.get("end", len(shape)) or None]]
    if any(name and name not in known for name in node.input):
        return None
    try:
        values = _run_node(node, known, opset)
    except Exception:  # noqa: BLE001 - what the reference cannot evaluate stays for the importer
        return None
    if any(np.asarray(v).size > MAX_FOLDED_ELEMENTS for v in values):
        return None
    return values


def _run_node(node, known: dict, opset: int) -> list:
    import onnx
    from onnx.reference import ReferenceEvaluator

    inputs = [name for name in node.input if name]
    graph = onnx.helper.make_graph([node], "fold",
                                   [onnx.helper.make_empty_tensor_value_info(n) for n in inputs],
                                   [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {n: known[n] for n in inputs})


def _taken_branch(node, known: dict):
    """An ``If`` whose condition is known: the nodes of the branch it takes, then ``Identity``
    nodes from the branch's outputs to the ``If``'s; else None."""
    import numpy as np
    import onnx

    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or node.input[0] not in known:
        return None
    name = "then_branch" if bool(np.asarray(known[node.input[0]]).reshape(-1)[0]) else "else_branch"
    body = next(a.g for a in node.attribute if a.name == name)
    if body.initializer or body.sparse_initializer:
        return None
    return list(body.node) + [onnx.helper.make_node("Identity", [b.name], [o])
                              for b, o in zip(body.output, node.output) if o]


def _outer_reads(node) -> set:
    """Names a node's subgraphs (If/Loop/Scan bodies) read from the enclosing scope, or define."""
    names = set()
    for attr in node.attribute:
        for body in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for inner in body.node:
                names.update(i for i in inner.input if i)
                names |= _outer_reads(inner)
            names.update(o.name for o in body.output)
    return names


def _live(nodes: list, outputs: set) -> list:
    """``nodes`` without those whose outputs nothing reads (graph outputs count as read)."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
            needed |= _outer_reads(node)
    return kept[::-1]
