"""What a Ray JobSubmissionClient user expects of the client (issue 45): jobs by a prefix
of their id, states as names, readable reprs, typed exceptions, a job's logs (followed,
tailed, filtered) and its events, and the quickstart example, against a real local cluster
(the fixtures of test_client)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep_client import (
    TERMINAL_STATES,
    Client,
    Event,
    InvalidArgument,
    JobInfo,
    JobNotFound,
    JobStatus,
    LockstepError,
    NotFound,
    job_pb2,
    state_name,
)
from lockstep_client.errors import FailedPrecondition, Unavailable, error_for
from test_client import cluster, client, spec  # noqa: F401  (the fixtures)


def test_job_status_is_a_name_that_also_equals_the_protobuf_number() -> None:
    done = JobInfo(job_pb2.Job(id="job-000001-ab", state=job_pb2.SUCCEEDED, step=3,
                               total_steps=3, last_loss=0.5, owner="alice",
                               spec={"name": "mnist", "workers": 2}))
    assert done.state == "SUCCEEDED" and done.state == job_pb2.SUCCEEDED
    assert done.state != "FAILED" and done.state != job_pb2.FAILED
    assert done.state is JobStatus.SUCCEEDED and done.state.is_terminal()
    assert f"{done.state}" == "SUCCEEDED" and state_name(done.state) == "SUCCEEDED"
    assert done.state in TERMINAL_STATES and "CANCELLED" in TERMINAL_STATES
    assert JobStatus.of(job_pb2.RUNNING) is JobStatus.RUNNING
    # A repr a user can read (at 0692893 print(job) was many lines of protobuf text).
    assert repr(done) == ("JobInfo(id='job-000001-ab', name='mnist', state=SUCCEEDED, step=3/3, "
                          "loss=0.5000, workers=2, owner='alice')")
    assert done.spec.workers == 2 and done.proto.id == "job-000001-ab"  # fields read through
    event = Event.from_proto(job_pb2.JobEvent(
        unix_ms=0, state=job_pb2.StateEvent(state=job_pb2.RUNNING, reason="resized 2 -> 1")))
    assert repr(event) == "Event(1970-01-01T00:00:00.000Z  state RUNNING: resized 2 -> 1)"
    assert event.state.state == "RUNNING" and event.state.state == job_pb2.RUNNING
    assert "\n" not in repr(event)


def test_errors_are_typed_and_still_lockstep_errors() -> None:
    for code, cls in [("NOT_FOUND", NotFound), ("INVALID_ARGUMENT", InvalidArgument),
                      ("FAILED_PRECONDITION", FailedPrecondition), ("UNAVAILABLE", Unavailable)]:
        e = error_for(code, "why")
        assert type(e) is cls and isinstance(e, LockstepError) and (e.code, e.message) == (code, "why")
    assert type(error_for("DATA_LOSS", "x")) is LockstepError
    assert issubclass(JobNotFound, NotFound)


def test_a_job_is_named_by_a_prefix_of_its_id(client: Client) -> None:  # noqa: F811
    job = client.submit(spec(name="py-prefix", steps=20))
    prefix = job.id[:len("job-000000")]
    assert prefix != job.id
    done = client.wait(prefix, timeout=60)  # at 0692893: NOT_FOUND where the CLI took it
    assert done.id == job.id and done.state == "SUCCEEDED"
    assert client.get(prefix).id == job.id
    assert client.resolve(job.id) == job.id
    assert [e.step.step for e in client.watch(prefix) if e.step is not None][-1] == 20
    with pytest.raises(JobNotFound) as e:
        client.get("job-999999")
    assert e.value.code == "NOT_FOUND" and "no job job-999999" in e.value.message
    client.wait(client.submit(spec(name="py-other", steps=5)).id, timeout=60)
    with pytest.raises(InvalidArgument, match="job- names 2 jobs"):
        client.get("job-")
    with pytest.raises(FailedPrecondition):  # an ended job cannot be cancelled
        client.cancel(prefix)
    assert "id='" + job.id in repr(done) and "state=SUCCEEDED" in repr(done)
    assert 0 < done.test_accuracy <= 1 and done.duration_s >= 0  # it evaluates at its end
    assert re.fullmatch(r"[0-9a-f]{16}", done.param_checksum_hex)
    assert all(w.id and repr(w).startswith("WorkerInfo(id=") for w in client.workers())


def test_logs_and_events_of_a_job(client: Client) -> None:  # noqa: F811
    job = client.submit(spec(name="py-logs", steps=30, eval={"every_steps": 10}))
    followed = list(client.logs(job.id, follow=True))  # until the job ends
    assert client.get(job.id).state == "SUCCEEDED"
    kinds = {e.kind for e in followed}
    assert kinds == {"step", "eval", "state", "log"}, kinds
    assert [e.step.step for e in followed if e.kind == "step"] == list(range(1, 31))
    times = [e.unix_ms for e in followed]
    kept = list(client.logs(job.id))
    assert len(kept) == len(followed)
    assert [e.unix_ms for e in kept] == sorted(e.unix_ms for e in kept)
    assert [str(e) for e in client.logs(job.id, tail=3)] == [str(e) for e in kept[-3:]]
    assert not list(client.logs(job.id, tail=0)) and times
    no_steps = list(client.logs(job.id, steps=False))
    assert no_steps and all(e.kind != "step" for e in no_steps)
    errors_only = list(client.logs(job.id, steps=False, level="error"))
    assert all(e.kind != "log" or e.log.level in ("error", "critical") for e in errors_only)
    assert any(e.kind == "state" for e in errors_only)
    line = next(e for e in kept if e.kind == "log")
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  info  ", str(line)), str(line)
    with pytest.raises(InvalidArgument):
        list(client.logs(job.id, level="loud"))
    # Its state changes, with their reasons, as `lockstep describe` lists them.
    states = [e.state.state for e in client.events(job.id[:len("job-000000")])]
    assert states[0] == "QUEUED" and states[-1] == "SUCCEEDED" and "RUNNING" in states


def test_the_quickstart_example(cluster: Path) -> None:  # noqa: F811
    env = {**os.environ, "LOCKSTEP_CLUSTER_DIR": str(cluster)}
    env.pop("LOCKSTEP_COORDINATOR", None)
    env.pop("LOCKSTEP_CREDENTIALS", None)
    run = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "examples" / "quickstart.py"),
                          "--steps", "40"], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "JobInfo(id='job-" in out and "state SUCCEEDED, test accuracy 0." in out
    assert "state RUNNING" in out and "checkpoint of step 40:" in out
    assert "as expected: NOT_FOUND: no job job-999999" in out
    assert "as expected: InvalidArgument: " in out and "hiden" in out
