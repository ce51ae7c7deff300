#!/usr/bin/env python3
"""Fashion-MNIST as a torchvision ImageFolder of JPEGs: OUT/{train,test}/CLASS/NNNNN.jpg
with class folders named so that their sorted order is the label order ('0_t-shirt_top',
'1_trouser', ...: ImageFolder's labels are the sorted folders' positions). Grayscale
JPEGs, quality 95 (lossy: the pixels are near the IDX files', not equal). Lockstep reads
it with

  dataset: {format: imagefolder, train_path: OUT/train, test_path: OUT/test}

  tools/.venv/bin/python tools/data/make_fashion_mnist_imagefolder.py --out /data/fm-folder
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import datasets_io  # noqa: E402


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", required=True)
  ap.add_argument("--idx", default=datasets_io.FASHION_MNIST, help="the IDX files' folder")
  ap.add_argument("--quality", type=int, default=95)
  ap.add_argument("--limit", type=int, default=0, help="first N examples of each split (0: all)")
  args = ap.parse_args()
  classes = datasets_io.class_folder_names(datasets_io.FASHION_CLASSES)
  for split in ("train", "test"):
    images, labels = datasets_io.fashion_mnist(split, args.idx)
    if args.limit:
      images, labels = images[:args.limit], labels[:args.limit]
    for c in classes:
      os.makedirs(os.path.join(args.out, split, c), exist_ok=True)
    for i, (img, label) in enumerate(zip(images, labels)):
      path = os.path.join(args.out, split, classes[label], f"{i:05d}.jpg")
      with open(path, "wb") as f:
        f.write(datasets_io.encode(img, "JPEG", quality=args.quality))
    print(f"{split}: {len(images)} JPEGs in {args.out}/{split}")


if __name__ == "__main__":
  main()
