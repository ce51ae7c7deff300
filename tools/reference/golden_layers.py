"""Golden files for models described as layer lists (model.layers in a job spec).

Flax builds each model generically from the same spec the C++ side reads (`Sequential`
below), so the golden files check the spec's vocabulary as much as the arithmetic. Each
file holds, with the spec as JSON in its metadata:
  init.*                 params after init (the spec's seed, Lockstep's RNG plan)
  data.images/labels     the examples (synthetic, of the spec's input_shape)
  grads.loss, grads.*    loss and every gradient at init on data[:batch], with
                         grads.dropout_key as the 'dropout' root
  train.losses, train.params.*, masks.<step>.<i>
                         20 steps of the spec's optimizer with dropout (N = 1)
Written by make_golden.py (--only layers); tests/golden_layers_test.cc reads them.
"""
import json
import os

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from safetensors.numpy import save_file

import models

VERSIONS = {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__}

CONV = {  # conv (VALID, stride 2, no bias; SAME with an uneven kernel), gelu, max pools
    "input_shape": [12, 12, 3],
    "layers": [
        {"conv": {"features": 8, "kernel_size": [3, 3], "strides": [2, 2], "padding": "VALID",
                  "use_bias": False}},
        {"gelu": {}},
        {"conv": {"features": 6, "kernel_size": [2, 3]}},
        {"max_pool": {"window_shape": [2, 2], "strides": [2, 2], "padding": "SAME"}},
        {"layer_norm": {}},
        {"relu": {}},
        {"max_pool": {"window_shape": [2, 2]}},
        {"flatten": {}},
        {"dense": {"features": 10}},
    ],
}

DENSE = {  # tanh, sigmoid, silu, exact gelu, layer norm options, dropout, dense options
    "input_shape": [6, 6, 2],
    "layers": [
        {"flatten": {}},
        {"dense": {"features": 32}},
        {"tanh": {}},
        {"dropout": {"rate": 0.25}},
        {"dense": {"features": 24, "use_bias": False}},
        {"layer_norm": {"epsilon": 1e-5, "use_scale": False}},
        {"sigmoid": {}},
        {"dense": {"features": 16}},
        {"silu": {}},
        {"layer_norm": {"use_bias": False}},
        {"dropout": {"rate": 0.5}},
        {"gelu": {"approximate": False}},
        {"dense": {"features": 10}},
    ],
}

POOL = {  # conv SAME stride 2 (padding after only), avg pools SAME/VALID, with and without pad counts
    "input_shape": [10, 10, 2],
    "layers": [
        {"conv": {"features": 4, "kernel_size": [3, 3], "strides": [2, 2], "padding": "SAME"}},
        {"relu": {}},
        {"avg_pool": {"window_shape": [2, 2], "strides": [2, 2], "padding": "SAME"}},
        {"conv": {"features": 5, "kernel_size": [1, 1]}},
        {"avg_pool": {"window_shape": [2, 2], "padding": "SAME", "count_include_pad": False}},
        {"tanh": {}},
        {"relu": {}},  # in place on tanh's output, which tanh's backward must not need
        {"avg_pool": {"window_shape": [3, 3]}},
        {"flatten": {}},
        {"dropout": {"rate": 0.1}},
        {"dense": {"features": 10}},
    ],
}

SPECS = {
    "conv": dict(model=CONV, optimizer={"kind": "sgd", "learning_rate": 0.05, "momentum": 0.9}),
    "dense": dict(model=DENSE, optimizer={"kind": "adam", "learning_rate": 3e-3}),
    "pool": dict(model=POOL, optimizer={"kind": "adamw", "learning_rate": 3e-3}),
}


class Sequential(nn.Module):
  """The layers of a spec's model.layers, in Flax's own modules and functions; named
  blocks (model.blocks) as Flax module classes of their own, residual connections as
  `x + layers(x)` (see flax_blocks.py)."""
  spec_json: str  # the model spec as JSON (hashable, as module fields should be)
  axis_name: str | None = None  # BatchNorm's statistics across this pmap axis

  @nn.compact
  def __call__(self, x, train: bool = False):
    spec = json.loads(self.spec_json)
    return apply_layers(spec["layers"], x, train, self.axis_name, spec.get("blocks", {}), self)


