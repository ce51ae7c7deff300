#!/usr/bin/env python3
"""Checks that the deployment files configure the servers the way the binaries accept.

For every container of the rendered Kubernetes overlays and every service of the compose
file, it takes the command, arguments, environment, ports and probes, and starts the real
binary from the build tree with them (cluster service names become 127.0.0.1, the pod IP
127.0.0.1, volume paths a temporary directory). The TLS files come from one `lockstep
certs --k8s-secrets` run and are put where each container's LOCKSTEP_TLS_* and
LOCKSTEP_TOKENS_FILE point: in a pod, the key of that name of the Secret mounted there, as
certs wrote it; in compose, certs' file of that name (compose's volumes hold copies of
them). It checks that:
  - every LOCKSTEP_* variable names a flag of that binary (the servers ignore the others);
  - each TLS file it names lies on one of the container's volumes, and is a key of the
    Secret mounted there (made for the pod's namespace) or a file certs makes;
  - the binary starts (no unknown flag, no bad value) and keeps running;
  - it listens on each port the container declares, and each port answers the gRPC
    health check over TLS with SERVING (`lockstep health`, checking the certificate of
    the role), and so does the image's own health check (docker/healthcheck); a port
    named `metrics` instead answers GET /metrics with Lockstep's Prometheus metrics;
  - each probe passes: an exec probe must run lockstep-healthcheck (the image's health
    check; kubelet gRPC probes cannot speak TLS) and exit 0 within its timeoutSeconds,
    run with the container's environment; a tcpSocket probe's port must listen;
  - the workers register with the coordinator (`lockstep workers` with the admin token);
  - it stops cleanly on SIGTERM within the grace period.
The compose file's one-shot `credentials` service, which copies the credentials into the
servers' volumes, is no server and is not started: it is checked to copy each file a
server names into the volume the server mounts there.
With --doc it also checks deploy/CONFIGURATION.md against the binaries' flags, and that
each flag's LOCKSTEP_* variable really sets it.

The servers are started inside a private network namespace where one can be made (root
or user namespaces), so the manifests' fixed ports never collide with anything else.

Usage: manifest_args_test.py --build BUILD_DIR [--doc] [--compose] [--k8s]
"""
import argparse
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
failures = []


def fail(msg):
    print(f"FAIL: {msg}")
    failures.append(msg)


def binaries(build):
    return {
        "lockstep-coordinator": os.path.join(build, "services", "lockstep-coordinator"),
        "lockstep-worker": os.path.join(build, "services", "lockstep-worker"),
        "lockstep": os.path.join(build, "clients", "lockstep"),
    }


