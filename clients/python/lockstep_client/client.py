"""A thin typed wrapper over the generated JobService stub."""
from __future__ import annotations

import builtins
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

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

Job = job_pb2.Job
JobSpec = spec_pb2.JobSpec
JobState = job_pb2.JobState
StepEvent = job_pb2.StepEvent
EvalResult = job_pb2.EvalResult
StateEvent = job_pb2.StateEvent
WorkerInfo = job_pb2.WorkerInfo

#: States a job never leaves.
TERMINAL_STATES: frozenset[int] = frozenset({job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.CANCELLED})

#: What `Client.submit` accepts: a JobSpec, a dict in protobuf JSON form (as in the YAML
#: spec files), or the path of a YAML or JSON spec file.
SpecLike = Union[spec_pb2.JobSpec, Mapping[str, Any], str, os.PathLike[str]]

DEFAULT_ADDRESS = "127.0.0.1:7070"
_MAX_MESSAGE_BYTES = 16 << 20  # as services/common/net.h
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


class LockstepError(Exception):
    """A failed call: `code` is the gRPC status code name (e.g. "INVALID_ARGUMENT",
    "NOT_FOUND", "UNAVAILABLE", "DEADLINE_EXCEEDED") and `message` the server's text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> LockstepError:
        """Converts a grpc.RpcError (which is also a grpc.Call) into a LockstepError."""
        code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        return cls(code.name, details or "")


@dataclass(frozen=True)
class Event:
    """One event of a job's stream: exactly one of `step`, `eval` and `state` is set."""

    unix_ms: int
    step: StepEvent | None = None
    eval: EvalResult | None = None
    state: StateEvent | None = None

    @property
    def replay(self) -> bool:
        """A step run again from the snapshot after a recovery or a coordinator restart
        (same inputs as its first run, so the same result)."""
        return self.step is not None and self.step.replay

    @property
    def kind(self) -> Literal["step", "eval", "state"]:
        """Which of the three fields is set."""
        return "step" if self.step is not None else "eval" if self.eval is not None else "state"

    @classmethod
    def from_proto(cls, e: job_pb2.JobEvent) -> Event:
        which = e.WhichOneof("event")
        return cls(unix_ms=e.unix_ms, **({which: getattr(e, which)} if which else {}))


def state_name(state: int) -> str:
    """"SUCCEEDED" for job_pb2.SUCCEEDED, and so on."""
    return job_pb2.JobState.Name(state)


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
        raise LockstepError(
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
            raise LockstepError("INVALID_ARGUMENT", f"{path}: {e}") from e
        if not isinstance(data, Mapping):
            raise LockstepError("INVALID_ARGUMENT", f"{path}: a spec must be a mapping")
        spec = data
    try:
        return json_format.ParseDict(dict(spec), spec_pb2.JobSpec())
    except json_format.ParseError as e:
        raise LockstepError("INVALID_ARGUMENT", str(e)) from e


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

    def submit(self, spec: SpecLike, request_id: str | None = None,
               timeout: float | None = None) -> job_pb2.Job:
        """Validates and queues a job; returns it (state QUEUED or later, defaults filled).

        `spec` is a JobSpec, a dict with protobuf JSON field names (as in the YAML spec
        files) or the path of a YAML/JSON spec file. With `request_id`, resubmitting
        the same spec returns the job the first submission created; another spec with
        that request id raises LockstepError("ALREADY_EXISTS") naming that job. An
        invalid spec raises LockstepError("INVALID_ARGUMENT") naming the field.
        """
        message = load_spec(spec)
        if request_id is not None:
            message.request_id = request_id
        return self._call(self._stub.SubmitJob, message, timeout)

    def get(self, job_id: str, timeout: float | None = None) -> job_pb2.Job:
        """The job's current record; NOT_FOUND if there is none."""
        return self._call(self._stub.GetJob, job_pb2.GetJobRequest(id=job_id), timeout)

    def list(self, states: Iterable[JobState | str] | None = None, limit: int = 0,
             timeout: float | None = None) -> builtins.list[job_pb2.Job]:
        """Jobs, newest first: those in `states` (JobState values such as job_pb2.RUNNING,
        or names such as "RUNNING"; None: all), at most `limit` of them (0: all)."""
        try:
            request = job_pb2.ListJobsRequest(states=builtins.list(states or ()), limit=limit)
        except (ValueError, TypeError) as e:
            raise LockstepError("INVALID_ARGUMENT", f"states: {e}") from e
        return builtins.list(self._call(self._stub.ListJobs, request, timeout).jobs)

    def cancel(self, job_id: str, timeout: float | None = None) -> job_pb2.Job:
        """Asks the coordinator to cancel the job; returns its record (the state becomes
        CANCELLED once the workers have stopped). FAILED_PRECONDITION if it had ended."""
        return self._call(self._stub.CancelJob, job_pb2.CancelJobRequest(id=job_id), timeout)

    def workers(self, timeout: float | None = None) -> builtins.list[job_pb2.WorkerInfo]:
        """The registered workers and the job each runs ("" when free)."""
        return list(self._call(self._stub.ListWorkers, job_pb2.ListWorkersRequest(),
                               timeout).workers)

    def checkpoint(self, job_id: str, path: str | os.PathLike[str], step: int | None = None,
                   timeout: float | None = None) -> int:
        """Downloads the job's state to `path` as a safetensors file with Flax names (load it
        with safetensors and flax.traverse_util.unflatten_dict(..., sep=".")): its final
        checkpoint, else its newest snapshot, or the kept snapshot of `step`. Written to
        `path`.part and renamed once whole. Returns the state's step; NOT_FOUND names the
        steps there are."""
        target = Path(path)
        part = target.with_name(target.name + ".part")
        request = job_pb2.GetCheckpointRequest(id=job_id)
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
            raise LockstepError("DATA_LOSS", f"{path}: {got} of {total} bytes arrived")
        os.replace(part, target)
        return at_step

    def watch(self, job_id: str, from_step: int = 0,
              timeout: float | None = None) -> Iterator[Event]:
        """The job's events: history from `from_step` (0: all the coordinator kept), then
        live events until the job ends, when the iterator stops. A watch lasts as long as
        the job, so it has no deadline unless `timeout` (seconds, for the whole watch) is
        given; then LockstepError("DEADLINE_EXCEEDED"). Leaving the loop early cancels
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
        seen = _Resume(from_step)
        while True:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise LockstepError("DEADLINE_EXCEEDED", f"watching {job_id}: {timeout} s passed")
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

    def wait(self, job_id: str, timeout: float | None = None) -> job_pb2.Job:
        """Blocks until the job ends (SUCCEEDED, FAILED or CANCELLED) and returns it.
        Resumes the watch if the stream breaks (UNAVAILABLE); after `timeout` seconds
        (None: no limit) raises LockstepError("DEADLINE_EXCEEDED")."""
        end = None if timeout is None else time.monotonic() + timeout
        job = self.get(job_id)
        if job.state not in TERMINAL_STATES:
            for _ in self.watch(job_id, from_step=job.step, timeout=timeout):
                pass
        while True:  # the job has ended; its record may still be on its way
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise LockstepError("DEADLINE_EXCEEDED", f"{job_id} did not end within {timeout} s")
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
            self.ended = self.ended or (which == "state" and e.state.state in TERMINAL_STATES)
        return True
