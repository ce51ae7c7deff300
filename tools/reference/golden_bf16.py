"""Golden files for mixed precision (docs/models.md#mixed-precision): one training step's
gradients of each model family with Flax's bfloat16 policy (every module dtype=
jnp.bfloat16, param_dtype=jnp.float32; the logits cast to float32 for the loss), and the
same step in float32, the reference that both bfloat16 steps are measured against.

The families: the Flax MNIST CNN and the BatchNorm convnet of golden_precision.py on
Fashion-MNIST images, the small ResNet of golden_resnet.py (blocks, residuals, a strided
projection, dropout), the decoder of golden_sequence.py (embeddings, causal attention
with dropout, gelu, layer norms) and the two ViTs of golden_vit.py (patches, the class
token and AddPositionEmbs, whose float32 params promote the tokens to float32 as
jnp.concatenate and + do; encoder blocks; the class token's output or the tokens' mean),
each with model.dtype bfloat16, built in Flax from the
spec by golden_layers.Sequential. tests/golden/bf16_<family>.safetensors holds, with the
spec as JSON in its metadata:
  data.images/labels, or data.stream    the batch (the token stream, windowed)
  init.*, init_stats.*                  params and batch_stats (Lockstep's RNG plan); the
                                        CNN's are init_cnn_seed0.safetensors' (its "init"
                                        metadata), not stored twice
  grads.loss, grads.*                   JAX's bfloat16 loss and gradients at init on the
                                        batch, train mode, dropout keyed by grads.dropout_key;
                                        BF16 where the gradient is a bfloat16 array cast
                                        (matmuls', convolutions', bias sums'), else F32
  f32.loss                              JAX's float32 loss at the same point
  jax_error.*                           per param, ||g_bf16 - g_f32||_2 (absolute)
  f32_norm.*                            per param, ||g_f32||_2
Written by make_golden.py (--only bf16); tests/golden_bf16_test.cc holds Lockstep's
bfloat16 gradients to JAX's and to its own float32 step.
"""
import copy
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
from safetensors.numpy import load_file, save_file

import golden_layers
import golden_precision
import golden_resnet
import golden_sequence
import golden_vit
import models

CNN = {  # model.kind cnn, as its layers
    "input_shape": [28, 28, 1],
    "layers": [
        {"conv": {"features": 32, "kernel_size": [3, 3]}}, "relu",
        {"avg_pool": {"window_shape": [2, 2], "strides": [2, 2]}},
        {"conv": {"features": 64, "kernel_size": [3, 3]}}, "relu",
        {"avg_pool": {"window_shape": [2, 2], "strides": [2, 2]}},
        "flatten", {"dense": {"features": 256}}, "relu", {"dense": {"features": 10}},
    ],
}

FAMILIES = {  # model, examples in the batch, optimizer
    "cnn": (CNN, 32, {"kind": "sgd", "learning_rate": 0.1, "momentum": 0.9}),
    "bn_convnet": (golden_precision.MODEL, 32, {"kind": "sgd", "learning_rate": 0.1}),
    "resnet": (golden_resnet.MODEL, 16, {"kind": "adam", "learning_rate": 3e-3}),
    "decoder": (golden_sequence.DECODER, 8, {"kind": "adam", "learning_rate": 1e-3}),
    "vit": (golden_vit.TOKEN, 16, golden_vit.SGD),
    "vit_gap": (golden_vit.GAP, 16, golden_vit.SGD),
}

DROPOUT_KEY = np.asarray([0, 7], np.uint32)


def with_dtype(model, dtype):
  m = copy.deepcopy(model)
  m["dtype"] = dtype
  return m


