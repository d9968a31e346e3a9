"""On-disk build cache: a second ``ext.build`` of the same model loads, not compiles.

Like TorchInductor's FX-graph cache and TensorRT's engine cache, an entry is
keyed by everything that decides the generated code:

* the module's structural hash (it covers the weights' bytes),
* the target (kind, mcpu, ISA, cores, arch),
* the tuning log's content (not its path),
* the versions of TVM, tvm-ffi and ext, and a hash of ext's own source files
  (an edited kernel must not be served from an old entry),
* the build options (``libraries``), ``TVM_NUM_THREADS`` and ``EXT_BLOCK_CHANNELS``.

Entries live under ``$EXT_CACHE_DIR`` (default ``~/.cache/ext``), one folder
per key holding the exported library (``lib.so``), the selection report and
a ``meta.json`` that repeats the key. A folder is written under a temporary
name and renamed into place, so a concurrent builder never sees half an entry;
the write itself is deferred (:func:`store_later`) to interpreter exit or the next build.
A corrupt or foreign entry is ignored with a warning, removed and rebuilt. The
cache keeps at most ``$EXT_CACHE_MAX_MB`` (default 2048) MiB: the least
recently used entries are evicted after each write.

``python -m ext.cache`` shows the entries; ``python -m ext.cache clear`` empties it.
Executables that call a vendor library through this Python process are not
cached (they cannot be exported).
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

FORMAT = 1
_SRC_HASH: dict = {}


def enabled() -> bool:
    """False when ``EXT_CACHE`` is ``0``/``off``/``false`` (the test suite sets it)."""
    return os.environ.get("EXT_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def cache_dir() -> Path:
    return Path(os.environ.get("EXT_CACHE_DIR") or Path.home() / ".cache" / "ext")


def max_bytes() -> int:
    return int(float(os.environ.get("EXT_CACHE_MAX_MB", "2048")) * 2**20)


def _source_hash() -> str:
    """Hash of ext's Python sources (computed once per process)."""
    if "h" not in _SRC_HASH:
        h = hashlib.sha256()
        root = Path(__file__).parent
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
        _SRC_HASH["h"] = h.hexdigest()[:16]
    return _SRC_HASH["h"]


def key_parts(mod, target, *, tuning_log=None, libraries=True, exact_specials=False) -> dict:
    """Every part of the cache key, readable (``meta.json`` stores it)."""
    import tvm
    import tvm_ffi
    from tvm_ffi import structural_hash

    from . import __version__
    from .relax_passes.block_channels import block_channels
    from .target import describe

    log_hash = None
    if tuning_log is not None:
        log_hash = hashlib.sha256(Path(tuning_log).read_bytes()).hexdigest()[:16]
    parts = {
        "format": FORMAT,
        "module": f"{structural_hash(mod):016x}",
        "target": str(target.export()) + " | " + describe(target),
        "tuning_log": log_hash,
        "libraries": str(libraries),
        "threads": os.environ.get("TVM_NUM_THREADS", ""),
        "block_channels": block_channels(),
        "tvm": tvm.__version__,
        "tvm_ffi": getattr(tvm_ffi, "__version__", "?"),
        "ext": __version__,
        "ext_source": _source_hash(),
    }
    if exact_specials:  # only then: the keys of every other build stay as they were
        parts["exact_specials"] = True
    return parts


