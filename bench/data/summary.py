"""bench/data/run's tables: per recipe and thread count, each peer's images/s per core,
best and median over the measured passes (each run's second), by the wall clock (the
run pinned to that many cores) and per CPU second (user + system of the process and its
workers: what other load on the machine changes least), and Lockstep's ratios to each."""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
  wall, cpu = defaultdict(list), defaultdict(list)
  for line in open(path):
    r = json.loads(line)
    if r.get("failed"):
      print(f"{r['peer']} failed ({r['recipe']}, {r['threads']} threads)")
    elif r["round"] >= 1:
      key = (r["recipe"], r["threads"], r["peer"])
      wall[key].append(r["images_per_s"] / r["threads"])
      cpu[key].append(r["images_per_cpu_s"])
  for recipe in ("imagenet", "small"):
    for threads in sorted({k[1] for k in wall if k[0] == recipe}):
      keys = [k for k in wall if k[0] == recipe and k[1] == threads]
      runs = len(wall[keys[0]])
      print(f"\n{recipe}, {threads} core(s), {runs} runs: images/s per core")
      print("| peer | wall best | wall median | per CPU-s best | per CPU-s median | "
            "Lockstep TFRecord / peer (wall best, median; CPU best, median) |")
      print("|---|---:|---:|---:|---:|---|")
      ours = (recipe, threads, "lockstep-tfrecord")
      for k in sorted(keys, key=lambda k: -max(wall[k])):
        ratio = ""
        if ours in wall:
          ratio = (f"{max(wall[ours]) / max(wall[k]):.2f}x, "
                   f"{statistics.median(wall[ours]) / statistics.median(wall[k]):.2f}x; "
                   f"{max(cpu[ours]) / max(cpu[k]):.2f}x, "
                   f"{statistics.median(cpu[ours]) / statistics.median(cpu[k]):.2f}x")
        print(f"| {k[2]} | {max(wall[k]):.0f} | {statistics.median(wall[k]):.0f} | "
              f"{max(cpu[k]):.0f} | {statistics.median(cpu[k]):.0f} | {ratio} |")


if __name__ == "__main__":
  main(sys.argv[1])
