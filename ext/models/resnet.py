"""ResNet-18/50 in plain PyTorch (no torchvision), random seeded weights.

Layout follows the standard ImageNet ResNet: 7x7/2 stem conv, 3x3/2 max pool,
four stages of BasicBlocks (18: [2, 2, 2, 2]) or Bottlenecks (50: [3, 4, 6, 3]),
global average pool, 1000-way linear. Batch norms carry random running
statistics so that folding them into the convolutions is exercised.
"""
from __future__ import annotations


def _torch():
    import torch

    return torch


def _bn(c):
    nn = _torch().nn
    bn = nn.BatchNorm2d(c)
    with _torch().no_grad():
        bn.running_mean.uniform_(-0.1, 0.1)
        bn.running_var.uniform_(0.8, 1.2)
        bn.weight.uniform_(0.8, 1.2)
        bn.bias.uniform_(-0.1, 0.1)
    return bn


def _make_classes():
    torch = _torch()
    nn = torch.nn

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, c, stride=1):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False), _bn(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), _bn(c)
            self.down = None
            if stride != 1 or cin != c:
                self.down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), _bn(c))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, c, stride=1):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, c, 1, bias=False), _bn(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), _bn(c)
            self.conv3, self.bn3 = nn.Conv2d(c, 4 * c, 1, bias=False), _bn(4 * c)
            self.down = None
            if stride != 1 or cin != 4 * c:
                self.down = nn.Sequential(nn.Conv2d(cin, 4 * c, 1, stride, bias=False), _bn(4 * c))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, block, layers, num_classes=1000, width=64):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), _bn(width), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            stages, cin = [], width
            for i, n in enumerate(layers):
                c = width * 2 ** i
                blocks = []
                for j in range(n):
                    blocks.append(block(cin, c, 2 if (j == 0 and i > 0) else 1))
                    cin = c * block.expansion
                stages.append(nn.Sequential(*blocks))
            self.stages = nn.Sequential(*stages)
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x):
            x = self.stages(self.stem(x))
            return self.fc(torch.flatten(torch.mean(x, dim=(2, 3)), 1))

    return BasicBlock, Bottleneck, ResNet


def resnet(depth: int = 18, *, num_classes: int = 1000, width: int = 64, seed: int = 0):
    """A ResNet-18 or -50 in eval mode with seeded random weights."""
    torch = _torch()
    BasicBlock, Bottleneck, ResNet = _make_classes()
    torch.manual_seed(seed)
    cfg = {18: (BasicBlock, [2, 2, 2, 2]), 50: (Bottleneck, [3, 4, 6, 3])}
    if depth not in cfg:
        raise ValueError(f"ResNet depth must be 18 or 50, got {depth}")
    block, layers = cfg[depth]
    return ResNet(block, layers, num_classes, width).eval()


def resnet18(**kw):
    return resnet(18, **kw)


def resnet50(**kw):
    return resnet(50, **kw)
