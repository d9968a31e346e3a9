"""Zoo architectures for text (encoders, causal LMs) and audio encoders.

Registered into ``ext.models.zoo.ZOO`` when ``zoo`` is imported (see its docstring for the
conventions: random seeded weights, randomized BatchNorm, quick variants, one output tensor).
"""
from __future__ import annotations

from .zoo import _eager, _register, _tokens

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
