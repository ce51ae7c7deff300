#!/usr/bin/env python3
"""Samples text from a Lockstep checkpoint of a byte-level model such as
examples/char-transformer.yaml, in Flax.

    build/clients/lockstep train examples/char-transformer.yaml -o /tmp/char.safetensors
    tools/.venv/bin/python examples/sample_text.py /tmp/char.safetensors \\
        --prompt "The " --bytes 300 --temperature 0.8

Loads the checkpoint as a Flax user would (safetensors.numpy.load_file, then
flax.traverse_util.unflatten_dict on its dotted names: params.DecoderBlock_0.
MultiHeadDotProductAttention_0.query.kernel -> a nested params tree), rebuilds the Flax
module from the spec stored in the checkpoint's metadata (tools/reference/
check_checkpoint.py's model_from_spec: golden_layers.Sequential with the spec's blocks,
so the module names are the checkpoint's), and samples one byte at a time: the logits of
the next byte divided by --temperature (0: always the likeliest byte), softmax, a draw.

The model reads windows of exactly T = model.input_shape[0] bytes (its position
embedding has T rows). The text so far, its last T bytes when longer, sits at the start
of the window and the rest is padding; the causal mask keeps the padding from reaching
the position read, so the next byte's distribution is the model's own for that text.
Evaluation mode: dropout off. Prints the prompt and the sampled bytes (invalid UTF-8
shown as U+FFFD).
"""
import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from safetensors import safe_open
from safetensors.numpy import load_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
import check_checkpoint  # noqa: E402 (the spec -> Flax module of a checkpoint)


def load(path):
  """(model, variables, T) of the checkpoint at `path`."""
  with safe_open(path, framework="numpy") as f:
    spec = json.loads(f.metadata()["spec"])
  tree = traverse_util.unflatten_dict(load_file(path), sep=".")
  variables = {k: tree[k] for k in ("params", "batch_stats") if k in tree}
  model = check_checkpoint.model_from_spec(spec)
  shape = check_checkpoint.snake_keys(spec["model"]).get("input_shape", [])
  if len(shape) != 1:
    raise SystemExit(f"{path}: model.input_shape {shape} is not a window of tokens [T]")
  return model, variables, int(shape[0])


def sample(model, variables, context, prompt, n, temperature, seed):
  """`n` bytes drawn one at a time after `prompt` (bytes)."""
  @jax.jit
  def next_logits(window, position):
    logits = model.apply(variables, window[None], train=False)  # (1, T, vocabulary)
    return logits[0, position]

  text = list(prompt) or [ord("\n")]  # an empty prompt starts at a line break
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    recent = text[-context:]
    window = np.zeros(context, np.int32)
    window[:len(recent)] = recent
    logits = np.asarray(next_logits(jnp.asarray(window), len(recent) - 1), np.float64)
    if temperature <= 0:
      byte = int(np.argmax(logits))
    else:
      p = np.exp((logits - logits.max()) / temperature)
      byte = int(rng.choice(len(p), p=p / p.sum()))
    text.append(byte)
    out.append(byte)
  return bytes(out)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("checkpoint", help="a safetensors checkpoint written by lockstep")
  ap.add_argument("--prompt", default="", help="text to continue (default: a line break)")
  ap.add_argument("--bytes", type=int, default=300, help="bytes to sample")
  ap.add_argument("--temperature", type=float, default=0.8)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  model, variables, context = load(args.checkpoint)
  prompt = args.prompt.encode()
  text = sample(model, variables, context, prompt, args.bytes, args.temperature, args.seed)
  sys.stdout.write((prompt + text).decode("utf-8", errors="replace") + "\n")


if __name__ == "__main__":
  main()
