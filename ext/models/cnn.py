"""Classic CNNs that ``transformers`` does not define, in plain PyTorch (no torchvision here).

DenseNet-121 (concatenation), GoogLeNet (Inception branches), SqueezeNet 1.1 and 1.0 (fire
modules), ShuffleNetV2 x1.0 (channel split + shuffle), MobileNetV3-small (hardswish,
squeeze-excitation with hardsigmoid) and ResNeXt-50 32x4d (grouped 3x3): the layer structure of the
published architectures at their usual 224x224 input, random seeded weights.
``width`` scales channel counts for the zoo's quick variants.
"""
from __future__ import annotations


def _nn():
    import torch

    return torch, torch.nn


def _cbr(cin, cout, k, stride=1, pad=None, groups=1, act="relu"):
    """conv (no bias) + BN + activation."""
    torch, nn = _nn()
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2 if pad is None else pad, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if act:
        layers.append({"relu": nn.ReLU, "hardswish": nn.Hardswish, "relu6": nn.ReLU6, "silu": nn.SiLU}[act]())
    return nn.Sequential(*layers)


def densenet121(width: float = 1.0, blocks=(6, 12, 24, 16), num_classes: int = 1000):
    torch, nn = _nn()
    growth, init = max(4, int(32 * width)), max(8, int(64 * width))

    class Dense(nn.Module):
        def __init__(self, cin):
            super().__init__()
            self.f = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                   nn.BatchNorm2d(4 * growth), nn.ReLU(),
                                   nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))

        def forward(self, x):
            return torch.cat([x, self.f(x)], 1)

    layers, c = [nn.Conv2d(3, init, 7, 2, 3, bias=False), nn.BatchNorm2d(init), nn.ReLU(),
                 nn.MaxPool2d(3, 2, 1)], init
    for i, n in enumerate(blocks):
        for _ in range(n):
            layers.append(Dense(c))
            c += growth
        if i < len(blocks) - 1:
            layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
            c //= 2
    layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes)]
    return nn.Sequential(*layers)


def googlenet(width: float = 1.0, num_classes: int = 1000):
    torch, nn = _nn()
    w = lambda c: max(4, int(c * width))  # noqa: E731

    class Inception(nn.Module):
        def __init__(self, cin, c1, c3r, c3, c5r, c5, pp):
            super().__init__()
            self.b1 = _cbr(cin, w(c1), 1)
            self.b2 = nn.Sequential(_cbr(cin, w(c3r), 1), _cbr(w(c3r), w(c3), 3))
            self.b3 = nn.Sequential(_cbr(cin, w(c5r), 1), _cbr(w(c5r), w(c5), 3))  # torchvision's 3x3 here
            self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), _cbr(cin, w(pp), 1))
            self.cout = w(c1) + w(c3) + w(c5) + w(pp)

        def forward(self, x):
            return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)

    spec = [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "pool",
            (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
            (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128), "pool",
            (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]
    layers = [_cbr(3, w(64), 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), _cbr(w(64), w(64), 1),
              _cbr(w(64), w(192), 3), nn.MaxPool2d(3, 2, ceil_mode=True)]
    c = w(192)
    for s in spec:
        if s == "pool":
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
            continue
        block = Inception(c, *s)
        layers.append(block)
        c = block.cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes)]
    return nn.Sequential(*layers)


def _fire(w):
    """SqueezeNet's fire module (squeeze 1x1, expand 1x1 and 3x3, concatenated); ``w`` scales widths."""
    torch, nn = _nn()

    class Fire(nn.Module):
        def __init__(self, cin, s, e):
            super().__init__()
            self.s = nn.Sequential(nn.Conv2d(cin, w(s), 1), nn.ReLU())
            self.e1 = nn.Sequential(nn.Conv2d(w(s), w(e), 1), nn.ReLU())
            self.e3 = nn.Sequential(nn.Conv2d(w(s), w(e), 3, padding=1), nn.ReLU())

        def forward(self, x):
            x = self.s(x)
            return torch.cat([self.e1(x), self.e3(x)], 1)

    return Fire


