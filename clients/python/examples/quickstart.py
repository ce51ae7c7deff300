"""A first hour with lockstep_client, cell by cell (`# %%` cells: run it as a script, or
open it in Jupyter or VS Code as a notebook). Against the local cluster of
`lockstep cluster up --detach` (or $LOCKSTEP_COORDINATOR and $LOCKSTEP_CREDENTIALS):

    python clients/python/examples/quickstart.py [--steps N]

Submits a small MLP, follows its progress, reads its result, events and logs, downloads
its checkpoint, and shows what the errors are. Ray users: each cell names the
JobSubmissionClient call it corresponds to.
"""
# %% Connect: the local cluster's address, CA and admin token, as the CLI finds them.
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from lockstep_client import Client, JobNotFound, JobStatus, LockstepError

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--steps", type=int, default=200, help="the job's steps")
args = parser.parse_args()
client = Client()
print("workers:", *client.workers(), sep="\n  ")

# %% Submit (Ray: client.submit_job(entrypoint=...)): a dict, a YAML/JSON file or a JobSpec.
job = client.submit({
    "name": "quickstart-mlp",
    "model": {"kind": "mlp", "hidden": [64]},
    "optimizer": {"kind": "adam", "learning_rate": 0.001},
    "global_batch_size": 64,
    "steps": args.steps,
    "workers": 1,
    "eval": {"every_steps": args.steps // 2},
})
print(job)  # JobInfo(id='job-…', name='quickstart-mlp', state=QUEUED, ...)
short = job.id[:len("job-000000")]  # a prefix that names one job works wherever an id does

# %% Follow it (Ray: client.tail_job_logs): steps, evaluations and state changes.
for event in client.watch(short):
    if event.kind == "eval" or event.kind == "state":
        print(event)  # Event(2026-…Z  eval at step 100  loss 0.5123  accuracy 0.8120)
    elif event.step.step % max(1, args.steps // 4) == 0:
        print(event)

# %% Its result (Ray: client.get_job_status / get_job_info): the state as a name.
done = client.wait(short)
print(done)
print(f"state {done.state}, test accuracy {done.test_accuracy:.4f}, took {done.duration_s:.1f} s, "
      f"params checksum {done.param_checksum_hex}")
assert done.state == JobStatus.SUCCEEDED == "SUCCEEDED"

# %% What happened (`lockstep describe`): its state changes, each with its reason.
for event in client.events(short):
    print(event)

# %% Its logs (Ray: client.get_job_logs): the servers' lines, without the steps.
print("\n".join(str(line) for line in client.logs(short, steps=False, tail=8)))

# %% Its trained state, as safetensors with Flax names.
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "quickstart.safetensors"
    step = client.checkpoint(short, path)
    print(f"checkpoint of step {step}: {path.stat().st_size} bytes")

# %% Errors are typed: catch the one you expect, or LockstepError for any.
try:
    client.get("job-999999")
except JobNotFound as e:
    print("as expected:", e)
try:
    client.submit({"model": {"kind": "mlp", "hiden": [32]}})
except LockstepError as e:
    print(f"as expected: {type(e).__name__}: {e.message}")

# %% The recent jobs, newest first.
for j in client.list(limit=3):
    print(j)
client.close()
sys.exit(0 if done.state == "SUCCEEDED" else 1)
