"""Golden files for randomly drawn models: the spec vocabulary of docs/models.md combined
as a user might combine it, checked against Flax building the same spec.

Each draw is a valid model (shapes tracked as they are built): image models of conv,
pools, layer_norm, activations, dropout, residual connections with and without a
projection and named blocks (nested, with `$arg`s and custom names), ending in flatten
and dense; sequence models of embed, position_embed, multi_head_attention (heads,
qkv/out widths, causal, dropout on the weights, no bias), dense, layer_norm, activations
and dropout, in residuals and blocks, ending in logits per position; and image models with
BatchNorm added after some convs and denses. Files, as golden_layers.py,
golden_sequence.py and golden_batchnorm.py write theirs: `layers_random<k>` (N = 1),
`sequence_random<k>` (N = 1) and `pmap2_random<k>` (batch_stats; jax.pmap on 2 devices).
tests/golden_random_test.cc checks every such file in its folder: init 1e-6; the loss and
every gradient 1e-5; 20 steps with dropout 1e-5 (identical masks), on 2 replicas and 2
logical replicas for pmap2 files; and every gradient against the file's float64 reference
(float64_reference), no further from it than a few times XLA's float32 gradient.

Three properties of a draw are measured, not assumed:
- A param whose true gradient is 0 (float64; e.g. a conv bias that reaches a BatchNorm
  only through linear layers) has rounding noise for a float32 gradient, in JAX as here:
  such draws are redrawn (attention's key/bias aside: the test holds it to its kernel).
- train.sensitivity: how far JAX's own 20 steps move when the init moves by one ulp. A
  draw above 1e-6 is chaotic in float32 (Lockstep's rounding, which differs from XLA's by
  about an ulp, would be amplified past 1e-5 as JAX's own is); the test compares its init
  and gradients and skips its training run, saying why.
- xla_error.*: how far XLA's float32 gradients are from float64's. Where some tensor's is
  above 3e-6 (relative), the draw is ill-conditioned: its float32 gradients are compared
  with float64's, not with JAX's within 1e-5.

  tools/.venv/bin/python tools/reference/golden_random.py --count 3 --seed 1
  tools/.venv/bin/python tools/reference/golden_random.py --count 20 --seed 7 --out /tmp/g

The first writes the committed files (tests/golden/); the second a larger draw for a
fuzzing session: LOCKSTEP_GOLDEN_DIR=/tmp/g build/tests/golden_random_test. --print shows
the specs drawn.
"""
import argparse
import json
import os
import random
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")  # pmap2_ files
sys.path.insert(0, os.path.dirname(__file__))
import jax  # noqa: E402

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

import golden_batchnorm  # noqa: E402
import golden_layers  # noqa: E402
import golden_sequence  # noqa: E402
import models  # noqa: E402

ACTIVATIONS = ["relu", "gelu", "tanh", "sigmoid", "silu"]
# A layer_norm over c channels makes c values of mean 0 and variance 1: over 2 they are
# +-1 whatever the input, and the gradient through them is cancellation (JAX's own
# float32 gradients upstream of one are 1-4% off float64's), so draws norm 4 or more.
MIN_NORM_CHANNELS = 4


def activation(r):
  a = r.choice(ACTIVATIONS)
  if a == "gelu" and r.random() < 0.4:
    return {"gelu": {"approximate": False}}
  return {a: {}}


def layer_norm(r):
  o = {}
  if r.random() < 0.3:
    o["epsilon"] = r.choice([1e-5, 1e-3])
  if r.random() < 0.2:
    o["use_bias"] = False
  elif r.random() < 0.2:
    o["use_scale"] = False
  return {"layer_norm": o}


def dropout(r):
  return {"dropout": {"rate": r.choice([0.1, 0.25, 0.5])}}


class Names:
  """Custom module names (Flax's name=), unique per scope."""

  def __init__(self, r, prefix="custom"):
    self.r, self.prefix, self.used = r, prefix, set()

  def maybe(self, o):
    if self.r.random() < 0.15:
      n = f"{self.prefix}{len(self.used)}"
      self.used.add(n)
      o["name"] = n
    return o


# ---- images ---------------------------------------------------------------------------

