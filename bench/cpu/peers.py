#!/usr/bin/env python3
"""CPU training throughput of Lockstep's peers: JAX (jit) and PyTorch (eager, compile).

Trains the benchmark models on Fashion-MNIST batches (the fortunes corpus for the
char-transformer) with the same optimizer as the Lockstep specs in bench/cpu/run, and
prints one JSON object:

  {"threads": N, "cpus": [...], "versions": {...},
   "results": {"cnn": {"jax": {"samples_per_sec": median, "windows": [...], "batch": B,
                               ...}, ...}, ...}}

  cnn: the Flax MNIST CNN (tools/reference/models.py), optax.sgd(0.1, momentum=0.9)
  mlp: 784-512-512-10 (no dropout), optax.adam(1e-3)
  bn-convnet: examples/bn-convnet.yaml's model (models.BNConvNet: BatchNorm in training
              mode, dropout 0.3) and optimizer (adam on a cosine decay), as the spec says
  resnet: examples/resnet.yaml's model and optimizer (adamw on a cosine decay), batch 128;
          BatchNorm in training mode
  char-transformer: examples/char-transformer.yaml's model and optimizer (adam 1e-3),
          batch 32 windows of 128 bytes of the fortunes corpus (the spec's train_path,
          cut into windows as Lockstep and train_flax.py read it), dropout on, the
          token-level cross-entropy; a sample is one window
  vit: examples/vit.yaml's model and optimizer (adamw on a warmup-cosine schedule),
       batch 128, dropout on (0.1 on the token stream; none on the attention weights)

JAX runs the spec's own Flax module for resnet, char-transformer and vit
(tools/reference/train_flax.py's model_from_spec: golden_layers.Sequential with the
spec's blocks, Lockstep's module names and init); PyTorch runs tools/reference/
torch_models.py's equivalents (same shapes and parameter counts, Flax's init
distributions). Every run reports its model's parameter count ("params"); the frameworks
of one model must agree on it, or the run fails.

Only training steps are timed, after `--warmup` steps (JIT compilation, allocator and
thread-pool start-up; default 20, 5 for the char-transformer and the vit, whose steps
are the longest: XLA and inductor compile in the first step). Each step draws its batch
from a fixed random permutation with a numpy gather, as the Flax MNIST example does;
that gather is part of the timed step, as Lockstep's GatherRows is. The PyTorch peers read a
dataset transposed to NCHW once, outside the timed loop. JAX steps are dispatched
asynchronously; each timed window ends with block_until_ready.

Every (framework, model) pair runs in its own subprocess, pinned to the same CPUs
(`--cpus`, default the first N of this process's affinity) with the thread pools fixed to
N threads:
  JAX:     taskset + sched_setaffinity before XLA starts: XLA sizes its intra-op pools
           from the affinity mask (checked: a 2-CPU mask gives 4 more threads than a
           1-CPU one). XLA_FLAGS has no thread-count flag (a bare
           `intra_op_parallelism_threads=N` token there is silently ignored, so it is not
           set); --xla_cpu_multi_thread_eigen=true (the default) is set explicitly.
  PyTorch: torch.set_num_threads(N), torch.set_num_interop_threads(1), OMP_NUM_THREADS=N

--dtype bfloat16 (default float32) trains every model in mixed precision, as each
framework's users write it: JAX with Flax's policy (every module dtype=jnp.bfloat16,
params float32, the logits cast to float32 for the loss: docs/models.md#mixed-precision),
PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) around the forward pass and the
loss (float32 params, its own casting rules).

Usage: peers.py [--threads N] [--models cnn,mlp,bn-convnet,resnet,char-transformer,vit]
                [--frameworks jax,torch,torch_compile] [--dtype float32|bfloat16]
                [--steps S] [--windows W] [--warmup K] [--cpus 0,1]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
from idx import read_idx  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 128  # the image models' batch; the example specs give their own
# The models that are an example spec: its model, optimizer, batch and dataset.
SPECS = {m: os.path.join(REPO, "examples", f"{m}.yaml")
         for m in ("bn-convnet", "resnet", "char-transformer", "vit")}
DEFAULT_WARMUP = {"char-transformer": 5, "vit": 5}  # else 20


def example_spec(model_name):
  """examples/<model_name>.yaml as a dict (the proto's field names)."""
  import yaml
  with open(SPECS[model_name]) as f:
    return yaml.safe_load(f)


def batch_size(model_name):
  return int(example_spec(model_name)["global_batch_size"]) if model_name in SPECS else BATCH


def load_train():
  images = read_idx(f"{DATA}/train-images-idx3-ubyte.gz")
  labels = read_idx(f"{DATA}/train-labels-idx1-ubyte.gz")
  return (images.astype(np.float32) / 255.0)[..., None], labels.astype(np.int32)  # NHWC


def load_text(model_name):
  """A text spec's training windows and their next bytes, int32 [N, context] each, as
  Lockstep reads `format: text` (train_flax.load: window i = bytes [i * T, i * T + T])."""
  import train_flax
  return train_flax.load(example_spec(model_name)["dataset"], "train")


def batch_indices(n, steps, batch=BATCH, seed=0):
  """Indices for `steps` batches: concatenated random permutations (drop remainder)."""
  rng = np.random.default_rng(seed)
  per_epoch = n // batch
  out = []
  while len(out) < steps:
    perm = rng.permutation(n)[:per_epoch * batch].reshape(per_epoch, batch)
    out.extend(perm)
  return out[:steps]


def timed_windows(step, idx, warmup, steps, windows, sync, batch=BATCH):
  """Runs warmup steps, then `windows` timed windows of `steps` steps each."""
  it = iter(idx)
  for _ in range(warmup):
    step(next(it))
  sync()
  rates = []
  for _ in range(windows):
    t0 = time.perf_counter()
    for _ in range(steps):
      step(next(it))
    sync()
    rates.append(steps * batch / (time.perf_counter() - t0))
  return rates


# ---------------------------------------------------------------------------- JAX

def jax_bn_step(model, tx, images, labels, init_input=None):
  """A training step of a model with BatchNorm and dropout (train=True): the batch
  statistics' running averages carried beside the params (none for the transformer), a
  dropout key per step; the mean softmax cross-entropy over the batch, and over every
  position for logits per position (the token-level loss)."""
  import jax
  import jax.numpy as jnp
  import optax

  rng, init_rng = jax.random.split(jax.random.PRNGKey(0))
  if init_input is None:
    init_input = jnp.ones([1, 28, 28, 1])
  variables = model.init(init_rng, init_input)
  params, stats = variables["params"], variables.get("batch_stats", {})

  def train_step(params, stats, opt_state, x, y, key):
    def loss(params):
      logits, new = model.apply({"params": params, "batch_stats": stats}, x, train=True,
                                rngs={"dropout": key}, mutable=["batch_stats"])
      logits = logits.astype(jnp.float32)  # the loss in float32 (a bf16 model's too)
      l = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
      return l, new.get("batch_stats", {})
    (l, stats), grads = jax.value_and_grad(loss, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), stats, opt_state, l

  # Donating the state lets XLA update parameters in place, as Lockstep does.
  train_step = jax.jit(train_step, donate_argnums=(0, 1, 2))
  holder = {"state": (params, stats, tx.init(params)), "loss": None, "key": rng}

  def step(b):
    holder["key"], key = jax.random.split(holder["key"])
    *state, holder["loss"] = train_step(*holder["state"], images[b], labels[b], key)
    holder["state"] = tuple(state)

  return step, lambda: jax.block_until_ready(holder["state"]), holder


def run_jax(model_name, threads, warmup, steps, windows, dtype):
  import jax
  import jax.numpy as jnp
  from flax.training import train_state
  import models
  import train_flax

  images, labels = load_text(model_name) if model_name == "char-transformer" else load_train()
  init_input = None
  d = jnp.bfloat16 if dtype == "bfloat16" else None  # the modules' computation dtype
  if model_name == "cnn":
    model, tx = models.CNN(dtype=d), models.make_tx("sgd", 0.1, momentum=0.9)
  elif model_name == "bn-convnet":
    model = models.BNConvNet(dtype=d)
    tx = models.make_tx_from_spec(example_spec(model_name)["optimizer"])
  elif model_name in SPECS:  # the spec's own Flax module, as train_flax.py trains it
    spec = example_spec(model_name)
    if d is not None:
      spec["model"]["dtype"] = dtype
    model, init_input = train_flax.model_from_spec(spec)
    tx = models.make_tx_from_spec(spec["optimizer"])
  else:
    model = models.MLP(widths=(512, 512), dropout_rate=0.0, dtype=d)
    tx = models.make_tx("adam", 1e-3)
  if model_name in SPECS:
    step, sync, holder = jax_bn_step(model, tx, images, labels, init_input)
  else:
    _, params = models.init_params(model, 0)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    def train_step(state, x, y):
      def loss(params):
        return models.loss_fn(params, state.apply_fn, x, y)  # no dropout key: train=False
      (l, _), grads = jax.value_and_grad(loss, has_aux=True)(state.params)
      return state.apply_gradients(grads=grads), l

    # Donating the state lets XLA update parameters in place, as Lockstep does.
    train_step = jax.jit(train_step, donate_argnums=(0,))
    holder = {"state": state, "loss": None}

    def step(b):
      holder["state"], holder["loss"] = train_step(holder["state"], images[b], labels[b])

    def sync():
      jax.block_until_ready(holder["state"].params)

  batch = batch_size(model_name)
  idx = batch_indices(len(labels), warmup + steps * windows, batch)
  params = holder["state"][0] if model_name in SPECS else holder["state"].params
  n = sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))  # before donation
  rates = timed_windows(step, idx, warmup, steps, windows, sync, batch)
  return rates, {"final_loss": float(holder["loss"]), "devices": str(jax.devices()),
                 "params": n}


