"""Extra zoo architectures: full-size models beyond the 36 of the zoo's table, for finding what
an unseen model does to ext (``python scripts/zoo.py --extra``).

They are not in the default ``scripts/zoo.py`` run (its geomean stays comparable from stop to
stop) and have no quick variant (``quick=True`` raises): the sweep that found CvT's failed
build, VideoMAE's stock-lowered conv3d (4x onnxruntime's time) and RegNet-X's unblocked grouped
convs (1.03-1.14x) ran these. Same conventions as the zoo: random seeded weights, randomized
BatchNorm statistics, one output tensor.
"""
from __future__ import annotations

from .zoo import _eager, _image, _register, _tokens


def _extra(name: str, kind: str, what: str):
    """Register a full-size-only factory ``f(gen) -> (model, inputs, field)``."""
    def wrap(build):
        def factory(quick, gen):
            if quick:
                raise ValueError(f"extra zoo model {name!r} has no quick variant (full size only)")
            return build(gen)

        _register(name, kind, what, extra=True)(factory)
        return build

    return wrap


def _hf(name: str, what: str, config: str, model: str, kw: dict, res: int = 224, field: str = "logits",
        eager: bool = False):
    """A transformers image model from its config class and keyword arguments, ``res`` x ``res`` input."""
    def build(gen):
        import transformers as tf

        cfg = getattr(tf, config)(**kw)
        return getattr(tf, model)(_eager(cfg) if eager else cfg), _image(gen, res), field

    _extra(name, "vision", what)(build)


def _text(name: str, what: str, config: str, model: str, kw: dict, seq: int = 128):
    """A transformers text encoder (``last_hidden_state``) on ``seq`` random tokens of a 1000-word vocabulary."""
    def build(gen):
        import transformers as tf

        cfg = _eager(getattr(tf, config)(vocab_size=1000, **kw))
        return getattr(tf, model)(cfg), _tokens(gen, 1000, seq), "last_hidden_state"

    _extra(name, "text", what)(build)


# ----------------------------------------------------------------------------- vision
_RESNET = dict(embedding_size=64, layer_type="bottleneck", hidden_sizes=[256, 512, 1024, 2048], num_labels=1000)
_hf("resnet34", "ResNet-34", "ResNetConfig", "ResNetForImageClassification",
    dict(_RESNET, layer_type="basic", hidden_sizes=[64, 128, 256, 512], depths=[3, 4, 6, 3]))
_hf("resnet101", "ResNet-101", "ResNetConfig", "ResNetForImageClassification", dict(_RESNET, depths=[3, 4, 23, 3]))
_hf("regnet_x_400mf", "RegNet-X-400MF (16-channel groups)", "RegNetConfig", "RegNetForImageClassification",
    dict(embedding_size=32, hidden_sizes=[32, 64, 160, 384], depths=[1, 2, 7, 12], groups_width=16,
         layer_type="x", num_labels=1000))
_hf("bit_50", "BiT-R50 (weight-standardized convs, GroupNorm)", "BitConfig", "BitForImageClassification",
    dict(layer_type="bottleneck", depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048]))
_hf("mobilenet_v2_140", "MobileNetV2 1.4", "MobileNetV2Config", "MobileNetV2ForImageClassification",
    dict(depth_multiplier=1.4, image_size=224))
_hf("mobilenet_v1_075_192", "MobileNetV1 0.75 at 192x192", "MobileNetV1Config", "MobileNetV1ForImageClassification",
    dict(depth_multiplier=0.75, image_size=192), res=192)
_hf("efficientnet_b2", "EfficientNet-B2 at 260x260", "EfficientNetConfig", "EfficientNetForImageClassification",
    dict(width_coefficient=1.1, depth_coefficient=1.2, image_size=260, hidden_dim=1408, num_labels=1000), res=260)
