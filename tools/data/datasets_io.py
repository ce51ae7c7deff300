"""Writing image-classification datasets the way their tools lay them out: TFDS's
TFRecord shards of tf.train.Example with its metadata files, torchvision's ImageFolder,
and Lockstep's record files (.npy + .labels.npy). Shared by the scripts in tools/data and
bench/data. numpy and Pillow; TensorFlow (tf.io.TFRecordWriter) only to write TFRecords,
for its CRC32C at C speed.
"""
import gzip
import io
import json
import os

import numpy as np
from PIL import Image

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                   "Sneaker", "Bag", "Ankle boot"]


def read_idx(path):
  with gzip.open(path, "rb") as f:
    raw = f.read()
  ndim = raw[3]
  dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
  return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist(split, root=FASHION_MNIST):
  """uint8 [N, 28, 28] images and int64 [N] labels of Debian's dataset-fashion-mnist."""
  prefix = "train" if split == "train" else "t10k"
  images = read_idx(f"{root}/{prefix}-images-idx3-ubyte.gz")
  labels = read_idx(f"{root}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
  return images, labels


def encode(img, fmt, **kw):
  """uint8 [H, W] or [H, W, 3] -> PNG or JPEG bytes (Pillow)."""
  b = io.BytesIO()
  Image.fromarray(img).save(b, fmt, **kw)
  return b.getvalue()


def _varint(v):
  v &= (1 << 64) - 1
  out = bytearray()
  while v >= 0x80:
    out.append(v & 0x7F | 0x80)
    v >>= 7
  out.append(v)
  return bytes(out)


def _field(number, payload):
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def example_bytes(image, label, image_key="image", label_key="label"):
  """A serialized tf.train.Example: image_key a bytes_list of `image`, label_key an
  int64_list of `label` (packed), as tf.train.Example(...).SerializeToString() writes."""
  image_feature = _field(1, _field(1, image))
  label_feature = _field(3, _field(1, _varint(int(label))))
  entries = sorted([(image_key.encode(), image_feature), (label_key.encode(), label_feature)])
  features = b"".join(_field(1, _field(1, k) + _field(2, v)) for k, v in entries)
  return _field(1, features)


def shard_name(name, split, index, count):
  return f"{name}-{split}.tfrecord-{index:05d}-of-{count:05d}"


def write_tfrecord(path, records):
  import tensorflow as tf  # noqa: PLC0415 (only for TFRecords: its writer's CRC32C)
  with tf.io.TFRecordWriter(path) as w:
    for r in records:
      w.write(r)


def write_tfds_metadata(folder, name, version, description, image_shape, encoding,
                        class_names, shard_lengths, num_bytes):
  """dataset_info.json, features.json and label.labels.txt as TFDS 4 writes them, so that
  tfds.builder_from_directory(folder) reads the shards (Image + ClassLabel features)."""
  splits = [{"name": split, "numBytes": str(num_bytes[split]),
             "shardLengths": [str(n) for n in lengths],
             "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"}
            for split, lengths in shard_lengths.items()]
  info = {"name": name, "version": version, "description": description,
          "fileFormat": "tfrecord", "moduleName": "lockstep.tools.data",
          "splits": splits,
          "supervisedKeys": {"tuple": {"items": [{"featureKey": "image"},
                                                 {"featureKey": "label"}]}}}
  features = {
      "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
      "featuresDict": {"features": {
          "image": {"pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
                    "image": {"shape": {"dimensions": [str(d) for d in image_shape]},
                              "dtype": "uint8", "encodingFormat": encoding}},
          "label": {"pythonClassName":
                    "tensorflow_datasets.core.features.class_label_feature.ClassLabel",
                    "classLabel": {"numClasses": str(len(class_names))}}}}}
  with open(os.path.join(folder, "dataset_info.json"), "w") as f:
    json.dump(info, f, indent=2)
  with open(os.path.join(folder, "features.json"), "w") as f:
    json.dump(features, f, indent=2)
  with open(os.path.join(folder, "label.labels.txt"), "w") as f:
    f.write("".join(c + "\n" for c in class_names))


def class_folder_names(class_names):
  """ImageFolder folder names that sort in label order: '0_t-shirt_top', '1_trouser'..."""
  width = len(str(len(class_names) - 1))
  clean = lambda c: "".join(ch if ch.isalnum() or ch == "-" else "_" for ch in c.lower())
  return [f"{i:0{width}d}_{clean(c)}" for i, c in enumerate(class_names)]


def write_records(path, images, labels):
  """Lockstep's format records: uint8 [N, H, W, C] in PATH (.npy), labels beside it."""
  assert path.endswith(".npy")
  images = np.asarray(images, np.uint8)
  if images.ndim == 3:
    images = images[..., None]
  np.save(path, images)
  np.save(path[:-4] + ".labels.npy", np.asarray(labels, np.int64))
