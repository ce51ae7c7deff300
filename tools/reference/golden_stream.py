"""Golden file for training from streamed shards: the seed program under jax.pmap on 2
devices (run with XLA_FLAGS=--xla_force_host_platform_device_count=2), fed by the
reference preprocessing (augment.py) under Lockstep's data key (docs/datasets.md):

  rng = PRNGKey(seed); rng, init_rng = split(rng)
  per epoch: rng, input_rng = split(rng); perm = permutation(input_rng, N)
             data_key = fold_in(input_rng, 1)
  example i of a step: preprocess(png_i, dataset.preprocess, fold_in(data_key, i))

tests/golden/stream_pmap2.safetensors holds, with the spec as JSON in its metadata (its
dataset fields but the path, which the test sets):
  data.png, data.png_sizes   the training examples' PNG files, back to back (uint8), and
                             each one's size; data.labels
  test.png, test.png_sizes, test.labels   the test split's, likewise
  train.losses               each step's mean of the replicas' losses (8 steps of global
                             batch 8 over 48 examples: the 7th starts a second epoch, with
                             its own permutation and data key)
  train.params.*             after them
  eval.loss, eval.accuracy   the final params on the test split (dataset.test_preprocess)
Written by make_golden.py (--only stream); tests/cluster/streamed_test.cc reads it.
"""
import io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from PIL import Image
from safetensors.numpy import save_file

import augment
import golden_layers
import models

MODEL = {
    "input_shape": [12, 12, 3],
    "layers": [
        {"conv": {"features": 4, "kernel_size": [3, 3]}},
        {"relu": {}},
        {"avg_pool": {"window_shape": [2, 2], "strides": [2, 2]}},
        {"flatten": {}},
        {"dense": {"features": 10}},
    ],
}

DATASET = {
    "format": "tfrecord",
    "name": "toy",
    "preprocess": [{"random_resized_crop": {"size": 12, "scale": [0.35, 1.0]}},
                   {"horizontal_flip": {}}],
    "test_preprocess": [{"resize": {"shorter_side": 13}}, {"center_crop": {"size": 12}}],
    "normalize": {"mean": [0.5, 0.4, 0.3], "std": [0.25, 0.2, 0.3]},
}

SPEC = {"model": MODEL, "dataset": DATASET,
        "optimizer": {"kind": "adam", "learning_rate": 0.01},
        "global_batch_size": 8, "steps": 8, "seed": 5, "dropout_seed": 9, "workers": 2,
        "eval": {"batch_size": 16}}


def pngs(count, seed):
  """`count` 16x16 RGB images (smooth patterns with noise) as PNG files, and labels."""
  data = np.random.default_rng(seed)
  files, labels = [], []
  yy, xx = np.mgrid[0:16, 0:16]
  for i in range(count):
    label = int(data.integers(0, 10))
    base = np.stack([(xx * (3 + label) + yy * 5 + 40 * c + 7 * i) % 256 for c in range(3)], -1)
    noise = data.integers(0, 40, (16, 16, 3))
    img = np.clip(base + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    files.append(buf.getvalue())
    labels.append(label)
  return files, np.asarray(labels, np.int32)


def batch(files, idx, steps, data_key):
  mean, std = DATASET["normalize"]["mean"], DATASET["normalize"]["std"]
  return np.stack([
      augment.preprocess(files[i], steps, np.asarray(jax.random.fold_in(data_key, int(i))),
                         3, mean, std) for i in idx])


def train_pmap(spec, params, rng, files, labels):
  model = golden_layers.Sequential(json.dumps(spec["model"]))
  o = spec["optimizer"]
  tx = models.make_tx(o["kind"], o["learning_rate"])
  n, b = spec["workers"], spec["global_batch_size"]

  def step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(lambda p: models.loss_fn(p, model.apply, x, y)[0])(params)
    grads = jax.lax.pmean(grads, axis_name="batch")
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  p_step = jax.pmap(step, axis_name="batch")
  rep = lambda t: jax.tree_util.tree_map(lambda v: np.stack([np.asarray(v)] * n), t)
  rparams, ropt = rep(params), rep(tx.init(params))
  steps_per_epoch = len(files) // b
  losses = []
  for s in range(spec["steps"]):
    if s % steps_per_epoch == 0:
      rng, input_rng = jax.random.split(rng)
      order = np.asarray(jax.random.permutation(input_rng, len(files)))
      data_key = jax.random.fold_in(input_rng, 1)
    idx = order[(s % steps_per_epoch) * b:(s % steps_per_epoch + 1) * b]
    x = batch(files, idx, DATASET["preprocess"], data_key).reshape(n, b // n, 12, 12, 3)
    y = labels[idx].reshape(n, b // n)
    rparams, ropt, loss = p_step(rparams, ropt, x, y)
    losses.append(float(jnp.mean(loss)))
  for leaf in jax.tree_util.tree_leaves(rparams):  # the replicas agree bit for bit
    assert np.array_equal(np.asarray(leaf[0]), np.asarray(leaf[1]))
  return jax.tree_util.tree_map(lambda v: np.asarray(v[0]), rparams), np.asarray(losses, np.float32)


def packed(files):
  return (np.frombuffer(b"".join(files), np.uint8),
          np.asarray([len(f) for f in files], np.int32))


def write_golden(out):
  assert jax.local_device_count() >= 2, "set XLA_FLAGS=--xla_force_host_platform_device_count=2"
  files, labels = pngs(48, 21)
  test_files, test_labels = pngs(16, 22)
  model = golden_layers.Sequential(json.dumps(MODEL))
  rng, params = golden_layers.init(model, MODEL["input_shape"], SPEC["seed"])
  final, losses = train_pmap(SPEC, params, rng, files, labels)
  t = {"data.labels": labels, "test.labels": test_labels, "train.losses": losses}
  t["data.png"], t["data.png_sizes"] = packed(files)
  t["test.png"], t["test.png_sizes"] = packed(test_files)
  t.update(golden_layers.tensors("train.params.", final))
  x = batch(test_files, range(len(test_files)), DATASET["test_preprocess"], jnp.zeros(2, jnp.uint32))
  loss, logits = models.loss_fn(final, model.apply, x, test_labels)
  t["eval.loss"] = np.asarray([loss], np.float32)
  t["eval.accuracy"] = np.asarray([np.mean(np.argmax(logits, -1) == test_labels)], np.float32)
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, f"{out}/stream_pmap2.safetensors",
            metadata={"versions": json.dumps(golden_layers.VERSIONS), "spec": json.dumps(SPEC)})


if __name__ == "__main__":
  write_golden(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
