"""PyTorch models with the module names of the zoo's PyTorch layouts, for the converter's
reference logits (needs torch; imported by tests/models/test_torch_conversion.py when torch is
installed and by tests/data/torch_checkpoints/make_fixtures.py). Channel counts scale with
`width` (64 = the released models), so small twins give small fixtures.

`TorchvisionResNet` and `TorchvisionVGG` follow torchvision's classes (ResNet v1.5 with the
stride on the 3x3 convolution; VGG with a 7x7 adaptive pool and a three-layer classifier); the
Fixup / bias-free ResNet-50, BagNet-33 and B-cos ResNet-50 follow their releases' layouts."""
import numpy as np
import torch


class _BasicBlock(torch.nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = (nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                         nn.BatchNorm2d(planes))
                           if stride != 1 or inplanes != planes else None)

    def forward(self, x):
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class _Bottleneck(torch.nn.Module):
    """torchvision's bottleneck block; BagNet's (`kernel` of its own, no padding) crops the
    residual to the block's smaller output."""
    expansion = 4

    def __init__(self, inplanes, planes, stride, kernel=3, padding=1):
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel, stride, padding, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = (nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                         nn.BatchNorm2d(planes * 4))
                           if stride != 1 or inplanes != planes * 4 else None)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        residual = x if self.downsample is None else self.downsample(x)
        excess = residual.size(-1) - out.size(-1)
        if excess:
            residual = residual[:, :, :-excess, :-excess]
        return torch.relu(out + residual)


class TorchvisionResNet(torch.nn.Module):
    """torchvision's ResNet with `blocks` per stage of basic or bottleneck blocks."""

    def __init__(self, num_classes, bottleneck, blocks, width=64):
        super().__init__()
        nn = torch.nn
        block = _Bottleneck if bottleneck else _BasicBlock
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        inplanes = width
        for index, count in enumerate(blocks):
            planes, stage = width * 2 ** index, []
            for position in range(count):
                stage.append(block(inplanes, planes, 2 if index and not position else 1))
                inplanes = planes * block.expansion
            setattr(self, f"layer{index + 1}", nn.Sequential(*stage))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for index in range(1, 5):
            x = getattr(self, f"layer{index}")(x)
        return self.fc(x.mean(dim=(2, 3)))


VGG_CONFIGS = {11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
               16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512,
                    512, 512, "M")}


class TorchvisionVGG(torch.nn.Module):
    """torchvision's VGG (features, 7x7 adaptive average pool, classifier)."""

    def __init__(self, num_classes, depth, width=64, hidden=4096, batch_norm=False, bias=True):
        super().__init__()
        nn = torch.nn
        layers, channels = [], 3
        for entry in VGG_CONFIGS[depth]:
            if entry == "M":
                layers.append(nn.MaxPool2d(2))
                continue
            out = entry * width // 64
            layers.append(nn.Conv2d(channels, out, 3, padding=1, bias=bias))
            if batch_norm:
                layers.append(nn.BatchNorm2d(out))
            layers.append(nn.ReLU())
            channels = out
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(channels * 49, hidden, bias=bias), nn.ReLU(), nn.Dropout(),
            nn.Linear(hidden, hidden, bias=bias), nn.ReLU(), nn.Dropout(),
            nn.Linear(hidden, num_classes, bias=bias))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class _FixupBottleneck(torch.nn.Module):
    def __init__(self, inplanes, planes, stride, bias_free):
        super().__init__()
        self.bias_free = bias_free
        conv = torch.nn.Conv2d
        self.conv1 = conv(inplanes, planes, 1, bias=False)
        self.conv2 = conv(planes, planes, 3, stride, 1, bias=False)
        self.conv3 = conv(planes, planes * 4, 1, bias=False)
        self.downsample = (conv(inplanes, planes * 4, 1, stride, bias=False)
                           if stride != 1 or inplanes != planes * 4 else None)
        if not bias_free:
            for name in ("bias1a", "bias1b", "bias2a", "bias2b", "bias3a", "bias3b"):
                setattr(self, name, torch.nn.Parameter(torch.randn(1) * 0.1))
            self.scale = torch.nn.Parameter(1 + torch.randn(1) * 0.1)

    def forward(self, x):
        b = (lambda name: 0.0) if self.bias_free else (lambda name: getattr(self, name))
        out = torch.relu(self.conv1(x + b("bias1a")) + b("bias1b"))
        out = torch.relu(self.conv2(out + b("bias2a")) + b("bias2b"))
        out = self.conv3(out + b("bias3a"))
        out = out if self.bias_free else out * self.scale + self.bias3b
        identity = x if self.downsample is None else self.downsample(x + b("bias1a"))
        return torch.relu(out + identity)


