"""Model families users bring that neither the zoo nor ``transformers`` covers, in plain PyTorch.

A recurrent text classifier (``nn.LSTM`` / ``nn.GRU`` over 64 tokens, the last step read with
``y[:, -1]``), a DLRM-style recommender (embedding tables, a Gram-matrix interaction picked with
``triu_indices``, MLPs; batch 128), Johnson's fast style-transfer net (reflection pads, instance
norms, transposed convs), a U-Net (BN, max pools, 2x2 transposed convs, skip concats), a
YOLOv5s-shaped detector (CSP blocks, SiLU, SPPF max pools, nearest upsampling, three heads) and
ConvMixer (9x9 depthwise convs, GELU before BatchNorm). Each found something on its first run
(stop 36): the RNN classifier returned garbage (a negative ``select``), the RNN build transposed
and packed its weights at every step, DLRM did not import (``triu_indices``), and the
transposed convs ran the stock lowering. Random seeded weights; BatchNorm statistics randomized.
"""
from __future__ import annotations


def _nn():
    import torch

    return torch, torch.nn


def rnn_classifier(cell: str = "lstm", vocab: int = 10000, width: int = 256, hidden: int = 512, layers: int = 2):
    torch, nn = _nn()

    class RNNClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, width)
            self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(width, hidden, num_layers=layers, batch_first=True)
            self.fc = nn.Linear(hidden, 10)

        def forward(self, ids):
            return self.fc(self.rnn(self.emb(ids))[0][:, -1])

    return RNNClassifier().eval()


def dlrm(tables: int = 8, rows: int = 50000, dim: int = 64, dense: int = 13):
    torch, nn = _nn()
    pairs = (tables + 1) * tables // 2

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embs = nn.ModuleList([nn.Embedding(rows, dim) for _ in range(tables)])
            self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, dim), nn.ReLU())
            self.top = nn.Sequential(nn.Linear(dim + pairs, 512), nn.ReLU(), nn.Linear(512, 1))

        def forward(self, x, ids):
            z = self.bottom(x)
            feats = torch.stack([z] + [e(ids[:, i]) for i, e in enumerate(self.embs)], 1)
            gram = torch.bmm(feats, feats.transpose(1, 2))
            iu = torch.triu_indices(tables + 1, tables + 1, 1)
            return torch.sigmoid(self.top(torch.cat([z, gram[:, iu[0], iu[1]]], 1)))

    return DLRM().eval()


def _norm_act(nn, c, norm="instance", act=True):
    layers = [nn.InstanceNorm2d(c, affine=True) if norm == "instance" else nn.BatchNorm2d(c)]
    return layers + ([nn.ReLU()] if act else [])


def style_net():
    torch, nn = _nn()

    def conv(i, o, k, s, act=True):
        return [nn.ReflectionPad2d(k // 2), nn.Conv2d(i, o, k, s), *_norm_act(nn, o, act=act)]

    class StyleNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Sequential(*conv(3, 32, 9, 1), *conv(32, 64, 3, 2), *conv(64, 128, 3, 2))
            self.res = nn.ModuleList([nn.Sequential(*conv(128, 128, 3, 1), *conv(128, 128, 3, 1, act=False))
                                      for _ in range(5)])
            self.up = nn.Sequential(nn.ConvTranspose2d(128, 64, 3, 2, 1, output_padding=1), *_norm_act(nn, 64),
                                    nn.ConvTranspose2d(64, 32, 3, 2, 1, output_padding=1), *_norm_act(nn, 32),
                                    nn.ReflectionPad2d(4), nn.Conv2d(32, 3, 9))

        def forward(self, x):
            y = self.head(x)
            for block in self.res:
                y = y + block(y)
            return self.up(y)

    return StyleNet().eval()


def unet(width: int = 32, depth: int = 4, classes: int = 2):
    torch, nn = _nn()

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), *_norm_act(nn, o, "batch"),
                             nn.Conv2d(o, o, 3, padding=1), *_norm_act(nn, o, "batch"))

    ch = [width * 2 ** i for i in range(depth + 1)]

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.ModuleList([block(3 if i == 0 else ch[i - 1], ch[i]) for i in range(depth)])
            self.mid = block(ch[depth - 1], ch[depth])
            self.ups = nn.ModuleList([nn.ConvTranspose2d(ch[i + 1], ch[i], 2, 2) for i in reversed(range(depth))])
            self.dec = nn.ModuleList([block(2 * ch[i], ch[i]) for i in reversed(range(depth))])
            self.out = nn.Conv2d(width, classes, 1)

        def forward(self, x):
            skips = []
            for d in self.down:
                x = d(x)
                skips.append(x)
                x = torch.nn.functional.max_pool2d(x, 2)
            x = self.mid(x)
            for up, dec in zip(self.ups, self.dec):
                x = dec(torch.cat([up(x), skips.pop()], 1))
            return self.out(x)

    return UNet().eval()


