"""Compile and run one candidate on its own (tests, benchmarks, the tuner).

``CompiledCandidate`` holds the kernel and its input transforms (e.g. weight
packing) built for one (workload, config, target); ``run`` takes NumPy inputs
in the workload's call order and returns the NumPy output, ``timer`` returns a
callable timing the kernel alone (transforms of constant inputs are done once,
as the pipeline folds them at compile time). A library candidate (whose
``build`` returns a ``PackedCall``) runs the same way: its packed function,
then its epilogue kernel, timed with a wall clock around both.

``Model`` runs a whole executable whose weights are run-time parameters: the
weight transforms ``ext.build`` lifted out of ``main`` run once per
``set_params``, then every call takes the inputs only.
"""
from __future__ import annotations

import time

import numpy as np
import tvm
from tvm.target import Target

from .strategies.registry import Candidate, PackedCall
from .target import compile_tir, get_target_kind, target_kind
from .tir_schedules.common import param_shape
from .workload import Workload


def _out_shape(wl: Workload):
    out = wl.attr("out_shape")
    if out is None:
        raise ValueError(f"workload {wl.key} has no out_shape attr")
    return tuple(out)


class CompiledCandidate:
    def __init__(self, cand: Candidate, wl: Workload, config, target: Target):
        self.cand, self.wl, self.config, self.target = cand, wl, config, target
        built, funcs = cand.build_all(wl, config, target)
        if isinstance(built, PackedCall):  # a vendor library: its packed function + our epilogue
            self.kernel = _LibraryKernel(built, target)
        else:
            self.kernel = compile_tir(built.with_attr("global_symbol", "kernel"), target)
        self.transforms = {i: compile_tir(f.with_attr("global_symbol", "transform"), target)
                           for i, f in funcs.items()}
        self.transform_shapes = {i: param_shape(f, -1) for i, f in funcs.items()}
        self.dev = target_kind(target).device(0)

    def prepare(self, inputs) -> list:
        """NumPy inputs -> device tensors in the kernel's layout (transforms applied)."""
        args = []
        for i, x in enumerate(inputs):
            t = tvm.runtime.tensor(np.asarray(x, order="C"), self.dev)
            if i in self.transforms:
                fn = self.transforms[i]
                dst = tvm.runtime.empty(self.transform_shapes[i], x.dtype, self.dev)
                fn["transform"](t, dst)
                t = dst
            args.append(t)
        return args

    def run(self, inputs) -> np.ndarray:
        args = self.prepare(inputs)
        out = tvm.runtime.empty(_out_shape(self.wl), self.wl.out_dtype, self.dev)
        self.kernel["kernel"](*args, out)
        return out.numpy()

    def timer(self, inputs, number: int = 10, repeat: int = 3):
        args = self.prepare(inputs)
        out = tvm.runtime.empty(_out_shape(self.wl), self.wl.out_dtype, self.dev)
        if isinstance(self.kernel, _LibraryKernel):
            return lambda: self.kernel.time(args, out, number, repeat)
        f = self.kernel.mod.time_evaluator("kernel", self.dev, number=number, repeat=repeat)
        return lambda: f(*args, out).median


class _LibraryKernel:
    """A ``PackedCall`` run like a compiled kernel: ``self["kernel"](*args, out)``.

    The epilogue (if any) is compiled with the same fallback schedule the
    pipeline gives it; the anchor's output lives in a scratch tensor.
    """

    def __init__(self, call: PackedCall, target: Target):
        from .relax_passes.fallback_schedule import FallbackSchedule

        self.call, self.func = call, tvm.get_global_func(call.func_name)
        self.epilogue = None
        if call.epilogue is not None:
            mod = tvm.IRModule({"epilogue": call.epilogue.with_attr("global_symbol", "epilogue")})
            with target:
                mod = FallbackSchedule(target)(mod)
            self.epilogue = compile_tir(mod, target)["epilogue"]
        self.scratch = None

    def __getitem__(self, name):
        return self._run

    def _run(self, *args_out):
        *args, out = args_out
        n, call = self.call.num_inputs, self.call
        if self.epilogue is None:
            self.func(*args[:n], *call.static_args, out)
            return
        if self.scratch is None:
            self.scratch = tvm.runtime.empty(call.out_shape, call.out_dtype, out.device)
        self.func(*args[:n], *call.static_args, self.scratch)
        self.epilogue(self.scratch, *args[n:], out)

    def time(self, args, out, number: int, repeat: int) -> float:
        """Median over ``repeat`` of the mean wall time of ``number`` calls (seconds)."""
        self._run(*args, out)  # warm-up
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                self._run(*args, out)
            if out.device.dlpack_device_type() != 1:
                tvm.runtime.device(out.device.dlpack_device_type(), 0).sync()
            times.append((time.perf_counter() - t0) / number)
        return float(np.median(times))