class AddPositionEmbs(nn.Module):
  """The reference ViT's learned position embedding (google-research/vision_transformer,
  models_vit.py): x + a (1, T, F) param initialized normal(stddev), ViT's 0.02."""
  stddev: float = 0.02

  @nn.compact
  def __call__(self, x):
    pe = self.param("pos_embedding", nn.initializers.normal(stddev=self.stddev),
                    (1, x.shape[1], x.shape[2]))
    return x + pe


def apply_layers(layers, x, train, axis_name, blocks, module):
  """Applies spec layers inside `module`'s compact __call__ (so that the modules created
  here are its children, auto-named in its scope, and a class token is its param)."""
  import flax_blocks  # noqa: E402 (it imports this module)
  for entry in layers:
    if isinstance(entry, str):
      entry = {entry: {}}
    (kind, o), = entry.items()
    o = o or {}
    window = lambda: (tuple(o["window_shape"]),
                      tuple(o["strides"]) if "strides" in o else None,
                      o.get("padding", "VALID"))
    name = o.get("name") or None
    if kind == "conv":
      x = nn.Conv(o["features"], tuple(o["kernel_size"]),
                  strides=tuple(o.get("strides", (1, 1))), padding=o.get("padding", "SAME"),
                  use_bias=o.get("use_bias", True), name=name)(x)
    elif kind == "dense":
      x = nn.Dense(o["features"], use_bias=o.get("use_bias", True), name=name)(x)
    elif kind == "batch_norm":
      x = nn.BatchNorm(use_running_average=not train, momentum=o.get("momentum", 0.99),
                       epsilon=o.get("epsilon", 1e-5), use_bias=o.get("use_bias", True),
                       use_scale=o.get("use_scale", True), axis_name=axis_name, name=name)(x)
    elif kind == "layer_norm":
      x = nn.LayerNorm(epsilon=o.get("epsilon", 1e-6), use_bias=o.get("use_bias", True),
                       use_scale=o.get("use_scale", True), name=name)(x)
    elif kind == "relu":
      x = nn.relu(x)
    elif kind == "gelu":
      x = nn.gelu(x, approximate=o.get("approximate", True))
    elif kind == "tanh":
      x = nn.tanh(x)
    elif kind == "sigmoid":
      x = nn.sigmoid(x)
    elif kind == "silu":
      x = nn.silu(x)
    elif kind == "avg_pool":
      shape, strides, padding = window()
      x = nn.avg_pool(x, shape, strides=strides, padding=padding,
                      count_include_pad=o.get("count_include_pad", True))
    elif kind == "max_pool":
      shape, strides, padding = window()
      x = nn.max_pool(x, shape, strides=strides, padding=padding)
    elif kind == "flatten":
      x = x.reshape((x.shape[0], -1))
    elif kind == "dropout":
      x = nn.Dropout(rate=o["rate"], deterministic=not train, name=name)(x)
    elif kind == "embed":
      x = nn.Embed(o["num_embeddings"], o["features"], name=name)(x)
    elif kind == "position_embed":  # a learned position embedding, added
      t = x.shape[-2]
      x = x + nn.Embed(o.get("max_len", t), x.shape[-1], name=name)(jnp.arange(t))
    elif kind == "to_sequence":  # ViT: the patches' pixels as tokens
      x = x.reshape((x.shape[0], -1, x.shape[-1]))
    elif kind == "class_token":  # ViT's, before the tokens
      cls = module.param(o.get("name", "cls"), nn.initializers.zeros, (1, 1, x.shape[-1]))
      x = jnp.concatenate([jnp.tile(cls, [x.shape[0], 1, 1]), x], axis=1)
    elif kind == "add_position_embs":
      x = AddPositionEmbs(o.get("stddev", 0.02), name=name)(x)
    elif kind == "sequence_pool":
      x = x[:, 0] if o["method"] == "first" else jnp.mean(x, axis=1)
    elif kind == "multi_head_attention":  # self-attention
      mask = nn.make_causal_mask(jnp.ones(x.shape[:2])) if o.get("causal") else None
      x = nn.MultiHeadDotProductAttention(
          num_heads=o["num_heads"], qkv_features=o.get("qkv_features"),
          out_features=o.get("out_features"), dropout_rate=o.get("dropout_rate", 0.0),
          use_bias=o.get("use_bias", True), deterministic=not train, name=name)(x, mask=mask)
    elif kind == "residual":
      x = flax_blocks.residual(o, x, train, axis_name, blocks, module)
    elif kind == "block":
      x = flax_blocks.call_block(o, x, train, axis_name, blocks)
    else:
      raise ValueError(f"layer {kind}: not in these goldens")
  return x


