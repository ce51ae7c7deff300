"""Golden files for sequence models: embed, position_embed, dense on [T, F], layer_norm,
gelu, dropout and multi_head_attention, with the token-level loss (docs/models.md).

Flax builds each model from the same spec the C++ side reads (`SequenceModel` below).
The data is one token stream windowed as Lockstep windows a token dataset
(core/data/token_dataset.h: window i = tokens [i * T, i * T + T], inputs its first T,
targets shifted by one). Each file holds, with the spec as JSON in its metadata:
  init.*                 params after init (the spec's seed, Lockstep's RNG plan)
  data.stream            the token stream (int32)
  grads.loss, grads.*    the loss and every gradient at init on windows [0, batch), with
                         grads.dropout_key as the 'dropout' root
  train.losses, train.params.*, masks.<step>.<i>
                         20 steps of the spec's optimizer with dropout (N = 1), every
                         bernoulli mask drawn (dropout layers', attention weights')
Written by make_golden.py (--only sequence); tests/golden_sequence_test.cc reads them.
"""
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from safetensors.numpy import save_file

import golden_layers
import models

EMBED = {  # embed, a position embedding, dense/layer_norm/gelu/dropout on [T, F]
    "input_shape": [16],
    "layers": [
        {"embed": {"num_embeddings": 50, "features": 24}},
        {"position_embed": {}},
        {"layer_norm": {}},
        {"dense": {"features": 32}},
        {"gelu": {}},
        {"dropout": {"rate": 0.2}},
        {"dense": {"features": 50}},
    ],
}

ATTENTION = {  # causal attention with dropout; a second one with its own widths, no bias
    "input_shape": [12],
    "layers": [
        {"embed": {"num_embeddings": 40, "features": 32}},
        {"position_embed": {"max_len": 16}},
        {"multi_head_attention": {"num_heads": 4, "causal": True, "dropout_rate": 0.1}},
        {"layer_norm": {}},
        {"dense": {"features": 48}},
        {"gelu": {}},
        {"multi_head_attention": {"num_heads": 2, "qkv_features": 16, "out_features": 24,
                                  "use_bias": False}},
        {"dense": {"features": 40}},
    ],
}

SPECS = {
    "embed": dict(model=EMBED, optimizer={"kind": "adam", "learning_rate": 3e-3}),
    # sgd, not adam: the key projection's bias has a true gradient of 0 (a constant added
    # to every score of a softmax row), and adam would scale its rounding noise to steps
    # of the learning rate, in JAX and here alike.
    "attention": dict(model=ATTENTION,
                      optimizer={"kind": "sgd", "learning_rate": 0.05, "momentum": 0.9}),
}


class SequenceModel(nn.Module):
  """The layers of a spec's model.layers on token ids [batch, T], in Flax's modules."""
  spec_json: str

  @nn.compact
  def __call__(self, x, train: bool = False):
    for entry in json.loads(self.spec_json)["layers"]:
      (kind, o), = entry.items()
      if kind == "embed":
        x = nn.Embed(o["num_embeddings"], o["features"])(x)
      elif kind == "position_embed":
        t = x.shape[-2]
        x = x + nn.Embed(o.get("max_len", t), x.shape[-1])(jnp.arange(t))
      elif kind == "multi_head_attention":
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2])) if o.get("causal") else None
        x = nn.MultiHeadDotProductAttention(
            num_heads=o["num_heads"], qkv_features=o.get("qkv_features"),
            out_features=o.get("out_features"), dropout_rate=o.get("dropout_rate", 0.0),
            use_bias=o.get("use_bias", True), deterministic=not train)(x, mask=mask)
      elif kind == "dense":
        x = nn.Dense(o["features"], use_bias=o.get("use_bias", True))(x)
      elif kind == "layer_norm":
        x = nn.LayerNorm(epsilon=o.get("epsilon", 1e-6), use_bias=o.get("use_bias", True),
                         use_scale=o.get("use_scale", True))(x)
      elif kind == "gelu":
        x = nn.gelu(x, approximate=o.get("approximate", True))
      elif kind == "relu":
        x = nn.relu(x)
      elif kind == "dropout":
        x = nn.Dropout(rate=o["rate"], deterministic=not train)(x)
      else:
        raise ValueError(f"layer {kind}: not in these goldens")
    return x


def token_loss(params, apply_fn, inputs, targets, dropout_key=None):
  """Mean over the batch and positions of softmax cross-entropy on integer targets."""
  rngs = {"dropout": dropout_key} if dropout_key is not None else {}
  logits = apply_fn({"params": params}, inputs, train=dropout_key is not None, rngs=rngs)
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return jnp.mean(loss), logits


def windows(stream, t):
  n = (len(stream) - 1) // t
  w = np.stack([stream[i * t:i * t + t + 1] for i in range(n)])
  return w[:, :-1].astype(np.int32), w[:, 1:].astype(np.int32)


def write_goldens(out):
  for name, base in SPECS.items():
    spec = dict(base, global_batch_size=8, steps=20, seed=3, dropout_seed=5, workers=1)
    t_len = spec["model"]["input_shape"][0]
    vocab = spec["model"]["layers"][0]["embed"]["num_embeddings"]
    data = np.random.default_rng(100 + len(name))
    stream = data.integers(0, vocab, 32 * t_len + 1).astype(np.int32)
    inputs, targets = windows(stream, t_len)
    model = SequenceModel(json.dumps(spec["model"]))
    rng, init_rng = jax.random.split(jax.random.PRNGKey(spec["seed"]))
    params = model.init(init_rng, jnp.ones([1, t_len], jnp.int32))["params"]
    t = {"data.stream": stream}
    t.update(golden_layers.tensors("init.", params))
    key = jax.random.PRNGKey(7)
    (loss, _), g = jax.value_and_grad(token_loss, has_aux=True)(
        params, model.apply, inputs[:8], targets[:8], key)
    t.update(golden_layers.tensors("grads.", g))
    t["grads.loss"] = np.asarray([loss], np.float32)
    t["grads.dropout_key"] = np.asarray(key, np.uint32)
    final, losses, masks = golden_layers.train(model, spec, params, rng, inputs, targets,
                                               loss_fn=token_loss)
    t["train.losses"] = losses
    t.update(golden_layers.tensors("train.params.", final))
    for step, mk in enumerate(masks):
      for i, m in enumerate(mk):
        t[f"masks.{step}.{i}"] = m.astype(np.uint8).reshape(-1)
    path = f"{out}/sequence_{name}.safetensors"
    spec["dataset"] = {"format": "tokens", "train_path": "unused.npz", "test_path": "unused.npz",
                       "context": t_len}
    save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
              metadata={"versions": json.dumps(golden_layers.VERSIONS), "spec": json.dumps(spec)})
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
