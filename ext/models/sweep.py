"""The architectures ``scripts/arch_sweep.py`` builds: transformers models from small configs
(2 layers, width 64, a 13-token text, a 64x64 image, a quarter second of audio; random weights),
the example inputs of each input kind, and the wrapper that gives a model one tensor output.

``architectures(transformers)`` maps a name to ``(config class, model class, config kwargs,
input kind)``; ``example_inputs(kind)`` makes that kind's inputs; ``Output(model, NAMED.get(kind))``
calls the model with them (two-input kinds by keyword) and returns its main tensor.
"""
from __future__ import annotations

TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000)
WAV = dict(conv_dim=[32, 32], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16,
           num_conv_pos_embedding_groups=4, **TEXT)
PYRAMID = dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])
SEQ2SEQ = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
               encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000, max_position_embeddings=64)


def architectures(t) -> dict:
    """name -> ``(config class, model class, config kwargs, input kind)``; ``t``: transformers."""
    return {
        # text decoders
        "gptj": (t.GPTJConfig, t.GPTJModel, dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000), "ids"),
        "codegen": (t.CodeGenConfig, t.CodeGenModel, dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000), "ids"),
        "falcon": (t.FalconConfig, t.FalconModel, dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000), "ids"),
        "gemma": (t.GemmaConfig, t.GemmaModel, dict(head_dim=16, num_key_value_heads=1, **TEXT), "ids"),
        "gemma2": (t.Gemma2Config, t.Gemma2Model, dict(head_dim=16, num_key_value_heads=2, **TEXT), "ids"),
        "stablelm": (t.StableLmConfig, t.StableLmModel, dict(num_key_value_heads=4, **TEXT), "ids"),
        "olmo": (t.OlmoConfig, t.OlmoModel, TEXT, "ids"),
        "starcoder2": (t.Starcoder2Config, t.Starcoder2Model, dict(num_key_value_heads=2, **TEXT), "ids"),
        "granite": (t.GraniteConfig, t.GraniteModel, TEXT, "ids"),
        "mixtral": (t.MixtralConfig, t.MixtralModel, dict(num_local_experts=4, num_experts_per_tok=2, num_key_value_heads=2, **TEXT), "ids"),
        "qwen2_moe": (t.Qwen2MoeConfig, t.Qwen2MoeModel, dict(num_key_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64, **TEXT), "ids"),
        "mamba": (t.MambaConfig, t.MambaModel, dict(hidden_size=64, num_hidden_layers=2, vocab_size=1000, state_size=8), "ids"),
        "rwkv": (t.RwkvConfig, t.RwkvModel, dict(hidden_size=64, num_hidden_layers=2, vocab_size=1000, attention_hidden_size=64, intermediate_size=128), "ids"),
        "xlnet": (t.XLNetConfig, t.XLNetModel, dict(d_model=64, n_layer=2, n_head=4, d_inner=128, vocab_size=1000), "ids"),
        "ctrl": (t.CTRLConfig, t.CTRLModel, dict(n_embd=64, n_layer=2, n_head=4, dff=128, vocab_size=1000), "ids"),
        "gpt_bigcode": (t.GPTBigCodeConfig, t.GPTBigCodeModel, dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, multi_query=True), "ids"),
        "qwen3": (t.Qwen3Config, t.Qwen3Model, dict(head_dim=16, num_key_value_heads=2, **TEXT), "ids"),
        "phi3": (t.Phi3Config, t.Phi3Model, dict(num_key_value_heads=4, pad_token_id=0, **TEXT), "ids"),
        "olmoe": (t.OlmoeConfig, t.OlmoeModel, dict(num_experts=4, num_experts_per_tok=2, **TEXT), "ids"),
        "cohere": (t.CohereConfig, t.CohereModel, dict(num_key_value_heads=4, **TEXT), "ids"),
        "falcon_mamba": (t.FalconMambaConfig, t.FalconMambaModel, dict(hidden_size=64, num_hidden_layers=2, vocab_size=1000, state_size=8), "ids"),
        "recurrent_gemma": (t.RecurrentGemmaConfig, t.RecurrentGemmaModel, dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, intermediate_size=128, lru_width=64, vocab_size=1000, attention_window_size=8), "ids"),
        "jamba": (t.JambaConfig, t.JambaModel, dict(num_experts=4, num_experts_per_tok=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8, mamba_dt_rank=8, num_key_value_heads=2, use_mamba_kernels=False, **TEXT), "ids"),
        "dbrx": (t.DbrxConfig, t.DbrxModel, dict(d_model=64, n_heads=4, n_layers=2, max_seq_len=64, vocab_size=1000, attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0}, ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2}), "ids"),
        # text encoders
        "deberta": (t.DebertaConfig, t.DebertaModel, dict(relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=16, **TEXT), "ids"),
        "ibert": (t.IBertConfig, t.IBertModel, dict(quant_mode=False, **TEXT), "ids"),
        "data2vec_text": (t.Data2VecTextConfig, t.Data2VecTextModel, TEXT, "ids"),
        "megatron_bert": (t.MegatronBertConfig, t.MegatronBertModel, TEXT, "ids"),
        "xlm_roberta": (t.XLMRobertaConfig, t.XLMRobertaModel, TEXT, "ids"),
        "squeezebert": (t.SqueezeBertConfig, t.SqueezeBertModel, dict(embedding_size=64, q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2, intermediate_groups=4, output_groups=4, **TEXT), "ids"),
        "convbert": (t.ConvBertConfig, t.ConvBertModel, dict(embedding_size=64, **TEXT), "ids"),
        "fnet": (t.FNetConfig, t.FNetModel, dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, vocab_size=1000), "ids"),
        "funnel": (t.FunnelConfig, t.FunnelModel, dict(d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1], vocab_size=1000), "ids16"),
        "roformer": (t.RoFormerConfig, t.RoFormerModel, dict(embedding_size=64, **TEXT), "ids"),
        "big_bird": (t.BigBirdConfig, t.BigBirdModel, dict(attention_type="original_full", **TEXT), "ids"),
        "canine": (t.CanineConfig, t.CanineModel, dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_hash_buckets=64, downsampling_rate=4), "ids16"),
        "rembert": (t.RemBertConfig, t.RemBertModel, dict(input_embedding_size=32, output_embedding_size=64, **TEXT), "ids"),
        "mobilebert": (t.MobileBertConfig, t.MobileBertModel, dict(embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32, num_feedforward_networks=2, **TEXT), "ids"),
        "longformer": (t.LongformerConfig, t.LongformerModel, dict(attention_window=8, **TEXT), "ids16"),
        "esm": (t.EsmConfig, t.EsmModel, dict(position_embedding_type="rotary", pad_token_id=1, **TEXT), "ids"),
        "umt5_encoder": (t.UMT5Config, t.UMT5EncoderModel, dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=1000), "ids"),
        # vision
        "convnextv2": (t.ConvNextV2Config, t.ConvNextV2Model, dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1]), "image"),
        "regnet": (t.RegNetConfig, t.RegNetModel, dict(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 2, 1], groups_width=8, embedding_size=16), "image"),
        "pvt_v2": (t.PvtV2Config, t.PvtV2Model, dict(num_attention_heads=[1, 2, 4, 8], **PYRAMID), "image"),
        "swinv2": (t.Swinv2Config, t.Swinv2Model, dict(image_size=64, embed_dim=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], window_size=4), "image"),
        "focalnet": (t.FocalNetConfig, t.FocalNetModel, dict(image_size=64, embed_dim=16, depths=[1, 1, 1, 1]), "image"),
        "beit": (t.BeitConfig, t.BeitModel, dict(image_size=64, patch_size=8, use_relative_position_bias=True, **TEXT), "image"),
        "yolos": (t.YolosConfig, t.YolosModel, dict(image_size=[64, 64], patch_size=8, num_detection_tokens=5, **TEXT), "image"),
        "dpt": (t.DPTConfig, t.DPTForDepthEstimation, dict(image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 32, 64, 64], fusion_hidden_size=32, head_hidden_size=16), "image"),
        "glpn": (t.GLPNConfig, t.GLPNForDepthEstimation, dict(num_attention_heads=[1, 2, 4, 8], decoder_hidden_size=32, **PYRAMID), "image"),
        "siglip_vision": (t.SiglipVisionConfig, t.SiglipVisionModel, dict(image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128), "image"),
        "vitdet": (t.VitDetConfig, t.VitDetModel, dict(image_size=64, patch_size=8, pretrain_image_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, window_size=4, window_block_indices=[0], use_relative_position_embeddings=True), "image"),
        "detr": (t.DetrConfig, t.DetrModel, dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=t.ResNetConfig(embedding_size=16, out_features=["stage4"], **PYRAMID), d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=10), "image"),
        "upernet": (t.UperNetConfig, t.UperNetForSemanticSegmentation, dict(backbone_config=t.ConvNextConfig(out_features=["stage1", "stage2", "stage3", "stage4"], **PYRAMID), hidden_size=32, auxiliary_in_channels=64, num_labels=5), "image"),
        "depth_anything": (t.DepthAnythingConfig, t.DepthAnythingForDepthEstimation, dict(backbone_config=t.Dinov2Config(image_size=56, patch_size=14, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, out_features=["stage1", "stage2", "stage3", "stage4"], reshape_hidden_states=False), reassemble_hidden_size=64, neck_hidden_sizes=[16, 32, 64, 64], fusion_hidden_size=32, head_hidden_size=16, patch_size=14), "image56"),
        "conditional_detr": (t.ConditionalDetrConfig, t.ConditionalDetrModel, dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=t.ResNetConfig(embedding_size=16, out_features=["stage4"], **PYRAMID), d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=10), "image"),
        "vit_msn": (t.ViTMSNConfig, t.ViTMSNModel, dict(image_size=64, patch_size=8, **TEXT), "image"),
        "imagegpt": (t.ImageGPTConfig, t.ImageGPTModel, dict(n_embd=64, n_layer=2, n_head=4, vocab_size=513, n_positions=64), "ids512"),
        "timesformer": (t.TimesformerConfig, t.TimesformerModel, dict(image_size=32, patch_size=8, num_frames=4, **TEXT), "video"),
        "videomae": (t.VideoMAEConfig, t.VideoMAEModel, dict(image_size=32, patch_size=8, num_frames=4, tubelet_size=2, **TEXT), "video"),
        "bit": (t.BitConfig, t.BitModel, dict(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], embedding_size=32, num_groups=4), "image"),
        "deformable_detr": (t.DeformableDetrConfig, t.DeformableDetrModel, dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=t.ResNetConfig(embedding_size=16, out_features=["stage2", "stage3", "stage4"], **PYRAMID), d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=10, num_feature_levels=3, encoder_n_points=2, decoder_n_points=2), "image"),
        "maskformer": (t.MaskFormerConfig, t.MaskFormerModel, dict(backbone_config=t.SwinConfig(image_size=64, embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 2, 4, 8], window_size=2, out_features=["stage1", "stage2", "stage3", "stage4"]), decoder_config=t.DetrConfig(d_model=64, decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128), num_queries=10, fpn_feature_size=32, mask_feature_size=32), "image"),
        # audio
        "wav2vec2_conformer": (t.Wav2Vec2ConformerConfig, t.Wav2Vec2ConformerModel, dict(position_embeddings_type="rotary", conv_depthwise_kernel_size=7, **WAV), "audio"),
        "unispeech_sat": (t.UniSpeechSatConfig, t.UniSpeechSatModel, WAV, "audio"),
        "hubert": (t.HubertConfig, t.HubertModel, WAV, "audio"),
        "wavlm": (t.WavLMConfig, t.WavLMModel, dict(num_buckets=32, max_bucket_distance=64, **WAV), "audio"),
        "sew": (t.SEWConfig, t.SEWModel, dict(squeeze_factor=2, **WAV), "audio"),
        "data2vec_audio": (t.Data2VecAudioConfig, t.Data2VecAudioModel, dict(WAV, num_conv_pos_embeddings=5), "audio"),
        "ast": (t.ASTConfig, t.ASTModel, dict(max_length=64, num_mel_bins=32, patch_size=8, frequency_stride=8, time_stride=8, **TEXT), "spectrogram"),
        "encodec": (t.EncodecConfig, t.EncodecModel, dict(num_filters=8, hidden_size=32, upsampling_ratios=[4, 2], codebook_size=64, codebook_dim=32, num_lstm_layers=1), "waveform"),
        # more decoders
        "bloom": (t.BloomConfig, t.BloomModel, dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000), "ids"),
        "mpt": (t.MptConfig, t.MptModel, dict(d_model=64, n_layers=2, n_heads=4, vocab_size=1000), "ids"),
        "gpt_neox": (t.GPTNeoXConfig, t.GPTNeoXModel, TEXT, "ids"),
        "phi": (t.PhiConfig, t.PhiModel, TEXT, "ids"),
        "mistral": (t.MistralConfig, t.MistralModel, dict(num_key_value_heads=2, **TEXT), "ids"),
        "qwen2": (t.Qwen2Config, t.Qwen2Model, dict(num_key_value_heads=2, **TEXT), "ids"),
        "biogpt": (t.BioGptConfig, t.BioGptModel, TEXT, "ids"),
        "xglm": (t.XGLMConfig, t.XGLMModel, dict(d_model=64, num_layers=2, attention_heads=4, ffn_dim=128, vocab_size=1000), "ids"),
        "mpnet": (t.MPNetConfig, t.MPNetModel, TEXT, "ids"),
        # encoder-decoders (token ids and decoder token ids; speech features and decoder token ids)
        "bart": (t.BartConfig, t.BartModel, SEQ2SEQ, "ids+dec"),
        "mbart": (t.MBartConfig, t.MBartModel, SEQ2SEQ, "ids+dec"),
        "marian": (t.MarianConfig, t.MarianMTModel, dict(decoder_vocab_size=1000, pad_token_id=0, **SEQ2SEQ), "ids+dec"),
        "pegasus": (t.PegasusConfig, t.PegasusModel, SEQ2SEQ, "ids+dec"),
        "blenderbot": (t.BlenderbotConfig, t.BlenderbotModel, SEQ2SEQ, "ids+dec"),
        "t5": (t.T5Config, t.T5ForConditionalGeneration, dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=1000), "ids+dec"),
        "whisper": (t.WhisperConfig, t.WhisperModel, dict(num_mel_bins=16, max_source_positions=50, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **{k: v for k, v in SEQ2SEQ.items() if k != "max_position_embeddings"}), "mel+dec"),
        "speech2text": (t.Speech2TextConfig, t.Speech2TextModel, dict(input_feat_per_channel=16, conv_channels=32, max_source_positions=64, **SEQ2SEQ), "fbank+dec"),
        # two modalities
        "clip": (t.CLIPConfig, t.CLIPModel, dict(text_config=dict(TEXT, max_position_embeddings=32), vision_config=dict(TEXT, image_size=64, patch_size=8)), "ids+image"),
        "layoutlm": (t.LayoutLMConfig, t.LayoutLMModel, TEXT, "ids+bbox"),
        "perceiver": (t.PerceiverConfig, t.PerceiverModel, dict(num_latents=16, d_latents=64, d_model=32, num_blocks=1, num_self_attends_per_block=2, num_self_attention_heads=4, num_cross_attention_heads=1), "sequence"),
        # more vision
        "cvt": (t.CvtConfig, t.CvtModel, {}, "image"),
        "sam_vision": (t.SamVisionConfig, t.SamVisionModel, dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=64, patch_size=8, output_channels=32, window_size=4, global_attn_indexes=[1], mlp_dim=128), "image"),
        "mobilenet_v2_hf": (t.MobileNetV2Config, t.MobileNetV2Model, dict(image_size=64), "image"),
        "groupvit_vision": (t.GroupViTVisionConfig, t.GroupViTVisionModel, dict(hidden_size=64, intermediate_size=128, depths=[1, 1], num_group_tokens=[8, 0], num_output_groups=[8, 8], num_attention_heads=4, image_size=64, patch_size=8), "image"),
        "owlvit_vision": (t.OwlViTVisionConfig, t.OwlViTVisionModel, dict(image_size=64, patch_size=8, **TEXT), "image"),
    }


