"""Built-in GEMM models: ``relu(x @ W + b)`` (or ``x @ W + b``) with constant weights."""
from __future__ import annotations

import numpy as np
from tvm import relax


def dense(M: int, N: int, K: int, *, activation: str | None = "relu", bias: bool = True,
          transpose_weight: bool = False, seed: int = 0, dtype: str = "float32"):
    """A Relax module ``main(x: (M, K)) -> act(x @ W + b)`` and its NumPy weights.

    ``transpose_weight`` stores W as (N, K) and multiplies by ``permute_dims(W)``,
    as PyTorch linear layers import. Returns ``(mod, params)`` with params
    ``{"w": (K, N) array as used, "b": (N,)}``.
    """
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(dtype)
    b = rng.standard_normal(N).astype(dtype)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((M, K), dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            if transpose_weight:
                wt = relax.op.permute_dims(relax.const(np.ascontiguousarray(w.T)), [1, 0])
                y = bb.emit(relax.op.matmul(x, bb.emit(wt)))
            else:
                y = bb.emit(relax.op.matmul(x, relax.const(w)))
            if bias:
                y = bb.emit(relax.op.add(y, relax.const(b)))
            if activation == "relu":
                y = bb.emit(relax.op.nn.relu(y))
            elif activation is not None:
                y = bb.emit(getattr(relax.op.nn, activation)(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), {"w": w, "b": b}


def numpy_reference(x: np.ndarray, params: dict, activation: str | None = "relu", bias: bool = True) -> np.ndarray:
    y = x @ params["w"]
    if bias:
        y = y + params["b"]
    return np.maximum(y, 0) if activation == "relu" else y


def mlp(batch: int = 32, sizes=(784, 512, 256, 10), seed: int = 0):
    """A small MLP (linear+relu layers, last layer linear) with PyTorch-style transposed weights."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((batch, sizes[0]), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
                w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype("float32")
                b = rng.standard_normal(n).astype("float32") * 0.1
                y = bb.emit(relax.op.matmul(y, bb.emit(relax.op.permute_dims(relax.const(w), [1, 0]))))
                y = bb.emit(relax.op.add(y, relax.const(b)))
                if i < len(sizes) - 2:
                    y = bb.emit(relax.op.nn.relu(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


__all__ = ["dense", "numpy_reference", "mlp"]
