"""Prints the GPU benchmark's table from check.sh's JSON lines: samples/s of Lockstep,
JAX and PyTorch per configuration, the ratios, and Lockstep's microseconds per step
against the floor (the step's FLOPs at the measured float32 GEMM rate). Then where each
ran: a peer that did not run on the expected device is flagged in its cell and below,
as are the peers' errors.

  python3 bench/gpu/table.py BENCH.jsonl [--device cuda|cpu]
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("jsonl")
ap.add_argument("--device", default="cuda", help="where everything should have run")
args = ap.parse_args()
# The backend names each framework reports for the expected device.
expected = {"cuda": {"gpu", "cuda"}, "cpu": {"cpu"}}.get(args.device, {args.device})

rows = []
for line in open(args.jsonl):
  if line.strip().startswith("{"):
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError:
      pass
rate = next((r["flops_per_sec"] for r in rows if r.get("kind") == "gemm_rate"), None)
print(f"float32 GEMM rate (torch, TF32 off): {rate / 1e12:.1f} TFLOP/s" if rate else "no GEMM rate")
print()
print("| model, batch | Lockstep samples/s | JAX pmap | PyTorch eager | PyTorch compile | "
      "Lockstep / JAX | Lockstep us/step | floor us/step |")
print("|---|---|---|---|---|---|---|---|")


def fmt(v):
  return f"{v:,.0f}" if v else "-"


wrong = []
for model, batch in (("cnn", 128), ("cnn", 1024), ("mlp", 4096)):
  def peer(fw):
    """(samples/s, cell) of a peer's row, the cell flagged when it ran elsewhere."""
    for r in rows:
      if (r.get("kind") == "throughput" and r.get("framework") == fw and r.get("model") == model
          and r.get("batch") == batch):
        if r.get("backend") not in expected:
          wrong.append(f"{fw} {model} {batch} ran on {r.get('backend')}")
          return None, f"{fmt(r['samples_per_sec'])} ({r.get('backend')}!)"
        return r["samples_per_sec"], fmt(r["samples_per_sec"])
    return None, "-"
  ls = next((r for r in rows if "flops_per_step" in r and r["model"] == model and r["batch"] == batch),
            None)
  if ls and ls.get("device") not in expected:
    wrong.append(f"Lockstep {model} {batch} ran on {ls.get('device')}")
  (jx, jx_cell), (_, te_cell), (_, tc_cell) = peer("jax-pmap"), peer("pytorch-eager"), peer("pytorch-compile")
  ratio = f"{ls['samples_per_sec'] / jx:.2f}x" if ls and jx else "-"
  floor = f"{1e6 * ls['flops_per_step'] / rate:.0f}" if ls and rate else "-"
  print(f"| {model}, {batch} | {fmt(ls and ls['samples_per_sec'])} | {jx_cell} | {te_cell} | "
        f"{tc_cell} | {ratio} | {fmt(ls and ls['us_per_step'])} | {floor} |")

print()
envs = {f"{r['framework']} {r.get('version', '')} on {r.get('backend')} ({r.get('device_name')})": 1
        for r in rows if r.get("kind") == "peer_env"}
print("ran on: " + ("; ".join(envs) or "no peer ran"))
for w in wrong:
  print(f"NOT ON {args.device.upper()}: {w}")
for r in rows:
  if r.get("kind") == "peer_error":
    where = " ".join(str(r[k]) for k in ("framework", "model", "batch") if k in r)
    print(f"peer error: {where}: {r.get('error')}")
