#!/usr/bin/env python3
"""Checks the security of a rendered Kubernetes overlay (k8s_test runs it on each).

  - No Secret is rendered: the TLS Secrets hold keys and are made by `lockstep certs`.
  - Each Lockstep container mounts its role's Secret (lockstep-coordinator-tls,
    lockstep-worker-bootstrap) read-only at /etc/lockstep/tls with defaultMode 0400, its
    pod has fsGroup (the kubelet then makes the files root:fsGroup 0440; without it user
    10001 could not read them), and its LOCKSTEP_* files point at the Secret's keys there:
    the coordinator's TLS files, tokens, CA key and bootstrap token; a worker's CA and
    bootstrap token only (it enrolls: its own key is made in the pod, in
    LOCKSTEP_IDENTITY_DIR, an emptyDir; no shared worker certificate exists).
  - No probe is a gRPC probe (the kubelet's cannot speak TLS); each is an exec of
    lockstep-healthcheck, and each container has readiness and liveness probes.
  - The NetworkPolicies exist, and evaluated as Kubernetes does (policies add up; a pod
    selected by one accepts only what some policy allows), they allow exactly this:
    the coordinator's gRPC port from workers and pods labelled lockstep.dev/client=true in
    the namespace; a worker's gRPC port from the coordinator and the workers; any other
    TCP port of a worker (Gloo, NCCL) from workers only; the metrics ports (named
    `metrics`, plain HTTP) from pods labelled lockstep.dev/metrics-scraper=true in the
    namespace; nothing from other pods, other namespaces or outside the cluster.
  - Each container declares a `metrics` port, its pod is annotated for Prometheus
    (prometheus.io/scrape, /port naming that port, /path /metrics), and its
    LOCKSTEP_METRICS_LISTEN listens on that port.
Usage: k8s_security_check.py RENDERED.yaml
"""
import sys

import yaml

failures = []


def fail(msg):
    print(f"FAIL: {msg}")
    failures.append(msg)


SECRETS = {"coordinator": "lockstep-coordinator-tls", "worker": "lockstep-worker-bootstrap"}
FILE_ENV = {
    "coordinator": {"LOCKSTEP_TLS_CA": "ca.pem", "LOCKSTEP_TLS_CERT": "tls.pem",
                    "LOCKSTEP_TLS_KEY": "tls-key.pem", "LOCKSTEP_TOKENS_FILE": "tokens",
                    "LOCKSTEP_WORKER_CA_KEY": "ca-key.pem",
                    "LOCKSTEP_BOOTSTRAP_TOKEN_FILE": "bootstrap-token"},
    "worker": {"LOCKSTEP_TLS_CA": "ca.pem", "LOCKSTEP_BOOTSTRAP_TOKEN_FILE": "bootstrap-token"},
}
TLS_DIR = "/etc/lockstep/tls"
CLIENT_LABEL = ("lockstep.dev/client", "true")
SCRAPER_LABEL = ("lockstep.dev/metrics-scraper", "true")


def workloads(docs):
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def container_env(c, configmaps):
    env = {}
    for src in c.get("envFrom", []):
        env.update(configmaps.get(src.get("configMapRef", {}).get("name"), {}))
    env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
    return env


