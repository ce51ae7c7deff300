"""Python client for Lockstep's JobService.

    from lockstep_client import Client

    with Client() as client:                     # address: $LOCKSTEP_COORDINATOR or the local cluster
        job = client.submit({"model": {"kind": "mlp", "hidden": [32]},
                             "optimizer": {"kind": "adam", "learning_rate": 0.001},
                             "global_batch_size": 64, "steps": 60, "workers": 2})
        for event in client.watch(job.id):
            if event.replay:                     # a step run again after a recovery
                print("replay", event.step.step, event.step.loss)
            elif event.step is not None:
                print(event.step.step, event.step.loss)
        print(client.wait(job.id))

The messages (Job, JobSpec, WorkerInfo, ...) are the protobuf classes generated from
proto/lockstep/v1 by generate.py; the generated modules are lockstep_client._gen.lockstep.v1.
"""
from lockstep_client.client import (
    DEFAULT_ADDRESS,
    TERMINAL_STATES,
    Client,
    EvalResult,
    Event,
    Job,
    JobSpec,
    JobState,
    LockstepError,
    SpecLike,
    StateEvent,
    StepEvent,
    WorkerInfo,
    load_spec,
    resolve_address,
    state_name,
)
from lockstep_client._gen.lockstep.v1 import job_pb2, spec_pb2

__all__ = [
    "DEFAULT_ADDRESS", "TERMINAL_STATES", "Client", "EvalResult", "Event", "Job", "JobSpec",
    "JobState", "LockstepError", "SpecLike", "StateEvent", "StepEvent", "WorkerInfo",
    "job_pb2", "load_spec", "resolve_address", "spec_pb2", "state_name",
]
