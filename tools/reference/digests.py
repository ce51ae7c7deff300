"""Checks the digests a Lockstep safetensors file keeps of itself (core/io/safetensors_digest.h).

  digests.py FILE...   exits 1 naming the first damaged file and tensor (or header)

In the header's __metadata__, "lockstep.tensor_digests" maps each tensor to the SHA-256 of
its bytes, and "lockstep.header_digest" is the SHA-256 of the file's first 8 + N bytes with
its own 64 hex digits read as "0"s. A file with neither key (another tool's, or an older
Lockstep's) has nothing to check; one with either must have both, matching.
"""
import hashlib
import json
import sys

TENSOR_DIGESTS = "lockstep.tensor_digests"
HEADER_DIGEST = "lockstep.header_digest"


def check(path):
  """None when `path` has no digests, True when all match; raises ValueError naming the damage."""
  with open(path, "rb") as f:
    raw = f.read()
  if len(raw) < 8:
    raise ValueError(f"{path}: truncated header")
  n = int.from_bytes(raw[:8], "little")
  head = raw[:8 + n]
  header = json.loads(head[8:])
  meta = header.get("__metadata__", {})
  for name, t in header.items():  # a damaged "__metadata__" key reads as a bad tensor
    if name != "__metadata__" and not (isinstance(t, dict) and
                                       {"dtype", "shape", "data_offsets"} <= set(t)):
      raise ValueError(f"{path}: bad header: tensor {name}")
  if TENSOR_DIGESTS not in meta and HEADER_DIGEST not in meta:
    return None
  for key in (TENSOR_DIGESTS, HEADER_DIGEST):
    if key not in meta:
      raise ValueError(f"{path}: the header lacks {key} (the file is damaged)")
  key = f'"{HEADER_DIGEST}":"'.encode()
  at = head.find(key)
  if at < 0 or head.find(key, at + 1) >= 0:
    raise ValueError(f"{path}: the header's {HEADER_DIGEST} cannot be found")
  at += len(key)
  zeroed = head[:at] + b"0" * 64 + head[at + 64:]
  if hashlib.sha256(zeroed).hexdigest() != meta[HEADER_DIGEST]:
    raise ValueError(f"{path}: the header does not match its digest {HEADER_DIGEST}")
  digests = json.loads(meta[TENSOR_DIGESTS])
  tensors = {k: v for k, v in header.items() if k != "__metadata__"}
  if set(digests) != set(tensors):
    raise ValueError(f"{path}: {TENSOR_DIGESTS} does not list the file's tensors")
  end = 0
  for name, t in tensors.items():
    b, e = t["data_offsets"]
    end = max(end, e)
    if hashlib.sha256(raw[8 + n + b:8 + n + e]).hexdigest() != digests[name]:
      raise ValueError(f"{path}: tensor {name} does not match its digest (the file is damaged)")
  if len(raw) - 8 - n != end:
    raise ValueError(f"{path}: {len(raw) - 8 - n} bytes follow the header, the tensors end at {end}")
  return True


def main(paths):
  for p in paths:
    try:
      ok = check(p)
    except ValueError as e:
      print(e)
      return 1
    print(f"{p}: " + ("every digest matches" if ok else "no digests (not checked)"))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
