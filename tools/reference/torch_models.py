"""The benchmark models of models.py in PyTorch, for the PyTorch peers of the CPU and GPU
benchmarks (bench/cpu/peers.py, bench/gpu/peers.py).

  cnn: the Flax MNIST CNN (models.CNN), NCHW input
  mlp: 784-512-512-10 without dropout (models.MLP(widths=(512, 512)))
  bn-convnet: examples/bn-convnet.yaml's BatchNorm convnet (models.BNConvNet); BatchNorm
    momentum 0.1 = 1 - Flax's 0.9, eps 1e-5 (PyTorch's running variance is the unbiased
    one, Flax's the biased: the same cost)
  resnet: examples/resnet.yaml's ResNet (ResNetBlock: two 3x3 convs without bias, each
    with BatchNorm, the input added back through a strided 1x1 conv + BatchNorm where the
    shape changes), 174,970 params as in Flax. The strided 3x3 convs pad 1 on each side
    where Flax's SAME pads 0 before and 1 after: the same output shape and FLOPs
  char-transformer: examples/char-transformer.yaml's decoder (token + learned position
    embedding, 4 pre-norm DecoderBlocks of causal nn.MultiheadAttention with dropout on
    the attention weights and a gelu MLP with dropout, a final LayerNorm, 256 logits per
    position), 875,520 params as in Flax; LayerNorm eps 1e-6 and tanh gelu as Flax's
    defaults. The attention runs through PyTorch's own fused path
    (scaled_dot_product_attention, as nn.MultiheadAttention picks it), not Flax's einsums:
    the same FLOPs, as a PyTorch user would write it
  vit: examples/vit.yaml's vision transformer (7x7 patches embedded by a conv with kernel
    = stride = 7, the 16 patches as tokens after a class token, learned position
    embeddings, dropout 0.1, 4 pre-norm EncoderBlocks of 4-head nn.MultiheadAttention
    without attention dropout and a tanh-gelu MLP of 128 with dropout after each layer of
    it, a final LayerNorm, the head on the class token), 139,018 params as in Flax

The last three are initialized as Flax initializes them (flax_init_): kernels lecun_normal
(a normal truncated at 2 std, variance 1 / fan_in), biases 0, embeddings normal with
variance 1 / features (the ViT's position embeddings normal(0.02) and its class token
zeros, as the spec's).

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


def flax_init_(module):
  """Re-initializes `module`'s Linear, Conv2d, Embedding and MultiheadAttention weights as
  Flax's defaults draw them (lecun_normal kernels, zero biases, embeddings normal with
  variance 1 / features); LayerNorm and BatchNorm start at scale 1, bias 0 in both."""
  def lecun_normal_(w, fan_in):
    std = (1.0 / fan_in) ** 0.5 / 0.87962566103423978  # truncated normal's variance
    nn.init.trunc_normal_(w, std=std, a=-2 * std, b=2 * std)

  for m in module.modules():
    if isinstance(m, (nn.Linear, nn.Conv2d)):
      lecun_normal_(m.weight, m.weight[0].numel())
      if m.bias is not None:
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
      nn.init.normal_(m.weight, std=(1.0 / m.embedding_dim) ** 0.5)
    elif isinstance(m, nn.MultiheadAttention):
      lecun_normal_(m.in_proj_weight, m.embed_dim)  # query, key, value: fan_in F
      nn.init.zeros_(m.in_proj_bias)  # out_proj is an nn.Linear (fan_in H * D = F)
  return module


class ResNetBlock(nn.Module):

  def __init__(self, in_features, filters, stride=1, momentum=0.1, eps=1e-5):
    super().__init__()
    bn = lambda: nn.BatchNorm2d(filters, eps=eps, momentum=momentum)
    self.conv0 = nn.Conv2d(in_features, filters, 3, stride, padding=1, bias=False)
    self.bn0 = bn()
    self.conv1 = nn.Conv2d(filters, filters, 3, 1, padding=1, bias=False)
    self.bn1 = bn()
    self.projection = None
    if stride != 1 or in_features != filters:  # residual.shape != y.shape
      self.projection = nn.Sequential(
          nn.Conv2d(in_features, filters, 1, stride, bias=False), bn())

  def forward(self, x):
    y = self.bn1(self.conv1(torch.relu(self.bn0(self.conv0(x)))))
    residual = x if self.projection is None else self.projection(x)
    return torch.relu(residual + y)


class ResNet(nn.Module):
  """examples/resnet.yaml: conv 16 + BatchNorm + relu, ResNetBlocks of 16, 16, 32/2, 32,
  64/2, 64 filters, global average pooling, dense 10."""

  def __init__(self, stages=((16, 1), (16, 1), (32, 2), (32, 1), (64, 2), (64, 1)),
               momentum=0.1, eps=1e-5):
    super().__init__()
    self.conv = nn.Conv2d(1, stages[0][0], 3, padding=1, bias=False)
    self.bn = nn.BatchNorm2d(stages[0][0], eps=eps, momentum=momentum)
    blocks, features = [], stages[0][0]
    for filters, stride in stages:
      blocks.append(ResNetBlock(features, filters, stride, momentum, eps))
      features = filters
    self.blocks = nn.Sequential(*blocks)
    self.dense = nn.Linear(features, 10)
    flax_init_(self)

  def forward(self, x):  # x: NCHW
    x = self.blocks(torch.relu(self.bn(self.conv(x))))
    return self.dense(x.mean(dim=(2, 3)))


class DecoderBlock(nn.Module):
  """x + attention(norm(x)), then x + dropout(mlp(norm(x))), as the spec's DecoderBlock."""

  def __init__(self, features=128, heads=4, hidden=512, dropout=0.1):
    super().__init__()
    self.norm0 = nn.LayerNorm(features, eps=1e-6)
    self.attention = nn.MultiheadAttention(features, heads, dropout=dropout, batch_first=True)
    self.norm1 = nn.LayerNorm(features, eps=1e-6)
    self.dense0 = nn.Linear(features, hidden)
    self.dense1 = nn.Linear(hidden, features)
    self.dropout = nn.Dropout(dropout)

  def forward(self, x, mask):
    h = self.norm0(x)
    x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False, is_causal=True)[0]
    y = self.dense1(nn.functional.gelu(self.dense0(self.norm1(x)), approximate="tanh"))
    return x + self.dropout(y)


