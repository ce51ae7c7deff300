"""Lockstep's image preprocessing in numpy, jax.random and Pillow: the twin of
core/data/image_transform.cc that tests/golden/augment.safetensors is drawn from, and
what a JAX or PyTorch program runs to feed a model the very floats a Lockstep worker
computes (docs/datasets.md, "Preprocessing, exactly").

  x = preprocess(image_bytes, steps, example_key, channels, mean, std)

`steps` is the spec's dataset.preprocess (or test_preprocess) as a list of dicts,
`example_key` the example's raw threefry key (uint32[2]: fold_in(epoch_key, index)).
Decoding is Pillow's (libjpeg-turbo, libpng) with Image.convert; the bilinear resize is
written out in numpy and checked on every call (check_pil=True) against Pillow's own
resampling, pass by pass: it is Image.resize(BILINEAR) of Pillow up to 12, i.e.
torchvision's Resize on PIL images.
"""
import io
import math

import jax
import numpy as np
from PIL import Image

PRECISION_BITS = 32 - 8 - 2  # Pillow's Resample.c
RESIZED_CROP_TRIES = 10


def decode(data, channels):
  """JPEG or PNG bytes -> uint8 [H, W, channels], refusing what Lockstep refuses."""
  if data[:3] == b"\xff\xd8\xff":
    kind = "JPEG"
  elif data[:8] == b"\x89PNG\r\n\x1a\n":
    kind = "PNG"
    if data[24] == 16:
      raise ValueError("a 16-bit PNG: only 8-bit PNGs are read")
  else:
    raise ValueError("not a JPEG or PNG image")
  img = Image.open(io.BytesIO(data))
  if kind == "JPEG" and img.mode == "CMYK":
    raise ValueError("a CMYK JPEG")
  gray = img.mode in ("1", "L", "LA")
  if channels == 1 and not gray:
    raise ValueError(f"a color {kind} image for a 1-channel model")
  a = np.asarray(img.convert("L" if channels == 1 else "RGB"), np.uint8)
  return a[..., None] if channels == 1 else a


def _triangle(x):
  x = -x if x < 0.0 else x
  return 1.0 - x if x < 1.0 else 0.0


def taps(in_size, out_size):
  """Pillow's precompute_coeffs + normalize_coeffs_8bpc for BILINEAR, op for op: per
  output, (first input, count, integer weights)."""
  scale = float(np.float32(in_size)) / out_size
  filterscale = scale if scale > 1.0 else 1.0
  support = 1.0 * filterscale
  ss = 1.0 / filterscale
  out = []
  for xx in range(out_size):
    center = 0.0 + (xx + 0.5) * scale
    xmin = max(int(center - support + 0.5), 0)
    xmax = min(int(center + support + 0.5), in_size) - xmin
    raw = [_triangle((x + xmin - center + 0.5) * ss) for x in range(xmax)]
    ww = 0.0
    for w in raw:
      ww += w
    weights = [int(0.5 + ((w / ww) if ww != 0.0 else w) * (1 << PRECISION_BITS)) for w in raw]
    out.append((xmin, xmax, np.asarray(weights, np.int64)))
  return out


def _pass(img, axis, out_size):
  """One resampling pass of uint8 [H, W, C] along axis 0 (vertical) or 1 (horizontal)."""
  src = np.moveaxis(img, axis, 0).astype(np.int64)
  out = np.empty((out_size,) + src.shape[1:], np.uint8)
  for i, (first, count, w) in enumerate(taps(src.shape[0], out_size)):
    s = (1 << (PRECISION_BITS - 1)) + np.tensordot(w, src[first:first + count], axes=(0, 0))
    out[i] = np.clip(s >> PRECISION_BITS, 0, 255)
  return np.moveaxis(out, 0, axis)


def resize(img, out_h, out_w, check_pil=True):
  """PIL's Image.resize((out_w, out_h), BILINEAR) of uint8 [H, W, C]: a horizontal pass
  then a vertical one, each rounding to uint8."""
  out = img
  if out_w != img.shape[1]:
    out = _pass(out, 1, out_w)
  if out_h != img.shape[0]:
    out = _pass(out, 0, out_h)
  if check_pil:
    # Pillow's passes one at a time: Image.resize does them in this order through Pillow
    # 12 (Pillow 13 runs the vertical one first for some sizes, which moves a few pixels
    # by one level).
    pil = Image.fromarray(img[..., 0] if img.shape[2] == 1 else img)
    want = np.asarray(pil.resize((out_w, img.shape[0]), Image.BILINEAR).resize(
        (out_w, out_h), Image.BILINEAR), np.uint8)
    assert np.array_equal(want.reshape(out.shape), out), "numpy resize != PIL's"
  return out


