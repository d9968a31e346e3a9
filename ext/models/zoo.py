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

    ``ones_mask``: call the model with an all-ones ``attention_mask`` (decoders). Without a mask,
    transformers 5 looks for packed sequences with a ``cumsum`` over a bool tensor, which TVM's
    importer keeps as a bool cumsum (torch promotes to int64) and LLVM codegen then rejects.
    """

    name: str
    kind: str  # "vision", "text" or "audio"
    what: str  # the full-size configuration it mirrors
    factory: Callable[[bool, object], Built]
    ones_mask: bool = False


ZOO: dict[str, ZooEntry] = {}


def _register(name: str, kind: str, what: str, ones_mask: bool = False):
    def wrap(factory):
        if name in ZOO:
            raise ValueError(f"zoo model {name!r} registered twice")
        ZOO[name] = ZooEntry(name, kind, what, factory, ones_mask)
        return factory

    return wrap


def names(kind: str | None = None) -> list[str]:
    """Registered model names (in registration order), optionally of one kind."""
    return [n for n, e in ZOO.items() if kind is None or e.kind == kind]


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


def zoo_model(name: str, *, quick: bool = False, seed: int = 0):
    """``(torch module in eval mode, example inputs tuple)`` for zoo model ``name``.

    The module returns a single tensor. ``quick`` selects the small configuration.
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
    wrapped = _wrapper_class()(model.eval(), field, entry.ones_mask).eval()
    return wrapped, tuple(inputs)


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


# ----------------------------------------------------------------------------- vision: CNNs


def _resnet(quick: bool, gen, basic: bool):
    import transformers as tf

    if quick:
        hidden = [16, 24, 32, 48] if basic else [32, 48, 64, 96]
        cfg = tf.ResNetConfig(embedding_size=16, hidden_sizes=hidden, depths=[1, 1, 1, 1],
                              layer_type="basic" if basic else "bottleneck", num_labels=10)
        res = 32
    else:
        hidden = [64, 128, 256, 512] if basic else [256, 512, 1024, 2048]
        cfg = tf.ResNetConfig(embedding_size=64, hidden_sizes=hidden,
                              depths=[2, 2, 2, 2] if basic else [3, 4, 6, 3],
                              layer_type="basic" if basic else "bottleneck", num_labels=1000)
        res = 224
    return tf.ResNetForImageClassification(cfg), _image(gen, res), "logits"


@_register("resnet18", "vision", "ResNet-18 (basic blocks), 224x224")
def _resnet18(quick, gen):
    return _resnet(quick, gen, basic=True)


@_register("resnet50", "vision", "ResNet-50 (bottleneck blocks), 224x224")
def _resnet50(quick, gen):
    return _resnet(quick, gen, basic=False)


def _plain(builder, quick: bool, gen, quick_kw: dict, res: int = 224, quick_res: int = 64):
    """A model of ``ext.models.cnn`` (plain PyTorch, not transformers)."""
    model = builder(**(dict(quick_kw, num_classes=10) if quick else {}))
    return model, _image(gen, quick_res if quick else res), ""


@_register("densenet121", "vision", "DenseNet-121 (concatenating dense blocks), 224x224")
def _densenet121(quick, gen):
    from .cnn import densenet121

    return _plain(densenet121, quick, gen, {"width": 0.25, "blocks": (2, 2, 2, 2)}, quick_res=32)


@_register("googlenet", "vision", "GoogLeNet / Inception v1 (BN variant), 224x224")
def _googlenet(quick, gen):
    from .cnn import googlenet

    return _plain(googlenet, quick, gen, {"width": 0.125})


@_register("squeezenet1_1", "vision", "SqueezeNet 1.1 (fire modules), 224x224")
def _squeezenet(quick, gen):
    from .cnn import squeezenet11

    return _plain(squeezenet11, quick, gen, {"width": 0.25})


@_register("shufflenet_v2", "vision", "ShuffleNetV2 x1.0 (channel split and shuffle), 224x224")
def _shufflenet(quick, gen):
    from .cnn import shufflenet_v2

    return _plain(shufflenet_v2, quick, gen, {"width": 0.25, "repeats": (1, 2, 1)})


@_register("mobilenet_v3_small", "vision", "MobileNetV3-small (hardswish, SE with hardsigmoid), 224x224")
def _mobilenet_v3_small(quick, gen):
    from .cnn import mobilenet_v3_small

    return _plain(mobilenet_v3_small, quick, gen, {"width": 0.25})


