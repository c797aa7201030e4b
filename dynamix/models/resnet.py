"""ResNets for 32x32 inputs.

``cifar_resnet(depth)``: He et al. 2016 Sec. 4.2, 6n+2 layers in three stages of 16/32/64 channels
(resnet8: n=1, 78k params; resnet20: n=3, 0.27M). ``resnet_basic``/``resnet_bottleneck``: the
ImageNet ResNet18/34/50 (He et al. 2016, Table 1) with a 3x3 stride-1 stem and no max-pool, the
common CIFAR adaptation (ResNet18 11.2M, ResNet34 21.3M, ResNet50 23.5M params).
"""

from __future__ import annotations

from torch import nn
from torch.nn import functional as F


def _c(n: int, width: float) -> int:
    return max(1, int(round(n * width)))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != out:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, block, blocks: tuple[int, ...], planes: tuple[int, ...], width: float,
                 num_classes: int = 10) -> None:
        super().__init__()
        cin = _c(planes[0], width)
        self.stem = nn.Sequential(nn.Conv2d(3, cin, 3, 1, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU(inplace=True))
        stages = []
        for i, (n, p) in enumerate(zip(blocks, planes)):
            p = _c(p, width)
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                stages.append(block(cin, p, stride))
                cin = p * block.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def cifar_resnet(depth: int, width: float = 1.0) -> ResNet:
    if (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
    n = (depth - 2) // 6
    return ResNet(BasicBlock, (n, n, n), (16, 32, 64), width)


def resnet_basic(blocks: tuple[int, ...], width: float = 1.0) -> ResNet:
    return ResNet(BasicBlock, blocks, (64, 128, 256, 512), width)


def resnet_bottleneck(blocks: tuple[int, ...], width: float = 1.0) -> ResNet:
    return ResNet(Bottleneck, blocks, (64, 128, 256, 512), width)
