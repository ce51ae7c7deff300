"""Golden file for the precision of one BatchNorm-convnet gradient against float64.

The BatchNorm convnet of examples/bn-convnet.yaml (its dense layer narrowed to 16 features
and its dropout left out, so that the file stays small), 64 Fashion-MNIST training images
(one worker's shard of a global batch of 128 on 2 workers: 64 x 28 x 28 = 50,176 positions
per convolution), Flax's initial parameters, train mode (batch statistics). The gradient
of the mean softmax cross-entropy is computed twice in JAX: in float32 as XLA runs it on
the CPU, and in float64 (the same model, parameters and images cast up), the reference.

tests/golden/precision_bn_convnet.safetensors holds, with the spec as JSON in its metadata:
  data.images/labels      the 64 examples
  init.*                  the parameters (float32)
  ref_hi.*, ref_lo.*      the float64 gradient as two float32s (hi + lo: ~48 bits)
  xla_error.*             per parameter, ||g_xla - g_f64||_2 (absolute: the biases before
                          a BatchNorm have a true gradient of 0, so no relative error)
  ref_loss                the float64 loss, as hi and lo
Written by make_golden.py (--only precision); tests/golden_precision_test.cc holds
Lockstep's float32 gradient to XLA's error, parameter by parameter.
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

import golden_layers
import models

MODEL = {
    "input_shape": [28, 28, 1],
    "layers": [
        {"conv": {"features": 32, "kernel_size": [3, 3]}},
        {"batch_norm": {"momentum": 0.9}},
        {"relu": {}},
        {"max_pool": {"window_shape": [2, 2], "strides": [2, 2]}},
        {"conv": {"features": 64, "kernel_size": [3, 3]}},
        {"batch_norm": {"momentum": 0.9}},
        {"relu": {}},
        {"max_pool": {"window_shape": [2, 2], "strides": [2, 2]}},
        {"flatten": {}},
        {"dense": {"features": 16}},
        {"batch_norm": {"momentum": 0.9}},
        {"relu": {}},
        {"dense": {"features": 10}},
    ],
}
SPEC = {"model": MODEL, "optimizer": {"kind": "sgd", "learning_rate": 0.1},
        "global_batch_size": 64, "steps": 1, "seed": 0}


def loss_fn(params, batch_stats, model, images, labels):
  logits, _ = model.apply({"params": params, "batch_stats": batch_stats}, images, train=True,
                          mutable=["batch_stats"])
  one_hot = jax.nn.one_hot(labels, num_classes=10, dtype=logits.dtype)
  return jnp.mean(-jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=-1))


def write_goldens(out):
  import make_golden  # noqa: E402 (its IDX loader)
  images, labels = make_golden.load_split("train")
  images, labels = images[:64], labels[:64]
  model = golden_layers.Sequential(json.dumps(MODEL))
  variables = model.init(jax.random.PRNGKey(SPEC["seed"]), jnp.ones([1, 28, 28, 1]))
  params, stats = variables["params"], variables["batch_stats"]
  g32 = jax.grad(loss_fn)(params, stats, model, images, labels)
  with jax.enable_x64(True):
    up = lambda t: jax.tree_util.tree_map(lambda v: jnp.asarray(np.asarray(v, np.float64)), t)
    p64, s64 = up(params), up(stats)
    x64 = jnp.asarray(images.astype(np.float64))
    loss64, g64 = jax.value_and_grad(loss_fn)(p64, s64, model, x64, labels)
    g64 = {k: np.asarray(v, np.float64) for k, v in models.flatten(g64).items()}
    loss64 = float(loss64)
  t = {"data.images": images, "data.labels": labels}
  t.update(golden_layers.tensors("init.", params))
  for name, ref in g64.items():
    hi = ref.astype(np.float32)
    t[f"ref_hi.{name}"] = hi
    t[f"ref_lo.{name}"] = (ref - hi.astype(np.float64)).astype(np.float32)
    xla = np.asarray(models.flatten(g32)[name], np.float64)
    err = np.linalg.norm((xla - ref).ravel())
    t[f"xla_error.{name}"] = np.asarray([err], np.float32)
    print(f"  {name}: |g64| {np.linalg.norm(ref):.3e}, XLA's error {err:.3e}")
  hi = np.float32(loss64)
  t["ref_loss"] = np.asarray([hi, np.float32(loss64 - float(hi))], np.float32)
  path = f"{out}/precision_bn_convnet.safetensors"
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
            metadata={"versions": json.dumps(golden_layers.VERSIONS), "spec": json.dumps(SPEC)})
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