@_register("mobilenet_v1", "vision", "MobileNetV1 1.0, 224x224")
def _mobilenet_v1(quick, gen):
    import transformers as tf

    cfg = tf.MobileNetV1Config(depth_multiplier=0.25 if quick else 1.0, image_size=32 if quick else 224,
                               num_labels=10 if quick else 1000)
    return tf.MobileNetV1ForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("mobilenet_v2", "vision", "MobileNetV2 1.0, 224x224")
def _mobilenet_v2(quick, gen):
    import transformers as tf

    cfg = tf.MobileNetV2Config(depth_multiplier=0.25 if quick else 1.0, image_size=32 if quick else 224,
                               num_labels=10 if quick else 1000)
    return tf.MobileNetV2ForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("efficientnet_b0", "vision", "EfficientNet-B0, 224x224")
def _efficientnet_b0(quick, gen):
    import transformers as tf

    if quick:
        cfg = tf.EfficientNetConfig(width_coefficient=0.25, depth_coefficient=0.25, image_size=32,
                                    hidden_dim=320, dropout_rate=0.2, num_labels=10)  # = round_filters(1280)
    else:
        cfg = tf.EfficientNetConfig(width_coefficient=1.0, depth_coefficient=1.0, image_size=224,
                                    hidden_dim=1280, dropout_rate=0.2, num_labels=1000)
    return tf.EfficientNetForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("regnet_y_400mf", "vision", "RegNetY-400MF, 224x224")
def _regnet(quick, gen):
    import transformers as tf

    if quick:
        cfg = tf.RegNetConfig(embedding_size=16, hidden_sizes=[16, 24, 32, 48], depths=[1, 1, 1, 1],
                              groups_width=8, layer_type="y", num_labels=10)
        res = 32
    else:
        cfg = tf.RegNetConfig(embedding_size=32, hidden_sizes=[48, 104, 208, 440], depths=[1, 3, 6, 6],
                              groups_width=8, layer_type="y", num_labels=1000)
        res = 224
    return tf.RegNetForImageClassification(cfg), _image(gen, res), "logits"


def _four_stage(config: str, model: str, quick: bool, gen, hidden: list, depths: list):
    """A four-stage classifier from its Config class (``config``) and model class (``model``):
    the quick variant has four one-block stages of width 16-48 at 32 px."""
    import transformers as tf

    if quick:
        hidden, depths = [16, 24, 32, 48], [1, 1, 1, 1]
    cfg = getattr(tf, config)(hidden_sizes=hidden, depths=depths, image_size=32 if quick else 224,
                              num_labels=10 if quick else 1000)
    return getattr(tf, model)(cfg), _image(gen, cfg.image_size), "logits"


@_register("convnext_tiny", "vision", "ConvNeXt-T, 224x224")
def _convnext(quick, gen):
    return _four_stage("ConvNextConfig", "ConvNextForImageClassification", quick, gen,
                       [96, 192, 384, 768], [3, 3, 9, 3])


@_register("convnextv2_tiny", "vision", "ConvNeXt V2-T (GRN), 224x224")
def _convnextv2(quick, gen):
    return _four_stage("ConvNextV2Config", "ConvNextV2ForImageClassification", quick, gen,
                       [96, 192, 384, 768], [3, 3, 9, 3])


@_register("poolformer_s12", "vision", "PoolFormer-S12, 224x224")
def _poolformer(quick, gen):
    return _four_stage("PoolFormerConfig", "PoolFormerForImageClassification", quick, gen,
                       [64, 128, 320, 512], [2, 2, 6, 2])


# ----------------------------------------------------------------------------- vision: transformers


def _vit_like(quick: bool, hidden: int, layers: int, heads: int, ffn: int, patch: int = 16, res: int = 224):
    """Keyword arguments shared by the ViT-family configs (quick: 2 layers of width 32)."""
    if quick:
        return dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    patch_size=8, image_size=40, num_labels=10)
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=ffn, patch_size=patch, image_size=res, num_labels=1000)


@_register("vit_base", "vision", "ViT-B/16, 224x224")
def _vit(quick, gen):
    import transformers as tf

    cfg = _eager(tf.ViTConfig(**_vit_like(quick, 768, 12, 12, 3072)))
    return tf.ViTForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("deit_small", "vision", "DeiT-S/16, 224x224")
