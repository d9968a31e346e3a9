#!/usr/bin/env python
"""GPT-2 small with a KV cache: ext against PyTorch eager and onnxruntime, in one run.

The model is transformers' ``GPT2LMHeadModel(GPT2Config())`` (12 layers, 768 wide, random
seeded weights). ext runs two executables built once with the weights as run-time
parameters (``ext.models.kv_decoder``): the prefill of ``--prefill`` tokens, and one decode
step whose past length is symbolic (one executable for every past length 1..1023). The
cache goes in and out as tensors (24 of ``[1, 12, past, 64]``).

Contenders, interleaved per row (median of ``--rounds``; ratios per round):

* PyTorch eager: ``model(ids, cache=DynamicCache(past), use_cache=True)``, transformers' own
  cached forward (the cache object wraps the same past tensors; its ``update`` concatenates
  as ext's step does);
* onnxruntime: the same wrappers exported with the past length (and the prompt) as dynamic
  axes, one session per wrapper;
* ext.

Before timing, each row checks the logits and every new cache tensor against PyTorch's
(``max |diff| / max |ref|``, printed; over 1e-4 stops the script).

    python scripts/bench_gpt2.py --rounds 7
    python scripts/bench_gpt2.py --past 32 256 1000 --prefill 128 --json gpt2.json
    python scripts/bench_gpt2.py --quick          # 2 layers, 64 wide: the whole path in seconds
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import ext  # noqa: E402  (first: sets TVM_NUM_THREADS)
import numpy as np  # noqa: E402

from ext import cli  # noqa: E402
from ext.bench import interleaved, onnxruntime_export, output_errors  # noqa: E402

TOLERANCE = 1e-4


def _model(quick: bool):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    kw = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=997, n_positions=1024, bos_token_id=0,
              eos_token_id=0) if quick else {}
    return tf.GPT2LMHeadModel(tf.GPT2Config(**kw)).eval()


def _flat_cache(out) -> list:
    return [t for layer in out.cache.layers for t in (layer.keys, layer.values)]


def _check(row: str, got: list, ref: list) -> float:
    """Largest relative error over the logits and every cache tensor; stops the run above the bar."""
    worst = max(output_errors(g, r.numpy())["max_rel"] for g, r in zip(got, ref))
    if len(got) != len(ref) or worst > TOLERANCE:
        raise SystemExit(f"{row}: ext's outputs differ from PyTorch's (max rel {worst:.2e} > {TOLERANCE:g}, "
                         f"{len(got)} vs {len(ref)} outputs)")
    return worst


def _names(layers: int, prefix: str) -> list[str]:
    return [f"{prefix}_{kind}{i}" for i in range(layers) for kind in ("k", "v")]


def _row(name, contenders, rounds, err, extra=None) -> dict:
    res = interleaved(contenders, "ext", rounds=rounds, min_seconds=0.3)
    r = {"row": name, "max_rel": err, **(extra or {})}
    for who in contenders:
        r[f"{who}_ms"] = res[who]["median_s"] * 1e3
    r["ext_vs_torch"] = 1 / res["PyTorch"]["ratio"]
    r["ext_vs_ort"] = 1 / res["onnxruntime"]["ratio"] if "onnxruntime" in res else None
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.common_args(ap, rounds=7, threads=True, quick="2 layers, 64 wide, a few rounds: the whole path quickly")
    ap.add_argument("--past", nargs="*", type=int, default=[32, 256, 1000], help="past lengths of the decode rows")
    ap.add_argument("--prefill", type=int, default=128, help="prompt length of the prefill row (0: none)")
    ap.add_argument("--no-ort", action="store_true", help="leave onnxruntime out")
    args = ap.parse_args(argv)
    threads = cli.apply_threads(args, torch=True)
    import torch

    from ext.models import kv_decoder as kv

    lm = _model(args.quick)
    layers, rounds = lm.config.n_layer, (2 if args.quick else args.rounds)
    target = ext.target.cpu()
    print(f"threads={threads} rounds={rounds} layers={layers} ({ext.target.describe(target)})", flush=True)

    decode_mod, weights = kv.export_decoder(lm, "decode")
    decode = ext.Model(ext.build(decode_mod, target))
    decode.set_params(weights)
    ids1 = torch.tensor([[42]])
    sess = None
    if not args.no_ort:
        past = kv.random_past(lm, 7)
        sess, _ = onnxruntime_export(kv.DecodeStep(lm), (ids1, *past), threads, ["ids", *_names(layers, "past")],
                                     output_names=["logits", *_names(layers, "present")],
                                     dynamic_axes={n: {2: "past"} for n in _names(layers, "past")})
    rows = []
    print("| row | PyTorch ms | onnxruntime ms | ext ms | ext/PyTorch | ext/onnxruntime | max rel err |\n"
          "|---|---|---|---|---|---|---|", flush=True)

    def show(r):
        ort_ms = f"{r['onnxruntime_ms']:.2f}" if "onnxruntime_ms" in r else "-"
        ort_x = f"{r['ext_vs_ort']:.2f}" if r["ext_vs_ort"] is not None else "-"
        print(f"| {r['row']} | {r['PyTorch_ms']:.2f} | {ort_ms} | {r['ext_ms']:.2f} | {r['ext_vs_torch']:.2f} | "
              f"{ort_x} | {r['max_rel']:.1e} |", flush=True)
        rows.append(r)

    if args.prefill:
        prompt = torch.randint(0, lm.config.vocab_size, (1, args.prefill), generator=torch.Generator().manual_seed(1))
        mod, w = kv.export_decoder(lm, "prefill", tokens=args.prefill)
        prefill = ext.Model(ext.build(mod, target))
        prefill.set_params(w)
        with torch.no_grad():
            ref = lm(prompt, use_cache=True)
        got = prefill(prompt.numpy())
        err = _check("prefill", [t.numpy() for t in got], [ref.logits, *_flat_cache(ref)])
        fns = {"PyTorch": lambda: lm(prompt, use_cache=True), "ext": lambda: prefill(prompt.numpy())}
        if not args.no_ort:
            psess, _ = onnxruntime_export(kv.Prefill(lm), (prompt,), threads, ["ids"])
            fns["onnxruntime"] = lambda: psess.run(None, {"ids": prompt.numpy()})
        with torch.no_grad():
            show(_row(f"prefill {args.prefill} tokens", fns, rounds, err))

    for p in args.past:
        past = kv.random_past(lm, p, seed=p)
        np_past = [t.numpy() for t in past]
        with torch.no_grad():
            ref = lm(ids1, cache=kv.torch_cache(lm, list(past)), use_cache=True)
        got = decode(ids1.numpy(), *np_past)
        err = _check(f"decode past={p}", [t.numpy() for t in got], [ref.logits, *_flat_cache(ref)])
        ext_args = [decode._tensor(x) for x in (ids1.numpy(), *np_past)]
        fns = {"PyTorch": lambda: lm(ids1, cache=kv.torch_cache(lm, list(past)), use_cache=True),
               "ext": lambda: decode(*ext_args)}
        if sess is not None:
            feed = {"ids": ids1.numpy(), **dict(zip(_names(layers, "past"), np_past))}
            fns["onnxruntime"] = lambda: sess.run(None, feed)
        with torch.no_grad():
            show(_row(f"decode, past {p}", fns, rounds, err, {"past": p}))
    cli.write_json(args.json, {"threads": threads, "layers": layers, "rows": rows})


if __name__ == "__main__":
    main()
