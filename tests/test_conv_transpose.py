"""ConvTransposeToConv2d: ConvTranspose2d runs as ext's conv2d (a 1x1 conv + depth to space when
the kernel is the stride; a conv of the zero-dilated input otherwise), checked against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.frontend import from_torch
from ext.relax_passes import Canonicalize
from ext.testing import assert_close


def _ops(mod) -> set[str]:
    ops = set()
    relax.analysis.post_order_visit(
        mod["main"], lambda e: ops.add(e.op.name) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return ops


CASES = [  # (N, C, H, W, O, kernel, stride, padding, output_padding, groups, bias[, dilation])
    (1, 16, 7, 9, 8, 4, 4, 0, 0, 1, True),     # DPT's reassemble x4: kernel == stride
    (2, 5, 6, 5, 3, 2, 2, 0, 0, 1, False),     # U-Net's up-conv
    (1, 6, 5, 7, 4, 4, 2, 1, 0, 1, True),      # GAN / FCN upsampling: k = 2s, padding 1
    (1, 4, 5, 5, 6, 3, 2, 1, 1, 2, True),      # output padding, 2 groups
    (1, 3, 4, 6, 5, (3, 2), (2, 1), (1, 0), 0, 1, True),  # uneven kernel and stride
    (1, 7, 5, 5, 7, 3, 1, 1, 0, 7, False),     # depthwise, stride 1
    # dilated kernels: the stock lowering wrote the dilation's zeros into the kernel (a NaN spread)
    (1, 4, 7, 6, 3, 3, 2, 1, 0, 1, True, 2),
    (1, 2, 5, 5, 1, (3, 2), 1, 0, 0, 1, False, (2, 3)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_conv_transpose_runs_as_conv2d_and_matches_pytorch(cpu_target, case):
    n, c, h, w, o, k, s, p, op, g, bias, *dilation = case
    torch.manual_seed(0)
    layer = torch.nn.ConvTranspose2d(c, o, k, stride=s, padding=p, output_padding=op, groups=g, bias=bias,
                                     dilation=dilation[0] if dilation else 1).eval()
    x = torch.randn(n, c, h, w)
    x[0, 0, 1, 2] = float("nan")
    with torch.no_grad():
        want = layer(x).numpy()
    mod = from_torch(layer, (x,))
    ops = _ops(Canonicalize()(mod))
    assert "relax.nn.conv2d_transpose" not in ops and "relax.nn.conv2d" in ops, ops
    got = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    assert got.shape == want.shape
    assert (np.isnan(got) == np.isnan(want)).all() and np.isnan(want).any()
    assert_close(got, want, rtol=1e-5, atol=1e-5, what="conv_transpose as conv2d")



@pytest.mark.parametrize("c,o,w,k,s,p,op,g", [(6, 4, 50, 16, 8, 4, 0, 1), (5, 5, 13, 4, 2, 1, 1, 5), (3, 7, 9, 3, 3, 0, 0, 1)])
def test_conv1d_transpose_runs_as_conv2d_with_its_epilogue(cpu_target, c, o, w, k, s, p, op, g):
    """Vocoder upsampling (HiFi-GAN's k = 2s, EnCodec's): ConvTranspose1d + bias + LeakyReLU."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.ConvTranspose1d(c, o, k, stride=s, padding=p, output_padding=op, groups=g),
                                torch.nn.LeakyReLU(0.1)).eval()
    x = torch.randn(2, c, w)
    x[1, 0, 3] = float("nan")
    with torch.no_grad():
        want = model(x).numpy()
    mod = from_torch(model, (x,))
    ops = _ops(Canonicalize()(mod))
    assert not {"relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose"} & ops and "relax.nn.conv2d" in ops, ops
    got = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    assert (np.isnan(got) == np.isnan(want)).all() and np.isnan(want).any()
    assert_close(got, want, rtol=1e-5, atol=1e-5, what="conv1d_transpose as conv2d")


def test_a_symbolic_batch_runs_as_conv2d(cpu_target):
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.ConvTranspose2d(8, 4, 4, 2, 1), torch.nn.ReLU(),
                                torch.nn.ConvTranspose2d(4, 3, 2, 2)).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    mod = from_torch(model, (torch.randn(2, 8, 9, 7),), dynamic_shapes=({0: batch},))
    assert "relax.nn.conv2d_transpose" not in _ops(Canonicalize()(mod))
    vm = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())
    for n in (1, 3):
        x = torch.randn(n, 8, 9, 7)
        with torch.no_grad():
            want = model(x).numpy()
        assert_close(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), want, rtol=1e-5, atol=1e-5, what=f"batch {n}")
