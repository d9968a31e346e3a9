"""Compile a scheduled CUDA PrimFunc without a GPU and describe its kernels.

``inspect_kernel(func, target)`` runs TVM's TIR pipeline (the same stages as
``tvm.tirx.build``), generates CUDA C, and reads the launch configuration from
the lowered device functions: thread-block and grid extents and the static and
dynamic shared memory each kernel allocates. ``check_limits`` compares them
with the architecture's limits. Used by tests, ``scripts/bench_cuda.py
--dry-run`` and anyone who wants to see what a candidate generates.
"""
from __future__ import annotations

import dataclasses
import re

import tvm

#: per-block limits: (max threads, static shared bytes, dynamic shared bytes after opt-in)
ARCH_LIMITS = {
    "sm_70": (1024, 48 * 1024, 96 * 1024),
    "sm_75": (1024, 48 * 1024, 64 * 1024),
    "sm_80": (1024, 48 * 1024, 163 * 1024),
    "sm_86": (1024, 48 * 1024, 99 * 1024),
    "sm_89": (1024, 48 * 1024, 99 * 1024),
    "sm_90": (1024, 48 * 1024, 227 * 1024),
}
_GRID_LIMITS = {"blockIdx.x": 2 ** 31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}
_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int32": 4,
          "int64": 8}


@dataclasses.dataclass
class KernelInfo:
    name: str
    threads: dict  # {"threadIdx.x": 32, ...}
    grid: dict  # {"blockIdx.x": 4, ...}
    static_shared: int  # bytes
    dynamic_shared: int  # bytes

    @property
    def threads_per_block(self) -> int:
        n = 1
        for v in self.threads.values():
            n *= v
        return n


@dataclasses.dataclass
class CompiledSource:
    source: str
    kernels: list


_LAUNCH = re.compile(r'T\.launch_thread\("((?:thread|block)Idx\.[xyz])", (\d+)\)')
_ALLOC = re.compile(r'T\.alloc_(buffer|shared)\(\((\d+),\)(?:, "(\w+)")?(?:, scope="([\w.]+)")?')


def _describe(name: str, script: str) -> KernelInfo:
    threads, grid = {}, {}
    for tag, ext in _LAUNCH.findall(script):
        (threads if tag.startswith("thread") else grid)[tag] = int(ext)
    static = dyn = 0
    for kind, n, dtype, scope in _ALLOC.findall(script):
        scope = "shared" if kind == "shared" else scope
        if not scope.startswith("shared"):
            continue
        size = int(n) * _BYTES.get(dtype or "float32", 4)
        if scope == "shared":
            static += size
        else:
            dyn += size
    return KernelInfo(name, threads, grid, static, dyn)


def inspect_kernel(func, target) -> CompiledSource:
    """CUDA source and launch configuration of one scheduled PrimFunc (no GPU needed)."""
    from tvm.tirx.build import split_host_device_mods, tir_to_runtime

    func = func.with_attr("global_symbol", "kernel")
    host = target.host or tvm.target.Target({"kind": "llvm"})
    mod = tvm.tirx.transform.BindTarget(target.with_host(host))(tvm.IRModule({"kernel": func}))
    pipeline, fin_host, fin_dev = tvm.tirx.get_default_tir_pipeline(target)
    host_mod, dev_mods = split_host_device_mods(pipeline(mod))
    host_mod = fin_host()(host_mod)
    dev_mods = {t: fin_dev()(m) for t, m in dev_mods.items()}
    kernels = [_describe(gv.name_hint, f.script()) for m in dev_mods.values() for gv, f in m.functions_items()]
    rt = tir_to_runtime(host_mod, dev_mods, host)
    source = "\n".join(m.inspect_source() for m in rt.imports if m.kind == "cuda")
    return CompiledSource(source, kernels)


def check_limits(kernels, arch: str) -> list[str]:
    """Violations of ``arch``'s launch limits (empty when every kernel fits)."""
    max_threads, max_static, max_dyn = ARCH_LIMITS.get(arch, ARCH_LIMITS["sm_80"])
    problems = []
    for k in kernels:
        if not 1 <= k.threads_per_block <= max_threads:
            problems.append(f"{k.name}: {k.threads_per_block} threads per block (limit {max_threads})")
        if k.threads_per_block % 32 and k.threads_per_block > 32:
            problems.append(f"{k.name}: {k.threads_per_block} threads is not a whole number of warps")
        for tag, n in k.grid.items():
            if n > _GRID_LIMITS[tag]:
                problems.append(f"{k.name}: {tag} = {n} (limit {_GRID_LIMITS[tag]})")
        if k.static_shared > max_static:
            problems.append(f"{k.name}: {k.static_shared} B static shared memory (limit {max_static})")
        if k.static_shared + k.dynamic_shared > max_dyn:
            problems.append(f"{k.name}: {k.static_shared + k.dynamic_shared} B shared memory (limit {max_dyn})")
    return problems


_CACHE: dict = {}


def inspect_candidate(cand, wl, target, config=None) -> CompiledSource:
    """``inspect_kernel`` of a candidate's kernel (default config unless given), cached per
    (candidate, workload, arch, config) in this process (tests and dry runs reuse builds)."""
    config = config if config is not None else cand.default_config(wl, target)
    key = (cand.name, wl.key, str(target.attrs.get("arch", "")), repr(config))
    if key not in _CACHE:
        _CACHE[key] = inspect_kernel(cand.build(wl, config, target), target)
    return _CACHE[key]
