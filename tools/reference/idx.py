"""Reads the gzipped IDX files Fashion-MNIST ships in (the golden-file generator and the
CPU benchmark peers)."""
import gzip

import numpy as np


def read_idx(path):
  with gzip.open(path, "rb") as f:
    raw = f.read()
  ndim = raw[3]
  dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
  return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)