def check_workload(d, configmaps):
    name = f'{d["kind"]}/{d["metadata"]["name"]}'
    pod = d["spec"]["template"]["spec"]
    role = d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
    if role not in SECRETS:
        fail(f"{name}: component label {role!r} is neither coordinator nor worker")
        return
    if pod.get("securityContext", {}).get("fsGroup") is None:
        fail(f"{name}: no fsGroup, so user {pod.get('securityContext', {}).get('runAsUser')} "
             "cannot read its 0400 Secret files (owned by root)")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for c in pod["containers"]:
        label = f'{name}/{c["name"]}'
        mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == TLS_DIR]
        if len(mounts) != 1:
            fail(f"{label}: nothing mounted at {TLS_DIR}")
        else:
            secret = volumes.get(mounts[0]["name"], {}).get("secret", {})
            if secret.get("secretName") != SECRETS[role]:
                fail(f"{label}: mounts {secret.get('secretName')} at {TLS_DIR}, not {SECRETS[role]}")
            if secret.get("defaultMode") != 0o400:
                fail(f"{label}: Secret defaultMode {secret.get('defaultMode')}, not 0400 (256)")
            if not mounts[0].get("readOnly"):
                fail(f"{label}: {TLS_DIR} is not mounted readOnly")
        env = container_env(c, configmaps)
        for key, file in FILE_ENV[role].items():
            if env.get(key) != f"{TLS_DIR}/{file}":
                fail(f"{label}: {key}={env.get(key)}, not {TLS_DIR}/{file}")
        if role == "worker":
            for key in ("LOCKSTEP_TLS_CERT", "LOCKSTEP_TLS_KEY", "LOCKSTEP_WORKER_CA_KEY"):
                if key in env:
                    fail(f"{label}: a worker has {key} (it enrolls for its own certificate)")
            identity = env.get("LOCKSTEP_IDENTITY_DIR")
            dirs = [m for m in c.get("volumeMounts", []) if m["mountPath"] == identity]
            if not dirs or "emptyDir" not in volumes.get(dirs[0]["name"], {}):
                fail(f"{label}: LOCKSTEP_IDENTITY_DIR={identity} is not an emptyDir mount")
        check_metrics(label, d["spec"]["template"]["metadata"].get("annotations", {}), c, env)
        if role == "worker" and "LOCKSTEP_TOKENS_FILE" in env:
            fail(f"{label}: a worker has LOCKSTEP_TOKENS_FILE (its Secret has no tokens)")
        if env.get("LOCKSTEP_INSECURE", "false").lower() not in ("", "0", "false"):
            fail(f"{label}: LOCKSTEP_INSECURE is set")
        for kind in ("readinessProbe", "livenessProbe"):
            if kind not in c:
                fail(f"{label}: no {kind}")
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = c.get(kind)
            if probe is None:
                continue
            if "grpc" in probe:
                fail(f"{label}: {kind} is a grpc probe (the kubelet's cannot speak TLS)")
            elif probe.get("exec", {}).get("command") != ["lockstep-healthcheck"]:
                fail(f"{label}: {kind} is not exec lockstep-healthcheck: {probe}")


def check_metrics(label, annotations, c, env):
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    if "metrics" not in ports:
        fail(f"{label}: no port named metrics")
        return
    want = {"prometheus.io/scrape": "true", "prometheus.io/port": str(ports["metrics"]),
            "prometheus.io/path": "/metrics"}
    for k, v in want.items():
        if annotations.get(k) != v:
            fail(f"{label}: pod annotation {k}={annotations.get(k)!r}, not {v!r}")
    listen = env.get("LOCKSTEP_METRICS_LISTEN", "")
    if not listen.endswith(f":{ports['metrics']}"):
        fail(f"{label}: LOCKSTEP_METRICS_LISTEN={listen!r} is not on its metrics port "
             f"{ports['metrics']}")


# ---------------------------------------------------------------------------- policies

def selects(selector, labels):
    """A LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist)."""
    if selector is None:
        return False
    for k, v in selector.get("matchLabels", {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions", []):
        k, op, values = e["key"], e["operator"], e.get("values", [])
        if op == "In" and labels.get(k) not in values:
            return False
        if op == "NotIn" and labels.get(k) in values:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


class Pod:
    """A connection's source or destination: labels, namespace and named ports."""

    def __init__(self, name, namespace, labels, ports=None, external=False):
        self.name, self.namespace, self.labels = name, namespace, labels
        self.ports, self.external = ports or {}, external


def peer_matches(peer, src, policy_ns, namespaces):
    if "ipBlock" in peer:
        return src.external  # the test's outside source is in every ipBlock
    if src.external:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], namespaces.get(src.namespace, {})):
            return False
    elif src.namespace != policy_ns:
        return False
    return selects(peer.get("podSelector", {}), src.labels)


def port_matches(rule_ports, dst, port, protocol):
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        want = p.get("port")
        if want is None:
            return True
        if isinstance(want, str):
            want = dst.ports.get(want)
        if want is not None and want <= port <= p.get("endPort", want):
            return True
    return False


