"""Drives a real local cluster (`lockstep cluster up --workers 2 --detach`) from Python.

The binaries come from $LOCKSTEP_BUILD_DIR (default <repo>/build). The cluster is stopped
with `lockstep cluster down` whatever happens; its logs are printed when a test failed.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from lockstep_client import (
    TERMINAL_STATES,
    Client,
    Event,
    JobSpec,
    LockstepError,
    job_pb2,
    load_spec,
    state_name,
)

REPO = Path(__file__).resolve().parents[3]
BUILD = Path(os.environ.get("LOCKSTEP_BUILD_DIR", REPO / "build"))
LOCKSTEP = BUILD / "clients" / "lockstep"

MLP: dict[str, Any] = {
    "model": {"kind": "mlp", "hidden": [32]},
    "optimizer": {"kind": "adam", "learning_rate": 0.001},
    "global_batch_size": 64,
    "steps": 60,
    "workers": 2,
}


def spec(**overrides: Any) -> dict[str, Any]:
    return {**MLP, **overrides}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Iterator[Path]:
    """A detached local cluster of a coordinator and 2 workers; yields its directory."""
    if not LOCKSTEP.is_file():
        pytest.fail(f"{LOCKSTEP} is missing: build first (scripts/build) or set LOCKSTEP_BUILD_DIR")
    d = tmp_path_factory.mktemp("cluster")
    try:
        up = subprocess.run([str(LOCKSTEP), "cluster", "up", "--workers", "2", "--detach",
                             "--dir", str(d)], capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, f"cluster up failed:\n{up.stdout}{up.stderr}"
        yield d
    finally:
        if (d / "cluster.json").exists():
            subprocess.run([str(LOCKSTEP), "cluster", "down", "--dir", str(d)], timeout=60,
                           capture_output=True)
        if request.session.testsfailed:
            for log in sorted((d / "logs").glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-40:]
                print(f"--- {log.name} (last lines)", *tail, sep="\n", file=sys.stderr)


@pytest.fixture(scope="module")
def client(cluster: Path) -> Iterator[Client]:
    address = json.loads((cluster / "cluster.json").read_text())["coordinator"]
    with Client(address, timeout=10.0, credentials=cluster / "credentials") as c:
        yield c


def test_workers(client: Client) -> None:
    workers = client.workers()
    assert sorted(w.name for w in workers) == ["worker-0", "worker-1"]
    assert all(w.device == "cpu" and w.address and w.id for w in workers)


def test_address_from_cluster_dir(cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCKSTEP_COORDINATOR", raising=False)
    monkeypatch.setenv("LOCKSTEP_CLUSTER_DIR", str(cluster))
    with Client() as c:
        assert c.address == json.loads((cluster / "cluster.json").read_text())["coordinator"]
        assert len(c.workers()) == 2
    monkeypatch.setenv("LOCKSTEP_COORDINATOR", "10.1.2.3:4")
    assert Client().address == "10.1.2.3:4"
    assert Client("h:1").address == "h:1"


def test_tls_and_token_are_required(cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    address = json.loads((cluster / "cluster.json").read_text())["coordinator"]
    with Client(address, timeout=10, credentials=cluster / "credentials",
                token="not-a-token-of-this-cluster") as stranger:
        with pytest.raises(LockstepError) as e:
            stranger.list()
        assert e.value.code == "UNAUTHENTICATED"
    with Client(address, timeout=5, insecure=True) as plaintext:  # the server speaks TLS only
        with pytest.raises(LockstepError) as e:
            plaintext.list()
        assert e.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    monkeypatch.delenv("LOCKSTEP_CREDENTIALS", raising=False)
    monkeypatch.setenv("LOCKSTEP_CLUSTER_DIR", str(cluster / "nowhere"))
    with pytest.raises(LockstepError) as e:
        Client(address)
    assert e.value.code == "INVALID_ARGUMENT" and "credentials" in e.value.message


def test_submit_and_watch_to_success(client: Client) -> None:
    job = client.submit(spec(name="py-mlp"))
    assert job.id and job.spec.name == "py-mlp" and job.spec.steps == 60
    assert job.spec.dataset.path  # defaults filled in by the coordinator

    events: list[Event] = list(client.watch(job.id, timeout=60))
    steps = [e.step for e in events if e.step is not None]
    assert [s.step for s in steps] == list(range(1, 61)), "step events missing or out of order"
    assert all(s.total_steps == 60 and len(s.local_losses) == 2 for s in steps)
    first, last = [s.loss for s in steps[:10]], [s.loss for s in steps[-10:]]
    assert sum(last) / 10 < 0.8 * sum(first) / 10, f"loss did not decrease: {first} -> {last}"
    states = [e.state.state for e in events if e.state is not None]
    assert states[-1] == job_pb2.SUCCEEDED and events[-1].kind == "state"
    assert all(e.unix_ms > 0 for e in events)

    done = client.wait(job.id, timeout=30)
    assert state_name(done.state) == "SUCCEEDED"
    assert done.step == 60 and done.last_loss == pytest.approx(steps[-1].loss)
    assert list(done.workers) and done.param_checksum != 0
    assert client.get(job.id) == done


class _Unavailable(grpc.RpcError):
    """What a stream that broke raises (the connection dropped, the coordinator went)."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "stream dropped by the test"