class FixupResNet50(torch.nn.Module):
    def __init__(self, num_classes, bias_free, width=64):
        super().__init__()
        self.bias_free = bias_free
        self.conv1 = torch.nn.Conv2d(3, width, 7, 2, 3, bias=False)
        if not bias_free:
            self.bias1 = torch.nn.Parameter(torch.randn(1) * 0.1)
            self.bias2 = torch.nn.Parameter(torch.randn(1) * 0.1)
        inplanes = width
        for index, blocks in enumerate((3, 4, 6, 3)):
            planes, stage = width * 2 ** index, []
            for block in range(blocks):
                stage.append(_FixupBottleneck(inplanes, planes, 2 if index and not block else 1,
                                              bias_free))
                inplanes = planes * 4
            setattr(self, f"layer{index + 1}", torch.nn.Sequential(*stage))
        self.fc = torch.nn.Linear(inplanes, num_classes, bias=not bias_free)

    def forward(self, x):
        x = self.conv1(x)
        x = torch.relu(x if self.bias_free else x + self.bias1)
        x = torch.nn.functional.max_pool2d(x, 3, 2, 1)
        for index in range(1, 5):
            x = getattr(self, f"layer{index}")(x)
        x = x.mean(dim=(2, 3))
        return self.fc(x if self.bias_free else x + self.bias2)


class BagNet33(torch.nn.Module):
    """BagNet-33 after the PyTorch release (kernel-3 convolution in each stage's first block)."""

    def __init__(self, num_classes, width=64):
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(3, width, 1, bias=False)
        self.conv2 = nn.Conv2d(width, width, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        inplanes = width
        for index, (blocks, stride) in enumerate(zip((3, 4, 6, 3), (2, 2, 2, 1))):
            planes, stage = width * 2 ** index, []
            for block in range(blocks):
                stage.append(_Bottleneck(inplanes, planes, stride if block == 0 else 1,
                                         3 if block == 0 else 1, padding=0))
                inplanes = planes * 4
            setattr(self, f"layer{index + 1}", nn.Sequential(*stage))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv2(self.conv1(x))))
        for index in range(1, 5):
            x = getattr(self, f"layer{index}")(x)
        return self.fc(x.mean(dim=(2, 3)))


class _BcosConv(torch.nn.Conv2d):
    def forward(self, x):
        weight = torch.nn.functional.normalize(self.weight, dim=(1, 2, 3))
        out = self._conv_forward(x, weight, None)
        norms = torch.nn.functional.avg_pool2d((x ** 2).sum(1, keepdim=True), self.kernel_size,
                                               padding=self.padding, stride=self.stride,
                                               divisor_override=1)
        return (out / (norms + 1e-6).sqrt()).abs() * out


class UncenteredBN(torch.nn.BatchNorm2d):
    def __init__(self, channels):
        super().__init__(channels)
        self.bias = None

    def forward(self, x):
        return x * (self.running_var + self.eps).rsqrt()[None, :, None, None] \
            * self.weight[None, :, None, None]


