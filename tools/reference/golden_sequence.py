"""Golden files for sequence models: embed, position_embed, dense on [T, F], layer_norm,
gelu, dropout and multi_head_attention, alone and inside blocks with residual connections
(a GPT-style decoder), with the token-level loss (docs/models.md).

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
And sequence_decoder_pmap2.safetensors: the decoder's 20 steps under pmap on 2 devices
(train.losses, train.params.*) and the final evaluation on every window (eval.loss,
eval.accuracy), which tests/cluster/equivalence_test compares with a 2-worker cluster.
Written by make_golden.py (--only sequence); tests/golden_sequence_test.cc reads them.
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

DECODER = {  # a GPT-style decoder: pre-norm DecoderBlocks (docs/models.md), residuals
    "input_shape": [12],
    "blocks": {
        "DecoderBlock": {
            "args": {"heads": None, "features": 32},
            "layers": [
                {"residual": {"layers": [  # x + attention(norm(x))
                    {"layer_norm": {}},
                    {"multi_head_attention": {"num_heads": "$heads", "causal": True,
                                              "dropout_rate": 0.1}},
                ]}},
                {"residual": {"layers": [  # x + mlp(norm(x))
                    {"layer_norm": {}},
                    {"dense": {"features": 64}},
                    {"gelu": {}},
                    {"dense": {"features": "$features"}},
                    {"dropout": {"rate": 0.1}},
                ]}},
            ],
        },
    },
    "layers": [
        {"embed": {"num_embeddings": 40, "features": 32}},
        {"position_embed": {}},
        {"block": {"module": "DecoderBlock", "args": {"heads": 4}}},
        {"block": {"module": "DecoderBlock", "args": {"heads": 2}}},
        {"layer_norm": {}},
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
    "decoder": dict(model=DECODER,
                    optimizer={"kind": "sgd", "learning_rate": 0.05, "momentum": 0.9}),
}


def SequenceModel(spec_json):
  """A spec's model on token ids [batch, T]: golden_layers.Sequential, whose layers
  include the sequence ones (embed, position_embed, multi_head_attention) and blocks."""
  return golden_layers.Sequential(spec_json)


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


def train_pmap(model, spec, params, rng, inputs, targets):
  """The seed program on N = spec["workers"] devices under jax.pmap: each device a shard
  of the global batch and its own dropout root (split(step_key, N)), gradients averaged
  over the devices; the step's loss is the devices' mean."""
  o = spec["optimizer"]
  tx = models.make_tx(o["kind"], o["learning_rate"], o.get("momentum", 0.0))
  n, b = spec["workers"], spec["global_batch_size"]

  def step(params, opt_state, x, y, key):
    loss, grads = jax.value_and_grad(lambda p: token_loss(p, model.apply, x, y, key)[0])(params)
    grads = jax.lax.pmean(grads, axis_name="batch")
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(loss, "batch")

  p_step = jax.pmap(step, axis_name="batch")
  rep = lambda t: jax.tree_util.tree_map(lambda x: np.stack([np.asarray(x)] * n), t)
  rparams, ropt = rep(params), rep(tx.init(params))
  main_key = jax.random.PRNGKey(spec["dropout_seed"])
  steps_per_epoch = len(inputs) // b
  losses, order = [], None
  for s in range(spec["steps"]):
    if s % steps_per_epoch == 0:
      rng, input_rng = jax.random.split(rng)
      order = np.asarray(jax.random.permutation(input_rng, len(inputs)))
    idx = order[(s % steps_per_epoch) * b:(s % steps_per_epoch + 1) * b].reshape(n, b // n)
    step_key, main_key = jax.random.split(main_key)
    keys = jax.random.split(step_key, n)
    rparams, ropt, loss = p_step(rparams, ropt, inputs[idx], targets[idx], keys)
    losses.append(float(loss[0]))
  return jax.tree_util.tree_map(lambda x: np.asarray(x[0]), rparams), np.asarray(losses,
                                                                                   np.float32)


def write_pmap_golden(out):
  """The decoder on 2 devices (run with XLA_FLAGS=--xla_force_host_platform_device_count=2),
  for a 2-worker cluster (tests/cluster/equivalence_test), then evaluated on every window
  of the same stream (mean per-token loss and accuracy, as a Lockstep evaluation)."""
  spec = dict(SPECS["decoder"], global_batch_size=8, steps=20, seed=3, dropout_seed=5,
              workers=2)
  assert jax.local_device_count() >= 2, "set XLA_FLAGS=--xla_force_host_platform_device_count=2"
  t_len = spec["model"]["input_shape"][0]
  stream = np.random.default_rng(123).integers(0, 40, 32 * t_len + 1).astype(np.int32)
  inputs, targets = windows(stream, t_len)
  model = SequenceModel(json.dumps(spec["model"]))
  rng, init_rng = jax.random.split(jax.random.PRNGKey(spec["seed"]))
  params = model.init(init_rng, jnp.ones([1, t_len], jnp.int32))["params"]
  final, losses = train_pmap(model, spec, params, rng, inputs, targets)
  logits = model.apply({"params": final}, inputs)
  per_token = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  t = {"data.stream": stream, "train.losses": losses,
       "eval.loss": np.asarray([jnp.mean(per_token)], np.float32),
       "eval.accuracy": np.asarray([jnp.mean(jnp.argmax(logits, -1) == targets)], np.float32)}
  t.update(golden_layers.tensors("train.params.", final))
  spec["dataset"] = {"format": "tokens", "train_path": "unused.npz", "test_path": "unused.npz",
                     "context": t_len}
  path = f"{out}/sequence_decoder_pmap2.safetensors"
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
            metadata={"versions": json.dumps(golden_layers.VERSIONS), "spec": json.dumps(spec)})
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def write_goldens(out):
  for name, base in SPECS.items():
    write_golden(out, name, base)
  write_pmap_golden(out)


def write_golden(out, name, base, prefix="sequence_"):
  """<out>/<prefix><name>.safetensors for the spec `base` (model and optimizer)."""
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
  path = f"{out}/{prefix}{name}.safetensors"
  spec["dataset"] = {"format": "tokens", "train_path": "unused.npz", "test_path": "unused.npz",
                     "context": t_len}
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
            metadata={"versions": json.dumps(golden_layers.VERSIONS), "spec": json.dumps(spec)})
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
  os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
