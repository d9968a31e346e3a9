"""A model zoo built from Hugging Face ``transformers`` configs (random seeded weights, no downloads).

Why: the handful of hand-written models in ``ext/models`` only exercise the ops their
author thought of. Real architectures bring the rest (depthwise and grouped convs,
squeeze-excitation, layer scale, GRN, relative position biases, RoPE, GQA, gelu_new,
shifted windows, strided audio convs...), so ``scripts/zoo.py`` and ``tests/test_zoo.py``
import them through ``ext.frontend.from_torch`` and compare ``ext.build`` with PyTorch.

Every model is constructed from its ``transformers`` Config class (never ``from_pretrained``),
with the library's own initialisation under ``torch.manual_seed(seed)``, then:

* BatchNorm running statistics are randomised (mean ~ N(0, 0.1), var ~ U(0.5, 1.5)) and so
  are the BN affine parameters (weight ~ U(0.5, 1.5), bias ~ N(0, 0.1)): freshly initialised
  BN layers are identities, which would let a broken BN fold pass unnoticed;
* attention uses the ``eager`` implementation (matmul + softmax, which ext's kernels handle;
  SDPA would go to TVM's generic attention op);
* the module is wrapped so ``forward(*inputs)`` returns one tensor (``logits`` or
  ``last_hidden_state``) and put in eval mode.

``quick=True`` gives a small config of the same architecture (one or two layers per stage,
narrow, mostly 32 px images, 17 tokens) that imports and builds in seconds, for the tests.

Example
-------
>>> from ext.models.zoo import zoo_model, ZOO              # doctest: +SKIP
>>> model, inputs = zoo_model("resnet18", quick=True)       # doctest: +SKIP
>>> model(*inputs).shape                                     # doctest: +SKIP
torch.Size([1, 10])
"""
from __future__ import annotations

import dataclasses
from typing import Callable

#: what a factory returns: the Hugging Face model, its example inputs, the output field to return
Built = tuple  # (transformers.PreTrainedModel, tuple[torch.Tensor, ...], str)


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    """One architecture: ``factory(quick, gen)`` builds the HF model and its inputs.

    ``ones_mask``: call the model with an all-ones ``attention_mask`` (decoders), as a served
    decoder is called. Without a mask, transformers 5 adds a packed-sequence check (a ``cumsum``
    over a bool tensor); ``from_torch`` builds that too (it gives bool cumsums PyTorch's int64,
    tested in ``tests/test_torch_layers.py``), but the zoo times the masked form.
    """

    name: str
    kind: str  # "vision", "text" or "audio"
    what: str  # the full-size configuration it mirrors
    factory: Callable[[bool, object], Built]
    ones_mask: bool = False
    extra: bool = False  # ``zoo_extra``: full size only, not in the default zoo run


ZOO: dict[str, ZooEntry] = {}


def _register(name: str, kind: str, what: str, ones_mask: bool = False, extra: bool = False):
    def wrap(factory):
        if name in ZOO:
            raise ValueError(f"zoo model {name!r} registered twice")
        ZOO[name] = ZooEntry(name, kind, what, factory, ones_mask, extra)
        return factory

    return wrap


def names(kind: str | None = None, extra: bool = False) -> list[str]:
    """The zoo's model names (in registration order), optionally of one kind; ``extra``: the
    extra architectures' (``zoo_extra``) instead."""
    return [n for n, e in ZOO.items() if (kind is None or e.kind == kind) and e.extra == extra]


def _wrapper_class():
    """The output wrapper, defined on first use so that importing the zoo does not import torch."""
    import torch

    class SingleOutput(torch.nn.Module):
        """``forward(*inputs)`` -> the named tensor field of the wrapped model's output."""

        def __init__(self, model: torch.nn.Module, field: str, ones_mask: bool):
            super().__init__()
            self.model, self.field, self.ones_mask = model, field, ones_mask

        def forward(self, *inputs):
            if self.ones_mask:
                out = self.model(*inputs, attention_mask=torch.ones_like(inputs[0]))
            else:
                out = self.model(*inputs)
            if isinstance(out, torch.Tensor):  # the plain-PyTorch models of ext.models.cnn
                return out
            return out[0] if isinstance(out, tuple) else getattr(out, self.field)

    return SingleOutput


