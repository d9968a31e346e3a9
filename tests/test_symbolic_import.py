"""``from_torch`` with a symbolic sequence length: the size arithmetic transformers models do
(slices of fixed tables, identity views, ``min(seq, n)`` as a tensor, ``repeat`` by the length)
imports with the lengths known and runs like PyTorch at several lengths."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import ext
from ext.testing import assert_close

torch = pytest.importorskip("torch")
LENGTHS = (2, 5, 11, 23)


class TableSlice(torch.nn.Module):
    """``x + table[:, :seq]`` (a position table of 24 rows), then a 1x1 conv1d over the sum:
    the conv needs the sum's shape, which a clipped slice (``min(seq, 24)``) lost."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(1, 24, 8))
        self.conv = torch.nn.Conv1d(8, 6, 1)

    def forward(self, x):
        y = x + self.table[:, : x.shape[1]]
        return self.conv(y.transpose(1, 2))


class HeadsView(torch.nn.Module):
    """Split and merge heads with views naming the symbolic length, from a tensor with the
    length at another axis (the stock importer's identity check compared ``1 == seq``)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.proj(x).unsqueeze(1).view(b, s, 8)
        heads = h.unsqueeze(1).view(b, s, 2, 4).transpose(1, 2)
        return torch.softmax(heads, dim=-1).transpose(1, 2).reshape(b, s, 8)


class RelativeSpan(torch.nn.Module):
    """DeBERTa's relative attention positions: ``span = tensor(min(seq, 4))``, table rows
    ``[4 - span, 4 + span)``, positions ``arange(seq)`` repeated ``seq`` times and clamped to
    ``[0, 2 * span - 1]``."""

    def __init__(self):
        super().__init__()
        self.rel = torch.nn.Parameter(torch.randn(8, 6))

    def forward(self, x):
        s = x.shape[1]
        span = torch.tensor(min(s, 4))
        rows = self.rel[4 - span: 4 + span, :]
        ids = torch.arange(s)
        rel_pos = ids[:, None] - ids.view(1, -1).repeat(s, 1)
        pos = torch.clamp(rel_pos + span, 0, span * 2 - 1)
        scores = x @ rows.t()  # [1, s, 2 * span]
        return torch.gather(scores, -1, pos[None].expand(x.shape[0], s, s)) + x.sum(-1, keepdim=True)


class AlibiBias(torch.nn.Module):
    """MPT's ALiBi bias: ``alibi[:, max(0, 1 - seq):, max(0, 32 - seq):]`` added to the attention
    scores. The slice's length was ``32 - max(32 - seq, 0)``, which TVM could not equate with
    ``seq``: the add lost its shape and the build failed."""

    def __init__(self):
        super().__init__()
        self.register_buffer("alibi", torch.randn(2, 1, 32))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        s = x.shape[1]
        heads = self.proj(x).view(1, s, 2, 4).transpose(1, 2)
        scores = heads @ heads.transpose(-1, -2) + self.alibi[:, max(0, 1 - s):, max(0, 32 - s):]
        return (torch.softmax(scores, dim=-1) @ heads).transpose(1, 2).reshape(1, s, 8)


class LastRows(torch.nn.Module):
    """``x + table[:, -seq:]``: the last ``seq`` rows of a 24-row table."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(1, 24, 8))

    def forward(self, x):
        return torch.relu(x + self.table[:, -x.shape[1]:])


class PrefixedIds(torch.nn.Module):
    """Token ids ``seq + 1`` long (a start token, then one per step), looked up in an embedding:
    the index check's kernel has the shape ``seq + 1``, which its arguments cannot define, and
    needs ``seq`` passed (MPNet with a symbolic length failed to build)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(3, 8)

    def forward(self, x):
        ids = torch.cat([torch.zeros(1, 1, dtype=torch.long), (x[..., 0] > 0).long() + 1], 1)
        return self.emb(ids)


class CenteredRows(torch.nn.Module):
    """DeBERTa's relative attention: embeddings ``rel[16 - min(seq, 16): 16 + min(seq, 16)]``
    projected to keys, scores against them, gathered at clamped relative positions. The importer
    simplifies a slice's bounds with the export ranges only where that settles every min/max
    (the DeBERTa row of ``arch_sweep.py --symbolic`` stopped building with a half-simplified
    begin; this smaller form builds either way and checks the values)."""

    def __init__(self):
        super().__init__()
        self.rel = torch.nn.Parameter(torch.randn(32, 8))
        self.key = torch.nn.Linear(8, 8)

    def forward(self, x):
        span = min(x.shape[1], 16)
        s = x.shape[1]
        keys = self.key(self.rel[16 - span: 16 + span].unsqueeze(0)).view(1, 2 * span, 2, 4).transpose(1, 2)
        scores = x.view(1, s, 2, 4).transpose(1, 2) @ keys.transpose(-1, -2)  # (1, 2, s, 2 * span)
        ids = torch.arange(s)
        pos = torch.clamp(ids[:, None] - ids[None, :] + span, 0, span * 2 - 1)
        return torch.softmax(torch.gather(scores, -1, pos.expand(1, 2, s, s)), dim=-1)


class EmptyOfLength(torch.nn.Module):
    """``torch.empty`` of a size naming the length, filled by a scatter (DeepSeek-V3's expert
    routing): the stock translation passed the size's graph node to Relax and failed."""

    def forward(self, x):
        rows = x.shape[0] * x.shape[1]
        flat = x.reshape(rows, x.shape[2])
        out = torch.empty(rows, 2, dtype=x.dtype)
        out = out.fill_(0.0).scatter(1, torch.topk(flat, 1, dim=-1).indices % 2, 1.0)
        return out * flat.sum(-1, keepdim=True)


