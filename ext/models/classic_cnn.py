"""More published CNNs in plain PyTorch, for the extra zoo (``zoo_extra``): the shapes no other
zoo model has.

VGG-16 (13 full-width 3x3 convs at 224..14, a 25088 -> 4096 classifier), AlexNet (11x11
stride-4 stem, 5x5 convs, an adaptive 6x6 pool), Inception-v3 at 299x299 (factorized 1x7 / 7x1
and 1x3 / 3x1 convs, average pools that count their padding, branch concats), MnasNet-1.0
(5x5 depthwise, ReLU), MobileNetV3-large (hardswish, SE with hardsigmoid, 5x5 depthwise at
stride 2), EfficientNetV2-S (fused MBConv: full 3x3 expansions, SiLU, SE) and Wide ResNet-50-2
(bottlenecks twice as wide). Layer structure as published, random seeded weights.
"""
from __future__ import annotations

from .cnn import _cbr, _nn


def vgg16(num_classes: int = 1000):
    torch, nn = _nn()
    layers, c = [], 3
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
            c = v
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 49, 4096), nn.ReLU(),
                         nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, num_classes))


def alexnet(num_classes: int = 1000):
    torch, nn = _nn()
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2), nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(),
        nn.MaxPool2d(3, 2), nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(), nn.Conv2d(384, 256, 3, padding=1),
        nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2), nn.AdaptiveAvgPool2d(6),
        nn.Flatten(), nn.Dropout(), nn.Linear(256 * 36, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096),
        nn.ReLU(), nn.Linear(4096, num_classes))


