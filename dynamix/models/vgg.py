"""VGG (Simonyan & Zisserman 2015) with batch norm, CIFAR form: 5 pools to 1x1, one linear head."""

from __future__ import annotations

from torch import nn

CFGS = {
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg13": (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    "vgg19": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"),
}


class VGG(nn.Module):
    """``VGG("vgg11")`` has 9.2M parameters at width 1 (the paper's VGG11 workload)."""

    def __init__(self, name: str, width: float = 1.0, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in CFGS[name]:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                cout = max(1, int(round(v * width)))
                layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                           nn.ReLU(inplace=True)]
                cin = cout
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))
