"""The argument pieces every script shares: rounds, threads, JSON, plot, quick, shapes.

Why: ten scripts had copied ``--rounds``/``--json``/``--plot`` flags and ``MxNxK`` parsers
that drifted apart (one split on ``x`` without checking, one accepted ``0x5x5``, one
crashed with a traceback). Here each flag is declared once with its validation, and a bad
value is an argparse error naming the field, e.g. ``argument --shapes: bad shape '64xax9':
N is 'a', not a positive integer (expected MxNxK)``.

    ap = argparse.ArgumentParser(...)
    cli.common_args(ap, rounds=7, threads=True, plot=True)
    ap.add_argument("--shapes", nargs="+", type=cli.parse_shape, default=[(64, 64, 64)])
    args = ap.parse_args()
    threads = cli.apply_threads(args, torch=True)   # before the first TVM / PyTorch run
    ...
    cli.write_json(args.json, rows)                  # no-op without --json

Importing it imports ``ext`` (which sets ``TVM_NUM_THREADS`` to the usable cores unless set);
TVM reads that variable only when its thread pool starts, at the first parallel run, so
``apply_threads`` after argument parsing still takes effect.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time


class ShapeError(ValueError, argparse.ArgumentTypeError):
    """A malformed shape or case string (a ``ValueError``; argparse shows its message as is)."""


def parse_shape(text: str, names: str = "MNK") -> tuple[int, ...]:
    """``"64x128x256"`` -> ``(64, 128, 256)``: one positive integer per letter of ``names``.

    Raises ``ShapeError`` naming the bad field, e.g. ``bad shape '64x0x9': N is '0', not a
    positive integer (expected MxNxK)``.
    """
    expected = "x".join(names)
    fields = str(text).strip().lower().split("x")
    if len(fields) != len(names):
        raise ShapeError(f"bad shape {text!r}: {len(fields)} fields, expected {len(names)} ({expected})")
    out = []
    for name, field in zip(names, fields):
        value = int(field) if re.fullmatch(r"\s*[0-9]+\s*", field) else None
        if not value:
            raise ShapeError(f"bad shape {text!r}: {name} is {field!r}, not a positive integer (expected {expected})")
        out.append(value)
    return tuple(out)


def format_shape(shape) -> str:
    """``(64, 128, 256)`` -> ``"64x128x256"`` (the inverse of ``parse_shape``)."""
    return "x".join(str(int(d)) for d in shape)


def count(minimum: int):
    """argparse ``type`` for an integer ``>= minimum`` (the error says which bound it broke)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def common_args(parser: argparse.ArgumentParser, *, rounds: int | None = 7, min_rounds: int = 1,
                threads: bool = False, json: bool | str = True, plot: bool = False, quick: str | None = None,
                rounds_help: str = "interleaved measurement rounds") -> argparse.ArgumentParser:
    """Add the shared flags: ``--rounds`` (unless ``rounds`` is None), ``--threads``, ``--json``
    (a string: its help text), ``--plot`` and ``--quick`` (its help text given as ``quick``).
    Returns ``parser``."""
    if rounds is not None:
        parser.add_argument("--rounds", type=count(min_rounds), default=rounds,
                            help=f"{rounds_help} (default {rounds})")
    if threads:
        parser.add_argument("--threads", type=count(0), default=0,
                            help="threads for TVM, PyTorch and BLAS (0: TVM_NUM_THREADS, else all usable cores)")
    if json:
        parser.add_argument("--json", metavar="PATH", help=json if isinstance(json, str)
                            else "also write the results as JSON to this path")
    if plot:
        parser.add_argument("--plot", metavar="PNG", help="write a chart to this PNG (matplotlib)")
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def apply_threads(args: argparse.Namespace | None = None, *, torch: bool = False) -> int:
    """The thread count every contender uses, applied; call before the first TVM run.

    ``args.threads`` > 0 sets ``TVM_NUM_THREADS`` (TVM reads it when its pool starts) and limits
    BLAS pools (threadpoolctl, when installed); otherwise ``TVM_NUM_THREADS`` stays as set by the
    user or by ``import ext`` (the usable cores). ``torch=True`` also sets PyTorch's intra-op pool.
    """
    wanted = getattr(args, "threads", 0) or 0
    if wanted:
        os.environ["TVM_NUM_THREADS"] = str(wanted)
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            pass
        else:
            threadpool_limits(wanted)
    if "TVM_NUM_THREADS" not in os.environ:
        from ext.target import configure_threads

        configure_threads()
    value = os.environ["TVM_NUM_THREADS"]
    threads = int(value) if re.fullmatch(r"\s*[0-9]+\s*", value) else 0
    if threads < 1:
        raise SystemExit(f"TVM_NUM_THREADS={value!r}: need a whole number of threads >= 1")
    if torch:
        import torch as _torch

        _torch.set_num_threads(threads)
    return threads


def write_json(path: str | None, data, default=None) -> str | None:
    """Write ``data`` as indented JSON to ``path`` (parent folders created; nothing without a path)."""
    if not path:
        return None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=default)
    return path


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (matplotlib comes with the ``test`` extra,
    which the README's first command installs)."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install -e .[plot]") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def log(msg: str) -> None:
    """A time-stamped progress line, flushed (long runs under ``tee``)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
