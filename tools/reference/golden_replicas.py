"""Golden file for logical replicas (docs/elastic.md): golden_batchnorm.py's BatchNorm
convnet with dropout under jax.pmap on V = 4 devices (run with
XLA_FLAGS=--xla_force_host_platform_device_count=4), the job a Lockstep run on V logical
replicas computes on any number of workers.

tests/golden/replicas_pmap4.safetensors holds, with the spec as JSON in its metadata
(`workers` there is V, the pmap's devices):
  data.images/labels     the examples (synthetic, as golden_batchnorm.py's)
  train.losses           [steps, V]: each device's loss at each step (the RNG plan of
                         reference §7 with N = V)
  train.params.*, train.stats.*, train.trace.*
                         params, batch_stats and sgd's momentum after the last step
Written by make_golden.py (--only replicas); tests/logical_replicas_golden_test.cc reads it.
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

import golden_batchnorm
import golden_layers
import models

SPEC = dict(golden_batchnorm.SPEC, workers=4, steps=12, seed=9, dropout_seed=4)


def train_pmap(spec, params, batch_stats, rng, images, labels):
  """The seed program on V = spec["workers"] devices: as golden_batchnorm.train_pmap, but
  every device's loss per step, and the optimizer state too."""
  model = golden_layers.Sequential(json.dumps(spec["model"]), axis_name="batch")
  o = spec["optimizer"]
  tx = models.make_tx(o["kind"], o["learning_rate"], o.get("momentum", 0.0))
  v, b = spec["workers"], spec["global_batch_size"]

  def step(params, batch_stats, opt_state, x, y, key):
    (loss, (new_stats, _)), grads = jax.value_and_grad(golden_batchnorm.loss_fn, has_aux=True)(
        params, batch_stats, model, x, y, True, key)
    grads = jax.lax.pmean(grads, axis_name="batch")
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_stats, opt_state, loss

  p_step = jax.pmap(step, axis_name="batch")
  rep = lambda t: jax.tree_util.tree_map(lambda x: np.stack([np.asarray(x)] * v), t)
  rparams, rstats, ropt = rep(params), rep(batch_stats), rep(tx.init(params))
  main_key = jax.random.PRNGKey(spec["dropout_seed"])
  steps_per_epoch = len(images) // b
  losses, order = [], None
  for s in range(spec["steps"]):
    if s % steps_per_epoch == 0:
      rng, input_rng = jax.random.split(rng)
      order = np.asarray(jax.random.permutation(input_rng, len(images)))
    idx = order[(s % steps_per_epoch) * b:(s % steps_per_epoch + 1) * b].reshape(v, b // v)
    step_key, main_key = jax.random.split(main_key)
    keys = jax.random.split(step_key, v)  # logical replica r's dropout root
    rparams, rstats, ropt, loss = p_step(rparams, rstats, ropt, images[idx], labels[idx], keys)
    losses.append(np.asarray(loss, np.float32))
  first = lambda t: jax.tree_util.tree_map(lambda x: np.asarray(x[0]), t)
  return first(rparams), first(rstats), first(ropt), np.stack(losses)


def write_goldens(out):
  spec = SPEC
  assert jax.local_device_count() >= spec["workers"], (
      "set XLA_FLAGS=--xla_force_host_platform_device_count=4")
  shape = spec["model"]["input_shape"]
  data = np.random.default_rng(13)
  images = data.random((64, *shape), dtype=np.float32)
  labels = data.integers(0, 10, 64).astype(np.int32)
  model = golden_layers.Sequential(json.dumps(spec["model"]))
  rng, init_rng = jax.random.split(jax.random.PRNGKey(spec["seed"]))
  variables = model.init(init_rng, jnp.ones([1, *shape]))
  final, final_stats, opt, losses = train_pmap(spec, variables["params"],
                                               variables["batch_stats"], rng, images, labels)
  t = {"data.images": images, "data.labels": labels, "train.losses": losses}
  t.update(golden_layers.tensors("train.params.", final))
  t.update(golden_layers.tensors("train.stats.", final_stats))
  t.update(golden_layers.tensors("train.trace.", opt[0].trace))  # sgd with momentum
  golden_batchnorm.save(f"{out}/replicas_pmap4.safetensors", t, spec)


if __name__ == "__main__":
  os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
