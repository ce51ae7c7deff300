"""The peers of the GPU benchmark, on one device: JAX running the seed program's pmap
train step (one device, jit-compiled by pmap), PyTorch eager and torch.compile, on the
models Lockstep trains (tools/reference/models.py), in float32 without TF32 (as Lockstep's
default), with batches already on the device. Also measures the device's float32 GEMM
rate for the benchmark's floor. Prints one JSON object per line.

  python3 bench/gpu/peers.py [--device cuda|cpu] [--quick] [--no-compile]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../tools/reference"))

CONFIGS = [("cnn", 128, 1000), ("cnn", 1024, 300), ("mlp", 4096, 500)]
WARMUP = 30


def emit(**kw):
  print(json.dumps(kw), flush=True)


def bench_torch(device, quick, compile_modes):
  import torch
  import torch_models
  torch.backends.cuda.matmul.allow_tf32 = False
  torch.backends.cudnn.allow_tf32 = False
  torch.manual_seed(0)
  dev = torch.device(device)
  sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
  if device == "cuda":
    n = 8192
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    for _ in range(3):
      a @ b
    sync()
    t = time.perf_counter()
    for _ in range(10):
      a @ b
    sync()
    emit(kind="gemm_rate", framework="torch", flops_per_sec=10 * 2 * n**3 / (time.perf_counter() - t))
    del a, b
  for mode in compile_modes:
    for name, batch, steps in CONFIGS:
      steps = 20 if quick else steps
      model = torch_models.MODELS[name]().to(dev)
      opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if name == "cnn"
             else torch.optim.Adam(model.parameters(), lr=1e-3))
      xs = torch.rand(8, batch, 1, 28, 28, device=dev)
      ys = torch.randint(0, 10, (8, batch), device=dev)
      loss_fn = torch.nn.CrossEntropyLoss()

      def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

      fn = torch.compile(step) if mode == "compile" else step
      t0 = time.perf_counter()
      for i in range(WARMUP):
        fn(xs[i % 8], ys[i % 8])
      sync()
      warm = time.perf_counter() - t0
      t = time.perf_counter()
      for i in range(steps):
        fn(xs[i % 8], ys[i % 8])
      sync()
      dt = time.perf_counter() - t
      emit(kind="throughput", framework=f"pytorch-{mode}", model=name, batch=batch,
           samples_per_sec=steps * batch / dt, us_per_step=1e6 * dt / steps, warmup_s=warm)


def bench_jax(quick):
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax
  from flax.training import train_state
  import models
  jax.config.update("jax_default_matmul_precision", "highest")  # float32, no TF32
  dev = jax.local_devices()[:1]
  for name, batch, steps in CONFIGS:
    steps = 20 if quick else steps
    model = models.CNN() if name == "cnn" else models.MLP(widths=(512, 512))
    tx = models.make_tx("sgd", 0.1, 0.9) if name == "cnn" else models.make_tx("adam", 1e-3)
    _, params = models.init_params(model, 0)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    def train_step(state, x, y):  # the seed program's step
      def lf(p):
        return models.loss_fn(p, state.apply_fn, x, y)
      (loss, _), grads = jax.value_and_grad(lf, has_aux=True)(state.params)
      grads = jax.lax.pmean(grads, axis_name="batch")
      return state.apply_gradients(grads=grads), loss

    p_step = jax.pmap(train_step, axis_name="batch", devices=dev)
    # Replicated onto the one device (a leading axis of 1), batches already there.
    put = lambda v: jax.device_put(np.asarray(v)[None], dev[0])
    rstate = jax.tree_util.tree_map(put, state)
    rng = np.random.default_rng(0)
    xs = [put(rng.random((batch, 28, 28, 1), np.float32)) for _ in range(8)]
    ys = [put(rng.integers(0, 10, batch).astype(np.int32)) for _ in range(8)]
    t0 = time.perf_counter()
    for i in range(WARMUP):
      rstate, loss = p_step(rstate, xs[i % 8], ys[i % 8])
    loss.block_until_ready()
    warm = time.perf_counter() - t0
    t = time.perf_counter()
    for i in range(steps):
      rstate, loss = p_step(rstate, xs[i % 8], ys[i % 8])
    jax.block_until_ready(rstate)
    dt = time.perf_counter() - t
    emit(kind="throughput", framework="jax-pmap", model=name, batch=batch,
         samples_per_sec=steps * batch / dt, us_per_step=1e6 * dt / steps, warmup_s=warm,
         backend=jax.default_backend())


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--device", default="cuda")
  ap.add_argument("--quick", action="store_true", help="a few steps: a smoke test")
  ap.add_argument("--no-compile", action="store_true")
  ap.add_argument("--only", default="jax,torch")
  args = ap.parse_args()
  only = args.only.split(",")
  # Slowest to warm up last, so that a time limit cuts the least.
  if "jax" in only:
    bench_jax(args.quick)
  if "torch" in only:
    bench_torch(args.device, args.quick, ["eager"] if args.no_compile else ["eager", "compile"])


if __name__ == "__main__":
  main()
