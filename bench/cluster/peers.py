#!/usr/bin/env python3
"""Data-parallel peers of a 2-worker Lockstep cluster: PyTorch DDP (torchrun, gloo) and
JAX pmap over host devices, the models and optimizers of bench/cpu/peers.py.

  peers.py --framework ddp|pmap --model cnn|mlp|bn-convnet --workers W --cpus 0,1
           [--steps S] [--warmup K] [--windows N]

prints one JSON object on its last line:

  {"samples_per_sec": median over windows, "windows": [...], "wall_seconds": ...,
   "final_loss": ..., ...}

Each of the W ranks (DDP processes, pmap devices) computes its shard of the global batch
of 128 (128 / W examples) and the gradients are averaged across ranks every step, as a
Lockstep job on W workers does; only training steps are timed, after `--warmup` steps.

  ddp:  `torchrun --nproc_per_node W` of this file under `taskset -c CPUS` (as the
        Lockstep cluster's processes), each rank with torch.set_num_threads(1), the gloo
        process group over loopback, DistributedDataParallel with its default 25 MB buckets. The
        timed window ends with a barrier; rank 0 reports. The BN convnet's BatchNorm
        uses each rank's own statistics: torch's SyncBatchNorm refuses CPU modules
        ("SyncBatchNorm layers only work with GPU modules"), so DDP does less work there
        than Lockstep and pmap, whose statistics are the global batch's.
  pmap: XLA_FLAGS=--xla_force_host_platform_device_count=W, the process pinned to --cpus
        (XLA sizes its pools from the affinity mask); jax.pmap of the step with
        lax.pmean of the gradients; the BN convnet's BatchNorm takes axis_name (the
        statistics of the global batch, as the spec's batch_norm on several workers).
        Every step ends with a host sync (block_until_ready): without it the queued
        steps' CPU all-reduce rendezvous times out after 40 s on a loaded 2-core machine.
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
sys.path.insert(0, os.path.join(REPO, "bench", "cpu"))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
import peers as cpu_peers  # noqa: E402  bench/cpu/peers.py: data, batches, optimizers

BATCH = cpu_peers.BATCH


def windows_of(step, idx, warmup, steps, windows, sync):
  """cpu_peers.timed_windows, with the global batch of 128 per step."""
  return cpu_peers.timed_windows(step, idx, warmup, steps, windows, sync)


# ---------------------------------------------------------------------------- DDP

def run_ddp_rank(args):
  import torch
  import torch.distributed as dist
  import torch_models
  rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
  torch.set_num_threads(1)
  torch.set_num_interop_threads(1)
  torch.manual_seed(0)
  dist.init_process_group("gloo")
  images, labels = cpu_peers.load_train()
  x_all = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
  y_all = torch.from_numpy(labels.astype(np.int64))
  sched = None
  if args.model == "cnn":
    model = torch_models.CNN()
    opt_of = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)
  elif args.model == "bn-convnet":
    model = torch_models.BNConvNet()
    o = cpu_peers.bn_convnet_optimizer()
    (kind, a), = o["schedule"].items()
    assert o["kind"] == "adam" and kind == "cosine_decay", o
    opt_of = lambda p: torch.optim.Adam(p, lr=float(a["init_value"]))
  else:
    model = torch_models.MLP()
    opt_of = lambda p: torch.optim.Adam(p, lr=1e-3)
  net = torch.nn.parallel.DistributedDataParallel(model)
  opt = opt_of(net.parameters())
  if args.model == "bn-convnet":
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(a["decay_steps"]))
  per = BATCH // world
  holder = {"loss": None}

  def step(b):
    b = torch.from_numpy(b[rank * per:(rank + 1) * per])
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(net(x_all[b]), y_all[b])
    loss.backward()  # DDP all-reduces the gradients (averaged) in buckets during backward
    opt.step()
    if sched is not None:
      sched.step()
    holder["loss"] = loss

  idx = cpu_peers.batch_indices(len(labels), args.warmup + args.steps * args.windows)
  rates = windows_of(step, idx, args.warmup, args.steps, args.windows, dist.barrier)
  if rank == 0:
    print(json.dumps({"rates": rates, "final_loss": float(holder["loss"]),
                      "ranks": world, "threads_per_rank": torch.get_num_threads()}))
  dist.destroy_process_group()


# --------------------------------------------------------------------------- pmap

def run_pmap(args):
  import jax
  import jax.numpy as jnp
  import optax
  import models
  os.sched_setaffinity(0, [int(c) for c in args.cpus.split(",")])
  n = jax.local_device_count()
  assert n == args.workers, f"{n} host devices, expected {args.workers}"
  images, labels = cpu_peers.load_train()
  per = BATCH // n
  bn = args.model == "bn-convnet"
  if args.model == "cnn":
    model, tx = models.CNN(), models.make_tx("sgd", 0.1, momentum=0.9)
  elif bn:
    # BatchNorm over the global batch, as the spec's batch_norm on several workers.
    model = models.BNConvNet(axis_name="batch")
    tx = models.make_tx_from_spec(cpu_peers.bn_convnet_optimizer())
  else:
    model, tx = models.MLP(widths=(512, 512), dropout_rate=0.0), models.make_tx("adam", 1e-3)
  rng, init_rng = jax.random.split(jax.random.PRNGKey(0))
  variables = (models.BNConvNet() if bn else model).init(init_rng, jnp.ones([1, 28, 28, 1]))
  params = variables["params"]
  stats = variables.get("batch_stats", {})
  opt_state = tx.init(params)

  def train_step(params, stats, opt_state, x, y, key):
    key = jax.random.fold_in(key, jax.lax.axis_index("batch"))

    def loss(params):
      if bn:
        logits, new = model.apply({"params": params, "batch_stats": stats}, x, train=True,
                                  rngs={"dropout": key}, mutable=["batch_stats"])
        new_stats = new["batch_stats"]
      else:
        logits, new_stats = model.apply({"params": params}, x), stats
      l = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
      return l, new_stats

    (l, new_stats), grads = jax.value_and_grad(loss, has_aux=True)(params)
    grads = jax.lax.pmean(grads, "batch")
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_stats, opt_state, jax.lax.pmean(l, "batch")

  p_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0, 1, 2))
  rep = lambda t: jax.tree.map(lambda a: jnp.stack([a] * n), t)  # one copy per device
  holder = {"state": (rep(params), rep(stats), rep(opt_state)), "loss": None, "key": rng}

  def step(b):
    holder["key"], key = jax.random.split(holder["key"])
    x = images[b].reshape(n, per, 28, 28, 1)
    y = labels[b].reshape(n, per)
    *state, holder["loss"] = p_step(*holder["state"], x, y, jnp.stack([key] * n))
    holder["state"] = tuple(state)
    jax.block_until_ready(holder["loss"])  # the host sync each step (see the header)

  idx = cpu_peers.batch_indices(len(labels), args.warmup + args.steps * args.windows)
  rates = windows_of(step, idx, args.warmup, args.steps, args.windows,
                     lambda: jax.block_until_ready(holder["state"]))
  print(json.dumps({"rates": rates, "final_loss": float(holder["loss"][0]), "devices": n}))


# ------------------------------------------------------------------------- driver

def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--framework", required=True, choices=["ddp", "pmap"])
  p.add_argument("--model", required=True, choices=["cnn", "mlp", "bn-convnet"])
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--cpus", default=None, help="CPUs (default: the first W allowed)")
  p.add_argument("--steps", type=int, default=100, help="steps per timed window")
  p.add_argument("--windows", type=int, default=2)
  p.add_argument("--warmup", type=int, default=20)
  p.add_argument("--timeout", type=float, default=900)
  p.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args()
  if BATCH % args.workers:
    sys.exit(f"peers.py: --workers {args.workers} does not divide the batch of {BATCH}")
  if args.cpus is None:
    args.cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:args.workers])
  if args.rank_worker:
    return run_ddp_rank(args) if args.framework == "ddp" else run_pmap(args)

  env = dict(os.environ)
  env.update({"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
              "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
  same = ["--framework", args.framework, "--model", args.model, "--workers", str(args.workers),
          "--cpus", args.cpus, "--steps", str(args.steps), "--windows", str(args.windows),
          "--warmup", str(args.warmup), "--rank-worker"]
  if args.framework == "ddp":
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = ["taskset", "-c", args.cpus, torchrun, "--standalone",
           f"--nproc_per_node={args.workers}", os.path.abspath(__file__)] + same
  else:
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={args.workers}").strip()
    cmd = ["taskset", "-c", args.cpus, sys.executable, os.path.abspath(__file__)] + same
  t0 = time.perf_counter()
  try:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout,
                          check=False)
  except subprocess.TimeoutExpired:
    print(json.dumps({"error": f"timed out after {args.timeout:.0f} s"}))
    return
  wall = time.perf_counter() - t0
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  if proc.returncode != 0 or not lines:
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    print(json.dumps({"error": f"exit {proc.returncode}: " + " | ".join(tail)}))
    return
  r = json.loads(lines[-1])
  rates = r.pop("rates")
  print(json.dumps({"samples_per_sec": float(np.median(rates)),
                    "windows": [round(x, 1) for x in rates], "steps_per_window": args.steps,
                    "warmup_steps": args.warmup, "wall_seconds": round(wall, 1), **r}))


if __name__ == "__main__":
  main()