def out_len(n, k, s, padding):
  return -(-n // s) if padding == "SAME" else (n - k) // s + 1


def conv(r, shape, names, features=None, stride=None, padding=None):
  h, w, _ = shape
  kh, kw = r.choice([1, 2, 3]), r.choice([1, 2, 3])
  s = stride if stride is not None else r.choice([1, 1, 2])
  p = padding or r.choice(["SAME", "SAME", "VALID"])
  if p == "VALID" and (h < kh or w < kw or out_len(h, kh, s, p) < 2 or out_len(w, kw, s, p) < 2):
    p = "SAME"
  f = features or r.randint(2, 6)
  o = {"features": f, "kernel_size": [kh, kw]}
  if s != 1 or r.random() < 0.2:
    o["strides"] = [s, s]
  if p != "SAME" or r.random() < 0.2:
    o["padding"] = p
  if r.random() < 0.3:
    o["use_bias"] = False
  return {"conv": names.maybe(o)}, [out_len(h, kh, s, p), out_len(w, kw, s, p), f]


def pool(r, shape):
  h, w, c = shape
  kind = r.choice(["avg_pool", "max_pool"])
  k = r.choice([2, 3])
  s = r.choice([1, 2])
  p = r.choice(["SAME", "VALID"])
  if p == "VALID" and (out_len(h, k, s, p) < 2 or out_len(w, k, s, p) < 2):
    p = "SAME"
  o = {"window_shape": [k, k]}
  if s != 1:
    o["strides"] = [s, s]
  if p != "VALID" or r.random() < 0.3:
    o["padding"] = p
  if kind == "avg_pool" and r.random() < 0.4:
    o["count_include_pad"] = False
  return {kind: o}, [out_len(h, k, s, p), out_len(w, k, s, p), c]


def image_layer(r, shape, names):
  """One layer or residual connection on an image; returns (layer, out shape)."""
  roll = r.random()
  if roll < 0.3 or min(shape[:2]) < 3:
    return conv(r, shape, names, stride=1 if min(shape[:2]) < 5 else None)
  if roll < 0.45:
    return activation(r), shape
  if roll < 0.55 and shape[2] >= MIN_NORM_CHANNELS:
    return _named(layer_norm(r), names), shape
  if roll < 0.65 and min(shape[:2]) >= 4:
    return pool(r, shape)
  if roll < 0.72:
    return _named(dropout(r), names), shape
  return image_residual(r, shape, names)


def _named(layer, names):
  (kind, o), = layer.items()
  return {kind: names.maybe(o)}


def image_residual(r, shape, names):
  """x + layers(x): a branch of convs (SAME; the first maybe strided or widening) with
  activations, norms and dropout, and a 1x1 projection where the shapes differ."""
  f = r.choice([shape[2], shape[2], r.randint(2, 6)])
  s = 2 if min(shape[:2]) >= 6 and r.random() < 0.4 else 1
  first, y = conv(r, shape, names, features=f, stride=s, padding="SAME")
  branch = [first]
  for _ in range(r.randint(0, 3)):
    roll = r.random()
    if roll < 0.35:
      layer, y = conv(r, y, names, features=f, stride=1, padding="SAME")
    elif roll < 0.6:
      layer = activation(r)
    elif roll < 0.8 and f >= MIN_NORM_CHANNELS:
      layer = _named(layer_norm(r), names)
    else:
      layer = _named(dropout(r), names)
    branch.append(layer)
  o = {"layers": branch}
  if y != shape or r.random() < 0.3:
    proj = {"features": f, "kernel_size": [1, 1], "use_bias": r.random() < 0.5}
    if s != 1:
      proj["strides"] = [s, s]
    o["projection"] = [{"conv": names.maybe(proj)}]
    if r.random() < 0.4 and f >= MIN_NORM_CHANNELS:
      o["projection"].append(_named(layer_norm(r), names))
  return {"residual": o}, y


def image_blocks(r):
  """Block classes: a ResNet-style block with $filters/$strides, and maybe an Outer
  block calling it twice (a nested scope)."""
  inner_names = Names(r)
  act = activation(r)
  branch = [
      {"conv": {"features": "$filters", "kernel_size": [3, 3], "strides": "$strides",
                "use_bias": False}},
      act,
      {"conv": {"features": "$filters", "kernel_size": [3, 3]}},
  ]
  if r.random() < 0.5:
    branch.append(_named(layer_norm(r), inner_names))
  if r.random() < 0.4:
    branch.append(_named(dropout(r), inner_names))
  blocks = {"Res": {"args": {"filters": None, "strides": [1, 1]}, "layers": [
      {"residual": {"layers": branch, "projection": [
          {"conv": {"features": "$filters", "kernel_size": [1, 1], "strides": "$strides",
                    "name": "conv_proj"}}]}},
      activation(r),
  ]}}
  if r.random() < 0.5:
    blocks["Stage"] = {"args": {"width": None}, "layers": [
        {"block": {"module": "Res", "args": {"filters": "$width", "strides": [2, 2]}}},
        {"block": {"module": "Res", "args": {"filters": "$width"}}},
    ]}
  return blocks


def image_model(r):
  shape = [r.randint(6, 10), r.randint(6, 10), r.randint(1, 3)]
  names = Names(r)
  model = {"input_shape": list(shape)}
  layers, y = [], shape
  use_blocks = r.random() < 0.5
  if use_blocks:
    model["blocks"] = image_blocks(r)
  for _ in range(r.randint(2, 6)):
    if use_blocks and r.random() < 0.3 and min(y[:2]) >= 4:
      f = r.randint(MIN_NORM_CHANNELS, 6)
      if "Stage" in model["blocks"] and r.random() < 0.5:
        layers.append({"block": {"module": "Stage", "args": {"width": f}}})
        y = [-(-y[0] // 2), -(-y[1] // 2), f]
      else:
        s = r.choice([1, 2])
        call = {"module": "Res", "args": {"filters": f}}
        if s == 2:
          call["args"]["strides"] = [2, 2]
        layers.append({"block": call})
        y = [-(-y[0] // s), -(-y[1] // s), f]
      continue
    layer, y = image_layer(r, y, names)
    layers.append(layer)
  layers.append({"flatten": {}})
  if r.random() < 0.5:
    layers += [{"dense": names.maybe({"features": r.randint(8, 24)})}, activation(r)]
    if r.random() < 0.4:
      layers.append(_named(dropout(r), names))
  layers.append({"dense": {"features": 10}})
  model["layers"] = layers
  return model


def batch_norm(r):
  o = {}
  if r.random() < 0.5:
    o["momentum"] = r.choice([0.9, 0.5])
  if r.random() < 0.2:
    o["epsilon"] = 1e-3
  if r.random() < 0.15:
    o["use_bias"] = False
  elif r.random() < 0.15:
    o["use_scale"] = False
  return {"batch_norm": o}


def with_batch_norm(r, layers, names, p=0.5):
  """The layers with a batch_norm after some convs and hidden denses (whose bias is then
  dropped, as a ResNet's: before a BatchNorm its true gradient is 0), in residual
  branches and projections too; True in [0] of the answer if any was added."""
  out, added = [], False
  for i, layer in enumerate(layers):
    (kind, o), = layer.items() if isinstance(layer, dict) else ((layer, {}),)
    if kind == "residual":
      o = dict(o)
      o["layers"], a = with_batch_norm(r, o["layers"], names, p)
      added |= a
      if "projection" in o:
        o["projection"], a = with_batch_norm(r, o["projection"], names, p)
        added |= a
      out.append({"residual": o})
      continue
    out.append(layer)
    last = i == len(layers) - 1 and kind == "dense"
    if kind in ("conv", "dense") and not last and r.random() < p:
      o["use_bias"] = False
      out.append(_named(batch_norm(r), names))
      added = True
  return out, added


def bn_model(r):
  """An image model with BatchNorm (and its batch_stats) somewhere: a draw of
  image_model with batch_norm layers added."""
  while True:
    model = image_model(r)
    model["layers"], added = with_batch_norm(r, model["layers"], Names(r, "norm"))
    for block in model.get("blocks", {}).values():
      block["layers"], a = with_batch_norm(r, block["layers"], Names(r, "norm"))
      added |= a and '"block"' in json.dumps(model["layers"])
    if added:
      return model


# ---- sequences ------------------------------------------------------------------------

def attention(r, width, names):
  heads = r.choice([1, 2, 4])
  o = {"num_heads": heads}
  if r.random() < 0.4 or width % heads:
    o["qkv_features"] = heads * r.choice([2, 3, 4])
  out = width
  if r.random() < 0.3:
    out = r.choice([8, 12, 16])
    o["out_features"] = out
  if r.random() < 0.6:
    o["causal"] = True
  if r.random() < 0.5:
    o["dropout_rate"] = r.choice([0.1, 0.3])
  if r.random() < 0.25:
    o["use_bias"] = False
  return {"multi_head_attention": names.maybe(o)}, out


def sequence_layer(r, width, names, depth):
  roll = r.random()
  if roll < 0.25:
    return attention(r, width, names)
  if roll < 0.4:
    f = r.choice([8, 12, 16, 20])
    o = {"features": f}
    if r.random() < 0.2:
      o["use_bias"] = False
    return {"dense": names.maybe(o)}, f
  if roll < 0.55:
    return _named(layer_norm(r), names), width
  if roll < 0.65:
    return activation(r), width
  if roll < 0.72:
    return _named(dropout(r), names), width
  if depth < 2:
    branch, y = [], width
    for _ in range(r.randint(1, 3)):
      layer, y = sequence_layer(r, y, names, depth + 1)
      branch.append(layer)
    o = {"layers": branch}
    if y != width or r.random() < 0.3:
      o["projection"] = [{"dense": names.maybe({"features": y})}]
    return {"residual": o}, y
  return activation(r), width


def decoder_block(r):
  inner = Names(r)
  mlp = [_named(layer_norm(r), inner), {"dense": {"features": "$hidden"}}, activation(r),
         {"dense": {"features": "$features"}}]
  if r.random() < 0.5:
    mlp.append(_named(dropout(r), inner))
  att = {"num_heads": "$heads", "causal": r.random() < 0.7}
  if r.random() < 0.5:
    att["dropout_rate"] = 0.1
  return {"args": {"heads": None, "features": None, "hidden": 24}, "layers": [
      {"residual": {"layers": [_named(layer_norm(r), inner),
                               {"multi_head_attention": att}]}},
      {"residual": {"layers": mlp}},
  ]}


def sequence_model(r):
  t = r.randint(3, 9)
  vocab = r.randint(10, 30)
  width = r.choice([8, 12, 16])
  names = Names(r)
  model = {"input_shape": [t]}
  layers = [{"embed": names.maybe({"num_embeddings": vocab, "features": width})}]
  if r.random() < 0.7:
    o = {}
    if r.random() < 0.4:
      o["max_len"] = t + r.randint(1, 5)
    layers.append({"position_embed": names.maybe(o)})
  use_blocks = r.random() < 0.5
  if use_blocks:
    model["blocks"] = {"Decoder": decoder_block(r)}
  for _ in range(r.randint(1, 5)):
    if use_blocks and r.random() < 0.4:
      call = {"heads": r.choice([h for h in (1, 2, 4) if width % h == 0]), "features": width}
      if r.random() < 0.3:
        call["hidden"] = r.choice([16, 32])
      layers.append({"block": {"module": "Decoder", "args": call}})
      continue
    layer, width = sequence_layer(r, width, names, 0)
    layers.append(layer)
  if r.random() < 0.5:
    layers.append(_named(layer_norm(r), names))
  layers.append({"dense": {"features": vocab}})
  model["layers"] = layers
  return model


def optimizer(r, attention):
  # Attention's key bias has a true gradient of 0 (one constant added to a softmax row):
  # adam would scale its rounding noise to steps of the learning rate, in JAX and here
  # alike, so models with attention train with sgd (golden_sequence.py does too).
  kinds = ["sgd"] if attention else ["sgd", "adam", "adamw"]
  kind = r.choice(kinds)
  if kind == "sgd":
    return {"kind": "sgd", "learning_rate": 0.05, "momentum": r.choice([0.0, 0.9])}
  return {"kind": kind, "learning_rate": 3e-3}


def zero_gradients(model_spec, prefix):
  """The params of the model whose true gradient is 0 (in float64, below 1e-9 of the
  largest tensor's), and the batch_stats means whose true value is 0: a conv's bias that
  reaches a BatchNorm only through linear layers, a layer_norm's bias before a 1x1 conv and
  a BatchNorm, a BatchNorm after a use_bias false one and a conv... Float32 values of those are
  rounding noise, in JAX and here alike, so such draws are redrawn; attention's key/bias
  (always 0: one constant added to a softmax row) is held to its kernel by the test."""
  model = golden_layers.Sequential(json.dumps(model_spec))
  shape = model_spec["input_shape"]
  data = np.random.default_rng(0)
  if prefix == "sequence_":
    vocab = model_spec["layers"][0]["embed"]["num_embeddings"]
    x, y = data.integers(0, vocab, (8, *shape)), data.integers(0, vocab, (8, *shape))
    variables = model.init(jax.random.PRNGKey(0), np.ones([1, *shape], np.int32))
  else:
    x, y = data.random((8, *shape)), data.integers(0, 10, 8)
    variables = model.init(jax.random.PRNGKey(0), np.ones([1, *shape], np.float32))
  with jax.enable_x64(True):
    f64 = lambda tree: jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), tree)
    params, key, noise = f64(variables["params"]), jax.random.PRNGKey(7), []
    if prefix == "pmap2_":
      stats = f64(variables["batch_stats"])
      loss = lambda p: golden_batchnorm.loss_fn(p, stats, model, x, y, True, key)[0]
      # A BatchNorm whose input has a mean of 0 by construction (a use_bias false
      # BatchNorm, then a conv without bias): its running mean is rounding noise too.
      new = models.flatten(golden_batchnorm.loss_fn(params, stats, model, x, y, True, key)[1][0])
      noise = [n for n, v in new.items() if n.endswith("/mean") and
               np.linalg.norm(v) <= 1e-9 * np.linalg.norm(new[n[:-len("mean")] + "var"])]
    elif prefix == "sequence_":
      loss = lambda p: golden_sequence.token_loss(p, model.apply, x, y, key)[0]
    else:
      loss = lambda p: models.loss_fn(p, model.apply, x, y, key)[0]
    norms = {n: float(np.linalg.norm(g)) for n, g in models.flatten(jax.grad(loss)(params)).items()}
  top = max(norms.values())
  zeros = [n for n, v in norms.items() if v <= 1e-9 * top and not n.endswith("/key/bias")]
  return zeros + (noise if prefix == "pmap2_" else [])


def perturbed(params):
  """Every param moved by one float32 ulp (relative 2^-23), up or down at random."""
  signs = np.random.default_rng(0)
  return jax.tree_util.tree_map(
      lambda v: (np.asarray(v) * (1 + 2.0**-23 * signs.choice([-1, 1], np.shape(v))))
      .astype(np.float32), params)


def unflatten(flat):
  tree = {}
  for name, v in flat.items():
    *scopes, leaf = name.split("/")
    node = tree
    for scope in scopes:
      node = node.setdefault(scope, {})
    node[leaf] = v
  return tree


def measure(path, prefix):
  """Adds to the file its float64 reference (float64_reference) and train.sensitivity:
  how chaotic its 20 steps are in float32, the largest relative change of a
  step's loss or of a final param tensor (relative L2; attention's key/bias, whose true
  gradient is 0, aside) when JAX reruns them from an init moved by one ulp. Lockstep's
  rounding differs from XLA's by about that much, so where this is above 1e-6 the 1e-5
  comparison of the training run is not meaningful (the test skips it, saying so)."""
  with safe_open(path, "np") as f:
    metadata = f.metadata()
  spec, t = json.loads(metadata["spec"]), load_file(path)
  params = perturbed(unflatten({k[5:]: v for k, v in t.items() if k.startswith("init.")}))
  rng, _ = jax.random.split(jax.random.PRNGKey(spec["seed"]))
  model = golden_layers.Sequential(json.dumps(spec["model"]))
  if prefix == "pmap2_":
    stats = unflatten({k[11:]: v for k, v in t.items() if k.startswith("init_stats.")})
    final, _, losses = golden_batchnorm.train_pmap(spec, params, stats, rng, t["data.images"],
                                                   t["data.labels"])
  elif prefix == "sequence_":
    inputs, targets = golden_sequence.windows(t["data.stream"], spec["model"]["input_shape"][0])
    final, losses, _ = golden_layers.train(model, spec, params, rng, inputs, targets,
                                           loss_fn=golden_sequence.token_loss)
  else:
    final, losses, _ = golden_layers.train(model, spec, params, rng, t["data.images"],
                                           t["data.labels"])
  want = t["train.losses"]
  worst = float(np.max(np.abs(losses - want) / np.abs(want)))
  for name, v in models.flatten(final).items():
    w = t["train.params." + name]
    if not name.endswith("/key/bias") and np.linalg.norm(w) > 0:
      worst = max(worst, float(np.linalg.norm(np.asarray(v) - w) / np.linalg.norm(w)))
  t["train.sensitivity"] = np.asarray([worst], np.float32)
  t.update(float64_reference(t, spec, prefix))
  save_file(t, path, metadata=metadata)
  return worst


def float64_reference(t, spec, prefix):
  """The loss and gradients at the file's grads point (its init, first batch and dropout
  key) in float64, as golden_precision.py writes them: ref_hi.* + ref_lo.*, ref_loss, and
  xla_error.* (||g_xla - g_f64||, the float32 grads.* against them). Dropout draws its
  masks in float32 as the float32 run does (jax.random.bernoulli on float64 would draw
  others)."""
  model = golden_layers.Sequential(json.dumps(spec["model"]))
  b = spec["global_batch_size"]
  params = unflatten({k[5:]: v for k, v in t.items() if k.startswith("init.")})
  bernoulli = jax.random.bernoulli
  with jax.enable_x64(True):
    f64 = lambda tree: jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), tree)
    jax.random.bernoulli = lambda key, p=0.5, shape=None: (
        jax.random.uniform(key, shape, np.float32) < np.float32(p))
    try:
      if prefix == "pmap2_":
        stats = f64(unflatten({k[11:]: v for k, v in t.items() if k.startswith("init_stats.")}))
        x, y = t["data.images"][:b].astype(np.float64), t["data.labels"][:b]
        loss = lambda p: golden_batchnorm.loss_fn(p, stats, model, x, y, True,
                                                  np.zeros(2, np.uint32))[0]
      elif prefix == "sequence_":
        inputs, targets = golden_sequence.windows(t["data.stream"], spec["model"]["input_shape"][0])
        key = t["grads.dropout_key"]
        loss = lambda p: golden_sequence.token_loss(p, model.apply, inputs[:b], targets[:b], key)[0]
      else:
        x, y = t["data.images"][:b].astype(np.float64), t["data.labels"][:b]
        key = t["grads.dropout_key"]
        loss = lambda p: models.loss_fn(p, model.apply, x, y, key)[0]
      loss64, g64 = jax.value_and_grad(loss)(f64(params))
    finally:
      jax.random.bernoulli = bernoulli
  out = {}
  for name, ref in models.flatten(g64).items():
    ref = np.asarray(ref, np.float64)
    hi = ref.astype(np.float32)
    out[f"ref_hi.{name}"] = hi
    out[f"ref_lo.{name}"] = (ref - hi.astype(np.float64)).astype(np.float32)
    err = np.linalg.norm((t[f"grads.{name}"].astype(np.float64) - ref).ravel())
    out[f"xla_error.{name}"] = np.asarray([err], np.float32)
  hi = np.float32(loss64)
  out["ref_loss"] = np.asarray([hi, np.float32(float(loss64) - float(hi))], np.float32)
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--count", type=int, default=8, help="models of each kind (images, sequences)")
  ap.add_argument("--seed", type=int, default=1)
  ap.add_argument("--out", default=os.path.normpath(
      os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/golden")))
  ap.add_argument("--print", action="store_true", help="print the specs, write nothing")
  ap.add_argument("--kinds", default="layers,sequence,pmap2",
                  help="which files to write (the draws are the same either way)")
  ap.add_argument("--remeasure", action="store_true",
                  help="redo the measurements (measure) of the draws already in --out")
  args = ap.parse_args()
  jax.config.update("jax_threefry_partitionable", True)
  if args.remeasure:
    for file in sorted(os.listdir(args.out)):
      prefix = file.split("random")[0]
      if "random" in file and prefix in ("layers_", "sequence_", "pmap2_"):
        print(f"{file}: sensitivity {measure(os.path.join(args.out, file), prefix):.1e}")
    return
  r = random.Random(args.seed)
  os.makedirs(args.out, exist_ok=True)
  kinds = [("layers_", image_model), ("sequence_", sequence_model), ("pmap2_", bn_model)]
  for k in range(args.count):
    name = f"random{k}"
    for prefix, draw in kinds:
      while True:
        model = draw(r)
        zeros = zero_gradients(model, prefix)
        if not zeros:
          break
        print(f"{prefix}{name}: redrawn: {', '.join(zeros)} would be 0 in float64 "
              "(rounding noise in float32)")
      opt = optimizer(r, "multi_head_attention" in json.dumps(model))
      if prefix[:-1] not in args.kinds.split(","):
        continue
      if args.print:
        print(f"{prefix}{name}: {json.dumps(model)} {json.dumps(opt)}")
        continue
      path = f"{args.out}/{prefix}{name}.safetensors"
      if prefix == "pmap2_":
        golden_batchnorm.write_golden(path, model, opt, 200 + k)
      else:
        module = golden_layers if prefix == "layers_" else golden_sequence
        module.write_golden(args.out, name, {"model": model, "optimizer": opt}, prefix)
      worst = measure(path, prefix)
      print(f"  its 20 steps move by {worst:.1e} when the init moves by one ulp"
            + (" (chaotic: the test compares init and gradients only)" if worst > 1e-6 else ""))

if __name__ == "__main__":
  main()
