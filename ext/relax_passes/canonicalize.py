"""Canonicalization before fusion: inference-mode batch norm, float64 norms as arithmetic
(``wide_norms``), conv1d as a conv2d of
height 1 (``conv1d``: every conv2d candidate and epilogue then serves it), conv3d as a conv2d
over the output frames (``conv3d``), a transposed conv2d as a conv2d (``conv_transpose``), the two clips
of an exported ReLU6 as one (``merge_clips``), a pool whose one window covers the image as a
mean or max over H and W (``global_pool``), a nearest resize to its own
size and a cast to its input's dtype dropped (``identity_resize``), GELU's tanh form written out as one op
(``gelu_tanh``), ``log(sigmoid(x))`` without underflow (``log_sigmoid``), constant folding, importer reshapes around
linear layers undone (``unflatten_linear``), a constant per-channel scale and shift after a
conv2d or matmul folded into its weight and bias (``fold_affine``), a top-1 whose indices nobody reads as a
max reduction (``top_one``), float ``!=`` and negated comparisons true at NaN (``nan_compare``), sorts that put NaN last (``nan_order``), common-subexpression elimination (also before folding), bindings
canonicalized (a tuple's known field read directly) and dead-code elimination."""
from __future__ import annotations

import tvm
from tvm import relax

from .bool_arith import BoolArithmetic
from .conv1d import Conv1dToConv2d
from .conv3d import Conv3dToConv2d
from .conv_transpose import ConvTransposeToConv2d
from .fold_affine import FoldAffineIntoAnchor
from .fold_constants import FoldConstants, FoldRemainingConstants
from .gelu_tanh import RecognizeGeluTanh
from .global_pool import GlobalPoolToReduce
from .identity_resize import DropIdentityCast, DropIdentityResize
from .log_sigmoid import StableLogSigmoid
from .merge_clips import MergeClips
from .nan_compare import NaNSafeCompare
from .nan_order import NaNLastSort
from .pool3d import MaxPool3dToPool2d
from .slice_bounds import ProveSliceBounds
from .top_one import TopOneToReduce
from .lifted import LiftedPass
from .unflatten_linear import UnflattenLinear
from .wide_norms import DecomposeWideNorms


def Canonicalize() -> tvm.transform.Pass:  # noqa: N802 - TVM pass naming
    return tvm.transform.Sequential([
        ProveSliceBounds(),  # before anything legalizes: a clamp's min() hides every shape after it
        relax.transform.DecomposeOpsForInference(),
        DecomposeWideNorms(),  # a float64 layer/group/instance norm, which TOPI refuses, as arithmetic
        StableLogSigmoid(),  # before NaNSafeCompare: the minimum it writes keeps a NaN
        NaNSafeCompare(),  # before anything fuses a negated float comparison into a kernel
        BoolArithmetic(),  # after it: the reflexive compares it rewrites leave bool products
        Conv1dToConv2d(),  # before folding: the weight reshapes it adds fold with the rest
        Conv3dToConv2d(),  # likewise: a conv2d over the output frames
        MaxPool3dToPool2d(),  # two 2-D max pools: ext's NaN-keeping pool kernels
        ConvTransposeToConv2d(),  # likewise: a 1x1 conv + depth to space, or a conv of the dilated input
        MergeClips(),
        GlobalPoolToReduce(),  # EfficientNet's AvgPool2d(1280, ceil_mode=True) head: a mean
        DropIdentityResize(),  # a nearest resize to its own size: the input
        DropIdentityCast(),  # a cast to its input's own dtype: the input
        RecognizeGeluTanh(),  # gelu_new written out: one op, an epilogue step
        # the same op on the same constant, once: an unrolled LSTM transposes its weights at
        # every step (129 transposes of 4 MB, each folded, copied and packed on its own); the
        # aliases it leaves (``lv2 = lv1``) read through, or each would fold to a copy
        relax.transform.EliminateCommonSubexpr(),
        relax.transform.CanonicalizeBindings(),
        FoldConstants(),  # NumPy + one batched build; stock FoldConstant catches what is left
        FoldRemainingConstants(),
        UnflattenLinear(),
        relax.transform.EliminateCommonSubexpr(),
        # a batch norm left unfolded (DenseNet's norm -> relu -> conv) decomposes to
        # ``(y, mean, var)[0]``: the tuple stopped FuseOps at the affine, so the relu ran alone
        relax.transform.CanonicalizeBindings(),
        # reshape(reshape(x)) -> reshape(x), a reshape to the same shape dropped: a chain of them
        # fused into one kernel composed its div/mod indices, doubling per reshape (20: 79 s)
        LiftedPass(relax.transform.RemoveRedundantReshape()),  # types only: weights lifted out
        relax.transform.DeadCodeElimination(),
        TopOneToReduce(),  # torch.max(x, dim).values: a max, once the unread indices are gone
        NaNLastSort(),  # the sorts left: NaN above every number
        # after the reshapes around linear layers are gone, constants folded and a decomposed
        # batch norm's tuple read through (and dropped: a second reader ends a chain)
        FoldAffineIntoAnchor(),
        relax.transform.DeadCodeElimination(),  # the chains' old bindings
    ], name="ext.Canonicalize")