_hf("deeplabv3_mobilenet_v2", "DeepLabV3 MobileNetV2 (dilated, output stride 8), 512x512", "MobileNetV2Config",
    "MobileNetV2ForSemanticSegmentation", dict(image_size=512, output_stride=8), res=512)
_hf("convnext_small", "ConvNeXt-S", "ConvNextConfig", "ConvNextForImageClassification", dict(depths=[3, 3, 27, 3]))
_hf("deit_tiny", "DeiT-Ti/16", "DeiTConfig", "DeiTForImageClassification",
    dict(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768), eager=True)
_hf("vit_b32", "ViT-B/32", "ViTConfig", "ViTForImageClassification", dict(patch_size=32), eager=True)
_hf("swinv2_tiny", "Swin V2-T, window 8, 256x256", "Swinv2Config", "Swinv2ForImageClassification",
    dict(image_size=256, window_size=8), res=256)
_hf("cvt_13", "CvT-13 (conv projections, class token in the last stage)", "CvtConfig", "CvtForImageClassification",
    {})
_hf("pvt_v2_b0", "PVT v2-b0", "PvtV2Config", "PvtV2ForImageClassification", {})
_hf("levit_256", "LeViT-256", "LevitConfig", "LevitForImageClassification",
    dict(hidden_sizes=[256, 384, 512], num_attention_heads=[4, 6, 8], depths=[4, 4, 4], key_dim=[32, 32, 32]))
_hf("swiftformer_xs", "SwiftFormer-XS", "SwiftFormerConfig", "SwiftFormerForImageClassification", {})
_hf("focalnet_tiny", "FocalNet-T (focal modulation)", "FocalNetConfig", "FocalNetForImageClassification", {})
_hf("data2vec_vision_small", "Data2Vec-Vision, 384 wide (relative position bias)", "Data2VecVisionConfig",
    "Data2VecVisionForImageClassification", dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                                 intermediate_size=1536, use_relative_position_bias=True), eager=True)
_hf("yolos_tiny", "YOLOS-Ti at 512x512", "YolosConfig", "YolosModel",
    dict(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768, image_size=[512, 512]),
    res=512, field="last_hidden_state", eager=True)
_hf("segformer_b1", "SegFormer-B1 at 512x512", "SegformerConfig", "SegformerForSemanticSegmentation",
    dict(hidden_sizes=[64, 128, 320, 512], decoder_hidden_size=256), res=512)
_hf("glpn", "GLPN depth estimation, 256x256", "GLPNConfig", "GLPNForDepthEstimation", {}, res=256,
    field="predicted_depth")

# stop 36: more architectures a user may bring, default configs where those are full size
_hf("hiera_base", "Hiera-B, default config (mask-unit attention, unrolled tokens)", "HieraConfig", "HieraForImageClassification", {})
_hf("textnet_base", "TextNet (re-parameterizable 3x1 / 1x3 / 3x3 convs)", "TextNetConfig",
    "TextNetForImageClassification", {})
_hf("mobilenet_v1_160", "MobileNetV1 1.0 at 160x160", "MobileNetV1Config", "MobileNetV1ForImageClassification",
    dict(image_size=160), res=160)
_hf("convnextv2_atto", "ConvNeXt V2-Atto (40 to 320 channels, GRN)", "ConvNextV2Config",
    "ConvNextV2ForImageClassification", dict(hidden_sizes=[40, 80, 160, 320], depths=[2, 2, 6, 2]))
_hf("dinov2_reg_small", "DINOv2-S with 4 registers", "Dinov2WithRegistersConfig",
    "Dinov2WithRegistersForImageClassification", dict(hidden_size=384, num_attention_heads=6), eager=True)
_hf("siglip_vision", "SigLIP vision tower B/16 (tanh GELU, attention-pooling head)", "SiglipVisionConfig",
    "SiglipVisionModel", {}, field="pooler_output", eager=True)
_hf("depth_anything_small", "Depth Anything (DINOv2-S backbone, DPT head) at 266x266", "DepthAnythingConfig",
    "DepthAnythingForDepthEstimation", {}, res=266, field="predicted_depth", eager=True)
