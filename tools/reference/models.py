"""Flax models and the RNG plan Lockstep reproduces (reference §7, §8).

Shared by the golden-file generator and the JAX benchmark peer, so both run exactly the
program Lockstep claims to match.
"""
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class CNN(nn.Module):
  """The Flax MNIST example's CNN (824,458 params). `dtype`: every module's computation
  dtype (None: float32; jnp.bfloat16: model.dtype bfloat16, docs/models.md#mixed-precision)."""
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    x = nn.Conv(features=32, kernel_size=(3, 3), dtype=self.dtype)(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3), dtype=self.dtype)(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(features=256, dtype=self.dtype)(x)
    x = nn.relu(x)
    return nn.Dense(features=10, dtype=self.dtype)(x)


class MLP(nn.Module):
  """Flatten -> [Dense(w) -> relu -> Dropout(rate)] per width -> Dense(10); `dtype` as
  CNN's."""
  widths: Sequence[int]
  dropout_rate: float = 0.0
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = x.reshape((x.shape[0], -1))
    for w in self.widths:
      x = nn.Dense(features=w, dtype=self.dtype)(x)
      x = nn.relu(x)
      x = nn.Dropout(rate=self.dropout_rate, deterministic=not train)(x)
    return nn.Dense(features=10, dtype=self.dtype)(x)


class BNConvNet(nn.Module):
  """examples/bn-convnet.yaml's model (422,090 params): [Conv 3x3 -> BatchNorm -> relu ->
  max_pool 2x2] for 32 and 64 features, Dense(128) -> BatchNorm -> relu -> Dropout(0.3),
  Dense(10). BatchNorm as the spec's batch_norm layers: momentum 0.9, epsilon 1e-5,
  running averages in evaluation (train=False); under pmap, `axis_name` makes the batch
  statistics those of the global batch (the spec's semantics on several workers). `dtype`
  as CNN's."""
  momentum: float = 0.9
  epsilon: float = 1e-5
  dropout_rate: float = 0.3
  axis_name: str | None = None
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool = False):
    def bn(x):
      return nn.BatchNorm(use_running_average=not train, momentum=self.momentum,
                          epsilon=self.epsilon, axis_name=self.axis_name, dtype=self.dtype)(x)

    for features in (32, 64):
      x = nn.Conv(features=features, kernel_size=(3, 3), dtype=self.dtype)(x)
      x = nn.relu(bn(x))
      x = nn.max_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(bn(nn.Dense(features=128, dtype=self.dtype)(x)))
    x = nn.Dropout(rate=self.dropout_rate, deterministic=not train)(x)
    return nn.Dense(features=10, dtype=self.dtype)(x)


def make_tx(kind, lr, momentum=0.0, weight_decay=1e-4, nesterov=False, b1=0.9, b2=0.999,
            eps=1e-8):
  """optax's optimizer; `lr` a float or an optax schedule."""
  if kind == "sgd":
    return optax.sgd(lr, momentum=momentum if momentum else None, nesterov=nesterov)
  if kind == "adam":
    return optax.adam(lr, b1=b1, b2=b2, eps=eps)
  if kind == "adamw":
    return optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  raise ValueError(kind)


def make_schedule(opt):
  """The learning rate of a Lockstep optimizer spec (a dict with the proto's field names):
  `learning_rate`, or the optax schedule `schedule` names, with Python floats and ints
  where a user's optax program would have them."""
  if not opt.get("schedule"):
    return float(opt["learning_rate"])
  (kind, a), = opt["schedule"].items()
  if kind == "cosine_decay":
    return optax.cosine_decay_schedule(
        float(a["init_value"]), int(a["decay_steps"]), alpha=float(a.get("alpha", 0.0)),
        exponent=float(a.get("exponent", 1.0)))
  if kind == "warmup_cosine_decay":
    return optax.warmup_cosine_decay_schedule(
        float(a.get("init_value", 0.0)), float(a["peak_value"]), int(a.get("warmup_steps", 0)),
        int(a["decay_steps"]), end_value=float(a.get("end_value", 0.0)),
        exponent=float(a.get("exponent", 1.0)))
  if kind == "exponential_decay":
    end = a.get("end_value")
    return optax.exponential_decay(
        float(a["init_value"]), int(a["transition_steps"]), float(a["decay_rate"]),
        transition_begin=int(a.get("transition_begin", 0)),
        staircase=bool(a.get("staircase", False)),
        end_value=None if end is None else float(end))
  if kind == "piecewise_constant":
    return optax.piecewise_constant_schedule(
        float(a["init_value"]),
        {int(k): float(v) for k, v in a.get("boundaries_and_scales", {}).items()})
  raise ValueError(kind)


def make_tx_from_spec(opt):
  """optax's transformation for a Lockstep optimizer spec (a dict with the proto's field
  names): the schedule or constant learning rate, Nesterov, and clip_by_global_norm
  chained before the optimizer."""
  tx = make_tx(opt["kind"], make_schedule(opt), momentum=opt.get("momentum", 0.0),
               weight_decay=opt.get("weight_decay", 1e-4), nesterov=opt.get("nesterov", False),
               b1=opt.get("b1", 0.9), b2=opt.get("b2", 0.999), eps=opt.get("eps", 1e-8))
  if opt.get("clip_by_global_norm"):
    tx = optax.chain(optax.clip_by_global_norm(float(opt["clip_by_global_norm"])), tx)
  return tx


def loss_fn(params, apply_fn, images, labels, dropout_key=None):
  rngs = {"dropout": dropout_key} if dropout_key is not None else {}
  logits = apply_fn({"params": params}, images, train=dropout_key is not None,
                    rngs=rngs)
  one_hot = jax.nn.one_hot(labels, num_classes=10)
  # The loss in float32 whatever the model's dtype (docs/models.md#mixed-precision).
  loss = -jnp.sum(one_hot * jax.nn.log_softmax(logits.astype(jnp.float32)), axis=-1)
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