def allowed(policies, namespaces, src, dst, port, protocol="TCP"):
    selecting = [p for p in policies
                 if p["metadata"].get("namespace") == dst.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                 and selects(p["spec"]["podSelector"], dst.labels)]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get("ingress", []):
            peers = rule.get("from")
            if (not peers or any(peer_matches(x, src, p["metadata"]["namespace"], namespaces)
                                 for x in peers)) and \
                    port_matches(rule.get("ports"), dst, port, protocol):
                return True
    return False


def check_policies(docs):
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    if not policies:
        fail("no NetworkPolicy rendered")
        return
    pods = {}
    for d in workloads(docs):
        labels = d["spec"]["template"]["metadata"]["labels"]
        ports = {p["name"]: p["containerPort"] for c in d["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", []) if "name" in p}
        pods[labels.get("app.kubernetes.io/component")] = Pod(
            d["metadata"]["name"], d["metadata"]["namespace"], labels, ports)
    coordinator, worker = pods.get("coordinator"), pods.get("worker")
    if not coordinator or not worker:
        fail("no coordinator or no worker workload to check the policies against")
        return
    ns = coordinator.namespace
    namespaces = {ns: {"kubernetes.io/metadata.name": ns},
                  "elsewhere": {"kubernetes.io/metadata.name": "elsewhere"}}
    client = Pod("client", ns, dict([CLIENT_LABEL]))
    other = Pod("other", ns, {"app": "other"})
    foreign_client = Pod("client-elsewhere", "elsewhere", dict([CLIENT_LABEL]))
    outside = Pod("outside", None, {}, external=True)
    scraper = Pod("scraper", ns, dict([SCRAPER_LABEL]))
    foreign_scraper = Pod("scraper-elsewhere", "elsewhere", dict([SCRAPER_LABEL]))
    c_port, w_port = coordinator.ports["grpc"], worker.ports["grpc"]
    c_metrics, w_metrics = coordinator.ports.get("metrics", -1), worker.ports.get("metrics", -1)
    collective = 40123  # an ephemeral port, as Gloo and NCCL use
    expect = [
        (worker, coordinator, c_port, "TCP", True),
        (client, coordinator, c_port, "TCP", True),
        (other, coordinator, c_port, "TCP", False),
        (foreign_client, coordinator, c_port, "TCP", False),
        (outside, coordinator, c_port, "TCP", False),
        (worker, coordinator, collective, "TCP", False),
        (coordinator, worker, w_port, "TCP", True),
        (worker, worker, w_port, "TCP", True),
        (client, worker, w_port, "TCP", False),
        (other, worker, w_port, "TCP", False),
        (outside, worker, w_port, "TCP", False),
        (worker, worker, collective, "TCP", True),
        (worker, worker, collective, "UDP", False),
        (coordinator, worker, collective, "TCP", False),
        (client, worker, collective, "TCP", False),
        (other, worker, collective, "TCP", False),
        (scraper, coordinator, c_metrics, "TCP", True),
        (scraper, worker, w_metrics, "TCP", True),
        (scraper, coordinator, c_port, "TCP", False),
        (scraper, worker, w_port, "TCP", False),
        (scraper, worker, collective, "TCP", False),
        (client, coordinator, c_metrics, "TCP", False),
        (other, coordinator, c_metrics, "TCP", False),
        (other, worker, w_metrics, "TCP", False),
        (foreign_scraper, coordinator, c_metrics, "TCP", False),
        (outside, worker, w_metrics, "TCP", False),
    ]
    for src, dst, port, protocol, want in expect:
        got = allowed(policies, namespaces, src, dst, port, protocol)
        if got != want:
            fail(f"NetworkPolicies {'allow' if got else 'deny'} {src.name} -> {dst.name}:"
                 f"{port}/{protocol}; want {'allowed' if want else 'denied'}")
    print(f"{len(policies)} NetworkPolicies: {len(expect)} connections allowed or denied as intended")


def main():
    with open(sys.argv[1]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    for d in docs:
        if d["kind"] == "Secret":
            fail(f'Secret {d["metadata"]["name"]} is rendered (keys belong out of the repository)')
    for d in workloads(docs):
        check_workload(d, configmaps)
    check_policies(docs)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
