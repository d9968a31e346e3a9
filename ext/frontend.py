"""Model import: PyTorch (torch.export) and ONNX to a Relax module ``ext.build`` accepts.

Parameters are bound as constants, so constant folding, batch-norm folding and
weight pre-transforms (packing, Winograd filter transforms) happen at compile
time. Unsupported operators raise :class:`UnsupportedOperatorError` naming them.

Example
-------
>>> mod = ext.frontend.from_torch(model.eval(), (torch.randn(1, 3, 224, 224),))  # doctest: +SKIP
>>> ex = ext.build(mod, ext.target.cpu())                                           # doctest: +SKIP
"""
from __future__ import annotations

import os
import re


class UnsupportedOperatorError(ValueError):
    """The model uses operators the importer cannot translate; ``operators`` lists them."""

    def __init__(self, frontend: str, operators: list[str]):
        self.operators = sorted(operators)
        super().__init__(f"{frontend} import: unsupported operator(s): {', '.join(self.operators)}")


def from_torch(module, example_inputs: tuple, *, dynamic_shapes=None):
    """Import a PyTorch ``nn.Module`` (put it in eval mode first) through ``torch.export``.

    Parameters
    ----------
    module : the ``torch.nn.Module``.
    example_inputs : tuple of example tensors (their shapes become the static input shapes).

    Returns
    -------
    A Relax ``IRModule`` whose ``main`` takes the inputs in order and returns the output
    (a single output is not wrapped in a tuple).
    """
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    with torch.no_grad():
        ep = torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)
    try:
        return from_exported_program(ep, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    except AssertionError as err:
        found = re.search(r"Unsupported function types \[(.*)\]", str(err))
        if found:
            ops = [s.strip().strip("'\"") for s in found.group(1).split(",") if s.strip()]
            raise UnsupportedOperatorError("PyTorch", ops) from None
        raise


def from_onnx(model, shape_dict: dict | None = None, opset: int | None = None):
    """Import an ONNX model (a path or a loaded ``onnx.ModelProto``); initializers become constants."""
    import onnx
    import tvm
    from tvm.relax.frontend.onnx import from_onnx as _from_onnx

    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(str(model))
    try:
        return _from_onnx(model, shape_dict=shape_dict, opset=opset, keep_params_in_input=False)
    except tvm.error.OpNotImplemented as err:
        text = str(err).split("frontend ONNX:", 1)[-1].splitlines()[0]
        raise UnsupportedOperatorError("ONNX", [s.strip() for s in text.split(",") if s.strip()]) from None
