"""Import, build and check many transformers architectures from small configs (random weights).

Why: the zoo (``scripts/zoo.py``) times a fixed set of full-size models; users bring others.
This sweep builds each architecture transformers defines for text, vision and audio that the
zoo lacks, at a small size (the table and its inputs: ``ext/models/sweep.py``), and checks
ext's output against PyTorch's: it finds what does not import, build or match, not what is
slow. Each model runs in its own subprocess with a time limit, so a crash is one row.

    python scripts/arch_sweep.py                          # all 96 (about 35 minutes on 2 cores)
    python scripts/arch_sweep.py --models falcon detr     # some
    python scripts/arch_sweep.py --symbolic               # text models, symbolic sequence length
    python scripts/arch_sweep.py --mask                   # text models, 3 padded sequences and their attention mask
    python scripts/arch_sweep.py --onnx dynamo            # through an ONNX file and ext.frontend.from_onnx
    python scripts/arch_sweep.py --tokens 96              # text models at 96 tokens (fused attention: >= 64 keys)
    python scripts/arch_sweep.py --params                 # weights as parameters, two checkpoints

A row is ``ok`` when ``max |ext - torch| / max |torch|`` < 1e-4 and NaNs sit where PyTorch's
are; ``WRONG`` otherwise; ``FAIL[stage]`` names the stage (import, build, run) and the error;
``TORCH`` means ``torch.export`` itself refused the model (e.g. a data-dependent shape).
With ``--onnx dynamo|torchscript`` the model goes through ``torch.onnx.export`` (``dynamo``:
PyTorch's default exporter, ``torch.export``-based; ``torchscript``: the older one, opset 17, as
``ext.bench`` exports for onnxruntime; ``--symbolic``: the length a named ONNX axis) and
``from_onnx`` instead of ``from_torch``: ``EXPORT`` means the exporter refused the model. Where
the file computes unlike PyTorch, ext is checked against onnxruntime on the same file, and the
row says so.
"""
from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

TOLERANCE = 1e-4

from ext.models.sweep import NAMED, Output, architectures, example_inputs, masked, text_ids  # noqa: E402
def _onnx_file(model, inputs, symbolic: bool, exporter: str) -> bytes:
    """``model`` exported to ONNX in memory: ``"torchscript"`` (opset 17, as ``ext.bench`` exports
    for onnxruntime) or ``"dynamo"`` (``torch.export``-based, PyTorch's default exporter)."""
    import io

    import torch

    from ext.torch_fixes import exportable_experts

    try:
        with torch.no_grad(), exportable_experts(model):  # MoE experts as from_torch exports them
            if exporter == "dynamo":
                dynamic = ({1: torch.export.Dim("seq", min=2, max=64)},) if symbolic else None
                return torch.onnx.export(model, inputs, input_names=_names(inputs), dynamo=True, verbose=False,
                                         dynamic_shapes=dynamic).model_proto.SerializeToString()
            buf = io.BytesIO()
            torch.onnx.export(model, inputs, buf, opset_version=17, input_names=_names(inputs), dynamo=False,
                              dynamic_axes={"x": {1: "seq"}} if symbolic else None)
            return buf.getvalue()
    except Exception as err:  # noqa: BLE001 - the exporter's refusal is the row
        raise _ExportRefused(f"{type(err).__name__}: {err}") from None


class _ExportRefused(Exception):
    """``torch.onnx.export`` refused the model."""


def _error(got, want) -> tuple[float, bool]:
    """(max |got - want| / max |want|, NaNs in the same places)."""
    import numpy as np

    err = float(np.nanmax(np.abs(got.astype("float64") - want)) / max(float(np.nanmax(np.abs(want))), 1e-30))
    return err, bool(np.array_equal(np.isnan(got), np.isnan(want)))


def _onnxruntime_outputs(data: bytes, checks) -> list:
    import onnxruntime as ort

    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return [sess.run(None, {n: x.numpy() for n, x in zip(_names(xs), xs)})[0] for xs in checks]


