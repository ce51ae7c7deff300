"""The peers of bench/data/run: the same recipe on the same files with tf.data, the
PyTorch DataLoader (torchvision's decoders and v2 transforms, or PIL as torchvision's
ImageFolder loads), and grain (PIL and numpy), each limited to --threads workers.
Prints one JSON line per round: images/s decoded and augmented to float32, by the wall
clock and per CPU second of the process and its workers.

  python bench/data/peers.py --peer tf --recipe imagenet --data DIR --threads 1 --images 500
"""
import argparse
import glob
import json
import os
import time

import numpy as np
import psutil

MEAN = {"imagenet": (0.485, 0.456, 0.406), "small": (0.4914, 0.4822, 0.4465)}
STD = {"imagenet": (0.229, 0.224, 0.225), "small": (0.2470, 0.2435, 0.2616)}
BATCH = 64


class CpuClock:
  """CPU seconds (user + system) of this process and its children, the live ones and
  those that ended (grain and the DataLoader compute in worker processes)."""

  def __init__(self):
    self.me = psutil.Process()

  def _read(self):
    live = {}
    for p in self.me.children(recursive=True):
      try:
        t = p.cpu_times()
        live[p.pid] = t.user + t.system
      except psutil.Error:
        pass
    t = self.me.cpu_times()
    return t.user + t.system + t.children_user + t.children_system, live

  def start(self):
    self.own0, self.live0 = self._read()

  def seconds(self):
    own, live = self._read()
    # A child that ended since start counts in children_* whole: take off its share before.
    ended = sum(v for pid, v in self.live0.items() if pid not in live)
    return own - self.own0 + sum(v - self.live0.get(pid, 0.0) for pid, v in live.items()) - ended


def files(data, n):
  paths = sorted(glob.glob(os.path.join(data, "imagefolder", "train", "*", "*")))
  return paths[:n]


def shards(data):
  return sorted(glob.glob(os.path.join(data, "synthetic_fashion", "1.0.0", "*-train.tfrecord-*")))


def run_tf(args):
  import tensorflow as tf  # noqa: PLC0415
  tf.config.threading.set_inter_op_parallelism_threads(args.threads)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  mean = tf.constant(MEAN[args.recipe]) * 255
  std = tf.constant(STD[args.recipe]) * 255

  def imagenet(image_bytes):
    # The Flax ImageNet example's crop: sample_distorted_bounding_box, then a decode of
    # the crop only; its resize (bilinear, antialiased here, as Lockstep's and PIL's).
    shape = tf.io.extract_jpeg_shape(image_bytes)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape, tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]), min_object_covered=0.1,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
        use_image_if_no_bounding_boxes=True)
    oy, ox, _ = tf.unstack(begin)
    h, w, _ = tf.unstack(size)
    image = tf.io.decode_and_crop_jpeg(image_bytes, tf.stack([oy, ox, h, w]), channels=3)
    image = tf.image.resize(image, [224, 224], method="bilinear", antialias=True)
    return tf.image.random_flip_left_right(image)

  def small(image_bytes):
    image = tf.io.decode_png(image_bytes, channels=3)
    image = tf.image.pad_to_bounding_box(image, 4, 4, 40, 40)
    image = tf.image.random_crop(image, [32, 32, 3])
    return tf.cast(tf.image.random_flip_left_right(image), tf.float32)

  augment = imagenet if args.recipe == "imagenet" else small

  def parse(record):
    ex = tf.io.parse_single_example(record, {"image": tf.io.FixedLenFeature([], tf.string),
                                             "label": tf.io.FixedLenFeature([], tf.int64)})
    return (augment(ex["image"]) - mean) / std, ex["label"]

  ds = tf.data.TFRecordDataset(shards(args.data)).take(args.images)
  ds = ds.map(parse, num_parallel_calls=args.threads).batch(BATCH).prefetch(2)
  options = tf.data.Options()
  options.threading.private_threadpool_size = args.threads
  options.threading.max_intra_op_parallelism = 1
  ds = ds.with_options(options)
  clock = CpuClock()
  for _ in range(args.rounds):
    n, start = 0, time.perf_counter()
    clock.start()
    for images, _ in ds:
      n += int(images.shape[0])
    yield n, time.perf_counter() - start, clock.seconds()


