"""Golden files for optax beyond constant learning rates (tests/golden_optax_test.cc).

optax_schedules.safetensors: for each schedule below, optax's learning rate at every count
in `<name>.count`, as `<name>.lr`; the metadata "schedules" maps each name to its Lockstep
optimizer spec. Each value is the schedule jitted with an int32 count, as TrainState's
optimizer calls it inside a pmapped step. Besides, `cnn.grads_norm` and `mlp.grads_norm`:
optax's global norm of grads.safetensors' gradients, clip_by_global_norm's input.

optax_train_<name>.safetensors: 20 steps of make_golden's small dropout MLP with each
option (schedules, Nesterov, clip_by_global_norm), in train_mlp_*'s layout but for the
data: the same 64 images, read from the file the metadata "data" names.

Called from make_golden.py (--only optax); run through tools/reference/run.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax

import make_golden
import models

# name -> (optimizer spec, counts). Every code path: the exponent rewrites (1, 2, 3, 0.5
# and powf), alpha, warmup 0, the exponential decay's begin, staircase and both bounds,
# unsorted piecewise boundaries, float32 rounding of large counts.
SCHEDULES = {
    "constant": ({"kind": "sgd", "learning_rate": 0.1}, range(0, 50)),
    "cosine": ({"kind": "sgd", "schedule": {"cosine_decay": {
        "init_value": 0.1, "decay_steps": 1000}}}, range(0, 1100)),
    "cosine_alpha_exp2": ({"kind": "sgd", "schedule": {"cosine_decay": {
        "init_value": 0.05, "decay_steps": 777, "alpha": 0.1, "exponent": 2.0}}},
        range(0, 800)),
    "cosine_exp3": ({"kind": "sgd", "schedule": {"cosine_decay": {
        "init_value": 0.3, "decay_steps": 333, "alpha": 0.01, "exponent": 3.0}}},
        range(0, 340)),
    "cosine_exp_half": ({"kind": "sgd", "schedule": {"cosine_decay": {
        "init_value": 0.2, "decay_steps": 500, "exponent": 0.5}}}, range(0, 510)),
    "cosine_exp_1p7": ({"kind": "adam", "schedule": {"cosine_decay": {
        "init_value": 0.001, "decay_steps": 640, "alpha": 0.03, "exponent": 1.7}}},
        range(0, 650)),
    "cosine_long": ({"kind": "sgd", "schedule": {"cosine_decay": {
        "init_value": 0.1, "decay_steps": 50_000_000}}},
        list(range(0, 50_000_001, 99_991)) + list(range(2**24 - 5, 2**24 + 6))),
    "warmup_cosine": ({"kind": "adam", "schedule": {"warmup_cosine_decay": {
        "init_value": 0.0, "peak_value": 0.1, "warmup_steps": 100, "decay_steps": 1000,
        "end_value": 0.001}}}, range(0, 1050)),
    "warmup_cosine_exp3": ({"kind": "adam", "schedule": {"warmup_cosine_decay": {
        "init_value": 0.01, "peak_value": 0.3, "warmup_steps": 7, "decay_steps": 50,
        "exponent": 3.0}}}, range(0, 60)),
    "warmup_cosine_no_warmup": ({"kind": "adam", "schedule": {"warmup_cosine_decay": {
        "init_value": 0.5, "peak_value": 0.02, "warmup_steps": 0, "decay_steps": 90,
        "end_value": 0.002, "exponent": 1.3}}}, range(0, 100)),
    "exponential_staircase": ({"kind": "sgd", "schedule": {"exponential_decay": {
        "init_value": 0.1, "transition_steps": 100, "decay_rate": 0.5,
        "staircase": True}}}, range(0, 1000)),
    "exponential_begin_floor": ({"kind": "sgd", "schedule": {"exponential_decay": {
        "init_value": 0.1, "transition_steps": 33, "decay_rate": 0.9, "transition_begin": 50,
        "end_value": 0.02}}}, range(0, 700)),
    "exponential_growth_ceiling": ({"kind": "sgd", "schedule": {"exponential_decay": {
        "init_value": 0.001, "transition_steps": 10, "decay_rate": 1.5,
        "end_value": 0.5}}}, range(0, 200)),
    "piecewise": ({"kind": "sgd", "schedule": {"piecewise_constant": {
        "init_value": 0.1, "boundaries_and_scales": {"300": 0.1, "100": 0.5,
                                                     "200": 0.3}}}}, range(0, 400)),
}

# name -> optimizer spec: 20 steps each. sgd_clipped's max norm, 0.05, is far below its
# gradients' norms; that clipping changed both clipped runs is asserted.
TRAINING = {
    "sgd_nesterov_cosine": {"kind": "sgd", "momentum": 0.9, "nesterov": True, "schedule": {
        "cosine_decay": {"init_value": 0.1, "decay_steps": 15, "alpha": 0.05}}},
    "adam_warmup_cosine_clip": {"kind": "adam", "clip_by_global_norm": 1.0, "schedule": {
        "warmup_cosine_decay": {"init_value": 0.0, "peak_value": 0.003, "warmup_steps": 5,
                                "decay_steps": 18, "end_value": 0.0001}}},
    "adamw_piecewise": {"kind": "adamw", "weight_decay": 0.01, "schedule": {
        "piecewise_constant": {"init_value": 0.002,
                               "boundaries_and_scales": {"12": 0.2, "5": 0.5}}}},
    "sgd_exponential_staircase": {"kind": "sgd", "schedule": {"exponential_decay": {
        "init_value": 0.2, "transition_steps": 4, "decay_rate": 0.6, "staircase": True}}},
    "sgd_clipped": {"kind": "sgd", "learning_rate": 0.1, "momentum": 0.9,
                    "clip_by_global_norm": 0.05},
}


def norm_goldens(out):
  """optax's global norm (clip_by_global_norm's) of grads.safetensors' gradients."""
  from safetensors.numpy import load_file
  grads = load_file(f"{out}/grads.safetensors")
  t = {}
  for model in ("cnn", "mlp"):
    prefix = f"{model}.grads."
    tree = {}
    for k, v in grads.items():
      if k.startswith(prefix):
        module, leaf = k[len(prefix):].split("/")
        tree.setdefault(module, {})[leaf] = v
    t[f"{model}.grads_norm"] = np.asarray([jax.jit(optax.tree.norm)(tree)], np.float32)
  return t