def _names(inputs) -> list[str]:
    """The ONNX files' input names: x, x1, x2..."""
    return ["x"] + [f"x{i}" for i in range(1, len(inputs))]


def run_one(name: str, symbolic: bool = False, exporter: str | None = None, tokens: int | None = None,
            mask: bool = False, params: bool = False) -> str:
    """One row: import, build, run, compare (in this process). ``symbolic``: a text model's
    sequence length is a symbol (2..64), checked at the example length and at 5 and 29;
    ``exporter``: imported with ``from_onnx`` from that ONNX exporter's file instead of
    ``from_torch``. Where the file itself computes unlike PyTorch, onnxruntime on the same file
    is the reference (the row says so). ``tokens``: a text model's example length. ``mask``: a
    text model called with 3 padded sequences and their ``attention_mask`` (``ext.models.sweep.masked``).
    ``params``: the weights imported as parameters (``keep_params_as_input``) and handed to
    ``ext.Model.set_params``; then a second checkpoint (other random weights) must replace them
    all: its output is checked against that model's."""
    os.environ.setdefault("EXT_CACHE", "0")
    import ext  # first: sets TVM_NUM_THREADS
    import onnx
    import torch
    import transformers

    from ext.frontend import from_onnx, from_torch

    cfg_cls, model_cls, kw, kind = architectures(transformers)[name]
    if (symbolic or tokens or mask) and not kind.startswith("ids") or (tokens or mask) and "+" in kind \
            or symbolic and kind not in ("ids", "ids16", "ids512", "ids+dec"):
        return "skipped (no sequence axis)"
    if mask and "attention_mask" not in inspect.signature(model_cls.forward).parameters:
        return "skipped (no attention_mask)"
    torch.manual_seed(0)
    cfg = cfg_cls(**kw)
    for field in ("max_position_embeddings", "n_positions", "max_seq_len"):  # room for the longer text
        limit = getattr(cfg, field, None)
        if tokens and isinstance(limit, int) and limit < tokens:
            try:
                setattr(cfg, field, tokens)
            except NotImplementedError:  # XLNet: no limit to raise
                pass
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    model = Output(model_cls(cfg).eval(), NAMED.get(kind)).eval()
    inputs = example_inputs(kind, tokens)
    checks = [inputs] + ([text_ids(kind, n, seed=n) + (text_ids(kind, n // 2 + 1, seed=n) if "+" in kind else ())
                          for n in (5, 29)] if symbolic else [])  # an encoder-decoder: decoder ids half as long
    if mask:
        inputs, checks = masked(inputs), [masked(xs) for xs in checks]
    seq = torch.export.Dim("seq", min=2, max=64)  # the decoder's its own: an encoder-decoder's lengths differ
    dynamic = tuple({1: seq if i == 0 or mask else torch.export.Dim("dec", min=2, max=64)}
                    for i in range(len(inputs))) if symbolic else None

    def imported(net):
        """``(data, mod, weights)``: the ONNX file (None from PyTorch), the module, the weights
        (None where they are bound as constants)."""
        data = _onnx_file(net, inputs, symbolic, exporter) if exporter else None
        got = from_onnx(onnx.load_from_string(data), keep_params_as_input=params) if data else \
            from_torch(net, inputs, dynamic_shapes=dynamic, keep_params_as_input=params)
        return (data, *got) if params else (data, got, None)

    def compared(runner, net, xs) -> tuple:
        out = runner(*[x.numpy() for x in xs])
        with torch.no_grad():
            return (out if hasattr(out, "numpy") else out[0]).numpy(), net(*xs).float().numpy()

    stage = "import"
    try:
        start = time.time()
        data, mod, weights = imported(model)
        stage = "build"
        ex = ext.build(mod, ext.target.cpu(), verbose=False)
        seconds = time.time() - start
        stage = "run"
        runner = ext.Model(ex)
        if params:
            runner.set_params(weights)
        pairs = [compared(runner, model, xs) for xs in checks]
        if params:  # a second checkpoint replaces every weight
            stage = "params"
            torch.manual_seed(1)
            other = Output(model_cls(cfg).eval(), NAMED.get(kind)).eval()
            runner.set_params(imported(other)[2])
            pairs.append(compared(runner, other, checks[0]))
    except _ExportRefused as err:
        return f"EXPORT {str(err).splitlines()[0][:200]}"
    except Exception as err:  # noqa: BLE001 - the row reports it
        first = str(err).splitlines()[0][:200] if str(err) else ""
        export = stage == "import" and "torch" in type(err).__module__
        return f"{'TORCH' if export else f'FAIL[{stage}]'} {type(err).__name__}: {first}"
    if any(got.shape != want.shape for got, want in pairs):
        return "WRONG shape " + ", ".join(f"{g.shape} vs {w.shape}" for g, w in pairs)
    errs = [_error(got, want) for got, want in pairs]
    worst, nan_ok = max(e for e, _ in errs), all(same for _, same in errs)
    ok = worst < TOLERANCE and nan_ok
    note = ""
    if not ok and data:  # does the ONNX file itself compute unlike PyTorch?
        ort = [_error(got, ref) for (got, _), ref in zip(pairs, _onnxruntime_outputs(data, checks))]
        if max(e for e, _ in ort) < TOLERANCE and all(same for _, same in ort):
            ok, note = True, f" against onnxruntime on the file (the file differs from PyTorch by {worst:.1e})"
            worst = max(e for e, _ in ort)
    return f"{'ok' if ok else 'WRONG'} import+build {seconds:.1f} s, error {worst:.1e}{note}" + (
        "" if nan_ok or note else ", NaNs differ") + (", 2 checkpoints" if params else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--models", nargs="+", metavar="NAME", help="architectures (default: all)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per model (default 600)")
    p.add_argument("--symbolic", action="store_true",
                   help="text models with a symbolic sequence length (2..64), checked at 3 lengths")
    p.add_argument("--onnx", choices=("torchscript", "dynamo"),
                   help="export to ONNX with this exporter and import with from_onnx")
    p.add_argument("--tokens", type=int, metavar="N", help="text models only, at N tokens (default 13)")
    p.add_argument("--mask", action="store_true",
                   help="text models with 3 padded sequences and their attention mask (from_torch only)")
    p.add_argument("--params", action="store_true",
                   help="weights as parameters (keep_params_as_input + ext.Model.set_params), two checkpoints")
    p.add_argument("--one", help=argparse.SUPPRESS)  # the subprocess
    args = p.parse_args(argv)
    if args.tokens is not None and not 2 <= args.tokens <= (64 if args.symbolic else 4096):
        p.error(f"--tokens must be 2..{64 if args.symbolic else 4096}, got {args.tokens}")
    if args.mask and args.onnx:
        p.error("--mask runs from_torch only (the ONNX files take one input)")
    if args.one:
        print(run_one(args.one, args.symbolic, args.onnx, args.tokens, args.mask, args.params), flush=True)
        return 0
    import transformers

    known = list(architectures(transformers))
    names = args.models or known
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown architecture(s) {', '.join(unknown)}; known: {', '.join(known)}")
    rows = {}
    for name in names:
        try:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", name] + (["--symbolic"] if args.symbolic else []) \
                + (["--onnx", args.onnx] if args.onnx else []) + (["--tokens", str(args.tokens)] if args.tokens else []) \
                + (["--mask"] if args.mask else []) + (["--params"] if args.params else [])
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
            rows[name] = lines[-1] if lines and res.returncode == 0 else \
                f"CRASH (exit {res.returncode}): {(res.stderr.strip().splitlines() or [''])[-1][:200]}"
        except subprocess.TimeoutExpired:
            rows[name] = f"TIMEOUT after {args.timeout:.0f} s"
        print(f"{name:16s} {rows[name]}", flush=True)
    good = sum(r.startswith("ok") for r in rows.values())
    tried = sum(not r.startswith("skipped") for r in rows.values())
    print(f"\n{good}/{tried} architectures imported, built and matched PyTorch within {TOLERANCE}")
    return 0 if good == tried else 1


if __name__ == "__main__":
    sys.exit(main())