class _BcosBottleneck(torch.nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1, self.bn1 = _BcosConv(inplanes, planes, 1, bias=False), UncenteredBN(planes)
        self.conv2 = _BcosConv(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = UncenteredBN(planes)
        self.conv3 = _BcosConv(planes, planes * 4, 1, bias=False)
        self.bn3 = UncenteredBN(planes * 4)
        self.downsample = (torch.nn.Sequential(_BcosConv(inplanes, planes * 4, 1, stride,
                                                         bias=False),
                                               UncenteredBN(planes * 4))
                           if stride != 1 or inplanes != planes * 4 else None)

    def forward(self, x):
        out = self.bn3(self.conv3(self.bn2(self.conv2(self.bn1(self.conv1(x))))))
        return out + (x if self.downsample is None else self.downsample(x))


class BcosResNet50(torch.nn.Module):
    """B-cos v2 ResNet-50 (B = 2): takes the 6-channel [x, 1 - x] input, as B-cos does."""

    def __init__(self, num_classes, width=64):
        super().__init__()
        self.conv1 = _BcosConv(6, width, 7, 2, 3, bias=False)
        self.bn1 = UncenteredBN(width)
        inplanes = width
        for index, blocks in enumerate((3, 4, 6, 3)):
            planes, stage = width * 2 ** index, []
            for block in range(blocks):
                stage.append(_BcosBottleneck(inplanes, planes, 2 if index and not block else 1))
                inplanes = planes * 4
            setattr(self, f"layer{index + 1}", torch.nn.Sequential(*stage))
        self.fc = _BcosConv(inplanes, num_classes, 1, bias=False)
        self.logit_bias = float(np.log(1 / (num_classes - 1)))

    def forward(self, x):
        x = torch.nn.functional.avg_pool2d(self.bn1(self.conv1(torch.cat([x, 1 - x], 1))), 3, 2,
                                           1)
        for index in range(1, 5):
            x = getattr(self, f"layer{index}")(x)
        return self.fc(x).mean(dim=(2, 3)) + self.logit_bias


def align_classifier(model, images):
    """B-cos classifier rows near the mean feature: random rows give |cos| ~ 1/45 and logits
    within 1e-3 of the bias, a vacuous comparison."""
    with torch.no_grad():
        x = torch.from_numpy(images.transpose(0, 3, 1, 2))
        x = torch.nn.functional.avg_pool2d(model.bn1(model.conv1(torch.cat([x, 1 - x], 1))), 3,
                                           2, 1)
        for index in range(1, 5):
            x = getattr(model, f"layer{index}")(x)
        mean = x.mean(dim=(0, 2, 3))
        rows = mean[None] + 0.3 * mean.abs().mean() * torch.randn(model.fc.weight.shape[0],
                                                                  mean.numel())
        model.fc.weight.copy_(rows[:, :, None, None])




def randomise_statistics(model):
    """BatchNorm statistics and affine parameters away from their initial values (B-cos gains
    near 4, so its logits leave the bias), as a trained model's are."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, UncenteredBN):
                module.running_var.uniform_(0.9, 1.1)
                module.weight.uniform_(3.8, 4.2)
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)


def reference_logits(model, images: np.ndarray) -> np.ndarray:
    """The model's logits of NHWC float32 `images`."""
    with torch.no_grad():
        return model(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()


class _Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        nn = torch.nn
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Module()
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        batch, tokens, dim = x.shape
        qkv = self.attn.qkv(self.norm1(x)).reshape(batch, tokens, 3, self.heads, -1)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attention = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(dim=-1)
        context = (attention @ v).transpose(1, 2).reshape(batch, tokens, dim)
        x = x + self.attn.proj(context)
        hidden = torch.nn.functional.gelu(self.mlp.fc1(self.norm2(x)))
        return x + self.mlp.fc2(hidden)


class TimmViT(torch.nn.Module):
    """timm's VisionTransformer (class token, learned positions, pre-norm blocks, exact GELU,
    LayerNorm epsilon 1e-6, the class token's output to the head)."""

    def __init__(self, num_classes, side, patch=16, dim=768, depth=12, heads=12):
        super().__init__()
        nn = torch.nn
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (side // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[_Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])
