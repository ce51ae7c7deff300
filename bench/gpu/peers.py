"""The peers of the GPU benchmark, on one device: JAX running the seed program's pmap
train step (one device, jit-compiled by pmap), PyTorch eager and torch.compile, on the
models Lockstep trains (tools/reference/models.py; the GPT-2-small-shaped decoder of
bench/gpu/gpt2-small.yaml also in bf16), in float32 without TF32 (as Lockstep's default),
with batches already on the device. Also measures the device's float32 GEMM
rate for the benchmark's floor. Prints one JSON object per line: first each framework's
"peer_env" (its backend and device), then its results; a configuration that fails prints
a "peer_error" line and the others still run (exit status 1 at the end).

With --device cuda, each framework must run on the GPU (jax.default_backend() == "gpu",
torch.cuda.is_available()): a silent fallback to the CPU is an error, exit status 3.

  python3 bench/gpu/peers.py [--device cuda|cpu] [--only jax,torch] [--modes eager,compile]
                             [--quick]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../tools/reference"))

CONFIGS = [("cnn", 128, 1000), ("cnn", 1024, 300), ("mlp", 4096, 500), ("gpt2-small", 8, 30)]
WARMUP = 30
QUICK_STEPS, QUICK_WARMUP = 5, 2
# bench/gpu/gpt2-small.yaml: 12 pre-norm decoder blocks of 768 features, 12 heads, MLPs of
# 3072, context 1024, 256 byte tokens; shrunk for a quick rehearsal (the code path, not
# the figures). Run in float32 and in bf16 (PyTorch's autocast; Flax modules computing in
# bfloat16 over float32 params), the other models in float32 only.
GPT2 = dict(context=1024, features=768, heads=12, hidden=3072, layers=12)
GPT2_QUICK = dict(context=128, features=128, heads=4, hidden=512, layers=12)


def emit(**kw):
  print(json.dumps(kw), flush=True)


class WrongDevice(Exception):
  pass


def each_config(framework, quick, run):
  """Runs run(name, batch, steps, warmup, bf16) for every configuration (the decoder's in
  float32, then bf16); True if all ran."""
  ok = True
  for name, batch, steps in CONFIGS:
    for bf16 in (False, True) if name == "gpt2-small" else (False,):
      try:
        run(name, batch, QUICK_STEPS if quick else steps, QUICK_WARMUP if quick else WARMUP,
            bf16=bf16)
      except Exception as e:  # one configuration's failure (say, out of memory) is reported
        ok = False
        emit(kind="peer_error", framework=framework + ("-bf16" if bf16 else ""), model=name,
             batch=batch, error=f"{type(e).__name__}: {e}")
        print(f"{framework} {name} {batch}: {type(e).__name__}: {e}", file=sys.stderr)
  return ok


def bench_torch(device, quick, modes):
  import torch
  import torch_models
  if device == "cuda" and not torch.cuda.is_available():
    raise WrongDevice(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is "
                      f"False; CUDA {torch.version.cuda})")
  emit(kind="peer_env", framework="torch", backend=device, version=torch.__version__,
       device_name=torch.cuda.get_device_name() if device == "cuda" else "cpu",
       ld_library_path=os.environ.get("LD_LIBRARY_PATH", ""))
  torch.backends.cuda.matmul.allow_tf32 = False
  torch.backends.cudnn.allow_tf32 = False
  torch.manual_seed(0)
  dev = torch.device(device)
  sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
  if device == "cuda" and "eager" in modes:
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
  ok = True
  for mode in modes:

    def run(name, batch, steps, warmup, bf16=False):
      if name == "gpt2-small":
        g = GPT2_QUICK if quick else GPT2
        model = torch_models.CharTransformer(dropout=0.0, **g).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        xs = torch.randint(0, 256, (8, batch, g["context"]), device=dev)
        ys = torch.randint(0, 256, (8, batch, g["context"]), device=dev)
      else:
        model = torch_models.MODELS[name]().to(dev)
        opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if name == "cnn"
               else torch.optim.Adam(model.parameters(), lr=1e-3))
        xs = torch.rand(8, batch, 1, 28, 28, device=dev)
        ys = torch.randint(0, 10, (8, batch), device=dev)
      loss_fn = torch.nn.CrossEntropyLoss()

      def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16):
          logits = model(x)
          loss = loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

      fn = torch.compile(step) if mode == "compile" else step
      t0 = time.perf_counter()
      for i in range(warmup):
        fn(xs[i % 8], ys[i % 8])
      sync()
      warm = time.perf_counter() - t0
      t = time.perf_counter()
      for i in range(steps):
        fn(xs[i % 8], ys[i % 8])
      sync()
      dt = time.perf_counter() - t
      emit(kind="throughput", framework=f"pytorch-{mode}" + ("-bf16" if bf16 else ""),
           model=name, batch=batch, samples_per_sec=steps * batch / dt,
           us_per_step=1e6 * dt / steps, warmup_s=warm, backend=device)

    ok = each_config(f"pytorch-{mode}", quick, run) and ok
  return ok


def gpt_flax(context, features, heads, hidden, layers, dtype):
  """The decoder of bench/gpu/gpt2-small.yaml in Flax (as examples/char-transformer.yaml's
  DecoderBlock, without dropout), computing in `dtype` over float32 params."""
  import flax.linen as nn
  import jax.numpy as jnp

  class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
      h = nn.LayerNorm(dtype=dtype)(x)
      x = x + nn.MultiHeadDotProductAttention(num_heads=heads, dtype=dtype)(
          h, mask=nn.make_causal_mask(jnp.ones(x.shape[:2])))
      y = nn.Dense(features, dtype=dtype)(nn.gelu(nn.Dense(hidden, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x))))
      return x + y

  class Gpt(nn.Module):
    @nn.compact
    def __call__(self, tokens):
      x = nn.Embed(256, features, dtype=dtype)(tokens)
      x = x + self.param("pos", nn.initializers.normal(0.02), (context, features))[None].astype(dtype)
      for _ in range(layers):
        x = Block()(x)
      return nn.Dense(256, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x))

  return Gpt()


def bench_jax(device, quick):
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax
  from flax.training import train_state
  import models
  backend = jax.default_backend()
  if backend != {"cuda": "gpu"}.get(device, device):
    raise WrongDevice(f"JAX runs on {backend} ({jax.devices()}), not {device}: "
                      "is jax[cuda] installed, and libcuda on LD_LIBRARY_PATH?")
  emit(kind="peer_env", framework="jax", backend=backend, version=jax.__version__,
       device_name=str(jax.devices()[0]), ld_library_path=os.environ.get("LD_LIBRARY_PATH", ""))
  jax.config.update("jax_default_matmul_precision", "highest")  # float32, no TF32
  dev = jax.local_devices()[:1]

  def run(name, batch, steps, warmup, bf16=False):
    rng = np.random.default_rng(0)
    if name == "gpt2-small":
      g = GPT2_QUICK if quick else GPT2
      model = gpt_flax(**g, dtype=jnp.bfloat16 if bf16 else jnp.float32)
      tx = optax.adamw(3e-4, weight_decay=0.1)
      params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, g["context"]), jnp.int32))["params"]
      x_of = lambda: rng.integers(0, 256, (batch, g["context"])).astype(np.int32)
      y_of = x_of

      def loss_of(p, x, y):
        logits = model.apply({"params": p}, x).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    else:
      model = models.CNN() if name == "cnn" else models.MLP(widths=(512, 512))
      tx = models.make_tx("sgd", 0.1, 0.9) if name == "cnn" else models.make_tx("adam", 1e-3)
      _, params = models.init_params(model, 0)
      x_of = lambda: rng.random((batch, 28, 28, 1), np.float32)
      y_of = lambda: rng.integers(0, 10, batch).astype(np.int32)

      def loss_of(p, x, y):
        return models.loss_fn(p, model.apply, x, y)[0]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    def train_step(state, x, y):  # the seed program's step
      loss, grads = jax.value_and_grad(loss_of)(state.params, x, y)
      grads = jax.lax.pmean(grads, axis_name="batch")
      return state.apply_gradients(grads=grads), loss

    p_step = jax.pmap(train_step, axis_name="batch", devices=dev)
    # Replicated onto the one device (a leading axis of 1), batches already there.
    put = lambda v: jax.device_put(np.asarray(v)[None], dev[0])
    rstate = jax.tree_util.tree_map(put, state)
    xs = [put(x_of()) for _ in range(8)]
    ys = [put(y_of()) for _ in range(8)]
    t0 = time.perf_counter()
    for i in range(warmup):
      rstate, loss = p_step(rstate, xs[i % 8], ys[i % 8])
    loss.block_until_ready()
    warm = time.perf_counter() - t0
    t = time.perf_counter()
    for i in range(steps):
      rstate, loss = p_step(rstate, xs[i % 8], ys[i % 8])
    jax.block_until_ready(rstate)
    dt = time.perf_counter() - t
    emit(kind="throughput", framework="jax-pmap" + ("-bf16" if bf16 else ""), model=name,
         batch=batch, samples_per_sec=steps * batch / dt, us_per_step=1e6 * dt / steps,
         warmup_s=warm, backend=backend)

  return each_config("jax-pmap", quick, run)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
  ap.add_argument("--quick", action="store_true", help="a few steps: a smoke test")
  ap.add_argument("--only", default="jax,torch")
  ap.add_argument("--modes", default="eager,compile", help="PyTorch's: eager, compile or both")
  args = ap.parse_args()
  only = args.only.split(",")
  ok = True
  wrong_device = False
  # Slowest to warm up last, so that a time limit cuts the least.
  for framework, bench in (("jax", lambda: bench_jax(args.device, args.quick)),
                           ("torch", lambda: bench_torch(args.device, args.quick,
                                                         args.modes.split(",")))):
    if framework not in only:
      continue
    try:
      ok = bench() and ok
    except WrongDevice as e:
      wrong_device = True
      emit(kind="peer_error", framework=framework, error=f"wrong device: {e}")
      print(f"{framework}: wrong device: {e}", file=sys.stderr)
    except Exception as e:  # an import or setup failure: the other framework still runs
      ok = False
      emit(kind="peer_error", framework=framework, error=f"{type(e).__name__}: {e}")
      print(f"{framework}: {type(e).__name__}: {e}", file=sys.stderr)
  sys.exit(3 if wrong_device else 0 if ok else 1)


if __name__ == "__main__":
  main()
