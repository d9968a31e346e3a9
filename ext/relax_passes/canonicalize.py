"""Canonicalization before fusion: inference-mode batch norm, constant
folding, importer reshapes around linear layers undone (``unflatten_linear``),
common-subexpression and dead-code elimination."""
from __future__ import annotations

import tvm
from tvm import relax

from .fold_constants import FoldConstants
from .unflatten_linear import UnflattenLinear


def Canonicalize() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    return tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        FoldConstants(),  # NumPy + one batched build; stock FoldConstant catches what is left
        relax.transform.FoldConstant(),
        UnflattenLinear(),
        relax.transform.EliminateCommonSubexpr(),
        relax.transform.DeadCodeElimination(),
    ], name="ext.Canonicalize")