def loss_fn(params, stats, model, x, y, key, tokens):
  """The mean softmax cross-entropy of the float32 logits (train mode: batch statistics,
  dropout keyed by `key`)."""
  variables = {"params": params}
  kw = {}
  if stats:
    variables["batch_stats"] = stats
    kw["mutable"] = ["batch_stats"]
  out = model.apply(variables, x, train=True, rngs={"dropout": key}, **kw)
  logits = (out[0] if stats else out).astype(jnp.float32)
  if tokens:
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))
  one_hot = jax.nn.one_hot(y, num_classes=10)
  return jnp.mean(-jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=-1))


def data_for(name, model, n):
  if name == "decoder":
    t_len = model["input_shape"][0]
    stream = np.random.default_rng(108).integers(0, 40, n * t_len + 1).astype(np.int32)
    x, y = golden_sequence.windows(stream, t_len)
    return {"data.stream": stream}, x, y
  if name in ("resnet", "vit", "vit_gap"):
    rng = np.random.default_rng(25)
    images = rng.random((n, *model["input_shape"]), dtype=np.float32)
    labels = rng.integers(0, 10, n).astype(np.int32)
  else:
    import make_golden  # noqa: E402 (its IDX loader)
    images, labels = make_golden.load_split("train")
    images, labels = images[:n], labels[:n]
  return {"data.images": images, "data.labels": labels}, images, labels


def write_golden(out, name):
  model_spec, n, optimizer = FAMILIES[name]
  spec = {"model": with_dtype(model_spec, "bfloat16"), "optimizer": optimizer,
          "global_batch_size": n, "steps": 1, "seed": 0 if name == "cnn" else 3}
  t, x, y = data_for(name, model_spec, n)
  tokens = name == "decoder"
  if tokens:
    spec["dataset"] = {"format": "tokens", "train_path": "unused.npz", "test_path": "unused.npz",
                       "context": model_spec["input_shape"][0]}
  bf16 = golden_layers.Sequential(json.dumps(spec["model"]))
  f32 = golden_layers.Sequential(json.dumps(model_spec))
  _, init_rng = jax.random.split(jax.random.PRNGKey(spec["seed"]))
  ones = jnp.ones([1, *model_spec["input_shape"]], jnp.int32 if tokens else jnp.float32)
  variables = f32.init(init_rng, ones)
  params, stats = variables["params"], variables.get("batch_stats", {})
  metadata = {}
  if name == "cnn":  # the preset's seed-0 init is a golden file already
    metadata["init"] = "init_cnn_seed0.safetensors"
    stored = load_file(f"{out}/{metadata['init']}")
    for p, v in models.flatten(params).items():
      assert np.array_equal(stored[p], np.asarray(v)), p
  else:
    t.update(golden_layers.tensors("init.", params))
  if stats:
    t.update(golden_layers.tensors("init_stats.", stats))
  key = jnp.asarray(DROPOUT_KEY)
  loss16, g16 = jax.value_and_grad(loss_fn)(params, stats, bf16, x, y, key, tokens)
  loss32, g32 = jax.value_and_grad(loss_fn)(params, stats, f32, x, y, key, tokens)
  g16, g32 = models.flatten(g16), models.flatten(g32)
  for p, g in g16.items():
    g = np.asarray(g, np.float32)
    as_bf16 = g.astype(ml_dtypes.bfloat16)
    exact = np.array_equal(as_bf16.astype(np.float32), g)
    t[f"grads.{p}"] = as_bf16.view(np.uint16) if exact else g
    ref = np.asarray(g32[p], np.float64)
    err = np.linalg.norm((g.astype(np.float64) - ref).ravel())
    t[f"jax_error.{p}"] = np.asarray([err], np.float32)
    t[f"f32_norm.{p}"] = np.asarray([np.linalg.norm(ref)], np.float32)
    print(f"  {name} {p}: |g32| {np.linalg.norm(ref):.3e}, JAX bf16 error {err:.3e}"
          f" ({'BF16' if exact else 'F32'})")
  t["grads.loss"] = np.asarray([loss16], np.float32)
  t["grads.dropout_key"] = DROPOUT_KEY
  t["f32.loss"] = np.asarray([loss32], np.float32)
  path = f"{out}/bf16_{name}.safetensors"
  bf16_names = [k for k, v in t.items() if v.dtype == np.uint16]
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
            metadata={"versions": json.dumps(golden_layers.VERSIONS), "spec": json.dumps(spec),
                      "bf16": json.dumps(bf16_names), **metadata})
  print(f"wrote {path} ({os.path.getsize(path)} bytes); loss bf16 {float(loss16):.6f}, "
        f"f32 {float(loss32):.6f}")


