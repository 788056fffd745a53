#!/usr/bin/python3
"""make_batch_models.py: writes the models and references of test_onnx's any-batch test, once
(the files are committed; run again only to change them): a small ResNet-like CNN, an MLP and an
upsampling CNN (ConvTranspose, nearest and bilinear Resize),
exported by PyTorch at batch 1 with no dynamic axes (so the files spell the batch as 1, e.g. a
Reshape to (1, -1) for x.view(x.size(0), -1)), and for each 8 inputs and PyTorch's outputs as
ONNX TensorProtos (no onnxruntime involved):
    cd tests/onnx/data && /usr/bin/python3 make_batch_models.py
"""
import onnx
import onnx.numpy_helper
import torch


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(c)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(x + self.b2(self.c2(y)))


class ResNetLike(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.block = Block(8)
        self.pool = torch.nn.MaxPool2d(2)
        self.down = torch.nn.Conv2d(8, 12, 3, stride=2, padding=1)
        self.gap = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(12, 10)

    def forward(self, x):
        x = self.pool(self.block(torch.relu(self.stem(x))))
        x = self.gap(torch.relu(self.down(x)))
        return self.fc(x.view(x.size(0), -1))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(20, 32)
        self.l2 = torch.nn.Linear(32, 7)

    def forward(self, x):
        return torch.softmax(self.l2(torch.tanh(self.l1(torch.flatten(x, 1)))), dim=1)


class Upsampler(torch.nn.Module):
    """ConvTranspose2d, nearest and bilinear upsampling (Resize in the file), a dense head."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.conv = torch.nn.Conv2d(4, 2, 3, padding=1)
        self.fc = torch.nn.Linear(2 * 30 * 30, 6)

    def forward(self, x):
        x = torch.nn.functional.interpolate(torch.relu(self.up(x)), scale_factor=2,
                                            mode="nearest")
        x = torch.nn.functional.interpolate(self.conv(x), size=(30, 30), mode="bilinear",
                                            align_corners=False)
        return self.fc(torch.flatten(x, 1))


def write(name, model, shape):
    torch.manual_seed(1)
    for p in model.parameters():  # non-trivial batch-norm statistics too
        p.data.uniform_(-0.5, 0.5)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    model.eval()
    torch.onnx.export(model, torch.randn(1, *shape), name + ".onnx", opset_version=13,
                      input_names=["x"], output_names=["y"])
    x = torch.randn(8, *shape)
    with torch.no_grad():
        y = model(x)
    for suffix, t in (("x", x), ("y", y)):
        tp = onnx.numpy_helper.from_array(t.numpy(), suffix)
        with open("%s_%s.pb" % (name, suffix), "wb") as f:
            f.write(tp.SerializeToString())


torch.manual_seed(0)
write("batch_resnet", ResNetLike(), (3, 12, 12))
write("batch_mlp", Mlp(), (4, 5))
write("batch_upsample", Upsampler(), (3, 6, 6))
