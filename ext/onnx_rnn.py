"""ONNX's recurrent layers, ``LSTM``, ``GRU`` and ``RNN``, which TVM's ONNX importer lacks.

Speech and OCR models (CRNN, DeepSpeech-style encoders) exported from PyTorch hold them: the
import failed with "unsupported operator(s): LSTM". Each is unrolled over its static sequence
length, as ``from_torch`` imports ``nn.LSTM``: the input projection of every step is one matmul
(``X W^T + Wb``, all steps at once), then per step the recurrent matmul and the gates, in ONNX's
gate order (LSTM ``i o f c``, GRU ``z r h``) and its equations, forward, ``reverse`` or
``bidirectional``. Outputs ``Y`` ``[T, D, B, H]``, ``Y_h`` (and LSTM's ``Y_c``) ``[D, B, H]``;
``layout=1`` (batch first) is transposed at both ends. Refused by name: per-sequence lengths
other than the full length, peepholes, ``clip``, ``input_forget``, activations other than
the defaults (GRU's ``linear_before_reset`` either way is computed as ONNX defines it).
"""
from __future__ import annotations

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

#: gate counts per op
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": [b"Sigmoid", b"Tanh", b"Tanh"], "GRU": [b"Sigmoid", b"Tanh"], "RNN": [b"Tanh"]}


def _static(expr) -> list[int]:
    return [int(d) for d in expr.ty.shape]


