"""The benchmark models of models.py in PyTorch, for the PyTorch peers of the CPU and GPU
benchmarks (bench/cpu/peers.py, bench/gpu/peers.py).

  cnn: the Flax MNIST CNN (models.CNN), NCHW input
  mlp: 784-512-512-10 without dropout (models.MLP(widths=(512, 512)))

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


# Model name -> constructor.
MODELS = {"cnn": CNN, "mlp": MLP}