# ------------------------------------------------------------------------ PyTorch

def warmup_cosine_decay(init, warmup_steps, decay_steps):
  """optax.warmup_cosine_decay_schedule(init * peak, peak, warmup_steps, decay_steps) over
  peak (end_value 0, exponent 1), as a LambdaLR factor of step (the count of updates
  before this one, as optax's): linear from init to 1 over warmup_steps, then a cosine
  to 0 at decay_steps."""
  import math

  def factor(step):
    if step < warmup_steps:
      return init + (1 - init) * step / warmup_steps
    t = min(step - warmup_steps, decay_steps - warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * t / (decay_steps - warmup_steps)))

  return factor


def run_torch(model_name, threads, warmup, steps, windows, compile_, dtype):
  import contextlib
  import torch
  import torch_models
  torch.set_num_threads(threads)
  torch.set_num_interop_threads(1)
  torch.manual_seed(0)

  if model_name == "char-transformer":
    tokens, targets = load_text(model_name)
    x_all = torch.from_numpy(tokens.astype(np.int64))
    y_all = torch.from_numpy(targets.astype(np.int64))
  else:
    images, labels = load_train()
    x_all = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))  # NCHW, once
    y_all = torch.from_numpy(labels.astype(np.int64))
  sched = None
  model = torch_models.MODELS[model_name]()
  if model_name == "cnn":
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # = optax.sgd trace
  elif model_name in SPECS:
    o = example_spec(model_name)["optimizer"]
    assert o["kind"] in ("adam", "adamw") and not o.get("clip_by_global_norm"), o  # the specs'

    def make(lr):
      # optax.adamw's decay is decoupled and scaled by the learning rate, as AdamW's.
      if o["kind"] == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr,
                                 weight_decay=float(o.get("weight_decay", 1e-4)))
      return torch.optim.Adam(model.parameters(), lr=lr)

    if o.get("schedule"):
      (kind, a), = o["schedule"].items()
      assert kind in ("cosine_decay", "warmup_cosine_decay"), o
      assert not a.get("alpha") and not a.get("end_value") and a.get("exponent", 1) == 1, o
      if kind == "cosine_decay":
        opt = make(float(a["init_value"]))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(a["decay_steps"]))
      else:
        opt = make(float(a["peak_value"]))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine_decay(
            float(a.get("init_value", 0.0)) / float(a["peak_value"]),
            int(a.get("warmup_steps", 0)), int(a["decay_steps"])))
    else:
      opt = make(float(o["learning_rate"]))
  else:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

  def loss_fn(logits, y):
    """Mean over the batch, as loss_fn in models.py; over every position too for logits
    per position (the token-level loss)."""
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             y.reshape(-1))

  # torch.compile: the model (inductor compiles forward and, through AOTAutograd, backward);
  # the optimizer stays eager (foreach). Compiling the whole step including backward() and
  # opt.step() was 4x slower for the CNN here (graph breaks).
  net = torch.compile(model) if compile_ else model
  holder = {"loss": None}

  def precision():
    if dtype == "bfloat16":
      return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()

  def step(b):
    b = torch.from_numpy(b)
    x, y = x_all[b], y_all[b]
    opt.zero_grad(set_to_none=True)
    with precision():
      loss = loss_fn(net(x), y)
    loss.backward()
    opt.step()
    if sched is not None:
      sched.step()
    holder["loss"] = loss

  batch = batch_size(model_name)
  idx = batch_indices(len(y_all), warmup + steps * windows, batch)
  t0 = time.perf_counter()
  rates = timed_windows(step, idx, warmup, steps, windows, lambda: None, batch)
  extra = {"final_loss": float(holder["loss"]), "num_threads": torch.get_num_threads(),
           "interop_threads": torch.get_num_interop_threads(),
           "params": sum(p.numel() for p in model.parameters())}
  if compile_:
    extra["warmup_and_run_seconds"] = round(time.perf_counter() - t0, 1)
  return rates, extra


