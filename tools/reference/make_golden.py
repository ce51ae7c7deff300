"""Writes Lockstep's golden files (tests/golden/) from JAX, Flax and optax.

Run through tools/reference/run (it makes the venv). The C++ tests read these files;
CI never needs JAX. Each file's metadata records the versions that produced it.
"""
import argparse
import json
import os
import sys

# pmap over several host devices, as the seed program does on one machine.
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(__file__))
import golden_layers  # noqa: E402
import models  # noqa: E402
from idx import read_idx  # noqa: E402

VERSIONS = {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__}
DATA = "/usr/share/datasets/fashion-mnist"


def load_split(split):
  prefix = "train" if split == "train" else "t10k"
  images = read_idx(f"{DATA}/{prefix}-images-idx3-ubyte.gz")
  labels = read_idx(f"{DATA}/{prefix}-labels-idx1-ubyte.gz")
  return (images.astype(np.float32) / 255.0)[..., None], labels.astype(np.int32)


def u32(x):
  return [int(v) for v in np.asarray(x, np.uint32).ravel()]


def f32(x):
  return [float(v) for v in np.asarray(x, np.float32).ravel()]


def rng_vectors():
  out = {"versions": VERSIONS}
  for mode in ("partitionable", "legacy"):
    jax.config.update("jax_threefry_partitionable", mode == "partitionable")
    cases = []
    for seed in (0, 1, 42, 1701, -1, 2**31 - 1):
      k = jax.random.PRNGKey(seed)
      case = {"seed": seed, "key": u32(k)}
      case["split"] = {str(n): u32(jax.random.split(k, n)) for n in (2, 3, 5)}
      case["fold_in"] = {str(d): u32(jax.random.fold_in(k, d))
                         for d in (0, 1, 4, 12345, 2**32 - 1)}
      case["random_bits"] = {str(n): u32(jax.random.bits(k, (n,), jnp.uint32))
                             for n in (1, 3, 7, 10)}
      case["random_bits_3x5"] = u32(jax.random.bits(k, (3, 5), jnp.uint32))
      case["uniform"] = f32(jax.random.uniform(k, (7,)))
      case["uniform_m2_3"] = f32(jax.random.uniform(k, (7,), minval=-2.0, maxval=3.0))
      case["bernoulli_0.8_3x5"] = [int(b) for b in
                                   np.asarray(jax.random.bernoulli(k, 0.8, (3, 5))).ravel()]
      case["normal"] = f32(jax.random.normal(k, (9,)))
      case["truncated_normal"] = f32(jax.random.truncated_normal(k, -2.0, 2.0, (9,)))
      case["permutation"] = {str(n): [int(v) for v in jax.random.permutation(k, n)]
                             for n in (1, 10, 100, 2000)}
      cases.append(case)
    out[mode] = cases
  jax.config.update("jax_threefry_partitionable", True)
  return out


def meta(**kw):
  m = {"versions": json.dumps(VERSIONS)}
  m.update({k: json.dumps(v) for k, v in kw.items()})
  return m


def tensors(prefix, tree):
  return {f"{prefix}{k}": np.asarray(v, np.float32)
          for k, v in models.flatten(tree).items()}


def write(path, tensors_, metadata):
  save_file({k: np.ascontiguousarray(v) for k, v in tensors_.items()}, path,
            metadata=metadata)
  print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def init_goldens(out):
  specs = {"cnn": (models.CNN(), {"kind": "cnn"}),
           "mlp": (models.MLP(widths=(128, 64), dropout_rate=0.1),
                   {"kind": "mlp", "hidden": [128, 64], "dropout_rate": 0.1})}
  for name, (model, spec) in specs.items():
    for seed in (0, 42):
      _, params = models.init_params(model, seed)
      write(f"{out}/init_{name}_seed{seed}.safetensors", tensors("", params),
            meta(model=spec, seed=seed))


def grad_goldens(out, images, labels):
  """Loss and every gradient of both models on a fixed batch (seed-0 params)."""
  x, y = images[:16], labels[:16]
  t = {"batch.images": x, "batch.labels": y}
  cnn = models.CNN()
  _, p = models.init_params(cnn, 0)
  (loss, _), g = jax.value_and_grad(models.loss_fn, has_aux=True)(p, cnn.apply, x, y)
  t.update(tensors("cnn.grads.", g))
  t["cnn.loss"] = np.asarray([loss], np.float32)
  mlp = models.MLP(widths=(128, 64), dropout_rate=0.1)
  _, p = models.init_params(mlp, 0)
  key = jax.random.PRNGKey(7)
  (loss, _), g = jax.value_and_grad(models.loss_fn, has_aux=True)(p, mlp.apply, x, y, key)
  t.update(tensors("mlp.grads.", g))
  t["mlp.loss"] = np.asarray([loss], np.float32)
  t["mlp.dropout_key"] = np.asarray(key, np.uint32)
  write(f"{out}/grads.safetensors", t,
        meta(cnn_params="init_cnn_seed0", mlp_params="init_mlp_seed0",
             mlp={"kind": "mlp", "hidden": [128, 64], "dropout_rate": 0.1}))


class Recorder:
  """Captures every dropout mask Flax draws, by wrapping jax.random.bernoulli."""

  def __init__(self):
    self.masks = []
    self._orig = jax.random.bernoulli

  def __enter__(self):
    def wrapped(*a, **kw):
      m = self._orig(*a, **kw)
      self.masks.append(m)
      return m
    jax.random.bernoulli = wrapped
    return self

  def __exit__(self, *exc):
    jax.random.bernoulli = self._orig


