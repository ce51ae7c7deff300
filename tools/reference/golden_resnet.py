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
import os

import golden_batchnorm

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
    path = f"{out}/resnet_pmap2_{name}.safetensors"
    golden_batchnorm.write_golden(path, MODEL, optimizer, 25)


if __name__ == "__main__":
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
