"""Loads a Lockstep checkpoint the way a Flax user would and runs the model on it.

  check_checkpoint.py FILE [--data DIR] [--accuracy A --loss L]

Checks the file's digests (digests.py: every tensor and the header), reads FILE with
`safetensors`, rebuilds the tree with flax.traverse_util.unflatten_dict,
checks that its params (and batch_stats, for BatchNorm models) have exactly the structure
and shapes Flax's own init gives the model named in the checkpoint's spec (a preset or
model.layers), evaluates the model on the test split, and (when
given) compares test accuracy and loss with what Lockstep reported. Exits 1 on a mismatch.
"""
import argparse
import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from safetensors import safe_open
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digests  # noqa: E402
import models  # noqa: E402
from idx import read_idx  # noqa: E402


def snake_keys(value, parent=None):
  """The spec as its .proto names it: protobuf's JSON (the checkpoint's metadata) writes
  lowerCamelCase field names ("kernelSize"); a block's class names (model.blocks' keys)
  and its args' names are the user's own and stay as written."""
  if isinstance(value, dict):
    return {(k if parent in ("blocks", "args") else re.sub(r"([A-Z])", r"_\1", k).lower()):
            snake_keys(v, k) for k, v in value.items()}
  if isinstance(value, list):
    return [snake_keys(v, parent) for v in value]
  return value


def model_from_spec(spec):
  m = snake_keys(spec["model"])
  if m.get("layers"):
    import golden_layers  # noqa: E402 (the generic Sequential of a spec's layers)
    return golden_layers.Sequential(json.dumps(m))
  if m["kind"] == "cnn":
    return models.CNN()
  rate = m.get("dropout_rate", 0.0)
  return models.MLP(widths=[int(w) for w in m.get("hidden", [])], dropout_rate=rate)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("file")
  ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
  ap.add_argument("--accuracy", type=float)
  ap.add_argument("--loss", type=float)
  args = ap.parse_args()

  try:
    if not digests.check(args.file):
      print(f"{args.file}: no digests (written by another tool or an older Lockstep)")
  except ValueError as e:
    print(e)
    return 1
  with safe_open(args.file, framework="numpy") as f:
    metadata = f.metadata()
  tree = traverse_util.unflatten_dict(load_file(args.file), sep=".")
  params = tree["params"]
  variables = {"params": params}
  if "batch_stats" in tree:  # BatchNorm's running averages, which evaluation uses
    variables["batch_stats"] = tree["batch_stats"]
  spec = json.loads(metadata["spec"])
  model = model_from_spec(spec)

  images = read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte.gz"))
  labels = read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz")).astype(np.int32)
  x = (images.astype(np.float32) / 255.0)[..., None]

  init = model.init(jax.random.PRNGKey(0), jnp.zeros((1,) + x.shape[1:]))
  for collection in ("params", "batch_stats"):
    want = jax.tree_util.tree_map(lambda a: a.shape, dict(init.get(collection, {})))
    got = jax.tree_util.tree_map(lambda a: a.shape, dict(variables.get(collection, {})))
    if want != got:
      print(f"{collection} tree differs from Flax's init:\n  want {want}\n  got  {got}")
      return 1

  logits = np.concatenate([
      np.asarray(model.apply(variables, x[i:i + 1000]))
      for i in range(0, len(x), 1000)])
  logp = jax.nn.log_softmax(logits)
  loss = float(-np.mean(np.take_along_axis(np.asarray(logp), labels[:, None], 1)))
  accuracy = float(np.mean(np.argmax(logits, -1) == labels))
  print(f"{args.file}: step {metadata.get('step')}, {len(traverse_util.flatten_dict(params))} "
        f"param tensors; Flax on the test split: accuracy {accuracy:.4f}, loss {loss:.6f}")
  ok = True
  if args.accuracy is not None and abs(accuracy - args.accuracy) > 3e-4:
    print(f"accuracy differs from Lockstep's {args.accuracy:.4f}")
    ok = False
  if args.loss is not None and abs(loss - args.loss) > 1e-4 * max(1.0, abs(args.loss)):
    print(f"loss differs from Lockstep's {args.loss:.6f}")
    ok = False
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