def schedule_goldens(out):
  t, specs = norm_goldens(out), {}
  for name, (opt, counts) in SCHEDULES.items():
    s = models.make_schedule(opt)
    if not callable(s):
      s = optax.constant_schedule(s)
    lr = jax.jit(lambda c, s=s: jnp.asarray(s(c), jnp.float32))
    counts = np.asarray(list(counts), np.int32)
    t[f"{name}.count"] = counts
    t[f"{name}.lr"] = np.asarray([lr(jnp.int32(c)) for c in counts], np.float32)
    specs[name] = opt
  make_golden.write(f"{out}/optax_schedules.safetensors", t, make_golden.meta(schedules=specs))


def train_goldens(out, images, labels):
  x, y = images[:64], labels[:64]
  base = {"model": {"kind": "mlp", "hidden": [32, 16], "dropout_rate": 0.2},
          "global_batch_size": 16, "steps": 20, "seed": 3, "dropout_seed": 5,
          "workers": 1}
  for name, opt in TRAINING.items():
    spec = dict(base, optimizer=opt)
    final, losses, _, masks = make_golden.train_plan(spec, x, y)
    clipped = None
    if opt.get("clip_by_global_norm"):
      # Whether clipping changed anything: the same run without it ends elsewhere.
      unclipped = {k: v for k, v in opt.items() if k != "clip_by_global_norm"}
      other, _, _, _ = make_golden.train_plan(dict(base, optimizer=unclipped), x, y)
      clipped = not all(np.array_equal(a, b) for a, b in zip(
          jax.tree_util.tree_leaves(final.params), jax.tree_util.tree_leaves(other.params)))
      assert clipped, name
    t = {"losses": losses}
    t.update(make_golden.tensors("params.", final.params))
    for step, mk in enumerate(masks):
      for i, m in enumerate(mk):
        t[f"masks.{step}.{i}"] = m[0].astype(np.uint8)
    meta = make_golden.meta(spec=spec, clipped=clipped, data="train_mlp_sgd.safetensors")
    make_golden.write(f"{out}/optax_train_{name}.safetensors", t, meta)


def write_goldens(out, images, labels):
  schedule_goldens(out)
  train_goldens(out, images, labels)
