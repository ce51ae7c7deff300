"""Flax models and the RNG plan Lockstep reproduces (reference §7, §8).

Shared by the golden-file generator and the JAX benchmark peer, so both run exactly the
program Lockstep claims to match.
"""
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class CNN(nn.Module):
  """The Flax MNIST example's CNN (824,458 params)."""

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    x = nn.Conv(features=32, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(features=256)(x)
    x = nn.relu(x)
    return nn.Dense(features=10)(x)


class MLP(nn.Module):
  """Flatten -> [Dense(w) -> relu -> Dropout(rate)] per width -> Dense(10)."""
  widths: Sequence[int]
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = x.reshape((x.shape[0], -1))
    for w in self.widths:
      x = nn.Dense(features=w)(x)
      x = nn.relu(x)
      x = nn.Dropout(rate=self.dropout_rate, deterministic=not train)(x)
    return nn.Dense(features=10)(x)


def make_tx(kind, lr, momentum=0.0, weight_decay=1e-4):
  if kind == "sgd":
    return optax.sgd(lr, momentum=momentum if momentum else None)
  if kind == "adam":
    return optax.adam(lr)
  if kind == "adamw":
    return optax.adamw(lr, weight_decay=weight_decay)
  raise ValueError(kind)


def loss_fn(params, apply_fn, images, labels, dropout_key=None):
  rngs = {"dropout": dropout_key} if dropout_key is not None else {}
  logits = apply_fn({"params": params}, images, train=dropout_key is not None,
                    rngs=rngs)
  one_hot = jax.nn.one_hot(labels, num_classes=10)
  loss = -jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=-1)
  return jnp.mean(loss), logits


def init_params(model, seed):
  """rng = PRNGKey(seed); rng, init_rng = split(rng); init(init_rng, ones)."""
  rng = jax.random.PRNGKey(seed)
  rng, init_rng = jax.random.split(rng)
  params = model.init(init_rng, jnp.ones([1, 28, 28, 1]))["params"]
  return rng, params


def flatten(tree, prefix=""):
  """{'Conv_0': {'kernel': x}} -> {'Conv_0/kernel': x} (Lockstep's param names)."""
  out = {}
  for k, v in tree.items():
    name = f"{prefix}/{k}" if prefix else k
    if isinstance(v, dict) or hasattr(v, "items"):
      out.update(flatten(v, name))
    else:
      out[name] = v
  return out