def randomize_batchnorm(module, gen) -> int:
    """Give every BatchNorm layer non-trivial statistics and affine parameters; returns how many."""
    import torch

    count = 0
    with torch.no_grad():
        for m in module.modules():
            if not isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                continue
            if m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
            if m.affine:
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
            count += 1
    return count


def zoo_model(name: str, *, quick: bool = False, seed: int = 0, batch: int = 1, size: int | None = None):
    """``(torch module in eval mode, example inputs tuple)`` for zoo model ``name``.

    The module returns a single tensor. ``quick`` selects the small configuration. ``batch``
    and ``size`` give other inputs than the entry's own (``other_inputs``): ``size`` is the image
    side (vision), the sequence length (text) or the samples / frames (audio).
    Raises ``ValueError`` naming the known models for an unknown name, and ``ImportError``
    with the install hint when ``transformers`` is missing.
    """
    if name not in ZOO:
        raise ValueError(f"unknown zoo model {name!r}; known: {', '.join(ZOO)}")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ImportError("the model zoo needs transformers: pip install -e .[zoo]") from None
    import torch

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    entry = ZOO[name]
    model, inputs, field = entry.factory(quick, gen)
    randomize_batchnorm(model, gen)
    if batch != 1 or size is not None:
        inputs = other_inputs(entry, model, inputs, batch, size, gen)
    wrapped = _wrapper_class()(model.eval(), field, entry.ones_mask).eval()
    return wrapped, tuple(inputs)


def other_inputs(entry: ZooEntry, model, inputs, batch: int, size: int | None, gen) -> tuple:
    """The entry's one input drawn again at ``batch`` and ``size`` (its own size where None):
    images ``(batch, C, size, size)``, token ids ``(batch, size)`` below the vocabulary, audio
    ``(batch, ..., size)``. Whether the model takes it (a ViT's fixed patch grid, Whisper's 3000
    frames) is the model's to say, when it runs."""
    import torch

    if batch < 1 or (size is not None and size < 1):
        raise ValueError(f"batch and size must be >= 1, got batch={batch}, size={size}")
    if len(inputs) != 1:
        raise ValueError(f"{entry.name} takes {len(inputs)} inputs; only one-input models can be resized")
    x = inputs[0]
    shape = list(x.shape)
    shape[0] = batch
    if size is not None:
        if entry.kind == "vision":
            shape[-2:] = [size, size]
        else:
            shape[-1] = size
    if x.dtype.is_floating_point:
        return (torch.randn(*shape, generator=gen, dtype=x.dtype),)
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or int(x.max()) + 1)
    return (torch.randint(min(3, vocab - 1), vocab, shape, generator=gen, dtype=x.dtype),)


# ----------------------------------------------------------------------------- inputs


def _image(gen, res: int, channels: int = 3):
    import torch

    return (torch.randn(1, channels, res, res, generator=gen),)


def _tokens(gen, vocab: int, seq: int, low: int = 3):
    """Token ids in ``[low, vocab)``: ids 0-2 are pad/bos/eos in most vocabularies."""
    import torch

    return (torch.randint(low, vocab, (1, seq), generator=gen, dtype=torch.int64),)


def _eager(cfg):
    cfg._attn_implementation = "eager"
    return cfg


# the architectures register themselves on import (split by modality to keep modules small)
from . import zoo_vision  # noqa: E402,F401  (first: the tables list vision models first)
from . import zoo_text  # noqa: E402,F401
from . import zoo_extra  # noqa: E402,F401  (last: not in the default table)