def help_entries(path, env=None):
    """{flag: help text} for the flags defined in services/ (not absl's own): --helpfull."""
    out = subprocess.run([path, "--helpfull"], capture_output=True, text=True, timeout=30,
                         env=env)
    entries, own, current = {}, False, None
    for line in (out.stdout + out.stderr).splitlines():
        if line.strip().startswith("Flags from "):
            own, current = "/services/" in line, None
            continue
        m = re.match(r"    --(\w+) \(", line)
        if m:
            current = m.group(1) if own else None
            if current:
                entries[current] = line
        elif current and line.startswith("      "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


_flag_cache = {}


def server_flags(path):
    """{name: default as --helpfull prints it} for a server binary's own flags."""
    if path not in _flag_cache:
        flags = {}
        for name, text in help_entries(path).items():
            m = re.search(r"; default: (.*?);", text)
            flags[name] = m.group(1) if m else None
        _flag_cache[path] = flags
    return _flag_cache[path]


# ---------------------------------------------------------------------------- namespaces

def in_private_netns():
    return os.environ.get("LOCKSTEP_DEPLOY_NETNS") == "1"


def reexec_in_netns():
    """Runs this script again in a new network namespace with loopback up, if possible."""
    if in_private_netns() or not shutil.which("unshare"):
        return None
    script = "ip link set lo up 2>/dev/null || ifconfig lo up 2>/dev/null; exec \"$@\""
    env = dict(os.environ, LOCKSTEP_DEPLOY_NETNS="1")
    for flags in (["--net"], ["--net", "--map-root-user"]):
        probe = subprocess.run(["unshare", *flags, "true"], capture_output=True)
        if probe.returncode == 0:
            cmd = ["unshare", *flags, "sh", "-c", script, "sh", sys.executable, *sys.argv]
            return subprocess.run(cmd, env=env).returncode
    return None


# ---------------------------------------------------------------------------- processes

def listening_ports():
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A":  # LISTEN
                        ports.add(int(parts[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def role(binary_name):
    """coordinator or worker: whose certificate a server of this binary holds."""
    return binary_name[len("lockstep-"):]


def metrics_page(port):
    """GET /metrics over plain HTTP: (whether it lists lockstep_ series, what was seen)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            body = r.read().decode()
    except OSError as e:
        return False, str(e)
    series = [line.split("{")[0].split(" ")[0] for line in body.splitlines()
              if line.startswith("lockstep_")]
    return bool(series), f"{len(series)} lockstep_ samples"


def health(cli, port, server_name, ca, timeout=2):
    """`lockstep health` over TLS, checking the server's certificate for server_name."""
    r = subprocess.run([cli, "health", f"127.0.0.1:{port}", "--timeout", str(timeout),
                        "--server_name", server_name],
                       env=dict(os.environ, LOCKSTEP_TLS_CA=ca), capture_output=True,
                       text=True, timeout=timeout + 10)
    return r.returncode == 0, (r.stdout + r.stderr).strip()


class Credentials:
    """One `lockstep certs` run: its folder (CA and its key, the coordinator's certificate
    and key, tokens, bootstrap token, admin.token) and the Kubernetes Secrets it writes, {name: (namespace, {key: bytes})}."""

    def __init__(self, cli, tmp):
        self.dir = os.path.join(tmp, "credentials")
        secrets_file = os.path.join(tmp, "secrets.yaml")
        subprocess.run([cli, "certs", "--out", self.dir, "--k8s-secrets", secrets_file],
                       check=True, capture_output=True, timeout=60)
        self.secrets = {}
        with open(secrets_file) as f:
            for d in yaml.safe_load_all(f):
                if d and d.get("kind") == "Secret":
                    data = {k: base64.b64decode(v) for k, v in d.get("data", {}).items()}
                    self.secrets[d["metadata"]["name"]] = (d["metadata"].get("namespace"), data)

    def ca(self):
        return os.path.join(self.dir, "ca.pem")


# The variables naming the files a server's TLS needs (a worker that enrolls: the CA and
# the bootstrap token; the coordinator signing for it: the CA's key and the token).
TLS_VARS = ("LOCKSTEP_TLS_CA", "LOCKSTEP_TLS_CERT", "LOCKSTEP_TLS_KEY", "LOCKSTEP_TOKENS_FILE",
            "LOCKSTEP_WORKER_CA_KEY", "LOCKSTEP_BOOTSTRAP_TOKEN_FILE")


def mount_of(c, path):
    """(mount path, what is mounted there) of the container's volume holding path."""
    for target in sorted(c.mounts, key=len, reverse=True):
        if path.startswith(target.rstrip("/") + "/"):
            return target, c.mounts[target]
    return None, None


def credential(c, key, path, credentials):
    """What the file at path holds in the container: a key of the Secret mounted there
    (Kubernetes), else the file of that name `lockstep certs` made (compose's volumes)."""
    target, source = mount_of(c, path)
    if target is None:
        fail(f"{c.label}: {key}={path} is on none of its volumes {sorted(c.mounts)}")
        return None
    name = os.path.relpath(path, target)
    if source.startswith("secret:"):
        secret = source[len("secret:"):]
        if secret not in credentials.secrets:
            fail(f"{c.label}: mounts Secret {secret}, which `lockstep certs --k8s-secrets` "
                 f"does not make (it makes {sorted(credentials.secrets)})")
            return None
        namespace, data = credentials.secrets[secret]
        if namespace != c.namespace:
            fail(f"{c.label}: runs in namespace {c.namespace}, Secret {secret} is made for {namespace}")
        if name not in data:
            fail(f"{c.label}: {key}={path}: Secret {secret} has no key {name} ({sorted(data)})")
            return None
        return data[name]
    source_file = os.path.join(credentials.dir, name)
    if not os.path.exists(source_file):
        fail(f"{c.label}: {key}={path}: `lockstep certs` makes no {name}")
        return None
    with open(source_file, "rb") as f:
        return f.read()


def place_credentials(c, env, local_env, credentials):
    """Writes the credentials where the container's variables point (after localize)."""
    for key in TLS_VARS:
        if key in env:
            content = credential(c, key, env[key], credentials)
            if content is None:
                continue
            path = local_env[key]
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(content)
            os.chmod(path, 0o400)


class Server:
    """A binary started with a container's command, arguments and environment."""

    def __init__(self, label, argv, env, log_dir):
        self.label = label
        self.log_path = os.path.join(log_dir, re.sub(r"\W+", "_", label) + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self, grace_s):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                fail(f"{self.label}: still running {grace_s}s after SIGTERM")
                return
            if self.proc.returncode != 0:
                fail(f"{self.label}: exit code {self.proc.returncode} after SIGTERM")
        self.log.close()


# ---------------------------------------------------------------------------- containers

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


def healthcheck_timeout_s():
    """The --timeout docker/healthcheck gives `lockstep health`."""
    with open(os.path.join(ROOT, "docker", "healthcheck")) as f:
        m = re.search(r"--timeout (\d+)", f.read())
    return int(m.group(1)) if m else 1


HEALTHCHECK_TIMEOUT_S = healthcheck_timeout_s()


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


def image_env():
    """The ENV the CPU image sets (docker/Dockerfile's runtime stage)."""
    env = {}
    with open(os.path.join(ROOT, "docker", "Dockerfile")) as f:
        text = f.read().split("AS runtime", 1)[1]
    for m in re.finditer(r"^ENV (.*?)(?<!\\)$", text, re.M | re.S):
        for k, v in re.findall(r"(\w+)=(\S+)", m.group(1)):
            env[k] = v
    return env


def localize(value, services, tmp, mounts):
    """Cluster names to 127.0.0.1; paths under a volume (or /tmp) into the temp dir."""
    for svc in sorted(services, key=len, reverse=True):
        value = re.sub(r"(?<![\w.-])%s(\.[\w.-]+)?:" % re.escape(svc), "127.0.0.1:", value)
    for m in sorted(set(mounts) | {"/tmp", "/var/lib/lockstep"}, key=len, reverse=True):
        if value == m or value.startswith(m.rstrip("/") + "/"):
            return os.path.join(tmp, value.lstrip("/"))
    return value


def check_container(c, services, bins, tmp, with_image_env, credentials):
    print(f"== {c.label}: {' '.join(c.command)}")
    if not c.command or c.command[0] not in ("lockstep-coordinator", "lockstep-worker"):
        fail(f"{c.label}: command {c.command} does not start a Lockstep server")
        return None
    binary = bins[c.command[0]]
    flags = server_flags(binary)
    for key in sorted(c.env):
        if key.startswith("LOCKSTEP_") and key[len("LOCKSTEP_"):].lower() not in flags:
            fail(f"{c.label}: {key} names no flag of {c.command[0]} (it would be ignored)")
    for arg in c.command[1:]:
        m = re.match(r"--(\w+)", arg)
        if m and m.group(1) not in flags:
            fail(f"{c.label}: argument {arg} is no flag of {c.command[0]}")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp}
    if with_image_env:
        env.update(image_env())
    env.update(c.env)
    if env.get("LOCKSTEP_DEVICE", "cpu").startswith("cuda") and not os.path.exists("/dev/nvidia0"):
        print(f"   {c.label}: LOCKSTEP_DEVICE={env['LOCKSTEP_DEVICE']} run as cpu (no GPU here)")
        env["LOCKSTEP_DEVICE"] = "cpu"
    local_env = {k: localize(v, services, tmp, c.mounts) for k, v in env.items()}
    place_credentials(c, env, local_env, credentials)
    env = local_env
    env.setdefault("LOCKSTEP_PORT_FILE", os.path.join(tmp, "port"))
    argv = [binary] + [localize(a, services, tmp, c.mounts) for a in c.command[1:]]
    for k, v in env.items():
        if k in ("LOCKSTEP_STATE_DIR",):
            os.makedirs(v, exist_ok=True)
        if k == "LOCKSTEP_PORT_FILE":
            os.makedirs(os.path.dirname(v), exist_ok=True)
    shown = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("LOCKSTEP_"))
    print(f"   start: {shown} {' '.join(argv)}")
    server = Server(c.label, argv, env, tmp)
    return server, env


def wait_serving(c, server, env, bins, credentials, image_path):
    cli = bins["lockstep"]
    ports = list(c.ports) + [p.port for p in c.probes if p.port is not None]
    deadline = time.time() + 30
    while time.time() < deadline:
        if server.proc.poll() is not None:
            fail(f"{c.label}: exited with {server.proc.returncode} at start:\n{server.output()}")
            return
        if all(p in listening_ports() for p in ports) and os.path.exists(env["LOCKSTEP_PORT_FILE"]):
            break
        time.sleep(0.2)
    listening = listening_ports()
    for port in c.ports:
        if port not in listening:
            fail(f"{c.label}: declares port {port} but does not listen on it:\n{server.output()}")
    server_name = f"lockstep-{role(c.command[0])}"
    for port, name in c.ports.items():
        if name == "metrics":
            ok, text = metrics_page(port)
            print(f"   port {port} (metrics): {text}")
            if not ok:
                fail(f"{c.label}: port {port} does not serve Prometheus metrics: {text}")
            continue
        ok, text = health(cli, port, server_name, credentials.ca())
        print(f"   port {port} as {server_name} over TLS: {text}")
        if not ok:
            fail(f"{c.label}: port {port} is not SERVING over TLS as {server_name}: {text}")
    for probe in c.probes:
        probe.run(c.label, env, image_path)
    # The image's HEALTHCHECK (docker/healthcheck) finds the port through the port file.
    hc = subprocess.run([os.path.join(ROOT, "docker", "healthcheck")], capture_output=True, text=True,
                        env=dict(env, PATH=os.path.dirname(cli) + ":" + env["PATH"]), timeout=20)
    print(f"   image health check: {(hc.stdout + hc.stderr).strip()}")
    if hc.returncode != 0:
        fail(f"{c.label}: the image's health check fails: {hc.stdout}{hc.stderr}")
    time.sleep(1)
    if server.proc.poll() is not None:
        fail(f"{c.label}: exited with {server.proc.returncode}:\n{server.output()}")


def check_registered(n, port_file, bins, credentials):
    """The workers reached the coordinator through the address their manifest gives."""
    if not os.path.exists(port_file):
        fail(f"{n} worker(s) started, but the coordinator did not (see above)")
        return
    with open(port_file) as f:
        address = f"127.0.0.1:{f.read().strip()}"
    deadline, seen = time.time() + 20, 0
    while time.time() < deadline:
        r = subprocess.run([bins["lockstep"], "workers", "--json", "--coordinator", address,
                            "--credentials", credentials.dir],
                           capture_output=True, text=True, timeout=40)
        if r.returncode == 0:
            seen = len(json.loads(r.stdout or "{}").get("workers", []))
            if seen >= n:
                print(f"   {seen} worker(s) registered with the coordinator")
                return
        time.sleep(0.5)
    fail(f"{n} worker(s) started, {seen} registered with the coordinator")


def run_set(name, containers, services, bins, with_image_env):
    print(f"# {name}")
    # Coordinators first: workers resolve the coordinator's address when they start.
    containers.sort(key=lambda c: c.command[:1] != ["lockstep-coordinator"])
    with tempfile.TemporaryDirectory(prefix="lockstep-manifest-") as tmp:
        credentials = Credentials(bins["lockstep"], tmp)
        # The image's PATH, as probes see it: lockstep-healthcheck (docker/healthcheck)
        # and lockstep.
        image_path = [os.path.join(tmp, "bin"), os.path.dirname(bins["lockstep"])]
        os.makedirs(image_path[0])
        os.symlink(os.path.join(ROOT, "docker", "healthcheck"),
                   os.path.join(image_path[0], "lockstep-healthcheck"))
        started, coordinator_port_file = [], None
        for c in containers:
            sub = os.path.join(tmp, re.sub(r"\W+", "_", c.label))
            os.makedirs(sub)
            r = check_container(c, services, bins, sub, with_image_env, credentials)
            if r:
                server, env = r
                started.append((c, server))
                wait_serving(c, server, env, bins, credentials, image_path)
                if c.command[0] == "lockstep-coordinator":
                    coordinator_port_file = env["LOCKSTEP_PORT_FILE"]
        workers = [s for c, s in started if c.command[0] == "lockstep-worker"]
        if workers and coordinator_port_file:
            check_registered(len(workers), coordinator_port_file, bins, credentials)
        for c, server in reversed(started):
            server.stop(c.grace_s)
            if server.proc.returncode == 0:
                print(f"   {c.label}: stopped cleanly on SIGTERM")


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


# ---------------------------------------------------------------------------- the doc

def check_doc(bins):
    path = os.path.join(ROOT, "deploy", "CONFIGURATION.md")
    rows = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\| (coordinator|worker) \| `--(\w+)` \| `(\w+)` \| (.*?) \|", line)
            if m:
                rows[(m.group(1), m.group(2))] = (m.group(3), m.group(4))
    for role in ("coordinator", "worker"):
        binary = bins[f"lockstep-{role}"]
        flags = server_flags(binary)
        documented = {f for r, f in rows if r == role}
        for missing in sorted(set(flags) - documented):
            fail(f"CONFIGURATION.md: {role} flag --{missing} is not in the table")
        for extra in sorted(documented - set(flags)):
            fail(f"CONFIGURATION.md: {role} has no flag --{extra}")
        for flag in sorted(set(flags) & documented):
            env, default = rows[(role, flag)]
            if env != "LOCKSTEP_" + flag.upper():
                fail(f"CONFIGURATION.md: --{flag} is documented as {env}")
            real = flags[flag].strip('"') if flags[flag] else ""
            doc = default.strip("`")
            if real and doc != real:
                fail(f"CONFIGURATION.md: {role} --{flag} default {doc}, the binary says {real}")
            if not real and not doc.startswith("("):
                fail(f"CONFIGURATION.md: {role} --{flag} has no default, the table says {doc}")
            # The variable must really set the flag: --helpfull then shows "currently".
            value = ("7" if re.fullmatch(r"-?\d+", real or "x") else
                     "true" if real in ("false", "true") else "probe-value")
            text = help_entries(binary, dict(os.environ, **{env: value})).get(flag, "")
            m = re.search(r"; currently: (.*?);", text)
            if not m or m.group(1).strip('"') != value:
                fail(f"{role}: {env}={value} does not set --{flag}")
        print(f"# CONFIGURATION.md: {len(documented)} {role} flags match lockstep-{role}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--k8s", action="store_true")
    ap.add_argument("--compose", action="store_true")
    ap.add_argument("--doc", action="store_true")
    args = ap.parse_args()
    bins = binaries(os.path.abspath(args.build))
    for name, path in bins.items():
        if not os.access(path, os.X_OK):
            print(f"FAIL: {path} is not built")
            return 1
    if (args.k8s or args.compose) and not in_private_netns():
        rc = reexec_in_netns()
        if rc is not None:
            return rc
        print("note: no private network namespace; using this machine's ports")
    if args.doc:
        check_doc(bins)
    if args.k8s or args.compose:
        rendered = {}
        if args.k8s:
            for overlay in ("cpu", "gpu"):
                rendered[f"k8s overlays/{overlay}"] = ("k8s", render_k8s(overlay))
        if args.compose:
            rendered["docker-compose.yml"] = ("compose", render_compose())
        for name, (kind, text) in rendered.items():
            containers, services = (k8s_containers if kind == "k8s" else compose_containers)(text)
            busy = {p for c in containers for p in c.ports} & listening_ports()
            if busy:
                fail(f"{name}: ports {sorted(busy)} are taken on this machine; cannot check")
                continue
            run_set(name, containers, services, bins, with_image_env=True)
            if kind == "compose":
                check_copies(text, containers)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all deployment checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