class _BreakingStream:
    """A WatchJob call that breaks after `after` events: the call is cancelled and the
    iterator raises UNAVAILABLE."""

    def __init__(self, call: Any, after: int) -> None:
        self._call, self._after = call, after

    def __iter__(self) -> Iterator[Any]:
        for i, event in enumerate(self._call):
            if i == self._after:
                self._call.cancel()
                raise _Unavailable()
            yield event

    def cancel(self) -> None:
        self._call.cancel()


class _DroppingStub:
    """The client's stub, except that each of the first `drops` WatchJob streams breaks
    after `after` events; records each WatchJob's from_step."""

    def __init__(self, stub: Any, drops: int, after: int) -> None:
        self._stub, self._drops, self._after = stub, drops, after
        self.from_steps: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    def WatchJob(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802
        self.from_steps.append(request.from_step)
        call = self._stub.WatchJob(request, timeout=timeout)
        return _BreakingStream(call, self._after) if len(self.from_steps) <= self._drops else call


def test_watch_resumes_after_dropped_streams(cluster: Path) -> None:
    address = json.loads((cluster / "cluster.json").read_text())["coordinator"]
    with Client(address, timeout=10.0, credentials=cluster / "credentials") as c:
        # Long enough to be running at each drop: a finished job's steps are dropped
        # from its history once no watcher is behind. The four resumes take about 2.5 s
        # (0.5 s apart); this job's steps take ~1 ms each at the fastest (1,500 steps
        # ended before the last resume once the all-reduce got faster), and 10,000 step
        # events fit the coordinator's history (--history_bytes: about 40,000).
        job = c.submit(spec(name="py-drops", steps=10000, eval={"every_steps": 5000}))
        dropping = _DroppingStub(c._stub, drops=4, after=12)
        c._stub = dropping
        events = list(c.watch(job.id, timeout=120))
    assert len(dropping.from_steps) == 5, dropping.from_steps
    resumed_at = dropping.from_steps[1:]
    assert resumed_at == sorted(resumed_at) and resumed_at[-1] > 0, dropping.from_steps
    steps = [e.step.step for e in events if e.step is not None]
    assert steps == list(range(1, 10001)), "a step missed or repeated across the drops"
    evals = [e.eval.step for e in events if e.eval is not None]
    assert evals == [5000, 10000], evals
    states = [(e.state.state, e.unix_ms) for e in events if e.state is not None]
    assert len(states) == len(set(states)), f"a state event repeated: {states}"
    assert states[-1][0] == job_pb2.SUCCEEDED


def test_watch_resumes_after_the_coordinator_restarts(cluster: Path) -> None:
    """A real dropped stream: the coordinator is killed mid-job and restarted by `cluster
    up`'s supervisor; the job recovers from its snapshot and runs some steps again."""
    record = json.loads((cluster / "cluster.json").read_text())
    with Client(record["coordinator"], timeout=10.0, credentials=cluster / "credentials") as c:
        job = c.submit(spec(name="py-restart", steps=1000,
                                 recovery={"snapshot_every_steps": 50}))
        steps: list[int] = []
        states: list[int] = []
        for event in c.watch(job.id, timeout=240):
            if event.step is not None:
                steps.append(event.step.step)
                if event.step.step == 120:
                    os.kill(record["pids"][0], signal.SIGKILL)  # the coordinator
            elif event.state is not None:
                states.append(event.state.state)
        assert c.wait(job.id, timeout=60).state == job_pb2.SUCCEEDED
    assert steps == list(range(1, 1001)), "a step missed or repeated across the restart"
    assert states[-1] == job_pb2.SUCCEEDED, states


def test_plot_loss_example(cluster: Path, tmp_path: Path) -> None:
    """examples/plot_loss.py against a short job: a PNG of the loss curve."""
    png = tmp_path / "loss.png"
    spec_file = tmp_path / "short.json"
    spec_file.write_text(json.dumps(spec(name="py-plot", steps=30, eval={"every_steps": 10})))
    env = {**os.environ, "LOCKSTEP_CLUSTER_DIR": str(cluster)}
    env.pop("LOCKSTEP_COORDINATOR", None)
    env.pop("LOCKSTEP_CREDENTIALS", None)
    run = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "examples" / "plot_loss.py"),
                          "--submit", str(spec_file), "-o", str(png)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r": 30 steps, [1-9]\d* evaluations of job-\S+ \(SUCCEEDED\)", run.stdout), \
        run.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_checkpoint_downloads_the_final_state(client: Client, tmp_path: Path) -> None:
    done = client.wait(client.submit(spec(steps=20)).id, timeout=60)
    assert state_name(done.state) == "SUCCEEDED"
    out = tmp_path / "job.safetensors"
    assert client.checkpoint(done.id, out) == 20
    assert out.read_bytes() == Path(done.checkpoint_path).read_bytes()  # the same machine
    header_size = int.from_bytes(out.read_bytes()[:8], "little")
    header = json.loads(out.read_bytes()[8:8 + header_size])
    assert header["params.Dense_0.kernel"]["shape"] == [784, 32]
    assert header["__metadata__"]["step"] == "20"
    with pytest.raises(LockstepError) as e:
        client.checkpoint(done.id, tmp_path / "other", step=7)
    assert e.value.code == "NOT_FOUND" and "steps 20" in e.value.message
    assert not (tmp_path / "other").exists() and not (tmp_path / "other.part").exists()