def squeezenet11(width: float = 1.0, num_classes: int = 1000):
    torch, nn = _nn()
    w = lambda c: max(4, int(c * width))  # noqa: E731
    Fire = _fire(w)
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(
        nn.Conv2d(3, w(64), 3, 2), nn.ReLU(), pool(), Fire(w(64), 16, 64), Fire(2 * w(64), 16, 64), pool(),
        Fire(2 * w(64), 32, 128), Fire(2 * w(128), 32, 128), pool(), Fire(2 * w(128), 48, 192),
        Fire(2 * w(192), 48, 192), Fire(2 * w(192), 64, 256), Fire(2 * w(256), 64, 256),
        nn.Conv2d(2 * w(256), num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def squeezenet10(num_classes: int = 1000):
    """SqueezeNet 1.0: a 7x7 stride-2 stem and the pools after fire modules 3 and 7."""
    torch, nn = _nn()
    Fire = _fire(lambda c: c)
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(
        nn.Conv2d(3, 96, 7, 2), nn.ReLU(), pool(), Fire(96, 16, 64), Fire(128, 16, 64), Fire(128, 32, 128), pool(),
        Fire(256, 32, 128), Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), pool(), Fire(512, 64, 256),
        nn.Conv2d(512, num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def resnext50_32x4d(num_classes: int = 1000, groups: int = 32, group_width: int = 4):
    """ResNeXt-50: ResNet-50's bottlenecks with a grouped 3x3 (``groups`` of ``group_width`` x 2^stage)."""
    torch, nn = _nn()

    class Block(nn.Module):
        def __init__(self, cin, width, cout, stride):
            super().__init__()
            self.body = nn.Sequential(_cbr(cin, width, 1), _cbr(width, width, 3, stride, groups=groups),
                                      _cbr(width, cout, 1, act=None))
            self.down = None if cin == cout and stride == 1 else _cbr(cin, cout, 1, stride, act=None)

        def forward(self, x):
            return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers, cin = [_cbr(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for stage, repeats in enumerate((3, 4, 6, 3)):
        width, cout = groups * group_width * 2 ** stage, 256 * 2 ** stage
        for i in range(repeats):
            layers.append(Block(cin, width, cout, 2 if i == 0 and stage > 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes))


def shufflenet_v2(width: float = 1.0, repeats=(4, 8, 4), num_classes: int = 1000):
    torch, nn = _nn()
    chans = [max(8, int(c * width)) // 2 * 2 for c in (24, 116, 232, 464, 1024)]

    def shuffle(x):
        n, c, h, wd = x.shape
        return x.reshape(n, 2, c // 2, h, wd).transpose(1, 2).reshape(n, c, h, wd)

    class Unit(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            half = cout // 2
            self.stride = stride
            if stride == 2:
                self.left = nn.Sequential(_cbr(cin, cin, 3, 2, groups=cin, act=None), _cbr(cin, half, 1))
            src = cin if stride == 2 else half
            self.right = nn.Sequential(_cbr(src, half, 1), _cbr(half, half, 3, stride, groups=half, act=None),
                                       _cbr(half, half, 1))

        def forward(self, x):
            if self.stride == 1:
                a, b = x.chunk(2, dim=1)
                out = torch.cat([a, self.right(b)], 1)
            else:
                out = torch.cat([self.left(x), self.right(x)], 1)
            return shuffle(out)

    layers, c = [_cbr(3, chans[0], 3, 2), nn.MaxPool2d(3, 2, 1)], chans[0]
    for n, cout in zip(repeats, chans[1:4]):
        layers += [Unit(c, cout, 2)] + [Unit(cout, cout, 1) for _ in range(n - 1)]
        c = cout
    layers += [_cbr(c, chans[4], 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(chans[4], num_classes)]
    return nn.Sequential(*layers)


def mobilenet_v3_small(width: float = 1.0, num_classes: int = 1000):
    torch, nn = _nn()
    mk = lambda c: max(8, int(c * width + 4) // 8 * 8)  # noqa: E731

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            r = mk(c // 4)
            self.f = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, r, 1), nn.ReLU(), nn.Conv2d(r, c, 1),
                                   nn.Hardsigmoid())

        def forward(self, x):
            return x * self.f(x)

    class Block(nn.Module):
        def __init__(self, cin, k, exp, cout, se, act, stride):
            super().__init__()
            layers = [] if exp == cin else [_cbr(cin, exp, 1, act=act)]
            layers.append(_cbr(exp, exp, k, stride, groups=exp, act=act))
            if se:
                layers.append(SE(exp))
            layers.append(_cbr(exp, cout, 1, act=None))
            self.f, self.res = nn.Sequential(*layers), stride == 1 and cin == cout

        def forward(self, x):
            return x + self.f(x) if self.res else self.f(x)

    # (kernel, expansion, out, SE, activation, stride) of MobileNetV3-small
    spec = [(3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
            (5, 96, 40, True, "hardswish", 2), (5, 240, 40, True, "hardswish", 1), (5, 240, 40, True, "hardswish", 1),
            (5, 120, 48, True, "hardswish", 1), (5, 144, 48, True, "hardswish", 1), (5, 288, 96, True, "hardswish", 2),
            (5, 576, 96, True, "hardswish", 1), (5, 576, 96, True, "hardswish", 1)]
    layers, c = [_cbr(3, mk(16), 3, 2, act="hardswish")], mk(16)
    for k, e, o, se, act, s in spec:
        layers.append(Block(c, k, mk(e), mk(o), se, act, s))
        c = mk(o)
    layers += [_cbr(c, mk(576), 1, act="hardswish"), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(mk(576), 1024), nn.Hardswish(), nn.Linear(1024, num_classes)]
    return nn.Sequential(*layers)