def bits(x):
  return np.asarray(jnp.asarray(x, jnp.bfloat16)).view(np.uint16)


def write_math_golden(out):
  """bf16_math.safetensors: XLA's bfloat16 results of the elementwise layers, bit by bit,
  for CpuBf16's tests: every activation on the bfloat16 numbers of magnitude in
  [2^-12, 16] and 0 (act.x, act.<name>), the attention softmax over 64 rows of 40 scores
  (softmax.x: float32 sums, as a matmul leaves them; softmax.causal: rows r % 40 + 1
  long), avg_pool 3x3 / 2x2 in bfloat16 (pool.x [2, 9, 9, 4]), and a Dense with bias
  (dense.x [64, 96], dense.kernel, dense.bias float32: dense.y)."""
  mags = [np.float32(m) * np.float32(2.0) ** e for e in range(-12, 4) for m in
          np.arange(128, 256, dtype=np.float32) / 128]
  x = np.asarray(sorted(set([0.0] + mags + [-m for m in mags])), np.float32)
  x = jnp.asarray(x, jnp.bfloat16)
  t = {"act.x": bits(x)}
  acts = {"gelu_tanh": lambda v: nn.gelu(v), "gelu_erf": lambda v: nn.gelu(v, approximate=False),
          "tanh": nn.tanh, "sigmoid": nn.sigmoid, "silu": nn.silu}
  for name, f in acts.items():
    t[f"act.{name}"] = bits(jax.jit(f)(x))
  rng = np.random.default_rng(77)
  s = (rng.standard_normal((64, 40)) * 3).astype(np.float32)
  t["softmax.x"] = s
  t["softmax.y"] = bits(jax.jit(lambda v: jax.nn.softmax(v.astype(jnp.bfloat16)))(s))
  mask = np.tril(np.ones((40, 40), bool))[np.arange(64) % 40]
  t["softmax.causal"] = bits(jax.jit(lambda v: jax.nn.softmax(
      jnp.where(mask, v.astype(jnp.bfloat16), jnp.finfo(jnp.bfloat16).min)))(s))
  p = np.asarray(jnp.asarray(rng.standard_normal((2, 9, 9, 4)), jnp.bfloat16)).astype(np.float32)
  t["pool.x"] = p
  t["pool.avg3"] = bits(jax.jit(lambda v: nn.avg_pool(v.astype(jnp.bfloat16), (3, 3), (3, 3)))(p))
  t["pool.avg2"] = bits(jax.jit(lambda v: nn.avg_pool(v.astype(jnp.bfloat16), (2, 2), (1, 1),
                                                      "SAME"))(p))
  dx = rng.standard_normal((64, 96)).astype(np.float32)
  dk = (rng.standard_normal((96, 48)) * 0.1).astype(np.float32)
  db = rng.standard_normal(48).astype(np.float32)
  t.update({"dense.x": dx, "dense.kernel": dk, "dense.bias": db})
  t["dense.y"] = bits(jax.jit(nn.Dense(48, dtype=jnp.bfloat16).apply)(
      {"params": {"kernel": dk, "bias": db}}, dx))
  path = f"{out}/bf16_math.safetensors"
  save_file({k: np.ascontiguousarray(v) for k, v in t.items()}, path,
            metadata={"versions": json.dumps(golden_layers.VERSIONS)})
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def write_goldens(out):
  write_math_golden(out)
  for name in FAMILIES:
    write_golden(out, name)


if __name__ == "__main__":
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