def train_plan(spec, images, labels):
  """Lockstep's RNG plan (reference §7) run as the seed program: pmap over N devices."""
  m = spec["model"]
  model = models.MLP(widths=tuple(m["hidden"]), dropout_rate=m["dropout_rate"])
  o = spec["optimizer"]
  tx = models.make_tx_from_spec(o)
  n, b = spec["workers"], spec["global_batch_size"]
  rng, params = models.init_params(model, spec["seed"])
  state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
  rec = Recorder()

  def train_step(state, x, y, key):
    def lf(p):
      with rec:
        rec.masks = []
        loss, logits = models.loss_fn(p, state.apply_fn, x, y, key)
        return loss, (logits, list(rec.masks))
    (loss, (_, masks)), grads = jax.value_and_grad(lf, has_aux=True)(state.params)
    grads = jax.lax.pmean(grads, axis_name="batch")
    return state.apply_gradients(grads=grads), loss, masks

  p_step = jax.pmap(train_step, axis_name="batch")
  rstate = jax.tree_util.tree_map(lambda v: np.stack([np.asarray(v)] * n), state)
  main_key = jax.random.PRNGKey(spec.get("dropout_seed", spec["seed"]))
  steps_per_epoch = len(images) // b
  losses, local_losses, masks = [], [], []
  order = None
  for step in range(spec["steps"]):
    s = step % steps_per_epoch
    if s == 0:
      rng, input_rng = jax.random.split(rng)
      order = np.asarray(jax.random.permutation(input_rng, len(images)))
    idx = order[s * b:(s + 1) * b].reshape(n, b // n)
    step_key, main_key = jax.random.split(main_key)
    keys = jax.random.split(step_key, n)
    rstate, loss, mk = p_step(rstate, images[idx], labels[idx], keys)
    local_losses.append(np.asarray(loss))
    losses.append(float(jnp.mean(loss)))
    masks.append([np.asarray(x) for x in mk])
  final = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), rstate)
  return final, np.asarray(losses, np.float32), np.asarray(local_losses, np.float32), masks


def train_goldens(out, images, labels):
  """20 steps of a small dropout MLP, N = 1, on 64 images; adam and sgd+momentum."""
  x, y = images[:64], labels[:64]
  base = {"model": {"kind": "mlp", "hidden": [32, 16], "dropout_rate": 0.2},
          "global_batch_size": 16, "steps": 20, "seed": 3, "dropout_seed": 5,
          "workers": 1}
  for name, opt in (("adam", {"kind": "adam", "learning_rate": 1e-3}),
                    ("sgd", {"kind": "sgd", "learning_rate": 0.1, "momentum": 0.9})):
    spec = dict(base, optimizer=opt)
    final, losses, _, masks = train_plan(spec, x, y)
    t = {"data.images": x, "data.labels": y, "losses": losses}
    t.update(tensors("params.", final.params))
    for step, mk in enumerate(masks):
      for i, m in enumerate(mk):
        t[f"masks.{step}.{i}"] = m[0].astype(np.uint8)
    write(f"{out}/train_mlp_{name}.safetensors", t, meta(spec=spec))


def pmap_golden(out, images, labels):
  """100 steps, 2 workers, dropout, on the full Fashion-MNIST train split."""
  spec = {"model": {"kind": "mlp", "hidden": [64, 32], "dropout_rate": 0.2},
          "optimizer": {"kind": "adam", "learning_rate": 1e-3},
          "global_batch_size": 64, "steps": 100, "seed": 0, "workers": 2}
  final, losses, local_losses, _ = train_plan(spec, images, labels)
  t = {"losses": losses, "local_losses": local_losses}
  t.update(tensors("params.", final.params))
  write(f"{out}/pmap2_mlp_dropout.safetensors", t, meta(spec=spec))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "../../tests/golden"))
  ap.add_argument(
      "--only",
      default="rng,init,grads,train,pmap,optax,layers,batchnorm,replicas,resnet,precision,sequence,"
              "vit")
  args = ap.parse_args()
  os.makedirs(args.out, exist_ok=True)
  only = set(args.only.split(","))
  if "rng" in only:
    with open(f"{args.out}/rng.json", "w") as f:
      json.dump(rng_vectors(), f, indent=1)
    print(f"wrote {args.out}/rng.json")
  images, labels = load_split("train")
  if "init" in only:
    init_goldens(args.out)
  if "grads" in only:
    grad_goldens(args.out, images, labels)
  if "train" in only:
    train_goldens(args.out, images, labels)
  if "pmap" in only:
    pmap_golden(args.out, images, labels)
  if "optax" in only:
    import golden_optax  # noqa: E402 (it imports this module's helpers)
    golden_optax.write_goldens(args.out, images, labels)
  if "layers" in only:
    golden_layers.write_goldens(args.out)
  if "sequence" in only:
    import golden_sequence  # noqa: E402
    golden_sequence.write_goldens(args.out)
  if "vit" in only:
    import golden_vit  # noqa: E402
    golden_vit.write_goldens(args.out)
  if "batchnorm" in only:  # pmap on 2 of the host devices set above
    import golden_batchnorm  # noqa: E402
    golden_batchnorm.write_goldens(args.out)
  if "replicas" in only:  # pmap on the 4 host devices set above
    import golden_replicas  # noqa: E402
    golden_replicas.write_goldens(args.out)
  if "resnet" in only:  # pmap on 2 of the host devices set above
    import golden_resnet  # noqa: E402
    golden_resnet.write_goldens(args.out)
  if "precision" in only:  # float64 in a scope of its own (jax.enable_x64)
    import golden_precision  # noqa: E402
    golden_precision.write_goldens(args.out)


if __name__ == "__main__":
  main()
