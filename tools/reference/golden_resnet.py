"""Golden files for named blocks and residual connections: a small ResNet (Flax's ResNet
block, twice: identity, then strided with the 1x1 conv + BatchNorm projection; a
pre-activation block with dropout whose relu reads the residual's branch point), built in
Flax from the spec by golden_layers.Sequential / flax_blocks.py, under jax.pmap on 2
devices (run with XLA_FLAGS=--xla_force_host_platform_device_count=2).

tests/golden/resnet_pmap2_<optimizer>.safetensors (sgd with momentum, adam) hold, with the
spec as JSON in their metadata, what golden_batchnorm.py's file holds: data, init.*,
init_stats.*, grads.loss and grads.* on one replica at init (dropout keyed by the zero
key), train.losses, train.params.* and train.stats.* after 20 steps on 2 replicas, and
eval.loss, eval.accuracy with the running averages. Written by make_golden.py (--only
resnet); tests/golden_resnet_test.cc reads them.
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

import golden_batchnorm
import golden_layers

RESNET_BLOCK = {  # Flax's examples/imagenet ResNetBlock (but the zero-init of the last scale)
    "args": {"filters": None, "strides": [1, 1]},
    "layers": [
        {"residual": {
            "layers": [
                {"conv": {"features": "$filters", "kernel_size": [3, 3], "strides": "$strides",
                          "use_bias": False}},
                {"batch_norm": {"momentum": 0.9}},
                "relu",
                {"conv": {"features": "$filters", "kernel_size": [3, 3], "use_bias": False}},
                {"batch_norm": {"momentum": 0.9}},
            ],
            "projection": [
                {"conv": {"features": "$filters", "kernel_size": [1, 1], "strides": "$strides",
                          "use_bias": False, "name": "conv_proj"}},
                {"batch_norm": {"momentum": 0.9, "name": "norm_proj"}},
            ],
        }},
        "relu",
    ],
}

PRE_ACT = {  # x + dropout(conv(relu(x))): a relu on the branch point, dropout in a block
    "layers": [
        {"residual": {"layers": ["relu", {"conv": {"features": 8, "kernel_size": [3, 3]}},
                                 {"dropout": {"rate": 0.25}}]}},
    ],
}

MODEL = {
    "input_shape": [8, 8, 3],
    "blocks": {"ResNetBlock": RESNET_BLOCK, "PreAct": PRE_ACT},
    "layers": [
        {"conv": {"features": 4, "kernel_size": [3, 3], "use_bias": False}},
        {"batch_norm": {"momentum": 0.9}},
        "relu",
        {"block": {"module": "ResNetBlock", "args": {"filters": 4}}},
        {"block": {"module": "ResNetBlock", "args": {"filters": 8, "strides": [2, 2]}}},
        {"block": {"module": "PreAct"}},
        {"avg_pool": {"window_shape": [4, 4]}},
        "flatten",
        {"dense": {"features": 10}},
    ],
}

OPTIMIZERS = {"sgd": {"kind": "sgd", "learning_rate": 0.1, "momentum": 0.9},
              "adam": {"kind": "adam", "learning_rate": 3e-3}}


def write_goldens(out):
  for name, optimizer in OPTIMIZERS.items():
    write_golden(f"{out}/resnet_pmap2_{name}.safetensors", MODEL, optimizer, 25)


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
  (loss, _), g = jax.value_and_grad(golden_batchnorm.loss_fn, has_aux=True)(
      params, stats, model, images[:b], labels[:b], True, jnp.zeros(2, jnp.uint32))
  t.update(golden_layers.tensors("grads.", g))
  t["grads.loss"] = np.asarray([loss], np.float32)
  final, final_stats, losses = golden_batchnorm.train_pmap(spec, params, stats, rng, images,
                                                           labels)
  t["train.losses"] = losses
  t.update(golden_layers.tensors("train.params.", final))
  t.update(golden_layers.tensors("train.stats.", final_stats))
  eval_loss, (_, logits) = golden_batchnorm.loss_fn(final, final_stats, model, images, labels,
                                                    False)
  t["eval.loss"] = np.asarray([eval_loss], np.float32)
  t["eval.accuracy"] = np.asarray([np.mean(np.argmax(logits, -1) == labels)], np.float32)
  golden_batchnorm.save(path, t, spec)


if __name__ == "__main__":
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