def _deit(quick, gen):
    import transformers as tf

    cfg = _eager(tf.DeiTConfig(**_vit_like(quick, 384, 12, 6, 1536)))
    return tf.DeiTForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("beit_base", "vision", "BEiT-B/16 (relative position bias, layer scale), 224x224")
def _beit(quick, gen):
    import transformers as tf

    cfg = _eager(tf.BeitConfig(**_vit_like(quick, 768, 12, 12, 3072), use_relative_position_bias=True,
                               use_mean_pooling=True))
    return tf.BeitForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("dinov2_small", "vision", "DINOv2-S/14 classifier, 224x224")
def _dinov2(quick, gen):
    import transformers as tf

    kw = _vit_like(quick, 384, 12, 6, 1536, patch=14)
    kw.pop("intermediate_size")
    cfg = _eager(tf.Dinov2Config(**kw, mlp_ratio=2 if quick else 4))
    return tf.Dinov2ForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("swin_tiny", "vision", "Swin-T (window 7), 224x224")
def _swin(quick, gen):
    import transformers as tf

    if quick:
        cfg = tf.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[2, 1], num_heads=[2, 4],
                            window_size=4, num_labels=10)
    else:
        cfg = tf.SwinConfig(image_size=224, patch_size=4, embed_dim=96, depths=[2, 2, 6, 2],
                            num_heads=[3, 6, 12, 24], window_size=7, num_labels=1000)
    return tf.SwinForImageClassification(_eager(cfg)), _image(gen, cfg.image_size), "logits"


@_register("segformer_b0", "vision", "SegFormer-B0 (MiT-B0) classifier, 224x224")
def _segformer(quick, gen):
    import transformers as tf

    if quick:
        cfg = tf.SegformerConfig(hidden_sizes=[16, 24, 32, 48], depths=[1, 1, 1, 1],
                                 num_attention_heads=[1, 1, 2, 2], decoder_hidden_size=32, num_labels=10)
        res = 32
    else:
        cfg = tf.SegformerConfig(hidden_sizes=[32, 64, 160, 256], depths=[2, 2, 2, 2],
                                 num_attention_heads=[1, 2, 5, 8], num_labels=1000)
        res = 224
    return tf.SegformerForImageClassification(_eager(cfg)), _image(gen, res), "logits"


@_register("mobilevit_small", "vision", "MobileViT-S, 256x256")
def _mobilevit(quick, gen):
    import transformers as tf

    if quick:
        cfg = tf.MobileViTConfig(image_size=64, hidden_sizes=[16, 24, 32],
                                 neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 48], num_attention_heads=2,
                                 num_labels=10)
    else:
        cfg = tf.MobileViTConfig(image_size=256, num_labels=1000)
    return tf.MobileViTForImageClassification(_eager(cfg)), _image(gen, cfg.image_size), "logits"


@_register("mobilevitv2", "vision", "MobileViTV2-1.0 (separable attention), 256x256")
def _mobilevitv2(quick, gen):
    import transformers as tf

    if quick:
        cfg = tf.MobileViTV2Config(image_size=64, width_multiplier=0.25, n_attn_blocks=[1, 1, 1],
                                   num_labels=10)
    else:
        cfg = tf.MobileViTV2Config(image_size=256, width_multiplier=1.0, num_labels=1000)
    model = tf.MobileViTV2ForImageClassification(cfg)
    for layer in model.modules():
        if hasattr(layer, "unfolding") and hasattr(layer, "folding"):
            _patches_by_reshape(layer)
    return model, _image(gen, cfg.image_size), "logits"


