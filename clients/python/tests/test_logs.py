"""`lockstep logs JOB [-f]` against a real local cluster (the fixtures of test_client).

It prints the job's events and the servers' log lines about it: the coordinator's, and
each worker's (shipped with its heartbeats), every line naming its worker and rank.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from lockstep_client import Client, state_name
from test_client import LOCKSTEP, client, cluster, spec  # noqa: F401  (the fixtures)


def logs(cluster_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOCKSTEP_CLUSTER_DIR": str(cluster_dir)}
    env.pop("LOCKSTEP_COORDINATOR", None)
    return subprocess.run([str(LOCKSTEP), "logs", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_follow_prints_events_and_every_servers_lines_until_the_end(
        client: Client, cluster: Path) -> None:  # noqa: F811
    job = client.submit(spec(steps=40))
    out = logs(cluster, job.id, "-f")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert state_name(client.get(job.id).state) == "SUCCEEDED"  # -f returned at the end
    steps = [int(m.group(1)) for m in (re.search(r"  step (\d+)/40  loss", x) for x in lines) if m]
    assert steps == sorted(steps) and steps[-1] == 40
    assert any(x.endswith("state SUCCEEDED") for x in lines)
    # The coordinator's lines, with the workers' ranks; each worker's own, shipped.
    assert any(re.search(r"info  coordinator \S+ rank 0: rank 0 of 2", x) for x in lines)
    assert any(re.search(r"info  coordinator: SUCCEEDED", x) for x in lines)
    for rank in (0, 1):
        assert any(re.search(rf"info  worker-\d \S+ rank {rank}: prepared", x) for x in lines), \
            out.stdout


def test_without_follow_prints_what_is_kept_and_returns(client: Client,
                                                        cluster: Path) -> None:  # noqa: F811
    job = client.submit(spec(steps=10))
    assert state_name(client.wait(job.id, timeout=60).state) == "SUCCEEDED"
    out = logs(cluster, job.id, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "state SUCCEEDED" in out.stdout and "coordinator: QUEUED" in out.stdout
    missing = logs(cluster, "job-999999-00000000", timeout=30)
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr
