"""Canonicalization before fusion: inference-mode batch norm, constant
folding, common-subexpression and dead-code elimination."""
from __future__ import annotations

import tvm
from tvm import relax


def Canonicalize() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    return tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        relax.transform.FoldConstant(),
        relax.transform.EliminateCommonSubexpr(),
        relax.transform.DeadCodeElimination(),
    ], name="ext.Canonicalize")
