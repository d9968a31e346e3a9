"""The GPU scripts, exercised as far as a machine without a GPU allows."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ext.testing import has_gpu

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_bundle.sh"])
def test_shell_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)]).returncode == 0


@pytest.mark.skipif(has_gpu() or shutil.which("nvidia-smi") is not None, reason="a GPU is visible")
def test_gpu_check_says_no_gpu(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)}, timeout=60)
    assert proc.returncode == 2 and "no NVIDIA GPU" in proc.stdout


def test_bench_cuda_dry_run_builds_every_kernel(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_cuda.py"), "--dry-run", "--quick",
                           "--sections", "norm", "gemm", "--gemm-shapes", "96x80x40", "--arch", "sm_90",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    notes = [v["note"] for r in rows for v in r["results"].values()]
    assert len(rows) == 4 and notes and all(n == "built, within limits" for n in notes), notes
