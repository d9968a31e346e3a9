"""Zoo architectures for images: CNNs and vision transformers.

Registered into ``ext.models.zoo.ZOO`` when ``zoo`` is imported (see its docstring for the
conventions: random seeded weights, randomized BatchNorm, quick variants, one output tensor).
"""
from __future__ import annotations

from .zoo import _eager, _image, _register

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
