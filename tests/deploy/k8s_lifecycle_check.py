#!/usr/bin/env python3
"""Checks how a rendered Kubernetes overlay stops its servers (k8s_test runs it on each).

  - The worker StatefulSet sets terminationGracePeriodSeconds, and its
    LOCKSTEP_LEAVE_TIMEOUT_S (how long a worker waits to leave its job at a step boundary
    after SIGTERM) is at least 5 s below it, so that the worker leaves before the SIGKILL.
  - The coordinator's LOCKSTEP_DRAIN_GRACE_S is below its own terminationGracePeriodSeconds.
  - A PodDisruptionBudget selects exactly the worker pods and lets voluntary disruptions
    take at most one at a time (maxUnavailable: 1).
Usage: k8s_lifecycle_check.py RENDERED.yaml
"""
import re
import sys

import yaml

failures = []


def fail(msg):
    print(f"FAIL: {msg}")
    failures.append(msg)


def seconds(value):
    """A Go/absl duration ("25s", "1m30s", "500ms") or a number of seconds, as float."""
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"not a duration: {value!r}")
    return sum(float(n) * units[u] for n, u in parts)


def role(d):
    return d["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def env_of(workload, configmaps):
    env = {}
    for c in workload["spec"]["template"]["spec"]["containers"]:
        for src in c.get("envFrom", []):
            env.update(configmaps.get(src.get("configMapRef", {}).get("name"), {}))
        env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
    return env


def check_grace(workload, configmaps, env_name, margin):
    name = workload["metadata"]["name"]
    grace = workload["spec"]["template"]["spec"].get("terminationGracePeriodSeconds")
    if grace is None:
        fail(f"{name}: no terminationGracePeriodSeconds")
        return
    value = env_of(workload, configmaps).get(env_name)
    if value is None:
        fail(f"{name}: no {env_name}")
        return
    try:
        wait = seconds(value)
    except ValueError as e:
        fail(f"{name}: {env_name}: {e}")
        return
    if wait + margin > grace:
        fail(f"{name}: {env_name}={value} leaves less than {margin} s of its "
             f"terminationGracePeriodSeconds ({grace})")


def check_pdb(docs, worker):
    labels = worker["spec"]["template"]["metadata"]["labels"]
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    chosen = [p for p in pdbs
              if all(labels.get(k) == v for k, v in p["spec"]["selector"]["matchLabels"].items())]
    if len(chosen) != 1:
        fail(f"{len(chosen)} PodDisruptionBudgets select the worker pods, not 1")
        return
    pdb = chosen[0]
    if pdb["spec"].get("maxUnavailable") != 1 or "minAvailable" in pdb["spec"]:
        fail(f"PodDisruptionBudget {pdb['metadata']['name']}: not maxUnavailable: 1")
    if pdb["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component") != "worker":
        fail(f"PodDisruptionBudget {pdb['metadata']['name']}: selects more than the workers")


def main():
    docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
                  if d["kind"] == "ConfigMap"}
    workloads = {role(d): d for d in docs if d["kind"] in ("Deployment", "StatefulSet")}
    for needed in ("coordinator", "worker"):
        if needed not in workloads:
            fail(f"no {needed} workload")
    if "worker" in workloads:
        check_grace(workloads["worker"], configmaps, "LOCKSTEP_LEAVE_TIMEOUT_S", 5)
        check_pdb(docs, workloads["worker"])
    if "coordinator" in workloads:
        check_grace(workloads["coordinator"], configmaps, "LOCKSTEP_DRAIN_GRACE_S", 5)
    if failures:
        sys.exit(1)
    print("lifecycle: grace periods, leave timeout and disruption budget hold")


if __name__ == "__main__":
    main()