class CharTransformer(nn.Module):
  """examples/char-transformer.yaml: tokens (batch, T) int64 -> logits (batch, T, 256)."""

  def __init__(self, context=128, vocabulary=256, features=128, heads=4, hidden=512,
               layers=4, dropout=0.1):
    super().__init__()
    self.embed = nn.Embedding(vocabulary, features)
    self.position = nn.Embedding(context, features)
    self.blocks = nn.ModuleList(
        DecoderBlock(features, heads, hidden, dropout) for _ in range(layers))
    self.norm = nn.LayerNorm(features, eps=1e-6)
    self.head = nn.Linear(features, vocabulary)
    # True where attention is not allowed (position t attends to positions <= t).
    self.register_buffer(
        "mask", torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1),
        persistent=False)
    flax_init_(self)

  def forward(self, tokens):
    t = tokens.shape[1]
    x = self.embed(tokens) + self.position.weight[:t]
    for block in self.blocks:
      x = block(x, self.mask[:t, :t])
    return self.head(self.norm(x))


class EncoderBlock(nn.Module):
  """x + dropout(attention(norm(x))), then x + MlpBlock(norm(x)), as the ViT spec's
  Encoder1DBlock (MlpBlock: dense, gelu, dropout, dense, dropout)."""

  def __init__(self, features=64, heads=4, hidden=128, dropout=0.1):
    super().__init__()
    self.norm0 = nn.LayerNorm(features, eps=1e-6)
    self.attention = nn.MultiheadAttention(features, heads, batch_first=True)
    self.norm1 = nn.LayerNorm(features, eps=1e-6)
    self.dense0 = nn.Linear(features, hidden)
    self.dense1 = nn.Linear(hidden, features)
    self.dropout = nn.Dropout(dropout)

  def forward(self, x):
    h = self.norm0(x)
    x = x + self.dropout(self.attention(h, h, h, need_weights=False)[0])
    h = self.dropout(nn.functional.gelu(self.dense0(self.norm1(x)), approximate="tanh"))
    return x + self.dropout(self.dense1(h))


class ViT(nn.Module):
  """examples/vit.yaml: images (batch, 1, 28, 28) -> logits (batch, 10)."""

  def __init__(self, patch=7, size=28, features=64, heads=4, hidden=128, layers=4,
               dropout=0.1, classes=10):
    super().__init__()
    tokens = (size // patch) ** 2 + 1  # the patches and the class token
    self.embedding = nn.Conv2d(1, features, patch, stride=patch)
    self.cls = nn.Parameter(torch.zeros(1, 1, features))
    self.position = nn.Parameter(torch.empty(1, tokens, features))
    self.dropout = nn.Dropout(dropout)
    self.blocks = nn.Sequential(
        *(EncoderBlock(features, heads, hidden, dropout) for _ in range(layers)))
    self.norm = nn.LayerNorm(features, eps=1e-6)
    self.head = nn.Linear(features, classes)
    flax_init_(self)
    nn.init.normal_(self.position, std=0.02)

  def forward(self, x):  # x: NCHW
    x = self.embedding(x).flatten(2).transpose(1, 2)  # (batch, patches, features), row-major
    x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
    x = self.blocks(self.dropout(x + self.position))
    return self.head(self.norm(x)[:, 0])


# Model name -> constructor.
MODELS = {"cnn": CNN, "mlp": MLP, "bn-convnet": BNConvNet, "resnet": ResNet,
          "char-transformer": CharTransformer, "vit": ViT}