def _randint(key, maxval):
  return int(jax.random.randint(key, (), 0, maxval))


def random_resized_crop_box(op_key, h, w, scale, ratio):
  """torchvision's RandomResizedCrop.get_params with the draws from op_key."""
  u = np.asarray(jax.random.uniform(jax.random.fold_in(op_key, 0), (RESIZED_CROP_TRIES, 2)),
                 np.float32)
  area = float(h * w)
  log_min, log_max = math.log(ratio[0]), math.log(ratio[1])
  for t in range(RESIZED_CROP_TRIES):
    target_area = area * (scale[0] + (scale[1] - scale[0]) * float(u[t, 0]))
    aspect = math.exp(log_min + (log_max - log_min) * float(u[t, 1]))
    cw = int(round(math.sqrt(target_area * aspect)))
    ch = int(round(math.sqrt(target_area / aspect)))
    if 0 < cw <= w and 0 < ch <= h:
      top = _randint(jax.random.fold_in(op_key, 1), h - ch + 1)
      left = _randint(jax.random.fold_in(op_key, 2), w - cw + 1)
      return top, left, ch, cw
  in_ratio = float(w) / float(h)
  if in_ratio < ratio[0]:
    cw, ch = w, int(round(w / ratio[0]))
  elif in_ratio > ratio[1]:
    ch, cw = h, int(round(h * ratio[1]))
  else:
    cw, ch = w, h
  return (h - ch) // 2, (w - cw) // 2, ch, cw


def _size(op):
  return (op["size"], op["size"]) if op.get("size") else (op["height"], op["width"])


def apply_steps(img, steps, example_key, check_pil=True):
  """The spec's steps on uint8 [H, W, C]; step i draws from fold_in(example_key, i), in
  JAX's partitionable threefry mode (its default), whatever the job's rng_impl."""
  assert jax.config.jax_threefry_partitionable, "the draws are partitionable threefry's"
  for i, step in enumerate(steps):
    (name, op), = step.items()
    op_key = jax.random.fold_in(example_key, i)
    h, w = img.shape[:2]
    if name == "resize":
      s = op["shorter_side"]
      nh, nw = (s, s * w // h) if h <= w else (s * h // w, s)
      if (nh, nw) != (h, w):
        img = resize(img, nh, nw, check_pil)
    elif name == "center_crop":
      ch, cw = _size(op)
      if h < ch or w < cw:
        raise ValueError(f"a {h}x{w} image: center_crop needs at least {ch}x{cw}")
      top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
      img = img[top:top + ch, left:left + cw]
    elif name == "random_crop":
      ch, cw = _size(op)
      p = op.get("padding", 0)
      padded = np.pad(img, ((p, p), (p, p), (0, 0)))
      top = _randint(jax.random.fold_in(op_key, 0), h + 2 * p - ch + 1)
      left = _randint(jax.random.fold_in(op_key, 1), w + 2 * p - cw + 1)
      img = padded[top:top + ch, left:left + cw]
    elif name == "random_resized_crop":
      ch, cw = _size(op)
      top, left, bh, bw = random_resized_crop_box(
          op_key, h, w, op.get("scale") or (0.08, 1.0), op.get("ratio") or (3.0 / 4.0, 4.0 / 3.0))
      img = resize(np.ascontiguousarray(img[top:top + bh, left:left + bw]), ch, cw, check_pil)
    elif name == "horizontal_flip":
      if bool(jax.random.bernoulli(op_key, op.get("probability", 0.5))):
        img = img[:, ::-1]
    else:
      raise ValueError(f"unknown step {name}")
  return np.ascontiguousarray(img)


def to_float(img, mean=None, std=None):
  """float32(pixel) / 255, then (x - mean[c]) / std[c], every operand float32."""
  x = img.astype(np.float32) / np.float32(255)
  if mean:
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
  return x


def preprocess(data, steps, example_key, channels, mean=None, std=None, check_pil=True):
  """Encoded bytes (or uint8 [H, W, C] pixels of a record file) -> float32 [h, w, c]."""
  img = data if isinstance(data, np.ndarray) else decode(data, channels)
  return to_float(apply_steps(img, steps, example_key, check_pil), mean, std)
