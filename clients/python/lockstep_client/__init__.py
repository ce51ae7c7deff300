r"""Python client for Lockstep's JobService.

    from lockstep_client import Client

    with Client() as client:                     # address: $LOCKSTEP_COORDINATOR or the local cluster
        job = client.submit({"model": {"kind": "mlp", "hidden": [32]},
                             "optimizer": {"kind": "adam", "learning_rate": 0.001},
                             "global_batch_size": 64, "steps": 60, "workers": 2})
        for event in client.watch(job.id):          # or a prefix of the id: "job-000001"
            if event.replay:                     # a step run again after a recovery
                print("replay", event.step.step, event.step.loss)
            elif event.step is not None:
                print(event.step.step, event.step.loss)
        done = client.wait(job.id)               # JobInfo(id=..., state=SUCCEEDED, ...)
        print(done.state == "SUCCEEDED", done.test_accuracy)
        print("\n".join(map(str, client.logs(job.id, steps=False))))

Results are JobInfo, WorkerInfo and Event: states as JobStatus names, readable reprs,
every other field of the protobuf message (`.proto`) read through. Failed calls raise
LockstepError subclasses: JobNotFound, PermissionDenied, InvalidArgument, ... The
messages (Job, JobSpec, ...) are the protobuf classes generated from proto/lockstep/v1 by
generate.py; the generated modules are lockstep_client._gen.lockstep.v1.
"""
from lockstep_client.client import (
    DEFAULT_ADDRESS,
    Client,
    EvalResult,
    Job,
    JobSpec,
    JobState,
    LogLine,
    SpecLike,
    StateEvent,
    StepEvent,
    load_spec,
    resolve_address,
    state_name,
)
from lockstep_client.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    JobNotFound,
    LockstepError,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from lockstep_client.types import (
    TERMINAL_STATES,
    Event,
    JobInfo,
    JobStatus,
    StateChange,
    WorkerInfo,
)
from lockstep_client._gen.lockstep.v1 import job_pb2, spec_pb2

__all__ = [
    "DEFAULT_ADDRESS", "TERMINAL_STATES", "AlreadyExists", "Client", "DeadlineExceeded",
    "EvalResult", "Event", "FailedPrecondition", "InvalidArgument", "Job", "JobInfo",
    "JobNotFound", "JobSpec", "JobState", "JobStatus", "LockstepError", "LogLine", "NotFound",
    "PermissionDenied", "ResourceExhausted", "SpecLike", "StateChange", "StateEvent",
    "StepEvent", "Unauthenticated", "Unavailable", "WorkerInfo", "job_pb2", "load_spec",
    "resolve_address", "spec_pb2", "state_name",
]
