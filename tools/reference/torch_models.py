"""The benchmark models of models.py in PyTorch, for the PyTorch peers of the CPU and GPU
benchmarks (bench/cpu/peers.py, bench/gpu/peers.py).

  cnn: the Flax MNIST CNN (models.CNN), NCHW input
  mlp: 784-512-512-10 without dropout (models.MLP(widths=(512, 512)))
  bn-convnet: examples/bn-convnet.yaml's BatchNorm convnet (models.BNConvNet); BatchNorm
    momentum 0.1 = 1 - Flax's 0.9, eps 1e-5 (PyTorch's running variance is the unbiased
    one, Flax's the biased: the same cost)

Imports torch: import this module only where torch runs.
"""
import torch
from torch import nn


class CNN(nn.Module):

  def __init__(self):
    super().__init__()
    self.conv0 = nn.Conv2d(1, 32, 3, padding=1)
    self.conv1 = nn.Conv2d(32, 64, 3, padding=1)
    self.dense0 = nn.Linear(64 * 7 * 7, 256)
    self.dense1 = nn.Linear(256, 10)
    self.pool = nn.AvgPool2d(2, 2)

  def forward(self, x):  # x: NCHW
    x = self.pool(torch.relu(self.conv0(x)))
    x = self.pool(torch.relu(self.conv1(x)))
    x = torch.flatten(x, 1)
    return self.dense1(torch.relu(self.dense0(x)))


class MLP(nn.Module):

  def __init__(self):
    super().__init__()
    self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                             nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

  def forward(self, x):
    return self.net(x)


class BNConvNet(nn.Module):

  def __init__(self, momentum=0.1, eps=1e-5, dropout_rate=0.3):
    super().__init__()
    self.conv0 = nn.Conv2d(1, 32, 3, padding=1)
    self.bn0 = nn.BatchNorm2d(32, eps=eps, momentum=momentum)
    self.conv1 = nn.Conv2d(32, 64, 3, padding=1)
    self.bn1 = nn.BatchNorm2d(64, eps=eps, momentum=momentum)
    self.dense0 = nn.Linear(64 * 7 * 7, 128)
    self.bn2 = nn.BatchNorm1d(128, eps=eps, momentum=momentum)
    self.dropout = nn.Dropout(dropout_rate)
    self.dense1 = nn.Linear(128, 10)
    self.pool = nn.MaxPool2d(2, 2)

  def forward(self, x):  # x: NCHW
    x = self.pool(torch.relu(self.bn0(self.conv0(x))))
    x = self.pool(torch.relu(self.bn1(self.conv1(x))))
    x = torch.flatten(x, 1)
    return self.dense1(self.dropout(torch.relu(self.bn2(self.dense0(x)))))


# Model name -> constructor.
MODELS = {"cnn": CNN, "mlp": MLP, "bn-convnet": BNConvNet}
