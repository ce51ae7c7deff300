"""What the client returns: the job API's messages with enum fields as their names
(JobStatus, a str enum as Ray's), a one-line readable repr, and every other field read
through to the protobuf message, which `.proto` is."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from lockstep_client._gen.lockstep.v1 import job_pb2


class JobStatus(str, enum.Enum):
    """A job's state by name, as Ray's JobStatus: `job.state == "SUCCEEDED"`. It also
    equals the protobuf enum's number (`job.state == job_pb2.SUCCEEDED`), so code written
    against the generated messages keeps working."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    SUSPENDED = "SUSPENDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNSPECIFIED = "JOB_STATE_UNSPECIFIED"

    @classmethod
    def of(cls, state: int | str) -> JobStatus:
        """The status of a protobuf enum number or a name."""
        return cls(job_pb2.JobState.Name(state) if isinstance(state, int) else state)

    @property
    def number(self) -> int:
        """The protobuf enum's number (job_pb2.SUCCEEDED, ...)."""
        return job_pb2.JobState.Value(self.value)

    def is_terminal(self) -> bool:
        """SUCCEEDED, FAILED or CANCELLED: a state the job never leaves."""
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int) and not isinstance(other, bool):
            return self.number == other
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return self.value


#: States a job never leaves.
TERMINAL_STATES: frozenset[JobStatus] = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


def _time(unix_ms: int) -> str:
    return datetime.fromtimestamp(unix_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[
        :-3] + "Z"


class _Message:
    """A protobuf message read through: `.proto` is the message, other attributes its
    fields. Equal when the messages are."""

    __slots__ = ("proto",)

    def __init__(self, proto: Any) -> None:
        object.__setattr__(self, "proto", proto)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.proto, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only (its .proto is a copy you may edit)")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Message):
            return bool(self.proto == other.proto)
        return bool(self.proto == other)

    __hash__ = None  # type: ignore[assignment]


class JobInfo(_Message):
    """A job: `state` as a JobStatus; `name`, `test_accuracy` and `duration_s` for short;
    every field of the Job message (`id`, `step`, `last_loss`, `last_eval`, `workers`,
    `param_checksum`, `checkpoint_path`, ...) as it is."""

    __slots__ = ()

    @property
    def state(self) -> JobStatus:
        return JobStatus.of(self.proto.state)

    @property
    def name(self) -> str:
        """The spec's name, else its model's kind."""
        return self.proto.spec.name or self.proto.spec.model.kind or "layers"

    @property
    def test_accuracy(self) -> float | None:
        """The latest evaluation's test accuracy; None before the first."""
        return self.proto.last_eval.test_accuracy if self.proto.HasField("last_eval") else None

    @property
    def duration_s(self) -> float | None:
        """Seconds from its start to its end; None until it has ended."""
        start, end = self.proto.started_unix_ms, self.proto.finished_unix_ms
        return (end - start) / 1000 if start and end >= start else None

    @property
    def param_checksum_hex(self) -> str:
        """The params checksum as the CLI and the dashboard show it: 16 hex digits."""
        return f"{self.proto.param_checksum:016x}"

    def __repr__(self) -> str:
        p = self.proto
        parts = [f"id={p.id!r}", f"name={self.name!r}", f"state={self.state}"]
        if p.total_steps:
            parts.append(f"step={p.step}/{p.total_steps}")
        if p.step:
            parts.append(f"loss={p.last_loss:.4f}")
        if self.test_accuracy is not None:
            parts.append(f"test_accuracy={self.test_accuracy:.4f}")
        parts.append(f"workers={len(p.workers) or p.spec.workers}")
        if p.owner:
            parts.append(f"owner={p.owner!r}")
        if p.failure_reason:
            parts.append(f"failure={p.failure_code}: {p.failure_reason!r}")
        return f"JobInfo({', '.join(parts)})"


class WorkerInfo(_Message):
    """A registered worker: every field of the WorkerInfo message (`id`, `name`,
    `address`, `device`, `threads`, `job_id`, ...)."""

    __slots__ = ()

    def __repr__(self) -> str:
        p = self.proto
        status = (f"quarantined: {p.quarantined}" if p.quarantined else "leaving" if p.leaving
                  else f"running {p.job_id}" if p.job_id else "free")
        return (f"WorkerInfo(id={p.id!r}, name={p.name!r}, address={p.address!r}, "
                f"device={p.device!r}, threads={p.threads}, {status})")


class StateChange(_Message):
    """A state event: `state` as a JobStatus, and `reason`."""

    __slots__ = ()

    @property
    def state(self) -> JobStatus:
        return JobStatus.of(self.proto.state)

    def __repr__(self) -> str:
        return f"StateChange({self.state}{': ' + self.proto.reason if self.proto.reason else ''})"


@dataclass(frozen=True, repr=False)
class Event:
    """One event of a job: exactly one of `step` (a StepEvent), `eval` (an EvalResult),
    `state` (a StateChange) and `log` (a LogLine: a server's log line, from `logs()`)."""

    unix_ms: int
    step: job_pb2.StepEvent | None = None
    eval: job_pb2.EvalResult | None = None
    state: StateChange | None = None
    log: job_pb2.LogLine | None = None

    @property
    def replay(self) -> bool:
        """A step run again from the snapshot after a recovery or a coordinator restart
        (same inputs as its first run, so the same result)."""
        return self.step is not None and self.step.replay

    @property
    def kind(self) -> Literal["step", "eval", "state", "log"]:
        """Which of the fields is set."""
        return ("step" if self.step is not None else "eval" if self.eval is not None
                else "log" if self.log is not None else "state")

    @classmethod
    def from_proto(cls, e: job_pb2.JobEvent) -> Event:
        which = e.WhichOneof("event")
        value = getattr(e, which) if which else None
        if which == "state":
            value = StateChange(value)
        return cls(unix_ms=e.unix_ms, **({which: value} if which else {}))

    def text(self) -> str:
        """The event in one line, as `lockstep logs` prints it."""
        if self.step is not None:
            s = self.step
            what = (f"{'replay ' if s.replay else ''}step {s.step}/{s.total_steps}  "
                    f"loss {s.loss:.4f}  accuracy {s.accuracy:.4f}  {s.samples_per_sec:.0f} samples/s")
        elif self.eval is not None:
            what = (f"eval at step {self.eval.step}  loss {self.eval.test_loss:.4f}  "
                    f"accuracy {self.eval.test_accuracy:.4f}")
        elif self.log is not None:
            line = self.log
            where = line.source + (f" {line.worker}" if line.worker and line.worker != line.source
                                   else "") + (f" rank {line.rank}" if line.HasField("rank") else "")
            what = f"{line.level}  {where}: {line.message}"
        elif self.state is not None:
            what = f"state {self.state.state}" + (f": {self.state.reason}" if self.state.reason
                                                  else "")
        else:
            what = "(empty)"
        return f"{_time(self.unix_ms)}  {what}"

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"Event({self.text()})"
