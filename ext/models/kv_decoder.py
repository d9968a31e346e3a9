"""GPT-2-style language models with the key/value cache as explicit tensors.

``transformers``' own ``GPT2LMHeadModel(..., use_cache=True)`` keeps its cache in a Python
object and builds its attention mask from it; ``torch.export`` + TVM's importer cannot take
that (``Concat expects all input tensors to have same ndim``). The two wrappers here run the
*same* modules (same weights, same blocks) but take and return the cache as tensors:

- :class:`Prefill` ``(input_ids[1, T]) -> (logits[1, T, V], k0, v0, k1, v1, ...)``: the prompt,
  causal, no past;
- :class:`DecodeStep` ``(input_ids[1, 1], k0, v0, ...) -> (logits[1, 1, V], k0', v0', ...)``: one
  token against a past of any length ``P`` (each ``k``/``v`` is ``[1, heads, P, head_dim]``; the
  new ones have ``P + 1`` rows). Exported with ``P`` symbolic, one executable serves every past
  length up to the model's context.

:func:`export_decoder` imports either through ``ext.frontend.from_torch`` with the weights as
run-time parameters, and :func:`greedy` runs a prefill + decode loop on ext executables.
"""
from __future__ import annotations

import numpy as np
import torch


class _TensorCache:
    """What a GPT-2 attention layer needs of a cache (``update``): concatenate the layer's past
    with the new keys/values along the sequence and remember the result as the layer's present."""

    def __init__(self, past: list | None, layers: int):
        self.past = past
        self.present = [None] * layers

    def update(self, key, value, layer_idx, *args, **kwargs):
        if self.past is not None:
            pk, pv = self.past[layer_idx]
            key, value = torch.cat([pk, key], dim=2), torch.cat([pv, value], dim=2)
        self.present[layer_idx] = (key, value)
        return key, value


class _Wrapper(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        if not (hasattr(lm, "transformer") and hasattr(lm.transformer, "wpe") and hasattr(lm, "lm_head")):
            raise TypeError(f"{type(lm).__name__} is not a GPT-2-style LM (transformer.wte/wpe/h/ln_f + lm_head)")
        lm.config._attn_implementation = "eager"  # matmul -> softmax -> matmul, ext's attention candidates
        self.lm = lm
        self.eval()  # an exporter that restores the wrapper's mode must not put dropout back on

    def _run(self, input_ids, past, mask):
        body = self.lm.transformer
        cache = _TensorCache(past, len(body.h))
        start = 0 if past is None else past[0][0].shape[2]
        positions = torch.arange(input_ids.shape[1]) + start
        hidden = body.wte(input_ids) + body.wpe(positions)[None]
        for block in body.h:
            hidden = block(hidden, cache, mask)
        logits = self.lm.lm_head(body.ln_f(hidden))
        return (logits, *[t for kv in cache.present for t in kv])


class Prefill(_Wrapper):
    """``(input_ids[1, T]) -> (logits[1, T, V], k0, v0, k1, v1, ...)``: the prompt, causal."""

    def forward(self, input_ids):
        T = input_ids.shape[1]
        blocked = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        mask = torch.zeros(T, T).masked_fill(blocked, torch.finfo(torch.float32).min)[None, None]
        return self._run(input_ids, None, mask)


class DecodeStep(_Wrapper):
    """``(input_ids[1, 1], k0, v0, ...) -> (logits[1, 1, V], k0', v0', ...)``: one token against
    a past of any length (no mask: the new token sees every earlier one)."""

    def forward(self, input_ids, *flat_past):
        past = [(flat_past[2 * i], flat_past[2 * i + 1]) for i in range(len(flat_past) // 2)]
        return self._run(input_ids, past, None)


def cache_shape(lm, past: int) -> tuple:
    """Shape of one layer's key (or value) cache for a past of ``past`` tokens (batch 1)."""
    cfg = lm.config
    return (1, cfg.n_head, past, cfg.n_embd // cfg.n_head)


def random_past(lm, past: int, seed: int = 0) -> list:
    """``2 * layers`` random cache tensors (k0, v0, k1, ...) of ``past`` tokens."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(cache_shape(lm, past), generator=gen) for _ in range(2 * lm.config.n_layer)]


def torch_cache(lm, flat_past):
    """``transformers``' own cache object holding the explicit tensors (k0, v0, k1, ...)."""
    from transformers import DynamicCache

    pairs = [(flat_past[2 * i], flat_past[2 * i + 1]) for i in range(len(flat_past) // 2)]
    return DynamicCache(ddp_cache_data=pairs, config=lm.config)


def export_decoder(lm, kind: str, *, tokens: int = 128, max_past: int | None = None):
    """Import the prefill (``kind="prefill"``, ``tokens`` long) or the decode step
    (``kind="decode"``, past length symbolic in ``1..max_past``, default the context minus one)
    with the weights as run-time parameters: ``(mod, weights)`` as ``ext.frontend.from_torch``."""
    from ..frontend import from_torch

    if kind == "prefill":
        ids = torch.zeros(1, tokens, dtype=torch.long)
        return from_torch(Prefill(lm), (ids,), keep_params_as_input=True)
    if kind != "decode":
        raise ValueError(f"kind must be 'prefill' or 'decode', got {kind!r}")
    top = (max_past or lm.config.n_positions - 1)
    past_dim = torch.export.Dim("past", min=1, max=top)
    past = random_past(lm, 7)
    shapes = (None, tuple({2: past_dim} for _ in past))  # forward(input_ids, *flat_past)
    ids = torch.zeros(1, 1, dtype=torch.long)
    return from_torch(DecodeStep(lm), (ids, *past), dynamic_shapes=shapes, keep_params_as_input=True)


def greedy(prefill, decode, prompt, steps: int) -> list[int]:
    """Greedy generation on ext executables: ``prefill`` and ``decode`` are ``ext.Model`` s (or
    any callables with the wrappers' signatures) built from :func:`export_decoder`; ``prompt``
    is a ``[1, T]`` integer array. The cache stays in the executables' tensors between steps.
    Returns the ``steps`` generated token ids."""
    out = prefill(np.asarray(prompt, dtype="int64"))
    tokens = []
    for _ in range(steps):
        logits, cache = out[0].numpy(), list(out)[1:]
        tokens.append(int(np.argmax(logits[0, -1])))
        out = decode(np.array([[tokens[-1]]], dtype="int64"), *cache)
    return tokens


def torch_greedy(lm, prompt, steps: int) -> list[int]:
    """The same loop in PyTorch eager with ``transformers``' own cache (``use_cache=True``)."""
    ids = torch.as_tensor(np.asarray(prompt, dtype="int64"))
    tokens, cache = [], None
    with torch.no_grad():
        for _ in range(steps):
            out = lm(ids, cache=cache, use_cache=True)
            cache = out.cache
            tokens.append(int(out.logits[0, -1].argmax()))
            ids = torch.tensor([[tokens[-1]]])
    return tokens
