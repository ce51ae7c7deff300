"""A typed client of the JobService: jobs by id or a unique prefix of it, states by name,
readable results, typed exceptions, and a job's logs and events as `lockstep logs` shows
them."""
from __future__ import annotations

import builtins
import json
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

import grpc
import yaml
from google.protobuf import json_format

try:
    from lockstep_client._gen.lockstep.v1 import job_pb2, job_pb2_grpc, spec_pb2
except ImportError as e:  # pragma: no cover - only without generated code
    raise ImportError(
        "lockstep_client: the generated gRPC code is missing: it is built into the wheel, "
        "never into the checkout; install the package (pip install clients/python) and do "
        "not import it from the source folder"
    ) from e

from lockstep_client.errors import InvalidArgument, JobNotFound, LockstepError, error_for
from lockstep_client.types import (
    TERMINAL_STATES,
    Event,
    JobInfo,
    JobStatus,
    WorkerInfo,
)

Job = job_pb2.Job
JobSpec = spec_pb2.JobSpec
JobState = job_pb2.JobState
StepEvent = job_pb2.StepEvent
EvalResult = job_pb2.EvalResult
StateEvent = job_pb2.StateEvent
LogLine = job_pb2.LogLine

_TERMINAL_NUMBERS = frozenset(s.number for s in TERMINAL_STATES)
_LEVELS = ("trace", "debug", "info", "warning", "error", "critical")

#: What `Client.submit` accepts: a JobSpec, a dict in protobuf JSON form (as in the YAML
#: spec files), or the path of a YAML or JSON spec file.
SpecLike = Union[spec_pb2.JobSpec, Mapping[str, Any], str, os.PathLike[str]]

DEFAULT_ADDRESS = "127.0.0.1:7070"
_MAX_MESSAGE_BYTES = 16 << 20  # as services/common/rpc/net.h
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def state_name(state: int | str) -> str:
    """"SUCCEEDED" for job_pb2.SUCCEEDED (or JobStatus.SUCCEEDED), and so on."""
    return JobStatus.of(state).value