def inception_v3(num_classes: int = 1000):
    torch, nn = _nn()

    def cbr(cin, cout, k, stride=1, pad=0):
        return _cbr(cin, cout, k, stride, pad)

    def pool_branch(cin, cout):
        return nn.Sequential(nn.AvgPool2d(3, 1, 1), cbr(cin, cout, 1))

    class Branches(nn.Module):
        def __init__(self, *branches):
            super().__init__()
            self.b = nn.ModuleList(branches)

        def forward(self, x):
            return torch.cat([b(x) for b in self.b], 1)

    def block_a(cin, pool):
        return Branches(cbr(cin, 64, 1), nn.Sequential(cbr(cin, 48, 1), cbr(48, 64, 5, pad=2)),
                        nn.Sequential(cbr(cin, 64, 1), cbr(64, 96, 3, pad=1), cbr(96, 96, 3, pad=1)),
                        pool_branch(cin, pool))

    def block_c(c7):  # 768 -> 768 with factorized 7x7s
        def fact(cin, cout, *ks):
            mods, c = [], c7
            for i, k in enumerate(ks):
                o = cout if i == len(ks) - 1 else c7
                mods.append(cbr(c, o, k, pad=(k[0] // 2, k[1] // 2)))
                c = o
            return nn.Sequential(cbr(cin, c7, 1), *mods)

        return Branches(cbr(768, 192, 1), fact(768, 192, (1, 7), (7, 1)),
                        fact(768, 192, (7, 1), (1, 7), (7, 1), (1, 7)), pool_branch(768, 192))

    class BlockE(nn.Module):  # the 8x8 blocks: 1x3 and 3x1 side by side
        def __init__(self, cin):
            super().__init__()
            self.b1, self.pool = cbr(cin, 320, 1), pool_branch(cin, 192)
            self.b3, self.b3a, self.b3b = cbr(cin, 384, 1), cbr(384, 384, (1, 3), pad=(0, 1)), cbr(384, 384, (3, 1), pad=(1, 0))
            self.d1, self.d2 = cbr(cin, 448, 1), cbr(448, 384, 3, pad=1)
            self.d3a, self.d3b = cbr(384, 384, (1, 3), pad=(0, 1)), cbr(384, 384, (3, 1), pad=(1, 0))

        def forward(self, x):
            b3, d = self.b3(x), self.d2(self.d1(x))
            return torch.cat([self.b1(x), self.b3a(b3), self.b3b(b3), self.d3a(d), self.d3b(d), self.pool(x)], 1)

    class Reduce(nn.Module):
        def __init__(self, *convs):
            super().__init__()
            self.convs, self.pool = nn.ModuleList(convs), nn.MaxPool2d(3, 2)

        def forward(self, x):
            return torch.cat([c(x) for c in self.convs] + [self.pool(x)], 1)

    return nn.Sequential(
        cbr(3, 32, 3, 2), cbr(32, 32, 3), cbr(32, 64, 3, pad=1), nn.MaxPool2d(3, 2), cbr(64, 80, 1), cbr(80, 192, 3),
        nn.MaxPool2d(3, 2), block_a(192, 32), block_a(256, 64), block_a(288, 64),
        Reduce(cbr(288, 384, 3, 2), nn.Sequential(cbr(288, 64, 1), cbr(64, 96, 3, pad=1), cbr(96, 96, 3, 2))),
        block_c(128), block_c(160), block_c(160), block_c(192),
        Reduce(nn.Sequential(cbr(768, 192, 1), cbr(192, 320, 3, 2)),
               nn.Sequential(cbr(768, 192, 1), cbr(192, 192, (1, 7), pad=(0, 3)), cbr(192, 192, (7, 1), pad=(3, 0)),
                             cbr(192, 192, 3, 2))),
        BlockE(1280), BlockE(2048), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(), nn.Linear(2048, num_classes))


class _SE:
    """Squeeze-excitation as a module factory: pool -> 1x1 -> act -> 1x1 -> gate, times the input."""

    def __new__(cls, c, r, act, gate):
        torch, nn = _nn()

        class SE(nn.Module):
            def __init__(self):
                super().__init__()
                self.f = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, r, 1), act(), nn.Conv2d(r, c, 1), gate())

            def forward(self, x):
                return x * self.f(x)

        return SE()


def _mbconv(cin, k, exp, cout, stride, act, se=0, fused=False):
    """An inverted residual: (1x1 expansion | full kxk when ``fused``), kxk depthwise, SE of ``se``
    channels, 1x1 projection; residual when the shape is kept."""
    torch, nn = _nn()
    layers = []
    if fused:
        layers.append(_cbr(cin, exp, k, stride, act=act) if exp != cin else _cbr(cin, cout, k, stride, act=act))
    else:
        if exp != cin:
            layers.append(_cbr(cin, exp, 1, act=act))
        layers.append(_cbr(exp, exp, k, stride, groups=exp, act=act))
    if se:
        gate = nn.Hardsigmoid if act == "hardswish" else nn.Sigmoid
        layers.append(_SE(exp, se, nn.ReLU if act != "silu" else nn.SiLU, gate))
    if not (fused and exp == cin):
        layers.append(_cbr(exp, cout, 1, act=None))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.f, self.res = nn.Sequential(*layers), stride == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    return Block()


def _head(nn, layers, c, width, num_classes, act):
    acts = {"relu": nn.ReLU, "hardswish": nn.Hardswish, "silu": nn.SiLU}
    return nn.Sequential(*layers, _cbr(c, width, 1, act=act), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Dropout(0.2), nn.Linear(width, num_classes) if num_classes else acts[act]())


def mnasnet1_0(num_classes: int = 1000):
    torch, nn = _nn()
    layers = [_cbr(3, 32, 3, 2), _cbr(32, 32, 3, groups=32), _cbr(32, 16, 1, act=None)]
    c = 16
    for k, e, o, n, s in ((3, 3, 24, 3, 2), (5, 3, 40, 3, 2), (5, 6, 80, 3, 2), (3, 6, 96, 2, 1),
                          (5, 6, 192, 4, 2), (3, 6, 320, 1, 1)):
        for i in range(n):
            layers.append(_mbconv(c, k, c * e, o, s if i == 0 else 1, "relu"))
            c = o
    return _head(nn, layers, c, 1280, num_classes, "relu")


def mobilenet_v3_large(num_classes: int = 1000):
    torch, nn = _nn()
    spec = [(3, 16, 16, 0, "relu", 1), (3, 64, 24, 0, "relu", 2), (3, 72, 24, 0, "relu", 1),
            (5, 72, 40, 24, "relu", 2), (5, 120, 40, 32, "relu", 1), (5, 120, 40, 32, "relu", 1),
            (3, 240, 80, 0, "hardswish", 2), (3, 200, 80, 0, "hardswish", 1), (3, 184, 80, 0, "hardswish", 1),
            (3, 184, 80, 0, "hardswish", 1), (3, 480, 112, 120, "hardswish", 1), (3, 672, 112, 168, "hardswish", 1),
            (5, 672, 160, 168, "hardswish", 2), (5, 960, 160, 240, "hardswish", 1), (5, 960, 160, 240, "hardswish", 1)]
    layers, c = [_cbr(3, 16, 3, 2, act="hardswish")], 16
    for k, e, o, se, act, s in spec:
        layers.append(_mbconv(c, k, e, o, s, act, se))
        c = o
    layers.append(_cbr(c, 960, 1, act="hardswish"))
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(960, 1280), nn.Hardswish(),
                         nn.Dropout(0.2), nn.Linear(1280, num_classes))


def efficientnet_v2_s(num_classes: int = 1000):
    torch, nn = _nn()
    # (fused, kernel, expansion, out, repeats, stride, SE ratio of the block's input)
    spec = [(True, 3, 1, 24, 2, 1, 0), (True, 3, 4, 48, 4, 2, 0), (True, 3, 4, 64, 4, 2, 0),
            (False, 3, 4, 128, 6, 2, 4), (False, 3, 6, 160, 9, 1, 4), (False, 3, 6, 256, 15, 2, 4)]
    layers, c = [_cbr(3, 24, 3, 2, act="silu")], 24
    for fused, k, e, o, n, s, se in spec:
        for i in range(n):
            layers.append(_mbconv(c, k, c * e, o, s if i == 0 else 1, "silu", c // se if se else 0, fused))
            c = o
    return _head(nn, layers, c, 1280, num_classes, "silu")


def wide_resnet50_2(num_classes: int = 1000):
    from .cnn import resnext50_32x4d

    return resnext50_32x4d(num_classes, groups=1, group_width=128)
