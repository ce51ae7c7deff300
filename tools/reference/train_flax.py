#!/usr/bin/env python3
"""Trains a Lockstep job spec's layer-list model in JAX/Flax/optax, to check a recipe's
accuracy against the framework Lockstep follows.

  tools/.venv/bin/python tools/reference/train_flax.py examples/bn-convnet.yaml

Reads the spec's model.layers (golden_layers.Sequential, plus batch_norm as
nn.BatchNorm(use_running_average=not train, momentum, epsilon, use_bias, use_scale)), its
optimizer (models.make_tx_from_spec: schedules, clipping), global_batch_size, epochs (or
steps) and seed, and its dataset (IDX folder or NPZ files, scaled as docs/datasets.md
says; a text file as bytes in windows of `context`; TFRecord shards through tf.data with
the spec's augmentation, as a Flax ImageNet pipeline would). It trains one process on the whole
global batch, which is what Flax's
BatchNorm(axis_name=...) computes under pmap over equal shards (the statistics' mean
over the devices is the batch's, up to float rounding), and prints the test accuracy after
each epoch, evaluated with the running averages as `model.apply(..., train=False)` does.

The data order and dropout keys follow Lockstep's plan only in kind (a permutation per
epoch from the spec's seed, a fresh dropout key per step), not bit for bit: this is a check
of the recipe, not a golden file.
"""
import argparse
import json
import os
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_layers import Sequential  # noqa: E402
from idx import read_idx  # noqa: E402
import models  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"


class BatchNormSequential(nn.Module):
  """Sequential with batch_norm layers; the other layers as golden_layers builds them."""
  spec_json: str

  @nn.compact
  def __call__(self, x, train: bool = False):
    run = []  # consecutive non-BN layers go through one Sequential each
    layers = json.loads(self.spec_json)["layers"]
    for entry in layers + [None]:
      kind = None if entry is None else next(iter(entry))
      if entry is not None and kind != "batch_norm":
        run.append(entry)
        continue
      if run:
        x = Sequential(json.dumps({"layers": run}))(x, train)
        run = []
      if entry is not None:
        o = entry["batch_norm"] or {}
        x = nn.BatchNorm(use_running_average=not train, momentum=o.get("momentum", 0.99),
                         epsilon=o.get("epsilon", 1e-5), use_bias=o.get("use_bias", True),
                         use_scale=o.get("use_scale", True))(x)
    return x


def normalize_layers(layers):
  """`- relu`, `- relu:` and `- relu: {}` all become {'relu': {}}."""
  out = []
  for e in layers:
    if isinstance(e, str):
      out.append({e: {}})
    else:
      (k, v), = e.items()
      out.append({k: v or {}})
  return out


def model_from_spec(spec):
  """The Flax module of a spec's model.layers and an input to init it on ([1, *shape]:
  float32 images, or int32 token ids for a text dataset). A model with blocks:
  golden_layers.Sequential builds it all (blocks, residual connections, batch_norm), with
  Lockstep's module names and hence its init. bench/cpu/peers.py builds its JAX peers of
  examples/resnet.yaml and examples/char-transformer.yaml here."""
  model_spec = dict(spec["model"], layers=normalize_layers(spec["model"]["layers"]))
  shape = model_spec.get("input_shape", [28, 28, 1])
  text = (spec.get("dataset") or {}).get("format") == "text"
  module = Sequential if model_spec.get("blocks") else BatchNormSequential
  init_input = jnp.ones([1, *shape], jnp.int32 if text else jnp.float32)
  return module(json.dumps(model_spec)), init_input


