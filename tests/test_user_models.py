"""Models written the way users write them (not from a model zoo), each imported with
``from_torch``, built and checked against PyTorch, with a NaN in the first input: a U-Net
(transposed convs, skip concats), a CRNN (convs into a 2-layer bidirectional LSTM), a VAE
decoder (nearest upsampling, GroupNorm, SiLU), a diffusion block (sinusoidal timestep embedding,
attention), PointNet (1-D convs, max over points), a GCN (index_add message passing), a TCN
(weight-normed dilated causal convs), a padded Transformer encoder (key padding mask), a YOLO
head (meshgrid decode), WaveNet's gated unit, DLRM (embedding bags, pairwise interactions) and
Meta-style Llama attention (complex RoPE buffer, causal mask).

Every output PyTorch computes from the NaN is NaN in ext too (Winograd convs may NaN more of
the same tile: README), and every other output matches.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ext.testing import assert_close
from torch_helpers import torch_and_ext


class UNet(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

        self.d1, self.d2, self.d3 = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.u2, self.u1 = nn.ConvTranspose2d(4 * c, 2 * c, 2, 2), nn.ConvTranspose2d(2 * c, c, 2, 2)
        self.c2, self.c1 = block(4 * c, 2 * c), block(2 * c, c)
        self.out = nn.Conv2d(c, 2, 1)
    def forward(self, x):
        a = self.d1(x); b = self.d2(F.max_pool2d(a, 2)); c = self.d3(F.max_pool2d(b, 2))
        b = self.c2(torch.cat([self.u2(c), b], 1)); a = self.c1(torch.cat([self.u1(b), a], 1))
        return self.out(a)

class CRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 1)))
        self.rnn = nn.LSTM(32 * 8, 48, bidirectional=True, batch_first=True, num_layers=2)
        self.fc = nn.Linear(96, 37)
    def forward(self, x):
        f = self.cnn(x)  # B, 32, 8, W/2
        f = f.permute(0, 3, 1, 2).flatten(2)
        return self.fc(self.rnn(f)[0]).log_softmax(-1)

class VAEDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32 * 4 * 4)
        self.up = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(32, 32, 3, padding=1),
                                nn.GroupNorm(8, 32), nn.SiLU(), nn.ConvTranspose2d(32, 16, 4, 2, 1),
                                nn.GroupNorm(4, 16), nn.SiLU(), nn.Conv2d(16, 3, 3, padding=1), nn.Tanh())
    def forward(self, z): return self.up(self.fc(z).view(-1, 32, 4, 4))

class TimeEmbedBlock(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.n1, self.c1, self.t = nn.GroupNorm(4, c), nn.Conv2d(c, c, 3, padding=1), nn.Linear(32, c)
        self.n2, self.c2 = nn.GroupNorm(4, c), nn.Conv2d(c, c, 3, padding=1)
        self.attn = nn.MultiheadAttention(c, 2, batch_first=True)
    def forward(self, x, t):
        half = 16
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
        emb = t[:, None] * freqs[None]
        emb = torch.cat([emb.sin(), emb.cos()], -1)
        h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(emb))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h))) + x
        B, C, H, W = h.shape
        seq = h.flatten(2).transpose(1, 2)
        return h + self.attn(seq, seq, seq, need_weights=False)[0].transpose(1, 2).reshape(B, C, H, W)

class PointNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv1d(3, 32, 1), nn.BatchNorm1d(32), nn.ReLU(),
                               nn.Conv1d(32, 64, 1), nn.BatchNorm1d(64), nn.ReLU())
        self.h = nn.Sequential(nn.Linear(64, 32), nn.Dropout(0.3), nn.ReLU(), nn.Linear(32, 10))
    def forward(self, x): return self.h(self.f(x).max(-1)[0])

class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)
    def forward(self, x, edges):
        src, dst = edges[0], edges[1]
        deg = torch.zeros(x.shape[0]).index_add(0, dst, torch.ones(dst.shape[0])) + 1
        def prop(h):
            msg = h[src] / deg[src].sqrt()[:, None]
            return (torch.zeros_like(h).index_add(0, dst, msg) + h) / deg.sqrt()[:, None]
        return self.l2(prop(F.relu(self.l1(prop(x)))))

class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        norm = nn.utils.parametrizations.weight_norm
        self.convs = nn.ModuleList(norm(nn.Conv1d(6, 6, 3, dilation=d)) for d in (1, 2, 4))
    def forward(self, x):
        for conv, d in zip(self.convs, (1, 2, 4)):
            x = x + F.relu(conv(F.pad(x, (2 * d, 0))))
        return x

class MHAPad(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
    def forward(self, x, lengths):
        mask = torch.arange(x.shape[1])[None, :] >= lengths[:, None]
        return self.enc(x, src_key_padding_mask=mask).masked_fill(mask[..., None], 0.0)

class YoloHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.SiLU())
        self.o = nn.Conv2d(24, 3 * 7, 1)
    def forward(self, x):
        a = self.c(x)
        f = torch.cat([F.interpolate(a, scale_factor=2.0, mode="nearest"), x], 1)
        p = self.o(f)
        B, _, H, W = p.shape
        p = p.view(B, 3, 7, H, W).permute(0, 1, 3, 4, 2).sigmoid()
        gy, gx = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
        grid = torch.stack((gx, gy), 2).view(1, 1, H, W, 2).float()
        xy = (p[..., :2] * 2 - 0.5 + grid) * 8
        wh = (p[..., 2:4] * 2) ** 2 * torch.tensor([10.0, 13.0])
        return torch.cat([xy, wh, p[..., 4:]], -1).view(B, -1, 7)

class WaveNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Conv1d(8, 8, 2, dilation=2); self.g = nn.Conv1d(8, 8, 2, dilation=2); self.r = nn.Conv1d(8, 8, 1)
    def forward(self, x):
        h = torch.tanh(self.f(F.pad(x, (2, 0)))) * torch.sigmoid(self.g(F.pad(x, (2, 0))))
        return x + self.r(h)

class DLRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.bot = nn.Sequential(nn.Linear(13, 16), nn.ReLU())
        self.emb = nn.ModuleList(nn.EmbeddingBag(50, 16, mode="sum") for _ in range(3))
        self.top = nn.Sequential(nn.Linear(16 + 6, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid())
    def forward(self, dense, sparse):
        x = self.bot(dense)
        ys = [e(sparse[:, i]) for i, e in enumerate(self.emb)]
        T = torch.stack([x] + ys, 1)
        Z = torch.bmm(T, T.transpose(1, 2))
        li, lj = torch.tril_indices(4, 4, -1)
        return self.top(torch.cat([x, Z[:, li, lj]], 1))

class LlamaMeta(nn.Module):
    """Meta-style attention with complex RoPE and a causal mask."""
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        f = 1.0 / (10000 ** (torch.arange(0, self.d, 2).float() / self.d))
        ang = torch.outer(torch.arange(64).float(), f)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(ang), ang), persistent=False)
        self.norm = nn.RMSNorm(dim)
    def forward(self, x):
        B, T, _ = x.shape
        h = self.norm(x)
        q, k, v = (proj(h).view(B, T, self.h, self.d) for proj in (self.wq, self.wk, self.wv))
        fc = self.freqs_cis[:T].view(1, T, 1, self.d // 2)
        def rot(t):
            return torch.view_as_real(torch.view_as_complex(t.float().reshape(B, T, self.h, -1, 2)) * fc).flatten(3)

        q, k = rot(q), rot(k)
        mask = torch.full((T, T), float("-inf")).triu(1)
        a = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(2, 3)) / math.sqrt(self.d) + mask
        o = a.softmax(-1) @ v.transpose(1, 2)
        return x + self.wo(o.transpose(1, 2).reshape(B, T, -1))

MODELS = {
    "unet": (UNet, lambda: [torch.randn(1, 3, 32, 24)]),
    "crnn": (CRNN, lambda: [torch.randn(2, 1, 32, 40)]),
    "vae_decoder": (VAEDecoder, lambda: [torch.randn(2, 16)]),
    "time_embed_block": (TimeEmbedBlock, lambda: [torch.randn(2, 16, 6, 5), torch.tensor([3.0, 700.0])]),
    "pointnet": (PointNet, lambda: [torch.randn(2, 3, 100)]),
    "gcn": (GCN, lambda: [torch.randn(9, 8), torch.randint(0, 9, (2, 20))]),
    "tcn": (TCN, lambda: [torch.randn(2, 6, 31)]),
    "mha_pad": (MHAPad, lambda: [torch.randn(3, 11, 32), torch.tensor([11, 7, 3])]),
    "yolo_head": (YoloHead, lambda: [torch.randn(1, 8, 16, 12)]),
    "wavenet": (WaveNet, lambda: [torch.randn(2, 8, 40)]),
    "dlrm": (DLRM, lambda: [torch.randn(4, 13), torch.randint(0, 50, (4, 3, 2))]),
    "llama_meta": (LlamaMeta, lambda: [torch.randn(2, 9, 32)]),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_user_model_matches_pytorch_with_a_nan(cpu_target, name):
    make, inputs = MODELS[name]
    torch.manual_seed(0)
    model, xs = make().eval(), inputs()
    xs[0].view(-1)[1] = float("nan")
    got, want = torch_and_ext(model, xs, cpu_target)
    assert got.shape == want.shape
    assert np.isnan(got[np.isnan(want)]).all(), f"{name}: an output PyTorch makes NaN is a number"
    fine = np.isfinite(got) & np.isfinite(want)
    assert np.isnan(got).sum() <= 3 * max(np.isnan(want).sum(), 1), f"{name}: NaN spread far beyond PyTorch's"
    scale = float(np.abs(want[fine]).max()) if fine.any() else 1.0
    assert_close(got[fine], want[fine], rtol=1e-4, atol=1e-4 * scale, what=name)
