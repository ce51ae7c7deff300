"""What the manifests ask for, read from the rendered Kubernetes overlays and compose file:
each workload's container (command, environment, ports, probes, volumes), its probes, and
the compose `credentials` service's copies."""
import os
import re
import shutil
import subprocess
import sys

import yaml

from manifest_common import ROOT, SKIP, fail
from manifest_servers import TLS_VARS, listening_ports, mount_of

def healthcheck_timeout_s():
    """The --timeout docker/healthcheck gives `lockstep health`."""
    with open(os.path.join(ROOT, "docker", "healthcheck")) as f:
        m = re.search(r"--timeout (\d+)", f.read())
    return int(m.group(1)) if m else 1


HEALTHCHECK_TIMEOUT_S = healthcheck_timeout_s()


class Probe:
    """A Kubernetes probe: exec (must run the image's health check) or tcpSocket."""

    def __init__(self, label, kind, spec, port_names):
        self.kind, self.timeout_s = kind, spec.get("timeoutSeconds", 1)
        self.command, self.port = None, None
        if "exec" in spec:
            self.command = list(spec["exec"].get("command", []))
            if not self.command or os.path.basename(self.command[0]) != "lockstep-healthcheck":
                fail(f"{label}: {kind} runs {self.command}, not lockstep-healthcheck")
            if self.timeout_s < HEALTHCHECK_TIMEOUT_S:
                fail(f"{label}: {kind} timeoutSeconds {self.timeout_s} is shorter than the "
                     f"{HEALTHCHECK_TIMEOUT_S} s the health check may take")
        elif "tcpSocket" in spec:
            port = spec["tcpSocket"]["port"]
            self.port = port_names.get(port, port)
        elif "grpc" in spec:
            fail(f"{label}: {kind} is a grpc probe, which cannot speak TLS; "
                 "exec lockstep-healthcheck instead")
        else:
            fail(f"{label}: {kind} is neither exec nor tcpSocket")

    def run(self, label, env, image_path):
        """Runs the probe as the kubelet would, against the started server."""
        if self.port is not None:
            ok = self.port in listening_ports()
            print(f"   {self.kind} tcpSocket port {self.port}: {'open' if ok else 'closed'}")
            if not ok:
                fail(f"{label}: {self.kind} port {self.port} does not listen")
            return
        if not self.command:
            return
        # In the image it is /usr/local/bin/lockstep-healthcheck; here, on image_path.
        command = [os.path.basename(self.command[0])] + self.command[1:]
        try:
            r = subprocess.run(command, capture_output=True, text=True,
                               timeout=self.timeout_s,
                               env=dict(env, PATH=":".join(image_path + [env["PATH"]])))
        except subprocess.TimeoutExpired:
            fail(f"{label}: {self.kind} {self.command} took over {self.timeout_s} s")
            return
        text = (r.stdout + r.stderr).strip()
        print(f"   {self.kind} exec {' '.join(self.command)}: {text}")
        if r.returncode != 0:
            fail(f"{label}: {self.kind} {self.command} exits {r.returncode}: {text}")


class Container:
    """What a workload runs: argv, environment, declared ports and probes."""

    def __init__(self, label, command, env, ports, probes, mounts, grace_s, namespace=None):
        self.label, self.command, self.env = label, command, env
        self.ports, self.probes, self.grace_s = ports, probes, grace_s
        self.mounts = mounts  # {mount path: "secret:NAME" or the volume's name or source}
        self.namespace = namespace


def k8s_containers(rendered):
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    out = []
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            continue
        pod = d["spec"]["template"]["spec"]
        for c in pod.get("containers", []):
            label = f'{d["kind"]}/{d["metadata"]["name"]}/{c["name"]}'
            env = {}
            for src in c.get("envFrom", []):
                ref = src.get("configMapRef", {}).get("name")
                if ref not in configmaps:
                    fail(f"{label}: envFrom names ConfigMap {ref}, which is not rendered")
                    continue
                env.update(configmaps[ref])
            for e in c.get("env", []):
                if "value" in e:
                    env[e["name"]] = e["value"]
                elif "fieldRef" in e.get("valueFrom", {}):
                    path = e["valueFrom"]["fieldRef"]["fieldPath"]
                    env[e["name"]] = {"status.podIP": "127.0.0.1",
                                      "metadata.name": f'{d["metadata"]["name"]}-0'}.get(path, "x")
                else:
                    fail(f"{label}: env {e['name']} has a source this test does not know")
            ports = {p["containerPort"]: p.get("name") for p in c.get("ports", [])}
            names = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            probes = []
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = c.get(kind)
                if probe:
                    probes.append(Probe(label, kind, probe, names))
            volumes = {v["name"]: (f'secret:{v["secret"]["secretName"]}' if "secret" in v
                                   else v["name"]) for v in pod.get("volumes", [])}
            mounts = {m["mountPath"]: volumes.get(m["name"], m["name"])
                      for m in c.get("volumeMounts", [])}
            command = list(c.get("command", [])) + list(c.get("args", []))
            out.append(Container(label, command, env, ports, probes, mounts,
                                 pod.get("terminationGracePeriodSeconds", 30),
                                 d["metadata"].get("namespace")))


    return out, services