def load(dataset, split):
  """float32 NHWC images and int32 labels of one split, as Lockstep reads them; for a text
  dataset (format text: the file's bytes), int32 windows of `context` tokens and their
  next tokens (docs/datasets.md: window i = bytes [i * T, i * T + T])."""
  dataset = dataset or {}
  if dataset.get("format") == "text":
    stream = np.frombuffer(open(dataset[f"{split}_path"], "rb").read(), np.uint8)
    t = int(dataset["context"])
    w = np.stack([stream[i * t:i * t + t + 1] for i in range((len(stream) - 1) // t)])
    return w[:, :-1].astype(np.int32), w[:, 1:].astype(np.int32)
  if dataset.get("format", "idx") == "npz":
    with np.load(dataset[f"{split}_path"]) as f:
      x, y = f[dataset.get("image_key", "image")], f[dataset.get("label_key", "label")]
  else:
    path = dataset.get("path", FASHION)
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{path}/{prefix}-images-idx3-ubyte.gz")[..., None]
    y = read_idx(f"{path}/{prefix}-labels-idx1-ubyte.gz")
  if x.dtype == np.uint8:
    x = x.astype(np.float32) / np.float32(255)
  norm = dataset.get("normalize")
  if norm:
    x = (x - np.asarray(norm["mean"], np.float32)) / np.asarray(norm["std"], np.float32)
  return x, y.astype(np.int32)


def tfdata(dataset, split, batch, seed):
  """A tfrecord dataset (TFDS's shards of PNG/JPEG Examples) through tf.data, as a Flax
  ImageNet input pipeline reads it: shuffled each epoch and augmented with tf.image by the
  spec's preprocess steps (train; test_preprocess for test), scaled by 1/255 and
  normalized. The same recipe as Lockstep's workers, not the same draws."""
  import glob
  import tensorflow as tf  # only for this path: the peers' input pipeline
  name, path = dataset["name"], dataset["path"]
  files = sorted(glob.glob(f"{path}/{name}-{dataset.get(split + '_split', split)}.tfrecord*"))
  image_key, label_key = dataset.get("image_key", "image"), dataset.get("label_key", "label")
  steps = dataset.get("preprocess" if split == "train" else "test_preprocess") or []
  norm = dataset.get("normalize")

  def parse(record):
    f = tf.io.parse_single_example(record, {image_key: tf.io.FixedLenFeature([], tf.string),
                                            label_key: tf.io.FixedLenFeature([], tf.int64)})
    return tf.io.decode_image(f[image_key], expand_animations=False), f[label_key]

  def augment(x, y):
    for step in steps:
      (kind, o), = step.items()
      if kind == "random_crop":
        pad, h, w = int(o.get("padding", 0)), int(o.get("size") or o["height"]), int(o.get("size") or o["width"])
        x = tf.image.random_crop(tf.pad(x, [[pad, pad], [pad, pad], [0, 0]]), [h, w, tf.shape(x)[2]])
      elif kind == "horizontal_flip":
        x = tf.image.random_flip_left_right(x)
      elif kind == "center_crop":
        x = tf.image.resize_with_crop_or_pad(x, int(o.get("size") or o["height"]), int(o.get("size") or o["width"]))
      else:
        raise NotImplementedError(f"train_flax.py's tf.data path: preprocess step {kind}")
    x = tf.cast(x, tf.float32) / 255.0
    if norm:
      x = (x - norm["mean"]) / norm["std"]
    return x, tf.cast(y, tf.int32)

  ds = tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE).map(parse)
  if split == "train":
    ds = ds.cache().shuffle(70000, seed=seed, reshuffle_each_iteration=True)
  ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE)
  return ds.batch(batch, drop_remainder=split == "train").prefetch(tf.data.AUTOTUNE)


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("spec")
  p.add_argument("--epochs", type=int, help="override the spec's epochs")
  args = p.parse_args()
  spec = yaml.safe_load(open(args.spec))
  batch = int(spec["global_batch_size"])
  seed = int(spec.get("seed", 0))

  streamed = (spec.get("dataset") or {}).get("format") == "tfrecord"
  if streamed:  # tf.data feeds the steps; the test split is read once
    train_ds = tfdata(spec["dataset"], "train", batch, seed)
    test = list(tfdata(spec["dataset"], "test", 250, seed).as_numpy_iterator())
    x_test, y_test = np.concatenate([t[0] for t in test]), np.concatenate([t[1] for t in test])
    n_train = sum(1 for _ in train_ds.unbatch().map(lambda x, y: y))
  else:
    x_train, y_train = load(spec.get("dataset"), "train")
    x_test, y_test = load(spec.get("dataset"), "test")
    n_train = len(x_train)
  steps_per_epoch = n_train // batch
  epochs = args.epochs or int(spec.get("epochs") or -(-int(spec["steps"]) // steps_per_epoch))

  model, init_input = model_from_spec(spec)
  rng, init_rng = jax.random.split(jax.random.PRNGKey(seed))
  text = (spec.get("dataset") or {}).get("format") == "text"
  variables = model.init(init_rng, init_input)
  params, stats = variables["params"], variables.get("batch_stats", {})
  tx = models.make_tx_from_spec(spec["optimizer"])
  opt_state = tx.init(params)
  print(f"{args.spec}: {sum(v.size for v in jax.tree_util.tree_leaves(params)):,} params, "
        f"{epochs} epochs of {steps_per_epoch} steps at batch {batch}", flush=True)

  @jax.jit
  def train_step(params, stats, opt_state, x, y, key):
    def lf(p):
      logits, new = model.apply({"params": p, "batch_stats": stats}, x, train=True,
                                rngs={"dropout": key}, mutable=["batch_stats"])
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
      return loss, new.get("batch_stats", {})

    (loss, stats), grads = jax.value_and_grad(lf, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), stats, opt_state, loss

  @jax.jit
  def correct(params, stats, x, y):
    """Right predictions and the summed loss: per example, or per token for text."""
    logits = model.apply({"params": params, "batch_stats": stats}, x, train=False)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return jnp.sum(jnp.argmax(logits, -1) == y), jnp.sum(loss)

  dropout_key = jax.random.PRNGKey(seed + 1)
  history, losses_out = [], []
  for epoch in range(1, epochs + 1):
    t0 = time.time()
    rng, input_rng = jax.random.split(rng)
    order = np.asarray(jax.random.permutation(input_rng, n_train))
    losses = []
    batches = train_ds.as_numpy_iterator() if streamed else (
        (x_train[order[s * batch:(s + 1) * batch]], y_train[order[s * batch:(s + 1) * batch]])
        for s in range(steps_per_epoch))
    for x, y in batches:
      step_key, dropout_key = jax.random.split(dropout_key)
      params, stats, opt_state, loss = train_step(params, stats, opt_state, x, y, step_key)
      losses.append(loss)
    n, total = 0, 0.0
    for i in range(0, len(x_test), 250):
      c, l = correct(params, stats, x_test[i:i + 250], y_test[i:i + 250])
      n, total = n + int(c), total + float(l)
    acc, test_loss = n / y_test.size, total / y_test.size
    history.append(acc)
    losses_out.append(test_loss)
    print(f"epoch {epoch}: train loss {float(jnp.mean(jnp.stack(losses))):.4f}, "
          f"test loss {test_loss:.4f}{' per token' if text else ''}, "
          f"test accuracy {acc:.4f} ({time.time() - t0:.0f} s)", flush=True)
  print(json.dumps({"spec": args.spec, "test_accuracy": history, "test_loss": losses_out}))


if __name__ == "__main__":
  main()