# ------------------------------------------------------------------------- driver

def worker(args):
  cpus = [int(c) for c in args.cpus.split(",")]
  os.sched_setaffinity(0, cpus)
  if args.worker == "jax":
    rates, extra = run_jax(args.model, args.threads, args.warmup, args.steps, args.windows,
                           args.dtype)
  else:
    rates, extra = run_torch(args.model, args.threads, args.warmup, args.steps, args.windows,
                             args.worker == "torch_compile", args.dtype)
  print(json.dumps({"rates": rates, **extra}))


def versions():
  out = {}
  for mod in ("jax", "jaxlib", "flax", "optax", "torch", "numpy"):
    try:
      from importlib.metadata import version
      out[mod] = version(mod)
    except Exception:  # pylint: disable=broad-except
      out[mod] = None
  return out


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
  p.add_argument("--cpus", default=None, help="CPUs to pin to (default: first N allowed)")
  p.add_argument("--models", default="cnn,mlp")
  p.add_argument("--frameworks", default="jax,torch,torch_compile")
  p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                 help="the models' computation dtype (params stay float32)")
  p.add_argument("--steps", type=int, default=None, help="steps per timed window "
                 "(default 100 for the cnn, 300 for the mlp)")
  p.add_argument("--windows", type=int, default=2, help="timed windows per run")
  p.add_argument("--warmup", type=int, default=None,
                 help="untimed steps first (default 20; 5 for the char-transformer and vit)")
  p.add_argument("--timeout", type=float, default=600, help="seconds per subprocess")
  p.add_argument("--model", help=argparse.SUPPRESS)
  p.add_argument("--worker", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.cpus is None:
    args.cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:args.threads])
  if args.worker:
    return worker(args)

  n = args.threads
  env = dict(os.environ)
  env.update({
      "OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n), "OPENBLAS_NUM_THREADS": str(n),
      "XLA_FLAGS": (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=true").strip(),
      "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
  })
  results = {}
  for model in args.models.split(","):
    steps = args.steps or (300 if model == "mlp" else 100)
    warmup = args.warmup if args.warmup is not None else DEFAULT_WARMUP.get(model, 20)
    results[model] = {}
    for fw in args.frameworks.split(","):
      cmd = ["taskset", "-c", args.cpus, sys.executable, os.path.abspath(__file__),
             "--worker", fw, "--model", model, "--threads", str(n), "--cpus", args.cpus,
             "--steps", str(steps), "--windows", str(args.windows), "--dtype", args.dtype,
             "--warmup", str(warmup)]
      t0 = time.perf_counter()
      try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.timeout, check=False)
      except subprocess.TimeoutExpired:
        results[model][fw] = {"error": f"timed out after {args.timeout:.0f} s"}
        continue
      wall = time.perf_counter() - t0
      lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
      if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        results[model][fw] = {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
        continue
      r = json.loads(lines[-1])
      rates = r.pop("rates")
      results[model][fw] = {"samples_per_sec": float(np.median(rates)),
                            "windows": [round(x, 1) for x in rates],
                            "steps_per_window": steps, "warmup_steps": warmup,
                            "batch": batch_size(model),
                            "wall_seconds": round(wall, 1), **r}
      print(f"peers: {model} {fw}: {np.median(rates):.0f} samples/s "
            f"(windows {', '.join(f'{x:.0f}' for x in rates)}), {r['params']:,} params",
            file=sys.stderr)
    counts = {fw: r["params"] for fw, r in results[model].items() if "params" in r}
    if len(set(counts.values())) > 1:
      sys.exit(f"peers.py: {model}: the frameworks' models differ: params {counts}")
  print(json.dumps({"threads": n, "cpus": args.cpus, "dtype": args.dtype,
                    "versions": versions(), "results": results}))


if __name__ == "__main__":
  main()
