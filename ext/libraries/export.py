"""Exporting executables that call Python-registered library functions.

An executable whose report has a candidate with ``needs_python`` calls a
packed function registered by ``ext.libraries`` in this Python process
(``ext.lib.*``). ``tvm.runtime.Executable.export_library`` writes it as usual,
but the VM of the loaded library finds those functions only in a process that
has imported ``ext``; elsewhere ``VirtualMachine(...)`` fails with
``Cannot find ffi::Function ext.lib...``. :func:`export_library` says so up
front: it refuses, naming each such candidate, unless ``allow_python=True``.
"""
from __future__ import annotations

import os
import shutil


class NeedsPythonError(RuntimeError):
    """The executable calls packed functions that exist only in a Python process running ext."""


def python_decisions(report) -> list:
    """The decisions of ``report`` whose candidate runs only inside this Python process."""
    return [d for d in (report.decisions if report is not None else [])
            if d.candidate is not None and d.candidate.needs_python]


def export_library(executable, path: str | os.PathLike, *, report=None, allow_python: bool = False, **kwargs):
    """``executable.export_library(path)``, refusing when it needs this Python process.

    Parameters
    ----------
    executable : what ``ext.build`` returned.
    path : the ``.so`` to write.
    report : the build's ``SelectionReport``; defaults to the one ``ext.build`` attached.
    allow_python : export anyway; the library then runs only where ``import ext`` ran first.

    Raises
    ------
    NeedsPythonError : naming each candidate (and its packed function) that needs Python.
    ValueError, FileNotFoundError : for a build cache hit (whose library is copied from its cache
        entry) given export options, or whose entry was evicted since.
    """
    report = report if report is not None else getattr(executable, "ext_report", None)
    if report is None:
        raise ValueError("no selection report for this executable: pass report= (ext.build attaches one)")
    needy = python_decisions(report)
    if needy and not allow_python:
        names = ", ".join(sorted({f"{d.name} ({d.workload.op})" for d in needy}))
        raise NeedsPythonError(
            f"cannot export a self-contained library: candidate(s) {names} call packed functions registered "
            f"from Python (ext.lib.*), so the executable runs only in a process that has imported ext. "
            f"Rebuild with ext.build(..., libraries=False), or pass allow_python=True and `import ext` "
            f"before loading it.")
    cached = getattr(executable, "ext_library_path", None)
    if cached is None:
        executable.export_library(str(path), **kwargs)
        return path
    # a build cache hit: TVM cannot pack a library it loaded again, so the cached file is the export
    if kwargs:
        raise ValueError(f"export options {sorted(kwargs)} need a fresh build: this executable is a build cache "
                         f"hit (ext.build(..., cache=False) compiles it again)")
    if not os.path.isfile(cached):
        raise FileNotFoundError(f"the build cache entry {cached} of this executable was evicted or cleared: "
                                f"build again (ext.build(..., cache=False)) to export it")
    shutil.copyfile(cached, path)
    return path