def _refuse_unsupported(op: str, inputs, attr):
    seq_lens = inputs[4] if len(inputs) > 4 else None
    if seq_lens is not None:
        value = getattr(seq_lens, "value", None)
        full = _static(inputs[0])[attr.get("layout", 0)]  # T: axis 0, batch first axis 1
        if value is None or (value.numpy() != full).any():
            raise NotImplementedError(f"ONNX {op}: sequence_lens shorter than the sequence do not import")
    if op == "LSTM" and len(inputs) > 7 and inputs[7] is not None:
        raise NotImplementedError("ONNX LSTM: peephole weights (P) do not import")
    for name in ("clip", "input_forget"):
        if attr.get(name):
            raise NotImplementedError(f"ONNX {op}: attribute {name} does not import")
    acts = attr.get("activations")
    if acts is not None:
        n = len(DEFAULT_ACTIVATIONS[op])
        if [a.capitalize() if isinstance(a, bytes) else a for a in acts] != DEFAULT_ACTIVATIONS[op] * (len(acts) // n):
            raise NotImplementedError(f"ONNX {op}: activations {acts} do not import (defaults only)")


def _slice(x, axis: int, begin: int, end: int):
    return relax.op.strided_slice(x, [axis], [begin], [end])


def _cell(op: str, bb, x_proj, h, c, r, rb, hidden: int, linear_before_reset: bool):
    """One step of direction-local weights: ``x_proj`` ``[B, G*H]`` (input projection with its
    bias), state ``h`` (``c``) ``[B, H]``, ``r`` ``[G*H, H]``, ``rb`` ``[G*H]``. Returns (h, c)."""
    gate = lambda t, k: _slice(t, 1, k * hidden, (k + 1) * hidden)  # noqa: E731
    if op == "LSTM":
        g = bb.emit(relax.op.add(x_proj, relax.op.add(relax.op.matmul(h, relax.op.permute_dims(r)), rb)))
        i, o, f = (relax.op.sigmoid(gate(g, k)) for k in (0, 1, 2))
        c = bb.emit(relax.op.add(relax.op.multiply(f, c), relax.op.multiply(i, relax.op.tanh(gate(g, 3)))))
        return bb.emit(relax.op.multiply(o, relax.op.tanh(c))), c
    if op == "RNN":
        return bb.emit(relax.op.tanh(relax.op.add(x_proj, relax.op.add(relax.op.matmul(h, relax.op.permute_dims(r)), rb)))), None
    # GRU: z and r gates from the full recurrent product; the candidate per linear_before_reset
    zr = bb.emit(relax.op.sigmoid(relax.op.add(_slice(x_proj, 1, 0, 2 * hidden), relax.op.add(
        relax.op.matmul(h, relax.op.permute_dims(_slice(r, 0, 0, 2 * hidden))), _slice(rb, 0, 0, 2 * hidden)))))
    z, reset = gate(zr, 0), gate(zr, 1)
    r_h, rb_h = _slice(r, 0, 2 * hidden, 3 * hidden), _slice(rb, 0, 2 * hidden, 3 * hidden)
    if linear_before_reset:
        rec = relax.op.multiply(reset, relax.op.add(relax.op.matmul(h, relax.op.permute_dims(r_h)), rb_h))
    else:
        rec = relax.op.add(relax.op.matmul(relax.op.multiply(reset, h), relax.op.permute_dims(r_h)), rb_h)
    cand = bb.emit(relax.op.tanh(relax.op.add(gate(x_proj, 2), rec)))
    one = relax.const(1.0, str(r.ty.dtype))
    return bb.emit(relax.op.add(relax.op.multiply(relax.op.subtract(one, z), cand), relax.op.multiply(z, h))), None


def _recurrent(op: str, bb, inputs, attr):
    _refuse_unsupported(op, inputs, attr)
    inputs = list(inputs) + [None] * (8 - len(inputs))
    x, w, r, b, _, h0, c0 = inputs[:7]
    batch_first = attr.get("layout", 0) == 1
    if batch_first:  # X [B, T, I], states [B, D, H]
        x, h0, c0 = (None if v is None else relax.op.permute_dims(v, [1, 0, 2]) for v in (x, h0, c0))
    steps, batch, _ = _static(bb.normalize(x))
    dirs, gh, _ = _static(w)
    hidden = gh // GATES[op]
    dtype = str(w.ty.dtype)
    direction = attr.get("direction", b"forward")
    reverse = [direction == b"reverse"] if dirs == 1 else [False, True]
    zeros = relax.op.zeros((batch, hidden), dtype)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        w_d, r_d = relax.op.squeeze(_slice(w, 0, d, d + 1), [0]), bb.emit(relax.op.squeeze(_slice(r, 0, d, d + 1), [0]))
        if b is not None:
            b_d = relax.op.squeeze(_slice(b, 0, d, d + 1), [0])
            wb, rb = _slice(b_d, 0, 0, gh), bb.emit(_slice(b_d, 0, gh, 2 * gh))
        else:
            wb, rb = relax.const(0.0, dtype), relax.const(0.0, dtype)
        proj = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w_d)), wb))  # [T, B, G*H]
        h = relax.op.squeeze(_slice(h0, 0, d, d + 1), [0]) if h0 is not None else zeros
        c = relax.op.squeeze(_slice(c0, 0, d, d + 1), [0]) if c0 is not None else zeros
        out = [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse[d] else range(steps)):
            h, c = _cell(op, bb, relax.op.squeeze(_slice(proj, 0, t, t + 1), [0]), h, c, r_d, rb, hidden,
                         bool(attr.get("linear_before_reset", 0)))
            out[t] = h
        ys.append(relax.op.stack(out, axis=0))  # [T, B, H]
        hs.append(h)
        cs.append(c)
    y = bb.emit(relax.op.stack(ys, axis=1))  # [T, D, B, H]
    y_h, y_c = bb.emit(relax.op.stack(hs, axis=0)), (bb.emit(relax.op.stack(cs, axis=0)) if op == "LSTM" else None)
    if batch_first:  # Y [B, T, D, H], states [B, D, H]
        y = bb.emit(relax.op.permute_dims(y, [2, 0, 1, 3]))
        y_h = bb.emit(relax.op.permute_dims(y_h, [1, 0, 2]))
        y_c = bb.emit(relax.op.permute_dims(y_c, [1, 0, 2])) if y_c is not None else None
    return relax.Tuple([y, y_h] + ([y_c] if y_c is not None else []))


def _converter(op: str):
    class Recurrent(stock.OnnxOpConverter):
        @classmethod
        def _impl_v7(cls, bb, inputs, attr, params):
            return _recurrent(op, bb, inputs, attr)

    Recurrent.__name__ = op
    return Recurrent


CONVERTERS = {op: _converter(op) for op in GATES}

__all__ = ["CONVERTERS"]
