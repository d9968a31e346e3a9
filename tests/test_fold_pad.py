"""FoldPadIntoConv: explicit zero pads of H/W fold into the conv's padding; anything else stays."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.frontend import from_torch
from ext.relax_passes.fold_pad import FoldPadIntoConv
from ext.testing import assert_close


class PadConv(torch.nn.Module):
    def __init__(self, pad, value=0.0, groups=1, stride=2, extra_user=False):
        super().__init__()
        self.pad, self.value, self.extra_user = pad, value, extra_user
        cin = 6 if len(pad) <= 4 else 6 + pad[4] + pad[5]
        self.conv = torch.nn.Conv2d(cin, 6, 3, stride, padding=1, groups=groups)

    def forward(self, x):
        y = torch.nn.functional.pad(x, self.pad, value=self.value)
        out = self.conv(y)
        return (out, y.sum()) if self.extra_user else out


def _ops(mod) -> list[str]:
    names = []
    relax.analysis.post_order_visit(mod["main"].body, lambda e: names.append(e.op.name) if isinstance(
        e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return names


CASES = {  # name: (module, pads fold?)
    "same_s2_depthwise": (PadConv((0, 1, 0, 1), groups=6), True),
    "asymmetric_dense": (PadConv((2, 0, 1, 3), stride=1), True),
    "nonzero_value": (PadConv((1, 1, 1, 1), value=0.5), False),
    "channel_axis": (PadConv((1, 1, 1, 1, 1, 0)), False),
    "second_user": (PadConv((0, 1, 0, 1), extra_user=True), True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fold_pad_matches_torch(cpu_target, name):
    model, folds = CASES[name]
    x = torch.from_numpy(np.random.default_rng(3).uniform(-1, 1, (1, 6, 13, 11)).astype("float32"))
    mod = from_torch(model.eval(), (x,))
    after = _ops(FoldPadIntoConv()(mod))
    if folds and not model.extra_user:
        assert "relax.nn.pad" not in after
    if not folds:
        assert "relax.nn.pad" in after
    with torch.no_grad():
        want = model(x)
    vm = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()))
    if isinstance(want, tuple):
        got, want = got[0], want[0]
    assert_close(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5, what=name)
