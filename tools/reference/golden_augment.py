"""tests/golden/augment.safetensors: images decoded and preprocessed by
tools/reference/augment.py (Pillow, numpy, jax.random), for core/data's
augment_golden_test to match pixel for pixel (bit for bit in float32).

Images of odd sizes, JPEG (4:2:0, 4:2:2, 4:4:4, progressive, gray) and PNG (gray,
1-bit, gray + alpha, RGB, RGBA, palette) and raw pixels, through every step with
several keys, in 1 and 3 channels. Per case i: case{i}.image (U8: the encoded bytes, or
the raw pixels), case{i}.out (F32 [h, w, c]); the metadata's "cases" lists each case's
spec (the DatasetSpec's JSON), split, model input shape, key and raw shape.
"""
import io
import json

import jax
import numpy as np
from PIL import Image
from safetensors.numpy import save_file

import augment


def _pattern(h, w, c, seed):
  """A smooth image with edges and noise, something like a photo to a codec."""
  rng = np.random.default_rng(seed)
  y, x = np.mgrid[0:h, 0:w].astype(np.float64)
  base = [128 + 90 * np.sin(x / (3 + k) + y / (5 + 2 * k) + seed) for k in range(c)]
  img = np.stack(base, -1) + rng.normal(0, 12, (h, w, c))
  img[h // 3:h // 2, w // 4:w // 2] = rng.integers(0, 256, c)  # a flat block with edges
  return np.clip(img, 0, 255).astype(np.uint8)


def _encode(img, fmt, **kw):
  b = io.BytesIO()
  img.save(b, fmt, **kw)
  return b.getvalue()


def images():
  rgb = lambda h, w, s: Image.fromarray(_pattern(h, w, 3, s), "RGB")
  gray = lambda h, w, s: Image.fromarray(_pattern(h, w, 1, s)[..., 0], "L")
  out = {
      "jpeg420": _encode(rgb(37, 53, 1), "JPEG", quality=90),
      "jpeg422": _encode(rgb(33, 45, 2), "JPEG", quality=85, subsampling=1),
      "jpeg444_progressive": _encode(rgb(40, 40, 3), "JPEG", quality=95, subsampling=0,
                                     progressive=True),
      "jpeg_gray": _encode(gray(61, 29, 4), "JPEG", quality=80),
      "jpeg_large": _encode(rgb(90, 120, 5), "JPEG", quality=75),
      "png_rgb": _encode(rgb(29, 31, 6), "PNG"),
      "png_gray": _encode(gray(30, 26, 7), "PNG"),
      "png_rgba": _encode(Image.fromarray(_pattern(27, 35, 4, 8), "RGBA"), "PNG"),
      "png_palette": _encode(rgb(25, 33, 9).convert("P", palette=Image.ADAPTIVE, colors=16),
                             "PNG"),
      "png_1bit": _encode(gray(32, 32, 10).convert("1"), "PNG"),
      "png_gray_alpha": _encode(Image.fromarray(_pattern(28, 28, 2, 11), "LA"), "PNG"),
  }
  return out


RAW = _pattern(31, 41, 3, 12)  # a record file's image (kind raw)
NORM3 = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
NORM1 = {"mean": [0.2860], "std": [0.3530]}


def recipes():
  """(name, train steps, output size (h, w) or None for the image's own)."""
  return [
      ("decode", [], None),
      ("resize_center", [{"resize": {"shorter_side": 24}}, {"center_crop": {"size": 24}}], (24, 24)),
      ("upscale_center", [{"resize": {"shorter_side": 50}},
                          {"center_crop": {"height": 40, "width": 44}}], (40, 44)),
      ("center_odd", [{"center_crop": {"height": 17, "width": 22}}], (17, 22)),
      ("crop_pad_flip", [{"random_crop": {"size": 24, "padding": 4}}, {"horizontal_flip": {}}],
       (24, 24)),
      ("flip_then_crop", [{"horizontal_flip": {}}, {"random_crop": {"height": 20, "width": 16}}],
       (20, 16)),
      ("resized_crop_flip", [{"random_resized_crop": {"size": 24}}, {"horizontal_flip": {}}],
       (24, 24)),
      ("resized_crop_narrow", [{"random_resized_crop": {"height": 20, "width": 28,
                                                        "scale": [0.9, 1.0],
                                                        "ratio": [2.0, 3.0]}}], (20, 28)),
      ("resize_then_resized_crop", [{"resize": {"shorter_side": 30}},
                                    {"random_resized_crop": {"size": 16, "scale": [0.25, 0.5]}},
                                    {"horizontal_flip": {"probability": 0.7}}], (16, 16)),
  ]


def write_goldens(out_dir):
  epoch_key = jax.random.fold_in(jax.random.PRNGKey(7), 3)
  tensors, cases = {}, []
  sources = [(name, data, None) for name, data in images().items()] + [("raw", RAW, RAW.shape)]
  i = 0
  for name, data, raw_shape in sources:
    for recipe, steps, size in recipes():
      random = any(k in s for s in steps for k in ("random_crop", "random_resized_crop",
                                                   "horizontal_flip"))
      gray_source = name in ("jpeg_gray", "png_gray", "png_1bit", "png_gray_alpha")
      channel_counts = (1, 3) if gray_source else (3,)
      if recipe != "decode" and name not in ("jpeg420", "jpeg_gray", "jpeg_large", "png_rgba",
                                             "png_palette", "raw"):
        continue  # every source decodes; the steps run on a few
      for channels in channel_counts:
        for index in ((5, 1234) if random else (channels // 3,)):
          key = np.asarray(jax.random.fold_in(epoch_key, index), np.uint32)
          norm = (NORM1 if channels == 1 else NORM3) if index % 2 else {}
          if raw_shape is not None:
            x = augment.preprocess(data, steps, key, channels, norm.get("mean"), norm.get("std"))
          else:
            x = augment.preprocess(data, steps, key, channels, norm.get("mean"), norm.get("std"))
          h, w = size or x.shape[:2]
          assert x.shape == (h, w, channels), (name, recipe, x.shape)
          spec = {"format": "records" if raw_shape is not None else "tfrecord",
                  "preprocess": steps}
          if norm:
            spec["normalize"] = norm
          tensors[f"case{i}.image"] = np.frombuffer(
              data.tobytes() if raw_shape is not None else data, np.uint8).copy()
          tensors[f"case{i}.out"] = x.astype(np.float32)
          cases.append({"name": f"{name}/{recipe}/c{channels}/i{index}", "spec": spec,
                        "input_shape": [int(h), int(w), channels], "key": [int(v) for v in key],
                        "raw_shape": list(raw_shape) if raw_shape is not None else None})
          i += 1
  meta = {"cases": json.dumps(cases),
          "versions": json.dumps({"jax": jax.__version__, "pillow": Image.__version__,
                                  "numpy": np.__version__}),
          "epoch_key": json.dumps([int(v) for v in np.asarray(epoch_key, np.uint32)])}
  save_file(tensors, f"{out_dir}/augment.safetensors", metadata=meta)
  print(f"wrote {out_dir}/augment.safetensors: {len(cases)} cases")