class TorchImages:
  """The files as a map-style dataset: bytes, decode, transform."""

  def __init__(self, paths, recipe, pil):
    self.paths, self.recipe, self.pil = paths, recipe, pil
    self.transform = None

  def __len__(self):
    return len(self.paths)

  def _make(self):
    import torch  # noqa: PLC0415
    from torchvision.transforms import v2  # noqa: PLC0415
    crop = (v2.RandomResizedCrop(224, antialias=True) if self.recipe == "imagenet"
            else v2.RandomCrop(32, padding=4))
    steps = [crop, v2.RandomHorizontalFlip()]
    if self.pil:
      steps.insert(0, v2.PILToTensor())
    steps += [v2.ToDtype(torch.float32, scale=True),
              v2.Normalize(MEAN[self.recipe], STD[self.recipe])]
    self.transform = v2.Compose(steps)

  def __getitem__(self, i):
    import torch  # noqa: PLC0415
    import torchvision  # noqa: PLC0415
    if self.transform is None:
      self._make()
    if self.pil:  # torchvision's ImageFolder default loader
      from PIL import Image  # noqa: PLC0415
      with open(self.paths[i], "rb") as f:
        image = Image.open(f).convert("RGB")
    else:
      data = torchvision.io.read_file(self.paths[i])
      image = torchvision.io.decode_image(data, mode=torchvision.io.ImageReadMode.RGB)
    return self.transform(image), 0


def _torch_worker_init(_):
  import torch  # noqa: PLC0415
  torch.set_num_threads(1)


def run_torch(args, pil=False):
  import torch  # noqa: PLC0415
  torch.set_num_threads(1)
  loader = torch.utils.data.DataLoader(
      TorchImages(files(args.data, args.images), args.recipe, pil), batch_size=BATCH,
      num_workers=args.threads, worker_init_fn=_torch_worker_init, persistent_workers=True,
      prefetch_factor=4)
  clock = CpuClock()
  for _ in range(args.rounds):
    n, start = 0, time.perf_counter()
    clock.start()
    for images, _ in loader:
      n += int(images.shape[0])
    yield n, time.perf_counter() - start, clock.seconds()


def run_grain(args):
  from absl import flags  # noqa: PLC0415 (grain reads its flags; nothing parses them here)
  flags.FLAGS.mark_as_parsed()
  import grain.python as grain  # noqa: PLC0415
  from PIL import Image  # noqa: PLC0415
  paths = files(args.data, args.images)
  mean = np.asarray(MEAN[args.recipe], np.float32)
  std = np.asarray(STD[args.recipe], np.float32)

  class Source(grain.RandomAccessDataSource):
    def __len__(self):
      return len(paths)

    def __getitem__(self, i):
      with open(paths[i], "rb") as f:
        return f.read()

  class Augment(grain.RandomMapTransform):
    def random_map(self, data, rng):
      import io  # noqa: PLC0415
      img = Image.open(io.BytesIO(data)).convert("RGB")
      w, h = img.size
      if args.recipe == "imagenet":  # torchvision's get_params, numpy draws
        box = None
        for _ in range(10):
          area = h * w * rng.uniform(0.08, 1.0)
          ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
          cw, ch = int(round(np.sqrt(area * ratio))), int(round(np.sqrt(area / ratio)))
          if 0 < cw <= w and 0 < ch <= h:
            top, left = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
            box = (left, top, left + cw, top + ch)
            break
        box = box or (0, 0, w, h)
        x = np.asarray(img.resize((224, 224), Image.BILINEAR, box=box))
      else:
        x = np.pad(np.asarray(img), ((4, 4), (4, 4), (0, 0)))
        top, left = rng.integers(0, 9, 2)
        x = x[top:top + 32, left:left + 32]
      if rng.random() < 0.5:
        x = x[:, ::-1]
      return (x.astype(np.float32) / np.float32(255) - mean) / std

  loader = grain.DataLoader(
      data_source=Source(),
      sampler=grain.IndexSampler(len(paths), grain.NoSharding(), shuffle=False, num_epochs=1,
                                 seed=0),
      operations=[Augment(), grain.Batch(BATCH)], worker_count=args.threads)
  clock = CpuClock()
  for _ in range(args.rounds):
    n, start = 0, time.perf_counter()
    clock.start()
    for images in loader:
      n += int(images.shape[0])
    yield n, time.perf_counter() - start, clock.seconds()


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--peer", choices=("tf", "torch", "torch-pil", "grain"), required=True)
  ap.add_argument("--recipe", choices=("imagenet", "small"), required=True)
  ap.add_argument("--data", required=True, help="make_synthetic_jpegs.py's --out (both formats)")
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--images", type=int, default=1000)
  ap.add_argument("--rounds", type=int, default=1)
  args = ap.parse_args()
  runs = {"tf": run_tf, "torch": run_torch, "torch-pil": lambda a: run_torch(a, pil=True),
          "grain": run_grain}[args.peer](args)
  for r, (n, seconds, cpu) in enumerate(runs):
    print(json.dumps({"peer": args.peer, "recipe": args.recipe, "threads": args.threads,
                      "round": r, "images": n, "seconds": round(seconds, 4),
                      "cpu_seconds": round(cpu, 4), "images_per_s": round(n / seconds, 1),
                      "images_per_cpu_s": round(n / cpu, 1)}), flush=True)


if __name__ == "__main__":
  main()
