#!/usr/bin/env python3
"""Makes an NPZ dataset from Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist, at
/usr/share/datasets/fashion-mnist): train.npz written with np.savez, test.npz with
np.savez_compressed, each holding

    image  uint8 [N, 28, 28, 1]   (Lockstep scales it by 1/255)
    label  int64 [N]              (the class, 0 to 9)

and prints the training images' per-channel mean and std after that scaling, the values
for the spec's dataset.normalize. Needs only numpy (tools/.venv has it):

    tools/.venv/bin/python examples/npz/make_fashion_mnist_npz.py          # -> examples/npz/data
    build/clients/lockstep train examples/npz/fashion_mnist_npz.yaml

Your own data goes the same way: np.savez(path, image=images, label=labels) with images
[N, H, W, C] uint8 or float32 and integer labels (docs/datasets.md).
"""
import argparse
import gzip
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def read_idx(path):
    """An IDX file (plain or .gz) as a numpy array: big-endian header, uint8 data."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[:4], "big")
    if magic >> 8 != 0x08:
        raise ValueError(f"{path}: not an IDX file of uint8 (magic {magic:#010x})")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(folder, base):
    for name in (base + ".gz", base):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(f"{folder}/{base}[.gz]: no such file")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idx", default="/usr/share/datasets/fashion-mnist",
                   help="the folder of IDX files (default: %(default)s)")
    p.add_argument("--out", default=os.path.join(HERE, "data"),
                   help="where train.npz and test.npz go (default: examples/npz/data)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for split, prefix, save in (("train", "train", np.savez), ("test", "t10k", np.savez_compressed)):
        images = read_idx(find(args.idx, f"{prefix}-images-idx3-ubyte"))[..., None]  # add C
        labels = read_idx(find(args.idx, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        path = os.path.join(args.out, f"{split}.npz")
        save(path, image=images, label=labels)
        print(f"{path}: image {images.dtype} {list(images.shape)}, "
              f"label {labels.dtype} {list(labels.shape)}")
        if split == "train":
            # As Lockstep scales uint8 images: float32(x) / float32(255).
            x = images.astype(np.float32) / np.float32(255)
            mean = x.mean(axis=(0, 1, 2), dtype=np.float64)
            std = x.std(axis=(0, 1, 2), dtype=np.float64)
            print("dataset.normalize: {mean: [%s], std: [%s]}" % (
                ", ".join(f"{m:.4f}" for m in mean), ", ".join(f"{s:.4f}" for s in std)))


if __name__ == "__main__":
    main()
