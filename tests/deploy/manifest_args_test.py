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

Its parts, a module each beside it: manifest_workloads.py (what the manifests ask for),
manifest_servers.py (credentials, processes, health), manifest_run.py (starting and
checking each container), manifest_doc.py (CONFIGURATION.md), manifest_netns.py (the
private network namespace) and manifest_common.py (failures, the binaries' flags).

Usage: manifest_args_test.py --build BUILD_DIR [--doc] [--compose] [--k8s]
"""
import argparse
import os
import sys

import manifest_common
from manifest_common import binaries, fail
from manifest_doc import check_doc
from manifest_netns import in_private_netns, reexec_in_netns
from manifest_run import run_set
from manifest_servers import listening_ports
from manifest_workloads import (check_copies, compose_containers, k8s_containers, render_compose,
                                render_k8s)


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
    if manifest_common.failures:
        print(f"{len(manifest_common.failures)} check(s) failed")
        return 1
    print("all deployment checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
