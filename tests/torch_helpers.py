"""Shared helpers of the PyTorch-import tests: a module around a function, and one program run
by PyTorch and by ext."""
from __future__ import annotations

import torch
import tvm
from tvm import relax

import ext
from ext.frontend import from_torch


class Call(torch.nn.Module):
    """A module whose forward is ``fn(*inputs)``."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *x):
        return self.fn(*x)


def torch_and_ext(model, inputs, target):
    """``(ext's output, PyTorch's output)`` of ``model`` on ``inputs`` as NumPy arrays: ext's from
    ``from_torch`` + ``ext.build`` for ``target``."""
    with torch.no_grad():
        want = model(*inputs).numpy()
    ex = ext.build(from_torch(model, inputs), target)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(x.numpy()) for x in inputs]).numpy()
    return got, want