def _patches_by_reshape(layer) -> None:
    """Replace a MobileViTV2 layer's ``F.unfold``/``F.fold`` with the equivalent reshapes.

    Its patches do not overlap (kernel = stride), so both are pure data movement; TVM 0.27's
    importer turns the exported unfold/fold into ``index_tensor`` calls whose index shapes it
    fails to broadcast ("index_tensor: cannot broadcast index shapes").
    """
    ph, pw = layer.patch_height, layer.patch_width

    def unfolding(feature_map):
        b, c, h, w = feature_map.shape
        x = feature_map.reshape(b, c, h // ph, ph, w // pw, pw).permute(0, 1, 3, 5, 2, 4)
        return x.reshape(b, c, ph * pw, (h // ph) * (w // pw)), (h, w)

    def folding(patches, output_size):
        b, c, _, _ = patches.shape
        h, w = output_size
        x = patches.reshape(b, c, ph, pw, h // ph, w // pw).permute(0, 1, 4, 2, 5, 3)
        return x.reshape(b, c, h, w)

    layer.unfolding, layer.folding = unfolding, folding


@_register("levit_128s", "vision", "LeViT-128S (attention with BatchNorm), 224x224")
def _levit(quick, gen):
    import transformers as tf

    if quick:
        cfg = tf.LevitConfig(image_size=64, hidden_sizes=[16, 32, 48], num_attention_heads=[2, 2, 4],
                             depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=10)
    else:
        cfg = tf.LevitConfig(image_size=224, num_labels=1000)
    return tf.LevitForImageClassification(cfg), _image(gen, cfg.image_size), "logits"


@_register("clip_vit_b32", "vision", "CLIP ViT-B/32 image encoder (quick_gelu), 224x224")
def _clip_vision(quick, gen):
    import transformers as tf

    kw = _vit_like(quick, 768, 12, 12, 3072, patch=32)
    kw.pop("num_labels")
    cfg = _eager(tf.CLIPVisionConfig(**kw, hidden_act="quick_gelu"))
    return tf.CLIPVisionModel(cfg), _image(gen, cfg.image_size), "last_hidden_state"


# ----------------------------------------------------------------------------- text encoders

#: quick text models: 2 layers, width 32, 17 tokens, a 997-token vocabulary
_QUICK_SEQ, _QUICK_VOCAB = 17, 997
_SEQ = 128


def _bert_like(quick: bool, vocab: int, hidden: int = 768, layers: int = 12, heads: int = 12, ffn: int = 3072):
    if quick:
        return dict(vocab_size=_QUICK_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64)
    return dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=ffn, max_position_embeddings=512)


def _text_inputs(gen, cfg, quick: bool):
    return _tokens(gen, cfg.vocab_size, _QUICK_SEQ if quick else _SEQ)


@_register("bert_base", "text", "BERT-base encoder, seq 128")
def _bert(quick, gen):
    import transformers as tf

    cfg = _eager(tf.BertConfig(**_bert_like(quick, 30522)))
    return tf.BertModel(cfg, add_pooling_layer=False), _text_inputs(gen, cfg, quick), "last_hidden_state"


@_register("roberta_base", "text", "RoBERTa-base encoder, seq 128")
def _roberta(quick, gen):
    import transformers as tf

    kw = _bert_like(quick, 50265)
    kw["max_position_embeddings"] += 2  # RoBERTa offsets positions by padding_idx + 1
    cfg = _eager(tf.RobertaConfig(**kw))
    return tf.RobertaModel(cfg, add_pooling_layer=False), _text_inputs(gen, cfg, quick), "last_hidden_state"


@_register("electra_small", "text", "ELECTRA-small discriminator encoder, seq 128")
def _electra(quick, gen):
    import transformers as tf

    kw = _bert_like(quick, 30522, hidden=256, layers=12, heads=4, ffn=1024)
    cfg = _eager(tf.ElectraConfig(**kw, embedding_size=16 if quick else 128))
    return tf.ElectraModel(cfg), _text_inputs(gen, cfg, quick), "last_hidden_state"


@_register("albert_base", "text", "ALBERT-base v2 encoder (shared layers), seq 128")
def _albert(quick, gen):
    import transformers as tf

    kw = _bert_like(quick, 30000)
    cfg = _eager(tf.AlbertConfig(**kw, embedding_size=16 if quick else 128, hidden_act="gelu_new"))
    return tf.AlbertModel(cfg, add_pooling_layer=False), _text_inputs(gen, cfg, quick), "last_hidden_state"


@_register("distilbert_base", "text", "DistilBERT-base encoder, seq 128")
def _distilbert(quick, gen):
    import transformers as tf

    if quick:
        kw = dict(vocab_size=_QUICK_VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64)
    else:
        kw = dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072)
    cfg = _eager(tf.DistilBertConfig(**kw))
    return tf.DistilBertModel(cfg), _text_inputs(gen, cfg, quick), "last_hidden_state"


@_register("t5_small_encoder", "text", "T5-small encoder (relative position buckets, RMSNorm), seq 128")
def _t5(quick, gen):
    import transformers as tf

    if quick:
        kw = dict(vocab_size=_QUICK_VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    else:
        kw = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8)
    cfg = _eager(tf.T5Config(**kw, use_cache=False))
    return tf.T5EncoderModel(cfg), _text_inputs(gen, cfg, quick), "last_hidden_state"


# ----------------------------------------------------------------------------- text decoders (causal LM logits)


@_register("gpt2", "text", "GPT-2 small LM (gelu_new), seq 128", ones_mask=True)
def _gpt2(quick, gen):
    import transformers as tf

    if quick:
        kw = dict(vocab_size=_QUICK_VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=1,
                  eos_token_id=2)
    else:
        kw = dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)
    cfg = _eager(tf.GPT2Config(**kw, use_cache=False))
    return tf.GPT2LMHeadModel(cfg), _text_inputs(gen, cfg, quick), "logits"


@_register("gpt_neo_125m", "text", "GPT-Neo 125M LM (global + local attention), seq 128", ones_mask=True)
def _gpt_neo(quick, gen):
    import transformers as tf

    if quick:
        kw = dict(vocab_size=_QUICK_VOCAB, hidden_size=32, num_layers=2, num_heads=2, window_size=8,
                  attention_types=[[["global", "local"], 1]], max_position_embeddings=64, bos_token_id=1,
                  eos_token_id=2)
    else:
        kw = dict(vocab_size=50257, hidden_size=768, num_layers=12, num_heads=12, window_size=256,
                  attention_types=[[["global", "local"], 6]], max_position_embeddings=2048)
    cfg = _eager(tf.GPTNeoConfig(**kw, use_cache=False))
    return tf.GPTNeoForCausalLM(cfg), _text_inputs(gen, cfg, quick), "logits"


@_register("opt_125m", "text", "OPT-125M LM (ReLU MLP, learned positions), seq 128", ones_mask=True)
def _opt(quick, gen):
    import transformers as tf

    if quick:
        kw = dict(vocab_size=_QUICK_VOCAB, hidden_size=32, word_embed_proj_dim=32, ffn_dim=64, num_hidden_layers=2,
                  num_attention_heads=2, max_position_embeddings=64, pad_token_id=1, bos_token_id=2, eos_token_id=2)
    else:
        kw = dict(vocab_size=50272, hidden_size=768, word_embed_proj_dim=768, ffn_dim=3072, num_hidden_layers=12,
                  num_attention_heads=12, max_position_embeddings=2048)
    cfg = _eager(tf.OPTConfig(**kw, use_cache=False))
    return tf.OPTForCausalLM(cfg), _text_inputs(gen, cfg, quick), "logits"


@_register("llama_tiny", "text", "Llama (RoPE, GQA, SwiGLU, RMSNorm), 8 layers of 512, seq 128", ones_mask=True)
def _llama(quick, gen):
    import transformers as tf

    if quick:
        kw = dict(vocab_size=_QUICK_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    else:
        kw = dict(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048)
    cfg = _eager(tf.LlamaConfig(**kw, use_cache=False))
    return tf.LlamaForCausalLM(cfg), _text_inputs(gen, cfg, quick), "logits"


# ----------------------------------------------------------------------------- audio encoders


@_register("whisper_tiny_encoder", "audio", "Whisper-tiny encoder, 80 mel x 3000 frames")
def _whisper(quick, gen):
    import torch
    import transformers as tf
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    if quick:
        kw = dict(d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
                  num_mel_bins=16, max_source_positions=24)
    else:
        kw = dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                  num_mel_bins=80, max_source_positions=1500)
    cfg = _eager(tf.WhisperConfig(**kw, use_cache=False))
    encoder = WhisperEncoder(cfg)  # the decoder is not built
    feats = torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=gen)
    return encoder, (feats,), "last_hidden_state"


@_register("wav2vec2_base", "audio", "wav2vec 2.0 base encoder, 1 s of 16 kHz audio")
def _wav2vec2(quick, gen):
    import torch
    import transformers as tf

    if quick:
        kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                  num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4)
        samples = 1203
    else:
        kw = {}
        samples = 16000
    cfg = _eager(tf.Wav2Vec2Config(**kw))
    audio = torch.randn(1, samples, generator=gen)
    return tf.Wav2Vec2Model(cfg), (audio,), "last_hidden_state"