_hf("swin2sr", "Swin2SR x2 super-resolution (pixel shuffle), 64x64", "Swin2SRConfig", "Swin2SRForImageSuperResolution",
    {}, res=64, field="reconstruction", eager=True)


@_extra("resnext50_32x4d", "vision", "ResNeXt-50 32x4d (plain PyTorch; 4- to 32-channel groups)")
def _resnext50(gen):
    from .cnn import resnext50_32x4d

    return resnext50_32x4d(), _image(gen, 224), ""


@_extra("squeezenet1_0", "vision", "SqueezeNet 1.0 (7x7 stride-2 stem, ceil-mode pools)")
def _squeezenet10(gen):
    from .cnn import squeezenet10

    return squeezenet10(), _image(gen, 224), ""


def _classic(name: str, what: str, res: int = 224):
    """A ``classic_cnn`` model of the same name at ``res`` x ``res``."""
    def build(gen):
        from . import classic_cnn

        return getattr(classic_cnn, name)(), _image(gen, res), ""

    _extra(name, "vision", what)(build)


_classic("vgg16", "VGG-16 (13 full-width 3x3 convs, 25088 -> 4096 classifier)")
_classic("alexnet", "AlexNet (11x11 stride-4 stem, 5x5 convs, 9216 -> 4096 classifier)")
_classic("inception_v3", "Inception-v3 at 299x299 (1x7/7x1 and 1x3/3x1 convs, padded average pools)", 299)
_classic("mnasnet1_0", "MnasNet-1.0 (3x3/5x5 depthwise, ReLU)")
_classic("mobilenet_v3_large", "MobileNetV3-large (hardswish, SE with hardsigmoid)")
_classic("efficientnet_v2_s", "EfficientNetV2-S (fused MBConv, SiLU, SE)")
_classic("wide_resnet50_2", "Wide ResNet-50-2 (bottlenecks twice as wide)")


@_extra("timesformer_small", "vision", "TimeSformer, 384 wide, 6 layers, 8 frames of 224x224 (divided space-time attention)")
def _timesformer(gen):
    import torch
    import transformers as tf

    cfg = _eager(tf.TimesformerConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                                      intermediate_size=1536, num_frames=8))
    return tf.TimesformerModel(cfg), (torch.randn(1, 8, 3, 224, 224, generator=gen),), "last_hidden_state"


@_extra("upernet_convnext_tiny", "vision", "UperNet with a ConvNeXt-T backbone (PPM + FPN), 150 classes, 256x256")
def _upernet(gen):
    import transformers as tf

    backbone = tf.ConvNextConfig(out_features=["stage1", "stage2", "stage3", "stage4"], hidden_sizes=[96, 192, 384, 768],
                                 depths=[3, 3, 9, 3])  # as lists: the backbone concatenates its default tuple to a list
    return tf.UperNetForSemanticSegmentation(tf.UperNetConfig(backbone_config=backbone, num_labels=150)), \
        _image(gen, 256), "logits"


@_extra("videomae_small", "vision", "VideoMAE, 384 wide, 6 layers, 8 frames of 224x224 (conv3d tubelets)")
def _videomae(gen):
    import torch
    import transformers as tf

    cfg = _eager(tf.VideoMAEConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                                   intermediate_size=1536, num_frames=8))
    return tf.VideoMAEModel(cfg), (torch.randn(1, 8, 3, 224, 224, generator=gen),), "last_hidden_state"


@_extra("detr_r50", "vision", "DETR with a ResNet-50 backbone (transformers' own, no timm), 2+2 layers, 320x320")
def _detr(gen):
    import transformers as tf

    cfg = _eager(tf.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, encoder_layers=2,
                               decoder_layers=2, backbone_config=tf.ResNetConfig(out_features=["stage4"])))
    return tf.DetrModel(cfg), _image(gen, 320), "last_hidden_state"