def key_of(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _warn(msg: str) -> None:
    warnings.warn(f"ext build cache: {msg}", stacklevel=3)


def load(parts: dict):
    """``(executable, report)`` of the entry for ``parts``, or None (a bad entry is removed)."""
    from tvm.relax.vm_build import VMExecutable
    import tvm

    from .strategies.report import SelectionReport

    entry = cache_dir() / key_of(parts)
    if not entry.is_dir():
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if meta.get("key") != parts:
            _warn(f"entry {entry} belongs to another build (key mismatch): rebuilding")
            _remove(entry)
            return None
        lib = entry / "lib.so"
        if meta.get("lib_sha256") != _sha256(lib):  # dlopen of a truncated library dies with SIGBUS
            raise ValueError("lib.so does not match its checksum")
        ex = VMExecutable(tvm.runtime.load_module(str(lib)))
        ex.ext_library_path = str(lib)  # a loaded library cannot be packed again: ext.export_library copies it
        report = SelectionReport.from_dict(json.loads((entry / "report.json").read_text()))
    except Exception as err:  # truncated file, unreadable JSON, a library that does not load
        _warn(f"entry {entry} is corrupt ({type(err).__name__}: {str(err)[:120]}): rebuilding")
        _remove(entry)
        return None
    now = time.time()
    os.utime(entry, (now, now))  # LRU: a hit makes the entry young
    return ex, report


_PENDING: list = []
#: at most this many built executables wait for their cache write; the next build writes them first
MAX_PENDING = 2


def store_later(parts: dict, ex, report) -> None:
    """Queue :func:`store` for later: exporting a model's library with its weights takes
    seconds (3.7 s for ResNet-18's 93 MB), which the build's caller should not wait for.
    It cannot run on a background thread: exporting while a VM of this process runs
    corrupted the heap (measured: double free within 20 runs). :func:`wait` writes the
    queue; it runs at interpreter exit and before a build when ``MAX_PENDING`` are queued."""
    _PENDING.append((parts, ex, report))


def wait() -> None:
    """Write every queued cache entry of this process now."""
    while _PENDING:
        store(*_PENDING.pop(0))


def flush_if_full() -> None:
    if len(_PENDING) >= MAX_PENDING:
        wait()


atexit.register(wait)


def store(parts: dict, ex, report) -> Path | None:
    """Write the entry (temp folder, then rename); returns its folder, or None if not cacheable."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    entry = root / key_of(parts)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        ex.export_library(str(tmp / "lib.so"))
        (tmp / "report.json").write_text(json.dumps(report.to_dict()))
        meta = {"key": parts, "created": time.time(), "lib_sha256": _sha256(tmp / "lib.so")}
        (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True))
        try:
            os.rename(tmp, entry)
        except OSError:  # another process won the race: its entry is as good as ours
            _remove(tmp)
    except Exception as err:
        _remove(tmp)
        _warn(f"could not write an entry ({type(err).__name__}: {str(err)[:120]})")
        return None
    evict()
    return entry


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def entries() -> list[tuple[Path, int, float]]:
    """``(folder, bytes, last use)`` of every complete entry, oldest use first."""
    root = cache_dir()
    if not root.is_dir():
        return []
    out = [(p, _size(p), p.stat().st_mtime) for p in root.iterdir() if p.is_dir() and not p.name.startswith(".tmp-")]
    return sorted(out, key=lambda e: e[2])


def evict(limit: int | None = None) -> list[Path]:
    """Remove least recently used entries until the cache holds at most ``limit`` bytes."""
    limit = max_bytes() if limit is None else limit
    items = entries()
    total, removed = sum(s for _, s, _ in items), []
    for path, size, _ in items:
        if total <= limit:
            break
        _remove(path)
        total -= size
        removed.append(path)
    return removed


def clear() -> int:
    n = len(entries())
    _remove(cache_dir())
    return n


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["clear"]:
        print(f"removed {clear()} entries from {cache_dir()}")
        return 0
    if argv and argv[0] not in ("show",):
        print("usage: python -m ext.cache [show|clear]", file=sys.stderr)
        return 2
    items = entries()
    print(f"{cache_dir()}: {len(items)} entries, {sum(s for _, s, _ in items) / 2**20:.1f} MiB "
          f"(limit {max_bytes() / 2**20:.0f} MiB)")
    for path, size, used in reversed(items):
        try:
            target = json.loads((path / "meta.json").read_text())["key"]["target"].split(" | ")[-1]
        except Exception:
            target = "?"
        print(f"  {path.name}  {size / 2**20:7.1f} MiB  used {time.strftime('%Y-%m-%d %H:%M', time.localtime(used))}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
