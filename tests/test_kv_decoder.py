"""GPT-2-style decoding with the KV cache as explicit tensors (ext.models.kv_decoder): the
wrappers against transformers' own cached forward, the ext builds (weights as run-time
parameters, past length symbolic) against both, and a greedy loop token for token."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as tf
import tvm

import ext
from ext.models import kv_decoder as kv

RTOL = 1e-4


def _lm(layers=2, width=64, heads=4, vocab=997, positions=64, seed=0):
    torch.manual_seed(seed)
    cfg = tf.GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=positions,
                        bos_token_id=0, eos_token_id=0)
    return tf.GPT2LMHeadModel(cfg).eval()


def _rel(got, ref) -> float:
    got, ref = np.asarray(got, dtype="float64"), np.asarray(ref, dtype="float64")
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.fixture(scope="module")
def lm():
    return _lm()


@pytest.fixture(scope="module")
def decode(lm):
    mod, weights = kv.export_decoder(lm, "decode")
    model = ext.Model(ext.build(mod, ext.target.cpu()))
    model.set_params(weights)
    return model


@pytest.fixture(scope="module")
def prefill(lm):
    mod, weights = kv.export_decoder(lm, "prefill", tokens=11)
    model = ext.Model(ext.build(mod, ext.target.cpu()))
    model.set_params(weights)
    return model


@pytest.mark.parametrize("past", [1, 2, 13, 63])
def test_decode_step_matches_transformers_cache(lm, decode, past):
    flat = kv.random_past(lm, past, seed=past)
    ids = torch.tensor([[past % 997]])
    with torch.no_grad():
        ref = lm(ids, cache=kv.torch_cache(lm, [t.clone() for t in flat]), use_cache=True)
        wrapped = kv.DecodeStep(lm)(ids, *flat)
    ref_cache = [t for layer in ref.cache.layers for t in (layer.keys, layer.values)]
    assert _rel(wrapped[0], ref.logits) < 1e-6
    got = decode(ids.numpy(), *[t.numpy() for t in flat])
    assert len(got) == 1 + len(ref_cache)
    assert _rel(got[0].numpy(), ref.logits) < RTOL
    for g, r in zip(list(got)[1:], ref_cache):
        assert g.numpy().shape == (1, 4, past + 1, 16)
        assert _rel(g.numpy(), r) < RTOL


def test_decode_fuses_the_cache_append_with_the_attention_products(lm):
    """Each layer's k and v caches are appended inside the kernels that read them (no separate
    concatenation, no transpose of the key cache); the prefill (static) keeps the batch kernels."""
    mod, _ = kv.export_decoder(lm, "decode")
    target = ext.target.cpu()
    with target:
        lowered = ext.pipeline(target)(mod)
    names = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any(n.startswith("kv_append_scores") for n in names), names
    assert any(n.startswith("kv_append_mix") for n in names), names
    assert not any("concatenate" in n for n in names), names
    mod, _ = kv.export_decoder(lm, "prefill", tokens=7)
    ext.build(mod, target)
    assert "matmul.batch" in {d.name for d in ext.last_report().find("matmul")}


def test_prefill_matches_transformers(lm, prefill):
    ids = torch.randint(0, 997, (1, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = lm(ids, use_cache=True)
    got = prefill(ids.numpy())
    assert _rel(got[0].numpy(), ref.logits) < RTOL
    ref_cache = [t for layer in ref.cache.layers for t in (layer.keys, layer.values)]
    for g, r in zip(list(got)[1:], ref_cache):
        assert _rel(g.numpy(), r) < RTOL


def test_greedy_20_steps_equal_transformers(lm, prefill, decode):
    prompt = np.random.default_rng(5).integers(0, 997, (1, 11))
    want = kv.torch_greedy(lm, prompt, 20)
    assert kv.greedy(prefill, decode, prompt, 20) == want


def test_decode_rejects_wrong_cache_shape(decode, lm):
    flat = [t.numpy() for t in kv.random_past(lm, 5)]
    flat[3] = flat[3][:, :, :4]  # one value cache shorter than the rest
    with pytest.raises(ValueError, match=r"input 4 \('flat_past_3'\): \w+=4, but input 1 \('flat_past_0'\) has \w+=5"):
        decode(np.array([[1]]), *flat)


def test_export_rejects_non_gpt2_model():
    with pytest.raises(TypeError, match="GPT-2-style"):
        kv.DecodeStep(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="prefill' or 'decode"):
        kv.export_decoder(_lm(layers=1, width=32, heads=2, vocab=50, positions=16), "encode")


def test_decode_refuses_a_past_beyond_the_context(decode, lm):
    """Past 64 on a 64-position model would read past the position table: refused, named."""
    flat = [t.numpy() for t in kv.random_past(lm, 64)]
    with pytest.raises(ValueError, match="outside the range the model was built for"):
        decode(np.array([[1]]), *flat)


@pytest.mark.parametrize("kind,B,H,M,D,T,lanes", [("scores", 1, 3, 1, 32, 1, 16), ("scores", 2, 5, 1, 32, 2, 16), ("scores", 1, 3, 1, 20, 1, 4),
                                                  ("mix", 1, 3, 1, 32, 1, None), ("mix", 2, 5, 2, 19, 3, None)])
def test_cache_append_kernels_match_numpy(kind, B, H, M, D, T, lanes):
    """The fused append + product kernels against NumPy for past lengths 1, 13 (prime), 100."""
    from tvm import te, tirx

    from ext.tir_schedules.common import create_schedule, finish
    from ext.tir_schedules.cpu import kv_append as sched
    from ext.topi_kernels import kv_append as kern

    P = tirx.Var("p", "int64")
    past, new = te.placeholder((B, H, P, D), name="past"), te.placeholder((B, H, T, D), name="new")
    left = te.placeholder((B, H, M, D) if kind == "scores" else (B, H, M, P + T), name="left")
    if kind == "scores":
        present, out = kern.append_scores(left, past, new, lanes)
    else:
        present, out = kern.append_mix(left, past, new)
    sch = create_schedule([left, past, new, present, out])
    (sched.schedule_append_scores if kind == "scores" else sched.schedule_append_mix)(sch)
    f = tvm.compile(finish(sch, "kv").with_attr("global_symbol", "k"), target=ext.target.cpu())
    rng = np.random.default_rng(7)
    for p in (1, 13, 100):
        pa, nw = rng.standard_normal((B, H, p, D)).astype("float32"), rng.standard_normal((B, H, T, D)).astype("float32")
        lf = rng.standard_normal((B, H, M, D if kind == "scores" else p + T)).astype("float32")
        full = np.concatenate([pa, nw], axis=2)
        want = lf.astype("float64") @ (np.swapaxes(full, -1, -2) if kind == "scores" else full)
        got_p = tvm.runtime.empty(full.shape, "float32")
        got = tvm.runtime.empty(want.shape, "float32")
        f["k"](*[tvm.runtime.tensor(x) for x in (lf, pa, nw)], got_p, got)
        np.testing.assert_array_equal(got_p.numpy(), full)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=f"past {p}")