# ----------------------------------------------------------------------------- audio
def _audio(name: str, what: str, config: str, model: str, kw: dict, shape: tuple, field: str = "last_hidden_state"):
    def build(gen):
        import torch
        import transformers as tf

        return getattr(tf, model)(_eager(getattr(tf, config)(**kw))), (torch.randn(*shape, generator=gen),), field

    _extra(name, "audio", what)(build)


_audio("hubert_base", "HuBERT base, 1 s of 16 kHz audio", "HubertConfig", "HubertModel", {}, (1, 16000))
_audio("wavlm_6l", "WavLM, 6 layers (gated relative position bias), 1 s", "WavLMConfig", "WavLMModel",
       dict(num_hidden_layers=6), (1, 16000))
_audio("wav2vec2_conformer_6l", "Wav2Vec2-Conformer, 6 layers (relative attention, depthwise conv1d, GLU), 1 s",
       "Wav2Vec2ConformerConfig", "Wav2Vec2ConformerModel", dict(num_hidden_layers=6), (1, 16000))
_audio("sew_4l", "SEW (squeezed wav2vec2: downsampled attention, upsampling), 4 layers, 1 s", "SEWConfig", "SEWModel",
       dict(num_hidden_layers=4), (1, 16000))
_audio("ast_6l", "Audio Spectrogram Transformer, 384 wide, 6 layers, 512 x 128 filterbank", "ASTConfig", "ASTModel",
       dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=6, intermediate_size=1536, max_length=512),
       (1, 512, 128))

# ----------------------------------------------------------------------------- text (seq 128)
_text("fnet_base", "FNet-base (FFT token mixing)", "FNetConfig", "FNetModel", {})
_text("mpnet_base", "MPNet-base (relative position buckets)", "MPNetConfig", "MPNetModel", {})
_text("deberta_v2_small", "DeBERTa-v2, 384 wide, 6 layers (disentangled attention)", "DebertaV2Config",
      "DebertaV2Model", dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=6, intermediate_size=1536))
_text("squeezebert", "SqueezeBERT (grouped conv1d layers)", "SqueezeBertConfig", "SqueezeBertModel", {})
_text("mobilebert", "MobileBERT (bottlenecks, no-norm)", "MobileBertConfig", "MobileBertModel", {})
_text("electra_base", "ELECTRA-base discriminator encoder", "ElectraConfig", "ElectraModel",
      dict(embedding_size=768, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072))
_text("funnel_base", "Funnel-Transformer base (pooled sequence)", "FunnelConfig", "FunnelBaseModel", {})
_text("convbert_base", "ConvBERT-base (span-based dynamic convolution)", "ConvBertConfig", "ConvBertModel", {})
_text("xlnet_6l", "XLNet, 512 wide, 6 layers (two-stream relative attention)", "XLNetConfig", "XLNetModel",
      dict(d_model=512, n_layer=6, n_head=8, d_inner=2048, use_mems_eval=False))
_text("bart_base", "BART-base encoder-decoder (decoder fed the same tokens)", "BartConfig", "BartModel", {})
_text("bloom_6l", "BLOOM, 512 wide, 6 layers (ALiBi)", "BloomConfig", "BloomModel",
      dict(hidden_size=512, n_layer=6, n_head=8, use_cache=False))
_text("qwen2_6l", "Qwen2, 512 wide, 6 layers (GQA, SwiGLU)", "Qwen2Config", "Qwen2Model",
      dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1408,
           use_cache=False))
_text("phi_6l", "Phi, 512 wide, 6 layers (partial rotary, parallel block)", "PhiConfig", "PhiModel",
      dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048, use_cache=False))
_text("pythia_6l", "GPT-NeoX / Pythia, 512 wide, 6 layers", "GPTNeoXConfig", "GPTNeoXModel",
      dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048, use_cache=False))