def compose_containers(rendered):
    doc = yaml.safe_load(rendered)
    services = set(doc["services"])
    out = []
    for name, svc in doc["services"].items():
        if name == "credentials":
            continue  # the one-shot copy of the credentials, no server: check_copies
        command = svc.get("command", [])
        if isinstance(command, str):
            command = command.split()
        if not command or not command[0].startswith("lockstep-"):
            print(f"== compose/{name}: not a Lockstep server (profile "
                  f"{svc.get('profiles', ['(none)'])}), not started")
            continue  # e.g. the optional Prometheus (profile metrics): no flags of ours
        env = svc.get("environment", {})
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        ports = {}
        for p in svc.get("ports", []):
            target = p["target"] if isinstance(p, dict) else str(p).rsplit(":", 1)[1]
            ports[int(str(target).split("/")[0])] = "published"
        grace = svc.get("stop_grace_period", "10s")
        grace_s = int(re.sub(r"\D", "", str(grace)) or 10)
        out.append(Container(f"compose/{name}", command, {k: str(v) for k, v in env.items()},
                             ports, [], compose_mounts(svc), grace_s))
    return out, services


def compose_mounts(svc):
    """{mount path: volume name or host path} of a compose service."""
    mounts = {}
    for v in svc.get("volumes", []):
        if isinstance(v, dict):
            mounts[v["target"]] = v.get("source", "")
        else:
            parts = v.split(":")
            mounts[parts[1] if len(parts) > 1 else parts[0]] = parts[0]
    return mounts


def check_copies(rendered, containers):
    """The compose `credentials` service copies each TLS file a server names into the
    volume the server mounts there (its `for f in NAMES; do ... DIR/$f; done` loops)."""
    svc = yaml.safe_load(rendered)["services"].get("credentials")
    if not svc:
        fail("docker-compose.yml: no `credentials` service to fill the servers' TLS volumes")
        return
    command = svc.get("command", "")
    script = " ".join(command) if isinstance(command, list) else str(command)
    mounted_at = {source: target for target, source in compose_mounts(svc).items()}
    copied = set()  # (volume, file name)
    for var, names, body in re.findall(r"for (\w+) in ([^;]+); do (.*?); done", script):
        for folder in re.findall(r"(/[\w/.-]+)/\$+\{?%s\b" % var, body):
            volume = next((v for v, t in mounted_at.items() if t == folder), None)
            copied |= {(volume, n) for n in names.split()}
    for c in containers:
        for key in TLS_VARS:
            if key in c.env:
                target, volume = mount_of(c, c.env[key])
                name = os.path.relpath(c.env[key], target) if target else c.env[key]
                if (volume, name) not in copied:
                    fail(f"{c.label}: {key}={c.env[key]}: the credentials service copies no "
                         f"{name} into volume {volume}")
    print(f"== compose/credentials (one-shot, not started): copies {len(copied)} files")


def render_k8s(overlay):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("SKIP: kubectl not found")
        sys.exit(SKIP)
    return subprocess.run([kubectl, "kustomize", os.path.join(ROOT, "deploy", "k8s", "overlays", overlay)],
                          check=True, capture_output=True, text=True).stdout


def render_compose():
    if not shutil.which("docker-compose"):
        print("SKIP: docker-compose not found")
        sys.exit(SKIP)
    return subprocess.run(["docker-compose", "-f", os.path.join(ROOT, "docker-compose.yml"), "config"],
                          check=True, capture_output=True, text=True, cwd=ROOT).stdout
