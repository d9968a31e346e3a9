"""The wmma tensor intrinsics the CUDA schedules use, registered without TVM's slow import.

``import tvm.s_tir.tensor_intrin`` parses about 160 TVMScript functions (every CUDA, ARM,
x86, ROCm, Hexagon and RISC-V intrinsic) and takes 20 s on an idle core, 60-110 s on this
project's shared 2-core machines, in every process that tensorizes. The schedules need
ten of them. ``wmma_intrin.json`` holds those ten (desc, impl) pairs serialized with
``tvm.ir.save_json`` from the pinned TVM (the version is recorded); ``intrin_group``
registers them under ``ext.``-prefixed names (so a later stock import, e.g. by dlight, never
collides) in milliseconds. With any other TVM version, or a missing/corrupt file, it falls
back to TVM's own module. Regenerate the file with ``python -m ext.tir_schedules.cuda.wmma``.
"""
from __future__ import annotations

import json
import os

import tvm

_FILE = os.path.join(os.path.dirname(__file__), "wmma_intrin.json")
_PREFIX = "ext."
_IN_DTYPES = ("float16",)
_ROLES = ("init", "load_a", "load_b", "compute", "store")


_LOAD_SCOPES = ("shared", "shared.dyn")


def _stock_group(in_dtype: str, trans_b: bool, load_scope: str) -> dict:
    from tvm.s_tir.tensor_intrin.cuda import get_wmma_intrin_group

    return get_wmma_intrin_group(load_scope, "shared.dyn", in_dtype, "float32", trans_b)


def _register_from_file() -> bool:
    from tvm.s_tir import TensorIntrin

    try:
        with open(_FILE) as f:
            data = json.load(f)
        if data.get("tvm_version") != tvm.__version__:
            return False
        for name, pair in data["intrinsics"].items():
            if TensorIntrin.get(_PREFIX + name, allow_missing=True) is None:
                TensorIntrin.register(_PREFIX + name, tvm.ir.load_json(pair["desc"]), tvm.ir.load_json(pair["impl"]))
        return True
    except (OSError, ValueError, KeyError, tvm.error.TVMError):
        return False


_STATE: dict = {"source": None}


def intrin_group(in_dtype: str, trans_b: bool, load_scope: str = "shared") -> dict:
    """``{"init", "load_a", "load_b", "compute", "store"} -> registered intrinsic name`` for wmma
    16x16x16 with ``in_dtype`` inputs in ``load_scope``, fp32 accumulation stored to ``shared.dyn``."""
    if _STATE["source"] is None:
        _STATE["source"] = "file" if _register_from_file() else "stock"
    names = {}
    for role, name in _names(in_dtype, trans_b, load_scope).items():
        names[role] = _PREFIX + name if _STATE["source"] == "file" else name
    if _STATE["source"] == "stock":
        import tvm.s_tir.tensor_intrin  # noqa: F401  (registers the stock names; guide bug 6)
    return names


def _names(in_dtype: str, trans_b: bool, load_scope: str) -> dict:
    """The stock intrinsic names (TVM's naming scheme), without importing TVM's module."""
    short = {"float16": "f16"}[in_dtype]
    t = "_trans" if trans_b else ""
    ls = load_scope.replace(".", "_")
    return {"init": "wmma_fill_16x16x16_f32", "load_a": f"wmma_load_16x16x16_{short}_a_{ls}",
            "load_b": f"wmma_load_16x16x16_{short}_b{t}_{ls}",
            "compute": f"wmma_sync_16x16x16_{short}{short}f32{t}", "store": "wmma_store_16x16x16_f32_shared_dyn"}


def generate(path: str = _FILE) -> dict:
    """Serialize the needed stock intrinsics (imports TVM's module: slow) to ``path``."""
    from tvm.s_tir import TensorIntrin

    out = {}
    for dt in _IN_DTYPES:
        for trans_b, scope in ((t, sc) for t in (False, True) for sc in _LOAD_SCOPES):
            stock = _stock_group(dt, trans_b, scope)
            assert stock == _names(dt, trans_b, scope), "TVM renamed its wmma intrinsics"
            for name in stock.values():
                ti = TensorIntrin.get(name)
                out[name] = {"desc": tvm.ir.save_json(ti.desc), "impl": tvm.ir.save_json(ti.impl)}
    data = {"tvm_version": tvm.__version__, "generated_by": "python -m ext.tir_schedules.cuda.wmma",
            "intrinsics": out}
    with open(path, "w") as f:
        json.dump(data, f)
    return data


if __name__ == "__main__":
    print(f"wrote {len(generate()['intrinsics'])} intrinsics to {_FILE}")