# stop 49's probe of unseen decoders (all matched; Mamba's build took 45 s before the in-place block cap)
_text("gemma2_4l", "Gemma 2, 512 wide, 4 layers (logit soft-capping, sliding-window layers, GQA)", "Gemma2Config",
      "Gemma2Model", dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                          head_dim=64, intermediate_size=1408, sliding_window=64, use_cache=False))
_text("mpt_4l", "MPT, 512 wide, 4 layers (ALiBi, no biases)", "MptConfig", "MptModel",
      dict(d_model=512, n_layers=4, n_heads=8, use_cache=False))
_text("modernbert_4l", "ModernBERT, 512 wide, 4 layers (alternating local/global attention, GeGLU)", "ModernBertConfig",
      "ModernBertModel", dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=1024,
                              pad_token_id=0))
_text("mamba_2l", "Mamba, 256 wide, 2 layers (selective scan, unrolled over 64 tokens by torch.export)", "MambaConfig",
      "MambaModel", dict(hidden_size=256, num_hidden_layers=2, state_size=16, use_cache=False), seq=64)
_text("mixtral_4l", "Mixtral, 512 wide, 4 layers (8 experts, 2 per token: FuseExpertGather)", "MixtralConfig",
      "MixtralModel", dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                           intermediate_size=1024, num_local_experts=8, num_experts_per_tok=2, use_cache=False))
_text("deepseek_v3_4l", "DeepSeek-V3, 512 wide, 4 layers (latent attention, grouped expert routing with an "
      "unsorted top-k, a shared expert)", "DeepseekV3Config", "DeepseekV3Model",
      dict(hidden_size=512, num_hidden_layers=4, first_k_dense_replace=1, num_attention_heads=8,
           num_key_value_heads=8, intermediate_size=1024, moe_intermediate_size=256, n_routed_experts=16,
           num_experts_per_tok=4, n_group=4, topk_group=2, q_lora_rank=128, kv_lora_rank=64,
           qk_rope_head_dim=16, qk_nope_head_dim=48, v_head_dim=64, use_cache=False))


# ----------------------------------------------------------------------------- plain PyTorch (stop 36)
def _user(name: str, kind: str, what: str, factory: str, kw: dict, inputs):
    """A ``user_nets`` model; ``inputs(gen)`` draws its input tuple."""
    def build(gen):
        from . import user_nets

        return getattr(user_nets, factory)(**kw), inputs(gen), ""

    _extra(name, kind, what)(build)


def _ids(gen, n: int = 64, vocab: int = 10000):
    import torch

    return (torch.randint(0, vocab, (1, n), generator=gen),)


def _recsys(gen):
    import torch

    return torch.randn(128, 13, generator=gen), torch.randint(0, 50000, (128, 8), generator=gen)


_user("lstm_classifier", "text", "2-layer LSTM text classifier, 64 tokens, last step", "rnn_classifier",
      dict(cell="lstm"), _ids)
_user("gru_classifier", "text", "2-layer GRU text classifier, 64 tokens, last step", "rnn_classifier",
      dict(cell="gru"), _ids)
_user("dlrm", "text", "DLRM-style recommender: 8 embedding tables, pairwise interactions, batch 128", "dlrm", {},
      _recsys)
_user("style_net", "vision", "fast style transfer (reflection pads, instance norms, transposed convs), 256x256",
      "style_net", {}, lambda gen: _image(gen, 256))
_user("unet", "vision", "U-Net, width 32, 4 levels (2x2 transposed convs, skip concats), 256x256", "unet", {},
      lambda gen: _image(gen, 256))
_user("yolo_s", "vision", "YOLOv5s-shaped detector (CSP, SiLU, SPPF, nearest upsampling), 320x320", "yolo_s", {},
      lambda gen: _image(gen, 320))
_user("convmixer", "vision", "ConvMixer-512/12, 9x9 depthwise, patch 7", "convmixer", {},
      lambda gen: _image(gen, 224))
