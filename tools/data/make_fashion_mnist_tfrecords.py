#!/usr/bin/env python3
"""Fashion-MNIST as TFDS writes it: OUT/fashion_mnist/3.0.1/ holding
fashion_mnist-{train,test}.tfrecord-NNNNN-of-NNNNN shards of tf.train.Example (image: a
28x28x1 PNG, or with --encoding jpeg a JPEG, label: int64), dataset_info.json, features.json and label.labels.txt, so that
tfds.builder_from_directory and tf.data read it, and Lockstep with

  dataset: {format: tfrecord, path: OUT/fashion_mnist/3.0.1, name: fashion_mnist}

Records are in the IDX files' order. PNG is lossless: the pixels are the IDX files'; JPEG
(quality --quality) is not, and is what bench/data/end_to_end trains from.

  tools/.venv/bin/python tools/data/make_fashion_mnist_tfrecords.py --out /data/tfds
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import datasets_io  # noqa: E402


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", required=True, help="the TFDS data folder (DATA_DIR)")
  ap.add_argument("--idx", default=datasets_io.FASHION_MNIST, help="the IDX files' folder")
  ap.add_argument("--train_shards", type=int, default=4)
  ap.add_argument("--test_shards", type=int, default=1)
  ap.add_argument("--encoding", choices=("png", "jpeg"), default="png")
  ap.add_argument("--quality", type=int, default=95, help="JPEG quality")
  ap.add_argument("--limit", type=int, default=0, help="first N examples of each split (0: all)")
  args = ap.parse_args()
  if args.encoding == "png":
    encode = lambda img: datasets_io.encode(img, "PNG")
  else:
    encode = lambda img: datasets_io.encode(img, "JPEG", quality=args.quality)
  folder = os.path.join(args.out, "fashion_mnist", "3.0.1")
  os.makedirs(folder, exist_ok=True)
  lengths, sizes = {}, {}
  for split, shards in (("train", args.train_shards), ("test", args.test_shards)):
    images, labels = datasets_io.fashion_mnist(split, args.idx)
    if args.limit:
      images, labels = images[:args.limit], labels[:args.limit]
    bounds = np.linspace(0, len(images), shards + 1).astype(int)
    lengths[split], sizes[split] = [], 0
    for s in range(shards):
      records = [datasets_io.example_bytes(encode(images[i]), labels[i])
                 for i in range(bounds[s], bounds[s + 1])]
      path = os.path.join(folder, datasets_io.shard_name("fashion_mnist", split, s, shards))
      datasets_io.write_tfrecord(path, records)
      lengths[split].append(len(records))
      sizes[split] += os.path.getsize(path)
    print(f"{split}: {len(images)} examples in {shards} shards, {sizes[split]} bytes")
  datasets_io.write_tfds_metadata(
      folder, "fashion_mnist", "3.0.1",
      "Fashion-MNIST (Zalando), written by Lockstep's tools/data from the IDX files.",
      (28, 28, 1), args.encoding, datasets_io.FASHION_CLASSES, lengths, sizes)
  print(f"wrote {folder}")


if __name__ == "__main__":
  main()
