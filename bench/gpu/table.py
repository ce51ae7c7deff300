"""Prints the GPU benchmark's table from check.sh's JSON lines: samples/s of Lockstep,
JAX and PyTorch per configuration, the ratios, and Lockstep's microseconds per step
against the floor (the step's FLOPs at the measured float32 GEMM rate)."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
rate = next((r["flops_per_sec"] for r in rows if r.get("kind") == "gemm_rate"), None)
print(f"float32 GEMM rate (torch, TF32 off): {rate / 1e12:.1f} TFLOP/s" if rate else "no GEMM rate")
print()
print("| model, batch | Lockstep samples/s | JAX pmap | PyTorch eager | PyTorch compile | "
      "Lockstep / JAX | Lockstep us/step | floor us/step |")
print("|---|---|---|---|---|---|---|---|")
for model, batch in (("cnn", 128), ("cnn", 1024), ("mlp", 4096)):
  def get(fw, key="samples_per_sec"):
    for r in rows:
      if r.get("model") == model and r.get("batch") == batch and r.get("framework", "lockstep") == fw:
        return r.get(key)
    return None
  ls = next((r for r in rows if "flops_per_step" in r and r["model"] == model and r["batch"] == batch), None)
  jx, te, tc = get("jax-pmap"), get("pytorch-eager"), get("pytorch-compile")
  fmt = lambda v: f"{v:,.0f}" if v else "-"
  ratio = f"{ls['samples_per_sec'] / jx:.2f}x" if ls and jx else "-"
  floor = f"{1e6 * ls['flops_per_step'] / rate:.0f}" if ls and rate else "-"
  print(f"| {model}, {batch} | {fmt(ls and ls['samples_per_sec'])} | {fmt(jx)} | {fmt(te)} | {fmt(tc)} | "
        f"{ratio} | {fmt(ls and ls['us_per_step'])} | {floor} |")
