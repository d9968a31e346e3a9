"""The on-disk build cache (``ext.cache``): hits, misses on every key part, corrupt and
foreign entries, concurrent writers, LRU eviction, the show/clear command."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.vm_build import VMExecutable

import ext
from ext import cache
from ext.models.gemm import dense, numpy_reference


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("EXT_CACHE", "1")
    monkeypatch.setenv("EXT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _build(mod, **kw):
    ex = ext.build(mod, ext.target.cpu(), verbose=False, **kw)
    cache.wait()
    return ex, ext.last_report()


def _run(ex, x):
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


X = np.random.default_rng(3).standard_normal((7, 13)).astype("float32")


def test_second_build_is_a_hit_with_the_same_behaviour_and_report(cache_on):
    mod, params = dense(7, 11, 13)
    ex1, rep1 = _build(mod)
    ex2, rep2 = _build(mod)
    assert not rep1.cached and rep2.cached and len(cache.entries()) == 1
    np.testing.assert_array_equal(_run(ex1, X), _run(ex2, X))
    np.testing.assert_allclose(_run(ex2, X), numpy_reference(X, params), rtol=1e-5, atol=1e-5)
    assert [d.to_json() for d in rep1] == [d.to_json() for d in rep2]
    assert rep2.stages[0][0] == "cache hit" and {s[0] for s in rep1.stages} >= {"graph", "select", "codegen"}


def test_a_hit_exports_and_the_export_runs(cache_on, tmp_path):
    mod, params = dense(7, 11, 13)
    _build(mod)
    ex, rep = _build(mod)
    assert rep.cached
    path = ext.export_library(ex, tmp_path / "hit.so")  # TVM alone cannot pack a loaded library again
    got = _run(VMExecutable(tvm.runtime.load_module(str(path))), X)
    np.testing.assert_allclose(got, numpy_reference(X, params), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="cache hit"):
        ext.export_library(ex, tmp_path / "opts.so", workspace_dir=str(tmp_path))
    cache.clear()
    with pytest.raises(FileNotFoundError, match="evicted or cleared"):
        ext.export_library(ex, tmp_path / "gone.so")


def test_cache_false_and_env_bypass(cache_on, monkeypatch):
    mod, _ = dense(7, 11, 13)
    ext.build(mod, ext.target.cpu(), cache=False, verbose=False)
    cache.wait()
    assert cache.entries() == []
    monkeypatch.setenv("EXT_CACHE", "0")
    _build(mod)
    assert cache.entries() == []


def _changed_key_builds(tmp_path):
    """Builds that differ from ``dense(7, 11, 13)`` in exactly one key part."""
    log = tmp_path / "log.jsonl"
    log.write_text("")
    yield "weights", lambda: _build(dense(7, 11, 13, seed=1)[0])
    yield "shape", lambda: _build(dense(7, 11, 17)[0])
    yield "tuning log", lambda: _build(dense(7, 11, 13)[0], tuning_log=str(log))
    yield "libraries", lambda: _build(dense(7, 11, 13)[0], libraries=False)


def test_any_changed_key_part_misses(cache_on, tmp_path, monkeypatch):
    mod, _ = dense(7, 11, 13)
    _build(mod)
    for what, build in _changed_key_builds(tmp_path):
        assert not build()[1].cached, what
    n = len(cache.entries())
    monkeypatch.setitem(cache._SRC_HASH, "h", "edited-ext-source")  # an edited kernel
    assert not _build(mod)[1].cached
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    assert not _build(mod)[1].cached
    assert len(cache.entries()) == n + 2
    target = ext.target.cpu(num_cores=1)
    parts = cache.key_parts(mod, target)
    assert cache.key_of(parts) != cache.key_of(cache.key_parts(mod, ext.target.cpu(num_cores=2)))


def test_corrupt_entry_is_ignored_with_a_warning_and_rebuilt(cache_on):
    mod, params = dense(7, 11, 13)
    _build(mod)
    (entry,) = [p for p, _, _ in cache.entries()]
    lib = entry / "lib.so"
    lib.write_bytes(lib.read_bytes()[:1000])  # truncated
    with pytest.warns(UserWarning, match="corrupt"):
        ex, rep = _build(mod)
    assert not rep.cached
    np.testing.assert_allclose(_run(ex, X), numpy_reference(X, params), rtol=1e-5, atol=1e-5)
    assert _build(mod)[1].cached  # rewritten


def test_foreign_entry_is_ignored_with_a_warning(cache_on):
    mod, _ = dense(7, 11, 13)
    _build(mod)
    (entry,) = [p for p, _, _ in cache.entries()]
    meta = json.loads((entry / "meta.json").read_text())
    meta["key"]["module"] = "someone else's"
    (entry / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="another build"):
        assert not _build(mod)[1].cached


_WRITER = """
import os, sys, numpy as np, tvm, ext
from ext.models.gemm import dense
ex = ext.build(dense(7, 11, 13)[0], ext.target.cpu(), verbose=False)
ext.cache.wait()
print("ok")
"""


def test_concurrent_writers_leave_one_complete_entry(cache_on):
    env = dict(os.environ, EXT_CACHE="1", EXT_CACHE_DIR=str(cache_on))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 and o.strip().endswith("ok") for p, (o, _) in zip(procs, outs)), outs
    assert len(cache.entries()) == 1 and not list(cache_on.glob(".tmp-*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _build(dense(7, 11, 13)[0])[1].cached


def test_lru_eviction_keeps_the_cache_under_its_limit(cache_on, monkeypatch):
    mods = [dense(7, 11, 13, seed=s)[0] for s in range(3)]
    _build(mods[0])
    size = cache.entries()[0][1]
    monkeypatch.setenv("EXT_CACHE_MAX_MB", str(2.5 * size / 2**20))  # room for two entries
    _build(mods[1])
    os.utime(cache.entries()[0][0], (1, 1))  # entry 0 is the oldest...
    assert _build(mods[0])[1].cached          # ...until a hit makes it young again
    _build(mods[2])                           # evicts entry 1, the least recently used
    assert len(cache.entries()) == 2
    assert _build(mods[0])[1].cached and _build(mods[2])[1].cached
    assert not _build(mods[1])[1].cached


def test_show_and_clear_command(cache_on):
    _build(dense(7, 11, 13)[0])
    env = dict(os.environ, EXT_CACHE_DIR=str(cache_on))
    show = subprocess.run([sys.executable, "-m", "ext.cache"], env=env, capture_output=True, text=True, timeout=120)
    assert "1 entries" in show.stdout and "llvm" in show.stdout
    clear = subprocess.run([sys.executable, "-m", "ext.cache", "clear"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert "removed 1 entries" in clear.stdout and cache.entries() == []