def random_inputs(wl: Workload, seed: int = 0, low: float = -1.0, high: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s, d in zip(wl.shapes, wl.dtypes):
        if "int" in d:
            out.append(rng.integers(-8, 8, size=s).astype(d))
        else:
            out.append(rng.uniform(low, high, size=s).astype(d))
    return out


def torch_to_numpy(x) -> np.ndarray:
    """A torch tensor as a NumPy array; bfloat16 (which NumPy lacks) as ``ml_dtypes.bfloat16``,
    the type TVM's tensors take and give for it."""
    x = x.detach().cpu()
    if str(x.dtype) != "torch.bfloat16":
        return x.numpy()
    import ml_dtypes
    import torch

    return x.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


class Model:
    """An executable whose weights are run-time parameters, called with the inputs only.

    The protocol (see the README's "Weights as parameters"): a Relax function with attr
    ``num_input = n`` takes ``n`` inputs, then its weights. ``ext.build`` lifts everything
    computed from the weights alone (packing, Winograd filter transforms, batch-norm folding)
    into ``<func>_transform_params(weights: tuple) -> tuple``; ``<func>`` then takes the inputs
    followed by that tuple. ``set_params`` checks the weights against the function's
    signature, runs the transform once and keeps its result; every call passes it on::

        mod, weights = ext.frontend.from_torch(net, (x,), keep_params_as_input=True)
        model = ext.Model(ext.build(mod, ext.target.cpu()))
        model.set_params(weights)          # once per weight set
        y = model(x)                       # NumPy or tvm tensors in; the VM's result out

    ``set_params`` again with other weights (same shapes) switches to them. A function
    without weights (bound as constants) needs no ``set_params``. ``transform_runs`` counts
    the transform's calls.
    """

    def __init__(self, ex, device=None, func: str = "main"):
        from tvm import relax

        specs = getattr(ex, "ext_params", None) or {}
        self.spec = specs.get(func)
        self.func = func
        if device is None:
            kind = getattr(ex, "ext_target_kind", "llvm")
            device = get_target_kind(kind).device(0)
        self.device = device
        self.vm = relax.VirtualMachine(ex, device)
        if not self.vm.module.implements_function(func):
            raise ValueError(f"the executable has no function {func!r}")
        name = f"{func}_transform_params"
        self._transform = self.vm[name] if self.vm.module.implements_function(name) else None
        self._main = self.vm[func]
        self._weights = None if self._transform is not None or (self.spec and self.spec.weights) else []
        self.transform_runs = 0

    def _tensor(self, x):
        if isinstance(x, tvm.runtime.Tensor):
            return x if x.device == self.device else tvm.runtime.tensor(x.numpy(), self.device)
        if hasattr(x, "detach"):  # a torch tensor
            x = torch_to_numpy(x)
        return tvm.runtime.tensor(np.asarray(x, order="C"), self.device)  # ascontiguousarray makes 0-d 1-d

    def set_params(self, weights) -> None:
        """Hand over the weights (a list in the function's weight order, or ``{name: array}``);
        runs the weight transform once. Raises ``ValueError`` naming a missing, extra or
        wrong-shaped weight."""
        tensors = [self._tensor(w) for w in self._ordered(weights)]
        if self.spec is not None:
            self.spec.check("weights", tensors)
        if self._transform is None:
            self._weights = tensors
            return
        self._weights = list(self._transform(tensors))
        self.transform_runs += 1

    def _ordered(self, weights) -> list:
        if isinstance(weights, dict):
            if self.spec is None:
                raise ValueError("weights by name need the executable's parameter names (an ext.build result); "
                                 "pass a list in the function's weight order")
            names = [n for n, _, _ in self.spec.weights]
            missing = [n for n in names if n not in weights]
            extra = sorted(set(weights) - set(names))
            if missing or extra:
                raise ValueError(f"weights by name: missing {missing}, unknown {extra} (expected {names})")
            return [weights[n] for n in names]
        if not isinstance(weights, (list, tuple)):
            raise TypeError(f"weights must be a list/tuple in the function's weight order or a dict by name, "
                            f"got {type(weights).__name__}")
        return list(weights)

    def __call__(self, *inputs):
        if self._weights is None:
            raise RuntimeError(f"{self.func}: call set_params(weights) before running the model")
        args = [self._tensor(x) for x in inputs]
        if self.spec is not None:
            self.spec.check("inputs", args)
        return self._main(*args, *self._weights)