#: keyword names of the inputs of a kind that takes more than one (single-input kinds go positionally)
NAMED = {"ids+dec": ("input_ids", "decoder_input_ids"), "mel+dec": ("input_features", "decoder_input_ids"),
         "fbank+dec": ("input_features", "decoder_input_ids"), "ids+image": ("input_ids", "pixel_values"),
         "ids+bbox": ("input_ids", "bbox")}


def example_inputs(kind: str, tokens: int | None = None):
    """The example inputs of an input kind (token ids: ``tokens``, else 13 tokens, 16 for ``ids16``)."""
    if "+" in kind:  # one input per part: "ids+dec" is 13 token ids and 7 decoder token ids
        return tuple(x for part, seed in zip(kind.split("+"), (0, 1)) for x in _part(part, seed))
    if kind.startswith("ids"):
        return text_ids(kind, tokens or (16 if kind == "ids16" else 13), seed=0)
    return _part(kind, 0)


def _part(kind: str, seed: int) -> tuple:
    import torch

    gen = torch.Generator().manual_seed(seed)
    if kind in ("ids", "dec"):
        return text_ids(kind, 13 if kind == "ids" else 7, seed=seed)
    if kind == "bbox":  # LayoutLM boxes: x0 <= x1, y0 <= y1 in 0..1000
        xs, ys = torch.randint(0, 1001, (2, 1, 13, 2), generator=gen)
        return (torch.stack([xs.min(-1).values, ys.min(-1).values, xs.max(-1).values, ys.max(-1).values], -1),)
    shapes = {"image": (1, 3, 64, 64), "image56": (1, 3, 56, 56), "audio": (1, 4000), "spectrogram": (1, 64, 32),
              "waveform": (1, 1, 800), "video": (1, 4, 3, 32, 32), "mel": (1, 16, 100), "fbank": (1, 40, 16),
              "sequence": (1, 20, 32)}
    return (torch.randn(*shapes[kind], generator=gen),)


