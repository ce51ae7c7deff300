"""Golden file for BatchNorm across replicas: Flax's nn.BatchNorm(axis_name='batch')
under jax.pmap on 2 devices (run with XLA_FLAGS=--xla_force_host_platform_device_count=2).

tests/golden/batchnorm_pmap2.safetensors holds, with the spec as JSON in its metadata:
  data.images/labels        the examples (synthetic, of the spec's input_shape)
  init.*, init_stats.*      params and batch_stats after init (Lockstep's RNG plan)
  grads.loss, grads.*       loss and every gradient at init on data[:batch], N = 1, train
                            mode (batch statistics), dropout keyed by the zero key
  train.losses              20 steps of the seed program under pmap (N = 2), dropout keys
                            from the RNG plan (reference §7): the mean of the replicas'
                            losses; train.params.*, train.stats.* after them
  eval.loss, eval.accuracy  the final state on every example, with the running averages
tests/golden/batchnorm_pmap2_fashion.safetensors: a smaller BatchNorm convnet, 20 steps
under pmap (N = 2) on the Fashion-MNIST train split (what a cluster job reads): losses,
train.params.*, train.stats.*.
Written by make_golden.py (--only batchnorm); tests/golden_batchnorm_test.cc reads the
first, the cluster's equivalence test (two worker processes) the second.
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from safetensors.numpy import save_file

import golden_layers
import models

MODEL = {  # conv, batch norm, relu, pool; dense, batch norm (other options), relu, dropout, dense
    "input_shape": [8, 8, 3],
    "layers": [
        {"conv": {"features": 6, "kernel_size": [3, 3]}},
        {"batch_norm": {}},
        {"relu": {}},
        {"avg_pool": {"window_shape": [2, 2], "strides": [2, 2]}},
        {"flatten": {}},
        {"dense": {"features": 16}},
        {"batch_norm": {"momentum": 0.9, "epsilon": 1e-3, "use_scale": False}},
        {"relu": {}},
        {"dropout": {"rate": 0.25}},
        {"dense": {"features": 10}},
    ],
}

FASHION_MODEL = {  # on [28, 28, 1]: a strided conv, so that the params stay few
    "input_shape": [28, 28, 1],
    "layers": [
        {"conv": {"features": 4, "kernel_size": [3, 3], "strides": [2, 2]}},
        {"batch_norm": {}},
        {"relu": {}},
        {"avg_pool": {"window_shape": [2, 2], "strides": [2, 2]}},
        {"flatten": {}},
        {"dense": {"features": 16}},
        {"batch_norm": {"momentum": 0.9}},
        {"relu": {}},
        {"dense": {"features": 10}},
    ],
}

SPEC = {"model": MODEL, "optimizer": {"kind": "sgd", "learning_rate": 0.1, "momentum": 0.9},
        "global_batch_size": 16, "steps": 20, "seed": 3, "dropout_seed": 5, "workers": 2}


def loss_fn(params, batch_stats, model, images, labels, train, key=None):
  """Mean softmax cross-entropy; in training (dropout keyed by `key`) also the new
  batch_stats."""
  variables = {"params": params, "batch_stats": batch_stats}
  if train:
    logits, updated = model.apply(variables, images, train=True, mutable=["batch_stats"],
                                  rngs={"dropout": key})
    new_stats = updated["batch_stats"]
  else:
    logits, new_stats = model.apply(variables, images, train=False), batch_stats
  one_hot = jax.nn.one_hot(labels, num_classes=10)
  loss = jnp.mean(-jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=-1))
  return loss, (new_stats, logits)


def train_pmap(spec, params, batch_stats, rng, images, labels):
  """The seed program with N = 2 under pmap: per epoch a permutation of the examples, each
  step's global batch split row-major across the replicas; grads pmean'd."""
  model = golden_layers.Sequential(json.dumps(spec["model"]), axis_name="batch")
  o = spec["optimizer"]
  tx = models.make_tx(o["kind"], o["learning_rate"], o.get("momentum", 0.0))
  n, b = spec["workers"], spec["global_batch_size"]

  def step(params, batch_stats, opt_state, x, y, key):
    (loss, (new_stats, _)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, batch_stats, model, x, y, True, key)
    grads = jax.lax.pmean(grads, axis_name="batch")
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_stats, opt_state, loss

  p_step = jax.pmap(step, axis_name="batch")
  rep = lambda t: jax.tree_util.tree_map(lambda v: np.stack([np.asarray(v)] * n), t)
  rparams, rstats, ropt = rep(params), rep(batch_stats), rep(tx.init(params))
  main_key = jax.random.PRNGKey(spec["dropout_seed"])
  steps_per_epoch = len(images) // b
  losses, order = [], None
  for s in range(spec["steps"]):
    if s % steps_per_epoch == 0:
      rng, input_rng = jax.random.split(rng)
      order = np.asarray(jax.random.permutation(input_rng, len(images)))
    idx = order[(s % steps_per_epoch) * b:(s % steps_per_epoch + 1) * b].reshape(n, b // n)
    step_key, main_key = jax.random.split(main_key)
    keys = jax.random.split(step_key, n)  # rank r's dropout root
    rparams, rstats, ropt, loss = p_step(rparams, rstats, ropt, images[idx], labels[idx], keys)
    losses.append(float(jnp.mean(loss)))
  for tree in (rparams, rstats):  # the replicas agree bit for bit
    for leaf in jax.tree_util.tree_leaves(tree):
      assert np.array_equal(np.asarray(leaf[0]), np.asarray(leaf[1]))
  first = lambda t: jax.tree_util.tree_map(lambda v: np.asarray(v[0]), t)
  return first(rparams), first(rstats), np.asarray(losses, np.float32)


def write_golden(path, model_spec, optimizer, data_seed):
  """The file for an image model with batch_stats: 64 random examples drawn with
  `data_seed`, batch 16, 20 steps of `optimizer` on 2 replicas."""
  assert jax.local_device_count() >= 2, "set XLA_FLAGS=--xla_force_host_platform_device_count=2"
  shape = model_spec["input_shape"]
  data = np.random.default_rng(data_seed)
  images = data.random((64, *shape), dtype=np.float32)
  labels = data.integers(0, 10, 64).astype(np.int32)
  model = golden_layers.Sequential(json.dumps(model_spec))
  spec = {"model": model_spec, "optimizer": optimizer, "global_batch_size": 16, "steps": 20,
          "seed": 3, "dropout_seed": 5, "workers": 2}
  rng, init_rng = jax.random.split(jax.random.PRNGKey(spec["seed"]))
  variables = model.init(init_rng, jnp.ones([1, *shape]))
  params, stats = variables["params"], variables["batch_stats"]
  t = {"data.images": images, "data.labels": labels}
  t.update(golden_layers.tensors("init.", params))
  t.update(golden_layers.tensors("init_stats.", stats))
  b = spec["global_batch_size"]
  (loss, _), g = jax.value_and_grad(loss_fn, has_aux=True)(
      params, stats, model, images[:b], labels[:b], True, jnp.zeros(2, jnp.uint32))
  t.update(golden_layers.tensors("grads.", g))
  t["grads.loss"] = np.asarray([loss], np.float32)
  final, final_stats, losses = train_pmap(spec, params, stats, rng, images, labels)
  t["train.losses"] = losses
  t.update(golden_layers.tensors("train.params.", final))
  t.update(golden_layers.tensors("train.stats.", final_stats))
  eval_loss, (_, logits) = loss_fn(final, final_stats, model, images, labels, False)
  t["eval.loss"] = np.asarray([eval_loss], np.float32)
  t["eval.accuracy"] = np.asarray([np.mean(np.argmax(logits, -1) == labels)], np.float32)
  save(path, t, spec)


def write_goldens(out):
  write_golden(f"{out}/batchnorm_pmap2.safetensors", MODEL, SPEC["optimizer"], 11)

  # The cluster's: Fashion-MNIST's train split, as the workers load it.
  import make_golden  # noqa: E402 (its IDX loader)
  images, labels = make_golden.load_split("train")
  spec = dict(SPEC, model=FASHION_MODEL, global_batch_size=32, seed=7)
  model = golden_layers.Sequential(json.dumps(FASHION_MODEL))
  rng, init_rng = jax.random.split(jax.random.PRNGKey(spec["seed"]))
  variables = model.init(init_rng, jnp.ones([1, 28, 28, 1]))
  final, final_stats, losses = train_pmap(spec, variables["params"], variables["batch_stats"],
                                          rng, images, labels)
  t = {"train.losses": losses}
  t.update(golden_layers.tensors("train.params.", final))
  t.update(golden_layers.tensors("train.stats.", final_stats))
  save(f"{out}/batchnorm_pmap2_fashion.safetensors", t, spec)


def save(path, t, spec):
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
            metadata={"versions": json.dumps(golden_layers.VERSIONS), "spec": json.dumps(spec)})
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