@pytest.mark.parametrize("module", [TableSlice, HeadsView, RelativeSpan, AlibiBias, LastRows, PrefixedIds,
                                    CenteredRows, EmptyOfLength],
                         ids=lambda m: m.__name__)
def test_symbolic_length_imports_and_matches_pytorch(module, cpu_target):
    torch.manual_seed(0)
    net = module().eval()
    width = 6 if module is RelativeSpan else 8
    seq = torch.export.Dim("seq", min=2, max=24)
    mod = ext.frontend.from_torch(net, (torch.randn(1, 7, width),), dynamic_shapes=({1: seq},))
    ex = ext.build(mod, cpu_target, cache=False, verbose=False)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for length in LENGTHS:
        x = torch.randn(1, length, width, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = net(x).numpy()
        got = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
        assert got.shape == want.shape, (length, got.shape, want.shape)
        assert_close(got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())), what=f"seq {length}")



class LastSteps(torch.nn.Module):
    """``y[:, -1]`` and ``y[:, -2]`` (a classifier on the last steps of a sequence): the stock
    translation read before the tensor for a negative position."""

    def __init__(self, rnn: bool):
        super().__init__()
        self.rnn = torch.nn.GRU(8, 16, batch_first=True) if rnn else None
        self.fc = torch.nn.Linear(8, 16)

    def forward(self, x):
        y = self.rnn(x)[0] if self.rnn is not None else self.fc(x)
        return y[:, -1] * 2.0 + y[:, -2]


def test_negative_select_after_a_gru(cpu_target):
    torch.manual_seed(0)
    net = LastSteps(rnn=True).eval()
    x = torch.randn(2, 7, 8)
    with torch.no_grad():
        want = net(x).numpy()
    vm = relax.VirtualMachine(ext.build(ext.frontend.from_torch(net, (x,)), cpu_target), tvm.cpu())
    assert_close(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), want, rtol=1e-5, atol=1e-6, what="GRU last steps")


def test_negative_select_on_a_symbolic_length(cpu_target):
    torch.manual_seed(0)
    net = LastSteps(rnn=False).eval()
    seq = torch.export.Dim("seq", min=2, max=24)
    mod = ext.frontend.from_torch(net, (torch.randn(1, 7, 8),), dynamic_shapes=({1: seq},))
    vm = relax.VirtualMachine(ext.build(mod, cpu_target, cache=False, verbose=False), tvm.cpu())
    for length in LENGTHS:
        x = torch.randn(1, length, 8, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = net(x).numpy()
        assert_close(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), want, rtol=1e-5, atol=1e-6, what=f"seq {length}")


def _onnx_with_dynamic_image(net, example: tuple, path: str, axes=(0, 2, 3)):
    """``net`` exported to ONNX at ``path`` with the named axes of its input dynamic, imported."""
    names = {0: "n", 2: "h", 3: "w"}
    torch.onnx.export(net, (torch.randn(*example),), path, input_names=["x"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": {a: names[a] for a in axes}})
    return ext.frontend.from_onnx(path)


def _runs_like_torch(vm, net, shapes, rtol: float, atol: float, scaled: bool = False):
    """One build run at every shape in ``shapes`` against ``net`` (``atol`` relative to the
    output's range when ``scaled``)."""
    for shape in shapes:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[2]))
        with torch.no_grad():
            want = net(x).numpy()
        tol = atol * float(np.abs(want).max()) if scaled else atol
        assert_close(vm["main"](tvm.runtime.tensor(x.numpy())).numpy(), want, rtol=rtol, atol=tol, what=str(shape))