def yolo_s(classes: int = 80):
    torch, nn = _nn()

    def cba(i, o, k=1, s=1):
        return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, bias=False), nn.BatchNorm2d(o), nn.SiLU())

    class C3(nn.Module):
        def __init__(self, i, o, n=1, shortcut=True):
            super().__init__()
            h = o // 2
            self.cv1, self.cv2, self.cv3 = cba(i, h), cba(i, h), cba(2 * h, o)
            self.m = nn.ModuleList([nn.Sequential(cba(h, h), cba(h, h, 3)) for _ in range(n)])
            self.shortcut = shortcut

        def forward(self, x):
            y = self.cv1(x)
            for b in self.m:
                y = y + b(y) if self.shortcut else b(y)
            return self.cv3(torch.cat([y, self.cv2(x)], 1))

    class SPPF(nn.Module):
        def __init__(self, i, o):
            super().__init__()
            self.cv1, self.cv2, self.pool = cba(i, i // 2), cba(i * 2, o), nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            x = self.cv1(x)
            a = self.pool(x)
            b = self.pool(a)
            return self.cv2(torch.cat([x, a, b, self.pool(b)], 1))

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.b3 = nn.Sequential(cba(3, 32, 3, 2), cba(32, 64, 3, 2), C3(64, 64), cba(64, 128, 3, 2), C3(128, 128, 2))
            self.b4 = nn.Sequential(cba(128, 256, 3, 2), C3(256, 256, 3))
            self.b5 = nn.Sequential(cba(256, 512, 3, 2), C3(512, 512), SPPF(512, 512))
            self.l1, self.c1 = cba(512, 256), C3(512, 256, shortcut=False)
            self.l2, self.c2 = cba(256, 128), C3(256, 128, shortcut=False)
            self.d1, self.c3 = cba(128, 128, 3, 2), C3(256, 256, shortcut=False)
            self.d2, self.c4 = cba(256, 256, 3, 2), C3(512, 512, shortcut=False)
            self.heads = nn.ModuleList([nn.Conv2d(c, 3 * (classes + 5), 1) for c in (128, 256, 512)])
            self.up = nn.Upsample(scale_factor=2, mode="nearest")

        def forward(self, x):
            p3 = self.b3(x)
            p4 = self.b4(p3)
            h5 = self.l1(self.b5(p4))
            h4 = self.l2(self.c1(torch.cat([self.up(h5), p4], 1)))
            o3 = self.c2(torch.cat([self.up(h4), p3], 1))
            o4 = self.c3(torch.cat([self.d1(o3), h4], 1))
            o5 = self.c4(torch.cat([self.d2(o4), h5], 1))
            return torch.cat([h(o).flatten(2) for h, o in zip(self.heads, (o3, o4, o5))], 2).sigmoid()

    return Yolo().eval()


def convmixer(dim: int = 512, depth: int = 12, kernel: int = 9, patch: int = 7):
    torch, nn = _nn()

    class ConvMixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, dim, patch, patch), nn.GELU(), nn.BatchNorm2d(dim))
            self.dw = nn.ModuleList([nn.Sequential(nn.Conv2d(dim, dim, kernel, groups=dim, padding="same"), nn.GELU(),
                                                   nn.BatchNorm2d(dim)) for _ in range(depth)])
            self.pw = nn.ModuleList([nn.Sequential(nn.Conv2d(dim, dim, 1), nn.GELU(), nn.BatchNorm2d(dim))
                                     for _ in range(depth)])
            self.fc = nn.Linear(dim, 1000)

        def forward(self, x):
            x = self.stem(x)
            for dw, pw in zip(self.dw, self.pw):
                x = pw(x + dw(x))
            return self.fc(x.mean((2, 3)))

    return ConvMixer().eval()
