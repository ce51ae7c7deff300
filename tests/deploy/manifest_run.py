"""Starting each container's binary as its manifest says (cluster names made local, volumes
in a temporary folder, the image's environment), and checking that it serves, answers
its probes, has its workers register, and stops cleanly on SIGTERM."""
import json
import os
import re
import subprocess
import tempfile
import time

from manifest_common import ROOT, fail, server_flags
from manifest_servers import (Credentials, Server, dashboard_page, health, listening_ports,
                              metrics_page, place_credentials, role)


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
        if env.get("LOCKSTEP_DASHBOARD_LISTEN", "").endswith(f":{port}"):
            ok, text = dashboard_page(port, credentials.ca())
            print(f"   port {port} (dashboard, HTTPS): {text}")
            if not ok:
                fail(f"{c.label}: port {port} does not serve the dashboard over HTTPS: {text}")
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
