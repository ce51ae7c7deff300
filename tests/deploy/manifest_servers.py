"""The servers the deployment checks start: the credentials one `lockstep certs` run makes,
put where a container's variables point; the processes; and how to ask them whether they
serve (ports listening, gRPC health over TLS, /metrics, the dashboard over HTTPS)."""
import base64
import os
import re
import signal
import ssl
import subprocess
import urllib.error
import urllib.request

import yaml

from manifest_common import fail


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


def dashboard_page(port, ca):
    """The dashboard over HTTPS, its certificate checked against the CA (it names 127.0.0.1
    besides lockstep-coordinator): (whether the page is served and the API asks for a token,
    what was seen)."""
    context = ssl.create_default_context(cafile=ca)

    def get(path):
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=context,
                                        timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    try:
        page, api = get("/"), get("/api/v1/whoami")
    except OSError as e:
        return False, str(e)
    ok = page[0] == 200 and "<title>Lockstep</title>" in page[1] and api[0] == 401
    return ok, f"GET / {page[0]}, GET /api/v1/whoami without a token {api[0]}"


def health(cli, port, server_name, ca, timeout=2):
    """`lockstep health` over TLS, checking the server's certificate for server_name."""
    r = subprocess.run([cli, "health", f"127.0.0.1:{port}", "--timeout", str(timeout),
                        "--server-name", server_name],
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