def test_cancel_mid_run(client: Client) -> None:
    job = client.submit(spec(name="py-long", model={"kind": "mlp", "hidden": [256, 256]},
                             steps=1_000_000))
    seen: list[int] = []
    final_state = None
    for event in client.watch(job.id, timeout=60):
        if event.step is not None:
            seen.append(event.step.step)
            if len(seen) == 3:
                client.cancel(job.id)
        elif event.state is not None:
            final_state = event.state.state
    assert seen[:3] == [1, 2, 3] and seen == sorted(seen)
    assert final_state == job_pb2.CANCELLED
    done = client.wait(job.id, timeout=30)
    assert done.state == job_pb2.CANCELLED and 3 <= done.step < 1_000_000
    # An ended job cannot be cancelled again; the workers are free again.
    with pytest.raises(LockstepError) as e:
        client.cancel(job.id)
    assert e.value.code == "FAILED_PRECONDITION"
    deadline = time.monotonic() + 15
    while any(w.job_id for w in client.workers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(w.job_id for w in client.workers())


@pytest.mark.parametrize("bad, field", [
    (spec(model={"kind": "rnn"}), "model.kind"),                               # server
    (spec(optimizer={"kind": "adam", "learning_rate": -1}), "optimizer.learning_rate"),
    (spec(model={"kind": "mlp", "hiden": [32]}), "hiden"),                     # client: unknown
    (spec(steps="many"), "steps"),                                             # client: bad value
])
def test_invalid_spec(client: Client, bad: dict[str, Any], field: str) -> None:
    with pytest.raises(LockstepError) as e:
        client.submit(bad)
    assert e.value.code == "INVALID_ARGUMENT"
    assert field in e.value.message


def test_errors(client: Client) -> None:
    with pytest.raises(LockstepError) as e:
        client.get("job-does-not-exist")
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(LockstepError) as e:
        list(client.watch("job-does-not-exist", timeout=10))
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(LockstepError) as e:
        client.list(states=["NO_SUCH_STATE"])
    assert e.value.code == "INVALID_ARGUMENT"
    with Client("127.0.0.1:1", timeout=2, insecure=True) as nobody:
        with pytest.raises(LockstepError) as e:
            nobody.workers()
        assert e.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_request_id_is_idempotent(client: Client, tmp_path: Path) -> None:
    # A YAML file as a user writes it (PyYAML reads 1e-3 as a string: protobuf's JSON
    # mapping accepts it).
    path = tmp_path / "small.yaml"
    path.write_text("name: py-idem\nmodel: {kind: mlp, hidden: [16]}\n"
                    "optimizer: {kind: sgd, learning_rate: 1e-3, momentum: 0.9}\n"
                    "global_batch_size: 32\nsteps: 5\nworkers: 2\n")
    rid = f"py-{uuid.uuid4()}"
    before = len(client.list())
    first = client.submit(path, request_id=rid)
    again = client.submit(str(path), request_id=rid)
    assert first.id == again.id
    # A JobSpec message, another spec with the same request id: ALREADY_EXISTS naming the
    # first job (issue 26: at 400deec the first job was returned without a word).
    message = load_spec(spec(steps=7))
    message.request_id = rid
    assert isinstance(message, JobSpec)
    with pytest.raises(LockstepError) as e:
        client.submit(message)
    assert e.value.code == "ALREADY_EXISTS" and first.id in e.value.message
    assert len(client.list()) == before + 1
    done = client.wait(first.id, timeout=30)
    assert done.state == job_pb2.SUCCEEDED and done.spec.optimizer.learning_rate == 1e-3
    assert client.list(limit=1)[0].id == first.id
    succeeded = client.list(states=["SUCCEEDED", job_pb2.FAILED])
    assert first.id in [j.id for j in succeeded]
    assert all(j.state in TERMINAL_STATES for j in succeeded)
    assert not client.list(states=[job_pb2.RUNNING, job_pb2.QUEUED])
    other = client.submit(path, request_id=rid + "-2")
    assert other.id != first.id
    assert client.wait(other.id, timeout=30).state == job_pb2.SUCCEEDED


def test_a_resumed_watch_yields_each_replayed_step_once() -> None:
    from lockstep_client.client import _Resume

    def step(n: int, replay: bool = False, unix_ms: int = 0) -> job_pb2.JobEvent:
        return job_pb2.JobEvent(step=job_pb2.StepEvent(step=n, replay=replay), unix_ms=unix_ms)

    seen = _Resume(0)
    assert seen.first(step(1)) and seen.first(step(2))
    assert seen.first(step(2, replay=True, unix_ms=5))  # dropped as seen before the fix
    assert not seen.first(step(2, replay=True, unix_ms=5))  # the resumed stream's copy
    assert seen.first(step(2, replay=True, unix_ms=9))  # a second recovery's replay
    assert seen.from_step == 2
    assert Event.from_proto(step(2, replay=True)).replay
    assert not Event.from_proto(step(3)).replay
