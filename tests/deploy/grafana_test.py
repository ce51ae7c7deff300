#!/usr/bin/env python3
"""Checks deploy/grafana/lockstep.json, the Grafana dashboard of Lockstep's metrics:
  - it is JSON with panels, each with a unique id, and its Prometheus queries use only
    metrics deploy/CONFIGURATION.md's metrics table lists (histograms through their
    _bucket, _sum and _count series), and every metric there appears on some panel;
  - every query is valid PromQL (promtool check rules, Grafana's variables replaced),
    where promtool (Debian's prometheus) is installed.
Usage: grafana_test.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def fail(msg):
    print(f"FAIL: {msg}")
    failures.append(msg)


def documented_metrics():
    """{name: type} from CONFIGURATION.md's metrics table."""
    out = {}
    with open(os.path.join(ROOT, "deploy", "CONFIGURATION.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 4 and cells[3] in ("counter", "gauge", "histogram"):
                for name in re.findall(r"`(lockstep_\w+)`", cells[2]):
                    out[name] = cells[3]
    return out


def queries(panels):
    for p in panels:
        yield from queries(p.get("panels", []))
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


def main():
    with open(os.path.join(ROOT, "deploy", "grafana", "lockstep.json")) as f:
        dashboard = json.load(f)
    docs = documented_metrics()
    if len(docs) < 15:
        fail(f"CONFIGURATION.md's metrics table lists {len(docs)} metrics; expected its table")
    panels = dashboard.get("panels", [])
    ids = [p["id"] for p in panels]
    if len(ids) != len(set(ids)):
        fail("panel ids repeat")
    used, exprs = set(), []
    for title, expr in queries(panels):
        exprs.append(expr)
        for name in re.findall(r"\blockstep_\w+", expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name in docs and docs[name] != "histogram":
                used.add(name)
            elif base in docs and docs[base] == "histogram":
                used.add(base)
            else:
                fail(f"panel {title!r}: {name} is no documented metric")
    for name in sorted(set(docs) - used):
        fail(f"{name} (documented) is on no panel")
    promtool = shutil.which("promtool")
    if promtool:
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as rules:
            json.dump({"groups": [{"name": "dashboard", "rules": [
                {"record": f"dashboard:q{i}",
                 "expr": e.replace("$__rate_interval", "1m").replace("$job_id", ".*")}
                for i, e in enumerate(exprs)]}]}, rules)
            rules.flush()
            r = subprocess.run([promtool, "check", "rules", rules.name], capture_output=True,
                               text=True)
            if r.returncode != 0:
                fail(f"promtool check rules: {r.stdout}{r.stderr}")
    else:
        print("note: no promtool (Debian package prometheus); PromQL not checked")
    print(f"grafana: {len(panels)} panels, {len(exprs)} queries over {len(used)} metrics")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