def tensors(prefix, tree):
  return {f"{prefix}{k}": np.asarray(v, np.float32) for k, v in models.flatten(tree).items()}


def init(model, input_shape, seed):
  """Lockstep's plan: rng = PRNGKey(seed); rng, init_rng = split(rng); init on ones."""
  rng, init_rng = jax.random.split(jax.random.PRNGKey(seed))
  return rng, model.init(init_rng, jnp.ones([1, *input_shape]))["params"]


def train(model, spec, params, rng, images, labels, loss_fn=models.loss_fn):
  """The seed program with N = 1: per epoch a permutation, per step a dropout key.

  `loss_fn(params, apply_fn, x, y, dropout_key)` returns (loss, aux): the images' loss, or
  golden_sequence's token-level one (images and labels are then token windows)."""
  o = spec["optimizer"]
  tx = models.make_tx(o["kind"], o["learning_rate"], o.get("momentum", 0.0))
  opt_state = tx.init(params)
  b = spec["global_batch_size"]
  bernoulli = jax.random.bernoulli

  @jax.jit
  def step(params, opt_state, x, y, key):
    masks = []

    def recording(*a, **kw):
      m = bernoulli(*a, **kw)
      masks.append(m)
      return m

    def lf(p):
      jax.random.bernoulli = recording
      try:
        loss, _ = loss_fn(p, model.apply, x, y, key)
      finally:
        jax.random.bernoulli = bernoulli
      return loss, list(masks)

    (loss, mk), grads = jax.value_and_grad(lf, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, mk

  main_key = jax.random.PRNGKey(spec["dropout_seed"])
  steps_per_epoch = len(images) // b
  losses, masks, order = [], [], None
  for s in range(spec["steps"]):
    if s % steps_per_epoch == 0:
      rng, input_rng = jax.random.split(rng)
      order = np.asarray(jax.random.permutation(input_rng, len(images)))
    idx = order[(s % steps_per_epoch) * b:(s % steps_per_epoch + 1) * b]
    step_key, main_key = jax.random.split(main_key)
    key = jax.random.split(step_key, 1)[0]
    params, opt_state, loss, mk = step(params, opt_state, images[idx], labels[idx], key)
    losses.append(float(loss))
    masks.append([np.asarray(m) for m in mk])
  return params, np.asarray(losses, np.float32), masks


def write_goldens(out):
  for name, base in SPECS.items():
    write_golden(out, name, base)


def write_golden(out, name, base, prefix="layers_"):
  """<out>/<prefix><name>.safetensors for the spec `base` (model and optimizer)."""
  spec = dict(base, global_batch_size=8, steps=20, seed=3, dropout_seed=5, workers=1)
  shape = spec["model"]["input_shape"]
  data = np.random.default_rng(len(name))
  images = data.random((32, *shape), dtype=np.float32)
  labels = data.integers(0, 10, 32).astype(np.int32)
  model = Sequential(json.dumps(spec["model"]))
  rng, params = init(model, shape, spec["seed"])
  t = {"data.images": images, "data.labels": labels}
  t.update(tensors("init.", params))
  key = jax.random.PRNGKey(7)
  (loss, _), g = jax.value_and_grad(models.loss_fn, has_aux=True)(
      params, model.apply, images[:8], labels[:8], key)
  t.update(tensors("grads.", g))
  t["grads.loss"] = np.asarray([loss], np.float32)
  t["grads.dropout_key"] = np.asarray(key, np.uint32)
  final, losses, masks = train(model, spec, params, rng, images, labels)
  t["train.losses"] = losses
  t.update(tensors("train.params.", final))
  for step, mk in enumerate(masks):
    for i, m in enumerate(mk):
      t[f"masks.{step}.{i}"] = m.astype(np.uint8)
  path = f"{out}/{prefix}{name}.safetensors"
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
            metadata={"versions": json.dumps(VERSIONS), "spec": json.dumps(spec)})
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")
