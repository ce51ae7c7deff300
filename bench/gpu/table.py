"""Prints the GPU benchmark's table from check.sh's JSON lines: samples/s of Lockstep,
JAX and PyTorch per configuration, the ratios, and Lockstep's microseconds per step
against the floor (the step's FLOPs at the measured float32 GEMM rate); for the
GPT-2-small-shaped decoder, tokens/s and MFU of every run, float32 and bf16. Then where each
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
# Datasheet peaks (dense, TFLOP/s) by the GPU's name as torch reports it: float32 without
# tensor cores, bf16 on tensor cores. MFU is a row's FLOPs per second (Lockstep's count of
# the step: 3x the forward pass) over the peak of its precision.
PEAKS = {"H100 PCIe": (51.2, 756.0), "H100 NVL": (60.0, 835.0), "H100": (66.9, 989.4),
         "H200": (66.9, 989.4), "A100": (19.5, 312.0)}
gpu = next((r.get("device_name", "") for r in rows
            if r.get("kind") == "peer_env" and r.get("framework") == "torch"), "")
peak = next((v for k, v in PEAKS.items() if k in gpu), None)
print(f"datasheet peaks ({gpu}): {peak[0]} TFLOP/s float32, {peak[1]} TFLOP/s bf16" if peak
      else f"no datasheet peak for '{gpu}': MFU against the measured float32 GEMM rate only")
print()
print("| model, batch | Lockstep samples/s | JAX pmap | PyTorch eager | PyTorch compile | "
      "Lockstep / JAX | Lockstep / faster PyTorch | Lockstep us/step | floor us/step |")
print("|---|---|---|---|---|---|---|---|---|")


def fmt(v):
  return f"{v:,.0f}" if v else "-"


wrong = []
configs = []  # (model, batch) in the order they came
for r in rows:
  if ("flops_per_step" in r or r.get("kind") == "throughput") and (r["model"], r["batch"]) not in configs:
    configs.append((r["model"], r["batch"]))


def peer(fw, model, batch):
  """(samples/s, cell) of a peer's row, the cell flagged when it ran elsewhere."""
  for r in rows:
    if (r.get("kind") == "throughput" and r.get("framework") == fw and r.get("model") == model
        and r.get("batch") == batch):
      if r.get("backend") not in expected:
        wrong.append(f"{fw} {model} {batch} ran on {r.get('backend')}")
        return None, f"{fmt(r['samples_per_sec'])} ({r.get('backend')}!)"
      return r["samples_per_sec"], fmt(r["samples_per_sec"])
  return None, "-"


def lockstep(model, batch):
  return next((r for r in rows if "flops_per_step" in r and r["model"] == model and r["batch"] == batch),
              None)


# A Lockstep row labelled MODEL-bf16 (check.sh: the spec with model.dtype bfloat16) is MODEL's
# bf16 run, beside the peers' bf16 runs (their frameworks' -bf16 rows).
for model, batch in configs:
  ls = lockstep(model, batch)
  if ls and ls.get("device") not in expected:
    wrong.append(f"Lockstep {model} {batch} ran on {ls.get('device')}")
  base, suffix = (model[:-len("-bf16")], "-bf16") if model.endswith("-bf16") else (model, "")
  (jx, jx_cell), (te, te_cell), (tc, tc_cell) = (peer(fw + suffix, base, batch) for fw in
                                                 ("jax-pmap", "pytorch-eager", "pytorch-compile"))
  ratio = f"{ls['samples_per_sec'] / jx:.2f}x" if ls and jx else "-"
  torch_best = max(te or 0, tc or 0)
  vs_torch = f"{ls['samples_per_sec'] / torch_best:.2f}x" if ls and torch_best else "-"
  floor = f"{1e6 * ls['flops_per_step'] / rate:.0f}" if ls and rate else "-"
  print(f"| {model}, {batch} | {fmt(ls and ls['samples_per_sec'])} | {jx_cell} | {te_cell} | "
        f"{tc_cell} | {ratio} | {vs_torch} | {fmt(ls and ls['us_per_step'])} | {floor} |")

# The decoder: tokens/s and MFU of every run, float32 and bf16.
for model, batch in configs:
  ls = lockstep(model, batch)
  if not model.startswith("gpt2") or model.endswith("-bf16") or not ls or "tokens_per_sec" not in ls:
    continue
  tokens = ls["tokens_per_sec"] / ls["samples_per_sec"]
  flops_per_sample = ls["flops_per_step"] / batch
  print()
  print(f"{model}, batch {batch} ({tokens:.0f} tokens a sample; "
        f"{ls['flops_per_step'] / 1e12:.2f} TFLOP a step by Lockstep's count):")
  print()
  print("| run | precision | tokens/s | TFLOP/s | MFU |")
  print("|---|---|---|---|---|")
  runs = [("Lockstep", "float32", ls["samples_per_sec"])]
  ls16 = lockstep(model + "-bf16", batch)
  if ls16:
    runs.append(("Lockstep", "bf16", ls16["samples_per_sec"]))
  for fw in ("jax-pmap", "pytorch-eager", "pytorch-compile"):
    for bf16 in (False, True):
      sps, _ = peer(fw + ("-bf16" if bf16 else ""), model, batch)
      if sps:
        runs.append((fw, "bf16" if bf16 else "float32", sps))
  for name, precision, sps in runs:
    tflops = sps * flops_per_sample / 1e12
    if peak:
      mfu = f"{100 * tflops / peak[precision == 'bf16']:.1f}%"
    elif rate and precision == "float32":
      mfu = f"{100 * tflops * 1e12 / rate:.1f}% (of the GEMM rate)"
    else:
      mfu = "-"
    print(f"| {name} | {precision} | {fmt(sps * tokens)} | {tflops:.1f} | {mfu} |")

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