class CeilPools(torch.nn.Module):
    """Ceil-mode pools on a symbolic image: SqueezeNet's max pool (3/2), GoogLeNet's (3/1 with
    padding 1), ResNet-D's average without padding counted (2/2): exact as floor-mode pools
    with more padding; an average counting its padding (3/2, padding 1) is not, and
    EfficientNet's head (a window larger than the map) neither: their extents become fresh
    symbols. Before ``SettleComputedDims`` the build stopped on the ``if_then_else`` extent."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2)
        self.pools = torch.nn.ModuleList([
            torch.nn.MaxPool2d(3, 2, ceil_mode=True), torch.nn.MaxPool2d(3, 1, padding=1, ceil_mode=True),
            torch.nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False),
            torch.nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=True)])
        self.head = torch.nn.AvgPool2d(64, ceil_mode=True)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        outs = [torch.relu(p(y)).flatten(1).sum(1, keepdim=True) for p in self.pools]
        return torch.cat(outs + [self.head(y).flatten(1)], 1)


def test_ceil_mode_pools_on_a_symbolic_image(cpu_target, tmp_path):
    """Through ONNX with a dynamic height and width (``torch.export`` itself refuses a symbolic
    size under a ceil-mode pool: its guards specialize it)."""
    torch.manual_seed(0)
    net = CeilPools().eval()
    mod = _onnx_with_dynamic_image(net, (1, 3, 21, 20), str(tmp_path / "pools.onnx"), axes=(2, 3))
    vm = relax.VirtualMachine(ext.build(mod, cpu_target, cache=False, verbose=False), tvm.cpu())
    _runs_like_torch(vm, net, [(1, 3, 21, 20), (1, 3, 9, 9), (1, 3, 32, 17), (1, 3, 50, 63)], 1e-5, 1e-5, scaled=True)


class ChannelShuffle(torch.nn.Module):
    """ShuffleNet's unit: ``chunk`` along the channels (exported as ``Gather(Shape(x), [1])``),
    then the reshape-transpose-reshape by sizes read from the shape."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        y = torch.cat([a, self.conv(b)], 1)
        n, c, h, w = y.shape
        return y.reshape(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


def test_onnx_shape_gather_keeps_symbolic_shapes(cpu_target, tmp_path):
    """The split sizes and reshape targets stay shapes of ``n``, ``h``, ``w``: before, the
    channel split's sizes were a run-time tensor and the import stopped at the reshape."""
    torch.manual_seed(0)
    net = ChannelShuffle().eval()
    mod = _onnx_with_dynamic_image(net, (1, 8, 5, 6), str(tmp_path / "shuffle.onnx"))
    assert [str(d) for d in mod["main"].ret_ty.shape] == ["n", "T.int64(8)", "h", "w"]
    vm = relax.VirtualMachine(ext.build(mod, cpu_target, cache=False, verbose=False), tvm.cpu())
    _runs_like_torch(vm, net, [(1, 8, 5, 6), (3, 8, 2, 9)], 1e-5, 1e-6)


class TinyFPN(torch.nn.Module):
    """A feature pyramid: an upsampled coarse map (nearest, scale 2) concatenated with a finer
    one, then a bilinear resize to the input's own size (sizes read from its shape) and an
    HF-style size cast (``Gather`` of one extent, ``Unsqueeze``, ``Concat``, ``Cast``)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, 2, 1)
        self.c2 = torch.nn.Conv2d(4, 4, 3, 2, 1)
        self.head = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = torch.relu(self.c1(x))
        b = torch.relu(self.c2(a))
        y = self.head(torch.cat([torch.nn.functional.interpolate(b, scale_factor=2.0, mode="nearest"), a], 1))
        return torch.nn.functional.interpolate(y, size=x.shape[2:], mode="bilinear", align_corners=False)


def test_onnx_feature_pyramid_on_a_symbolic_image(cpu_target, tmp_path):
    """Before: the upsample's size was ``int64(2.0 * float32(h'))``, which the concat could not
    compare with the lateral map's extent (its shape, then the next import, lost); the resize
    to the input's size read its symbolic sizes as numbers. Now both resizes keep exact
    shapes, the concat checks its extents at run time, and a size where the maps differ stops
    with the VM's shape error (PyTorch stops there too)."""
    torch.manual_seed(0)
    net = TinyFPN().eval()
    mod = _onnx_with_dynamic_image(net, (1, 3, 16, 12), str(tmp_path / "fpn.onnx"))
    assert [str(d) for d in mod["main"].ret_ty.shape] == ["n", "T.int64(2)", "h", "w"]
    vm = relax.VirtualMachine(ext.build(mod, cpu_target, cache=False, verbose=False), tvm.cpu())
    _runs_like_torch(vm, net, [(1, 3, 16, 12), (2, 3, 8, 20), (1, 3, 4, 28)], 1e-5, 1e-5)
    with pytest.raises(Exception, match="match_cast"):
        vm["main"](tvm.runtime.tensor(np.zeros((1, 3, 10, 12), "float32")))