def text_ids(kind: str, length: int, seed: int):
    """``length`` token ids of a text kind's vocabulary (``ids512``: 0..511; others 3..999)."""
    import torch

    vocab, low = (512, 0) if kind == "ids512" else (1000, 3)
    return (torch.randint(low, vocab, (1, length), generator=torch.Generator().manual_seed(seed)),)


def masked(ids):
    """``(ids, attention_mask)`` for 3 sequences drawn like ``ids`` (1, L): the second padded on
    the right (its last third masked), the third on the left (its first quarter masked)."""
    import torch

    length = ids[0].shape[1]
    batch = torch.cat([ids[0], ids[0].roll(1, 1), ids[0].flip(1)])
    mask = torch.ones(3, length, dtype=torch.long)
    mask[1, length - max(1, length // 3):] = 0
    mask[2, :max(1, length // 4)] = 0
    return batch, mask


def _output_class():
    import torch

    class Output(torch.nn.Module):
        """The model's main tensor output (last hidden state, depth, logits or audio codes)."""

        def __init__(self, model, names=None):
            super().__init__()
            self.model, self.names = model, names

        def forward(self, x, y=None):
            if self.names:  # a kind of two inputs, by keyword
                out = self.model(**dict(zip(self.names, (x, y))), return_dict=True)
            else:  # one input, and the attention mask with --mask
                out = self.model(x, return_dict=True) if y is None else \
                    self.model(x, attention_mask=y, return_dict=True)
            if getattr(out, "image_embeds", None) is not None:  # CLIP: both towers' embeddings
                return torch.cat([out.text_embeds, out.image_embeds], -1)
            for key in ("last_hidden_state", "predicted_depth", "logits", "audio_codes"):
                if getattr(out, key, None) is not None:
                    return getattr(out, key)
            return out[0]

    return Output


def Output(model, names=None):  # noqa: N802 - a class, built on first use so that --help does not import torch
    return _output_class()(model, names)