def resolve_address(address: str | None = None) -> str:
    """The coordinator's address, as the `lockstep` CLI finds it: `address`, else
    $LOCKSTEP_COORDINATOR, else the "coordinator" of cluster.json in $LOCKSTEP_CLUSTER_DIR
    (default .lockstep-cluster, written by `lockstep cluster up`), else 127.0.0.1:7070."""
    if address:
        return address
    if env := os.environ.get("LOCKSTEP_COORDINATOR"):
        return env
    record = Path(os.environ.get("LOCKSTEP_CLUSTER_DIR", ".lockstep-cluster")) / "cluster.json"
    try:
        return str(json.loads(record.read_text())["coordinator"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_ADDRESS


_COORDINATOR = "lockstep-coordinator"


def _resolve_credentials(credentials: str | os.PathLike[str] | None,
                         tls_ca: str | os.PathLike[str] | None, token: str | None,
                         address: str) -> tuple[bytes, str]:
    """The CA (PEM bytes) and bearer token to use, found as Client's docstring says."""
    folder = credentials or os.environ.get("LOCKSTEP_CREDENTIALS")
    if folder is None:
        local = Path(os.environ.get("LOCKSTEP_CLUSTER_DIR", ".lockstep-cluster")) / "credentials"
        if (local / "ca.pem").exists():
            folder = local
    ca_path = tls_ca or os.environ.get("LOCKSTEP_TLS_CA") or (
        Path(folder) / "ca.pem" if folder else None)
    if ca_path is None:
        raise error_for(
            "INVALID_ARGUMENT",
            f"no credentials for {address}: pass credentials=DIR (made by `lockstep certs`), "
            "or tls_ca= and token=, or insecure=True for a plaintext coordinator")
    if token is None:
        token_file = os.environ.get("LOCKSTEP_TOKEN_FILE") or (
            Path(folder) / "admin.token" if folder else None)
        token = Path(token_file).read_text().strip() if token_file else ""
    return Path(ca_path).read_bytes(), token


def load_spec(spec: SpecLike) -> spec_pb2.JobSpec:
    """A JobSpec from a message (copied), a dict or a YAML/JSON file. Unknown fields and
    bad values raise LockstepError("INVALID_ARGUMENT") naming the field; a file that
    cannot be read raises OSError."""
    if isinstance(spec, spec_pb2.JobSpec):
        out = spec_pb2.JobSpec()
        out.CopyFrom(spec)
        return out
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        text = path.read_text()
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as e:
            raise InvalidArgument("INVALID_ARGUMENT", f"{path}: {e}") from e
        if not isinstance(data, Mapping):
            raise InvalidArgument("INVALID_ARGUMENT", f"{path}: a spec must be a mapping")
        spec = data
    try:
        return json_format.ParseDict(dict(spec), spec_pb2.JobSpec())
    except json_format.ParseError as e:
        raise InvalidArgument("INVALID_ARGUMENT", str(e)) from e


class Client:
    """A connection to a Lockstep coordinator's JobService.

    Every unary call has a deadline of `timeout` seconds (per call overridable); a failed
    call raises LockstepError. Use as a context manager, or call close().

        with Client() as c:
            job = c.submit("examples/mlp.yaml")
            for event in c.watch(job.id):
                ...
            print(c.wait(job.id).last_eval.test_accuracy)
    """

    def __init__(self, address: str | None = None, timeout: float = 30.0, *,
                 credentials: str | os.PathLike[str] | None = None,
                 tls_ca: str | os.PathLike[str] | None = None,
                 token: str | None = None, insecure: bool | None = None) -> None:
        """Connects over TLS with a bearer token, as the CLI does.

        `credentials`: a folder with ca.pem and admin.token (`lockstep certs`, or a local
        cluster's DIR/credentials); else $LOCKSTEP_CREDENTIALS, else the local cluster's.
        `tls_ca` (else $LOCKSTEP_TLS_CA) and `token` (else the contents of
        $LOCKSTEP_TOKEN_FILE) override its parts. `insecure` (else $LOCKSTEP_INSECURE=1)
        talks plaintext to a coordinator started with --insecure. Without credentials,
        raises LockstepError("INVALID_ARGUMENT") saying what to pass.
        """
        self.address = resolve_address(address)
        self.timeout = timeout
        if insecure is None:
            insecure = os.environ.get("LOCKSTEP_INSECURE", "") in ("1", "true")
        if insecure:
            self._channel = grpc.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
        else:
            ca, token = _resolve_credentials(credentials, tls_ca, token, self.address)
            creds = grpc.ssl_channel_credentials(root_certificates=ca)
            if token:
                creds = grpc.composite_channel_credentials(
                    creds, grpc.access_token_call_credentials(token))
            # The certificate names the role, not the address (as the servers check it).
            options = _CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", _COORDINATOR)]
            self._channel = grpc.secure_channel(self.address, creds, options=options)
        self._stub = job_pb2_grpc.JobServiceStub(self._channel)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the channel; the client is unusable afterwards."""
        self._channel.close()

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            raise LockstepError.from_rpc(e) from e

    def resolve(self, job_id: str, timeout: float | None = None) -> str:
        """The full id of the job `job_id` names: its id, or a prefix of it that names one
        of the jobs the caller may see ("job-000007" for "job-000007-3fa1b2c4"), as the
        CLI takes. JobNotFound when none does; InvalidArgument naming them when several do."""
        try:
            return self._call(self._stub.GetJob, job_pb2.GetJobRequest(id=job_id), timeout).id
        except LockstepError as e:
            if e.code != "NOT_FOUND":
                raise
        jobs = self._call(self._stub.ListJobs, job_pb2.ListJobsRequest(), timeout).jobs
        matches = [j.id for j in jobs if job_id and j.id.startswith(job_id)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise JobNotFound("NOT_FOUND", f"no job {job_id}")
        raise InvalidArgument("INVALID_ARGUMENT", f"{job_id} names {len(matches)} jobs "
                              f"({', '.join(matches)}): give more of the id")

    def submit(self, spec: SpecLike, request_id: str | None = None,
               timeout: float | None = None) -> JobInfo:
        """Validates and queues a job; returns it (state QUEUED or later, defaults filled).

        `spec` is a JobSpec, a dict with protobuf JSON field names (as in the YAML spec
        files) or the path of a YAML/JSON spec file. With `request_id`, resubmitting
        the same spec returns the job the first submission created; another spec with
        that request id raises AlreadyExists naming that job. An invalid spec raises
        InvalidArgument naming the field.
        """
        message = load_spec(spec)
        if request_id is not None:
            message.request_id = request_id
        return JobInfo(self._call(self._stub.SubmitJob, message, timeout))

    def get(self, job_id: str, timeout: float | None = None) -> JobInfo:
        """The job's current record (`job_id`: its id or a unique prefix); JobNotFound if
        there is none."""
        request = job_pb2.GetJobRequest(id=self.resolve(job_id, timeout))
        return JobInfo(self._call(self._stub.GetJob, request, timeout))

    def list(self, states: Iterable[JobStatus | JobState | str] | None = None, limit: int = 0,
             timeout: float | None = None) -> builtins.list[JobInfo]:
        """Jobs, newest first: those in `states` (names such as "RUNNING", JobStatus
        values, or the protobuf enum's numbers; None: all), at most `limit` of them (0:
        all)."""
        try:
            wanted = [s.number if isinstance(s, JobStatus) else s for s in states or ()]
            request = job_pb2.ListJobsRequest(states=wanted, limit=limit)
        except (ValueError, TypeError) as e:
            raise InvalidArgument("INVALID_ARGUMENT", f"states: {e}") from e
        return [JobInfo(j) for j in self._call(self._stub.ListJobs, request, timeout).jobs]

    def cancel(self, job_id: str, timeout: float | None = None) -> JobInfo:
        """Asks the coordinator to cancel the job; returns its record (the state becomes
        CANCELLED once the workers have stopped). FailedPrecondition if it had ended."""
        request = job_pb2.CancelJobRequest(id=self.resolve(job_id, timeout))
        return JobInfo(self._call(self._stub.CancelJob, request, timeout))

    def workers(self, timeout: float | None = None) -> builtins.list[WorkerInfo]:
        """The registered workers and the job each runs ("" when free)."""
        response = self._call(self._stub.ListWorkers, job_pb2.ListWorkersRequest(), timeout)
        return [WorkerInfo(w) for w in response.workers]

    def events(self, job_id: str, timeout: float | None = None) -> builtins.list[Event]:
        """The job's state changes so far, oldest first, each with its reason (queued,
        running, recovering and why, resized, the end): what `lockstep describe` lists."""
        request = job_pb2.WatchJobRequest(id=self.resolve(job_id, timeout), history_only=True,
                                          from_step=2**63 - 1)  # its states, not its steps
        call = self._stub.WatchJob(request, timeout=self.timeout if timeout is None else timeout)
        try:
            return [Event.from_proto(e) for e in call if e.WhichOneof("event") == "state"]
        except grpc.RpcError as e:
            raise LockstepError.from_rpc(e) from e

    def logs(self, job_id: str, follow: bool = False, tail: int | None = None,
             steps: bool = True, level: str | None = None) -> Iterator[Event]:
        """The job's events and its servers' log lines about it (the coordinator's and its
        workers'), in time order, as `lockstep logs` prints them: what the coordinator
        keeps (the last `tail` of it when given), then with `follow` what comes, as it
        comes, until the job ends. `steps=False` leaves out the step events; `level`
        ("info", "warning", "error", ...) the log lines less severe. Each is an Event
        (`kind` "log" for a log line, whose `log` is a LogLine; `str(event)` is its line).
        As Ray's get_job_logs: "\\n".join(map(str, client.logs(job))); as its
        tail_job_logs: client.logs(job, follow=True)."""
        job_id = self.resolve(job_id)
        if level is not None and level not in _LEVELS:
            raise InvalidArgument("INVALID_ARGUMENT", f"level: {level!r} is none of {_LEVELS}")
        least = _LEVELS.index(level) if level else 0
        keep = (lambda e: (steps or e.WhichOneof("event") != "step") and (
            e.WhichOneof("event") != "log" or e.log.level not in _LEVELS
            or _LEVELS.index(e.log.level) >= least))
        kept, _ = self._read_both(job_id, follow=False, put=None)
        replayed = Counter(e.SerializeToString(deterministic=True) for e in kept)
        ordered = sorted((e for e in kept if keep(e)),
                         key=lambda e: (e.unix_ms, e.WhichOneof("event") == "log"))
        if tail is not None:
            ordered = ordered[len(ordered) - tail:] if tail > 0 else []
        yield from (Event.from_proto(e) for e in ordered)
        if not follow:
            return
        arrived: queue.Queue[Any] = queue.Queue()
        _, cancel = self._read_both(job_id, follow=True, put=arrived.put)
        try:
            for e in iter(arrived.get, None):
                if isinstance(e, LockstepError):
                    raise e
                key = e.SerializeToString(deterministic=True)
                if replayed[key] > 0:  # what the follow streams replay of what was printed
                    replayed[key] -= 1
                elif keep(e):
                    yield Event.from_proto(e)
        finally:
            cancel()  # a caller that leaves the loop early ends the streams

    def _read_both(self, job_id: str, follow: bool,
                   put: Any) -> tuple[builtins.list[job_pb2.JobEvent], Any]:
        """WatchJob's and WatchLogs's messages: without `put`, all they hold now, read side
        by side; with it, each handed to `put` as it comes from two threads, then the first
        error (a LockstepError) if any, then None once both streams ended. Also returns a
        function that cancels both streams."""
        events = self._stub.WatchJob(job_pb2.WatchJobRequest(id=job_id, history_only=not follow),
                                     timeout=None if follow else 60)
        lines = self._stub.WatchLogs(job_pb2.WatchLogsRequest(id=job_id, follow=follow),
                                     timeout=None if follow else 60)
        got: builtins.list[job_pb2.JobEvent] = []
        errors: builtins.list[LockstepError] = []
        lock = threading.Lock()

        def drain(call: Any) -> None:
            try:
                for message in call:
                    with lock:
                        (put or got.append)(message)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.CANCELLED:
                    errors.append(LockstepError.from_rpc(e))
                cancel()  # e.g. not the caller's job: said once

        def cancel() -> None:
            events.cancel()
            lines.cancel()

        threads = [threading.Thread(target=drain, args=(c,), daemon=True) for c in (events, lines)]
        for t in threads:
            t.start()
        if put is None:
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            return got, cancel

        def finish() -> None:
            for t in threads:
                t.join()
            if errors:
                put(errors[0])
            put(None)

        threading.Thread(target=finish, daemon=True).start()
        return [], cancel

    def checkpoint(self, job_id: str, path: str | os.PathLike[str], step: int | None = None,
                   timeout: float | None = None) -> int:
        """Downloads the job's state to `path` as a safetensors file with Flax names (load it
        with safetensors and flax.traverse_util.unflatten_dict(..., sep=".")): its final
        checkpoint, else its newest snapshot, or the kept snapshot of `step`. Written to
        `path`.part and renamed once whole. Returns the state's step; NOT_FOUND names the
        steps there are."""
        target = Path(path)
        part = target.with_name(target.name + ".part")
        request = job_pb2.GetCheckpointRequest(id=self.resolve(job_id, timeout))
        if step is not None:
            request.step = step
        call = self._stub.GetCheckpoint(request, timeout=timeout)
        at_step, total, got = -1, 0, 0
        try:
            with open(part, "wb") as f:
                for chunk in call:
                    if at_step < 0:
                        at_step, total = chunk.step, chunk.total_bytes
                    f.write(chunk.data)
                    got += len(chunk.data)
        except grpc.RpcError as e:
            part.unlink(missing_ok=True)
            raise LockstepError.from_rpc(e) from e
        if at_step < 0 or got != total:
            part.unlink(missing_ok=True)
            raise error_for("DATA_LOSS", f"{path}: {got} of {total} bytes arrived")
        os.replace(part, target)
        return at_step

    def watch(self, job_id: str, from_step: int = 0,
              timeout: float | None = None) -> Iterator[Event]:
        """The job's events: history from `from_step` (0: all the coordinator kept), then
        live events until the job ends, when the iterator stops. A watch lasts as long as
        the job, so it has no deadline unless `timeout` (seconds, for the whole watch) is
        given; then DeadlineExceeded. Leaving the loop early cancels
        the stream.

        A stream that breaks (UNAVAILABLE: a restarted coordinator, a dropped connection)
        is resumed from the last step seen, and each event comes once: no step is missed
        or repeated, also when the job recovers from a snapshot and runs steps again:
        those come once each as replays (`event.replay`, `event.step.replay`).
        (Only the coordinator's history can be replayed: it keeps a running job's recent
        steps, and a finished job's states, evaluations and its steps, thinned past
        the coordinator's --history_steps to every 2nd, 4th, ... step and the last.)
        Other errors raise
        LockstepError."""
        end = None if timeout is None else time.monotonic() + timeout
        job_id = self.resolve(job_id)
        seen = _Resume(from_step)
        while True:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise error_for("DEADLINE_EXCEEDED", f"watching {job_id}: {timeout} s passed")
            call = self._stub.WatchJob(
                job_pb2.WatchJobRequest(id=job_id, from_step=seen.from_step), timeout=left)
            try:
                for event in call:
                    if seen.first(event):
                        yield Event.from_proto(event)
                if seen.ended:
                    return
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise LockstepError.from_rpc(e) from e
            finally:
                call.cancel()
            # The stream broke, or ended before the job did (a coordinator going down):
            # resume shortly; while the coordinator is away, the call fails UNAVAILABLE.
            time.sleep(0.5)

    def wait(self, job_id: str, timeout: float | None = None) -> JobInfo:
        """Blocks until the job ends (SUCCEEDED, FAILED or CANCELLED) and returns it.
        Resumes the watch if the stream breaks (UNAVAILABLE); after `timeout` seconds
        (None: no limit) raises DeadlineExceeded."""
        end = None if timeout is None else time.monotonic() + timeout
        job = self.get(job_id)
        job_id = job.id
        if job.state not in TERMINAL_STATES:
            for _ in self.watch(job_id, from_step=job.step, timeout=timeout):
                pass
        while True:  # the job has ended; its record may still be on its way
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise error_for("DEADLINE_EXCEEDED", f"{job_id} did not end within {timeout} s")
            job = self.get(job_id, timeout=min(self.timeout, left or self.timeout))
            if job.state in TERMINAL_STATES:
                return job
            time.sleep(min(0.2, left or 0.2))


class _Resume:
    """Which events of a resumed stream are new, and where to resume: WatchJob replays
    the job's state events in full and its step and evaluation events from `from_step`
    on, and a job that recovered from a snapshot reports some steps again. As the CLI's
    EventResume (clients/cli/resume.h)."""

    def __init__(self, from_step: int) -> None:
        self.from_step = max(0, from_step - 1)  # the last step seen: none before from_step
        self.last_eval_step = self.from_step if from_step > 0 else -1
        self.states: set[bytes] = set()
        self.replays: set[bytes] = set()  # replayed steps' events seen (StepEvent.replay)
        self.ended = False  # a terminal state event arrived

    def first(self, e: job_pb2.JobEvent) -> bool:
        which = e.WhichOneof("event")
        if which == "step" and e.step.replay:
            # A step run again after a recovery: yielded once (a resumed stream may bring
            # it again), without moving the resume point.
            key = e.SerializeToString(deterministic=True)
            if key in self.replays:
                return False
            self.replays.add(key)
        elif which == "step":
            if e.step.step <= self.from_step:
                return False
            self.from_step = e.step.step
        elif which == "eval":
            if e.eval.step <= self.last_eval_step:
                return False
            self.last_eval_step = e.eval.step
        else:
            key = e.SerializeToString(deterministic=True)
            if key in self.states:
                return False
            self.states.add(key)
            self.ended = self.ended or (which == "state" and e.state.state in _TERMINAL_NUMBERS)
        return True
