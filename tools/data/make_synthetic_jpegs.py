#!/usr/bin/env python3
"""A deterministic JPEG dataset as large as asked: Fashion-MNIST's images upscaled to
H x W RGB, each with its own jitter (shift, scale), colors, lighting gradient and
texture noise, labels kept. Hundreds of thousands of them make a dataset larger than a
worker's memory as float32 (300,000 at 96x96x3 are 33 GB) in about 1 GB of JPEGs.

  --format tfrecord      OUT/synthetic_fashion/1.0.0/synthetic_fashion-{train,test}.tfrecord-*
                         with TFDS's metadata files (tfds.builder_from_directory reads it)
  --format imagefolder   OUT/imagefolder/{train,test}/CLASS/NNNNNNN.jpg

Example i of a split is a function of (--seed, split, i) alone: any --workers count
writes the same bytes. Shards are written in parallel, one process each at a time.

  tools/.venv/bin/python tools/data/make_synthetic_jpegs.py --out /data/synth --count 300000
  # ImageNet-sized photos for bench/data: --height 375 --width 500 --noise 24
  # CIFAR-sized PNGs: --height 32 --width 32 --encoding png
"""
import argparse
import multiprocessing
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import datasets_io  # noqa: E402

NAME = "synthetic_fashion"
_SOURCE = {}


def _init(idx_root):
  for split in ("train", "test"):
    _SOURCE[split] = datasets_io.fashion_mnist(split, idx_root)


def synthesize(split, i, args):
  """Example i of `split`: (uint8 [H, W, 3], label)."""
  images, labels = _SOURCE[split]
  src = i % len(images)
  rng = np.random.default_rng([args.seed, 0 if split == "train" else 1, i])
  # Jitter: a random scale and shift of the 28x28 image, resampled to H x W.
  scale = rng.uniform(0.8, 1.15)
  dx, dy = rng.uniform(-3, 3, 2)
  c = 14.0
  small = Image.fromarray(images[src]).transform(
      (28, 28), Image.AFFINE, (1 / scale, 0, c - (c + dx) / scale, 0, 1 / scale,
                               c - (c + dy) / scale), resample=Image.BILINEAR)
  mask = np.asarray(small.resize((args.width, args.height), Image.BICUBIC), np.float32) / 255
  # Colors: a background and a foreground, a lighting gradient, texture noise.
  bg, fg = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
  y, x = np.mgrid[0:args.height, 0:args.width].astype(np.float32)
  angle = rng.uniform(0, 2 * np.pi)
  light = 1 + 0.25 * ((np.cos(angle) * x / args.width + np.sin(angle) * y / args.height) - 0.5)
  img = (bg + (fg - bg) * mask[..., None]) * light[..., None]
  img += rng.normal(0, args.noise, img.shape)
  return np.clip(img, 0, 255).astype(np.uint8), int(labels[src])


def write_shard(task):
  split, shard, first, last, args = task
  classes = datasets_io.class_folder_names(datasets_io.FASHION_CLASSES)
  records = []
  for i in range(first, last):
    img, label = synthesize(split, i, args)
    if args.encoding == "png":
      data, ext = datasets_io.encode(img, "PNG"), "png"
    else:
      data, ext = datasets_io.encode(img, "JPEG", quality=args.quality), "jpg"
    if args.format in ("tfrecord", "both"):
      records.append(datasets_io.example_bytes(data, label))
    if args.format in ("imagefolder", "both"):
      path = os.path.join(args.out, "imagefolder", split, classes[label], f"{i:07d}.{ext}")
      with open(path, "wb") as f:
        f.write(data)
  size = 0
  if records:
    shards = args.shards if split == "train" else args.test_shards
    path = os.path.join(args.out, NAME, "1.0.0", datasets_io.shard_name(NAME, split, shard, shards))
    datasets_io.write_tfrecord(path, records)
    size = os.path.getsize(path)
  return split, shard, last - first, size


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", required=True)
  ap.add_argument("--count", type=int, default=300_000, help="training examples")
  ap.add_argument("--test_count", type=int, default=10_000)
  ap.add_argument("--height", type=int, default=96)
  ap.add_argument("--width", type=int, default=96)
  ap.add_argument("--noise", type=float, default=8.0, help="texture noise (std of a level)")
  ap.add_argument("--quality", type=int, default=90)
  ap.add_argument("--encoding", choices=("jpeg", "png"), default="jpeg",
                  help="png: lossless, for a CIFAR-like set of small images")
  ap.add_argument("--format", choices=("tfrecord", "imagefolder", "both"), default="tfrecord")
  ap.add_argument("--shards", type=int, default=0, help="training shards (0: one per 1000)")
  ap.add_argument("--test_shards", type=int, default=0)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--workers", type=int, default=os.cpu_count())
  ap.add_argument("--idx", default=datasets_io.FASHION_MNIST)
  args = ap.parse_args()
  args.shards = args.shards or max(1, args.count // 1000)
  args.test_shards = args.test_shards or max(1, args.test_count // 1000)
  os.makedirs(os.path.join(args.out, NAME, "1.0.0"), exist_ok=True)
  for split in ("train", "test"):
    for c in datasets_io.class_folder_names(datasets_io.FASHION_CLASSES):
      if args.format in ("imagefolder", "both"):
        os.makedirs(os.path.join(args.out, "imagefolder", split, c), exist_ok=True)
  tasks = []
  for split, count, shards in (("train", args.count, args.shards),
                               ("test", args.test_count, args.test_shards)):
    bounds = np.linspace(0, count, shards + 1).astype(int)
    tasks += [(split, s, int(bounds[s]), int(bounds[s + 1]), args) for s in range(shards)]
  lengths = {"train": [0] * args.shards, "test": [0] * args.test_shards}
  sizes = {"train": 0, "test": 0}
  # spawn: TensorFlow, imported by the TFRecord writer, does not survive a fork.
  ctx = multiprocessing.get_context("spawn")
  with ctx.Pool(args.workers, initializer=_init, initargs=(args.idx,)) as pool:
    for done, (split, shard, n, size) in enumerate(pool.imap_unordered(write_shard, tasks), 1):
      lengths[split][shard] = n
      sizes[split] += size
      if done % max(1, len(tasks) // 20) == 0 or done == len(tasks):
        print(f"{done}/{len(tasks)} shards", flush=True)
  if args.format in ("tfrecord", "both"):
    datasets_io.write_tfds_metadata(
        os.path.join(args.out, NAME, "1.0.0"), NAME, "1.0.0",
        f"Fashion-MNIST upscaled to {args.height}x{args.width} RGB, jittered and recolored "
        f"(Lockstep's tools/data/make_synthetic_jpegs.py, seed {args.seed}).",
        (args.height, args.width, 3), args.encoding, datasets_io.FASHION_CLASSES, lengths, sizes)
  print(f"wrote {args.count} training and {args.test_count} test images of "
        f"{args.height}x{args.width} under {args.out} ({sizes['train'] + sizes['test']} bytes "
        "of TFRecords)")


if __name__ == "__main__":
  main()
