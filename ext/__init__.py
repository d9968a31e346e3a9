"""ext: kernel candidates, an op-strategy registry and autotuning for Apache TVM 0.27.

Public API::

    import ext
    ex = ext.build(mod, ext.target.cpu(), report="report.json")
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())

Importing ``ext`` sets ``TVM_NUM_THREADS`` to the usable core count unless it
is already set (TVM 0.27 would otherwise use half the logical CPUs on x86).
"""
from . import target  # noqa: E402

target.configure_threads()

from . import frontend, strategies  # noqa: E402  (frontend imports torch/onnx only when called)
from .workload import Workload  # noqa: E402
from .pipeline import build, last_report, pipeline  # noqa: E402
from .tuning import apply_history_best, tune  # noqa: E402
from .libraries.export import export_library  # noqa: E402
from .runner import Model  # noqa: E402

__version__ = "0.1.0"


def __getattr__(name):  # ``ext.cache`` on first use: ``python -m ext.cache`` must not find it imported
    if name == "cache":
        import importlib

        return importlib.import_module(".cache", __name__)
    raise AttributeError(f"module 'ext' has no attribute {name!r}")


__all__ = ["build", "Model", "pipeline", "last_report", "tune", "apply_history_best", "export_library", "target", "strategies", "frontend", "cache", "Workload", "__version__"]
