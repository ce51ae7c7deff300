"""The coordinator's TensorBoard event files, read with TensorBoard's own reader.

A short job runs on a real local cluster (the fixtures of test_client); its event files
under STATE_DIR/tensorboard/JOB are then loaded with tensorboard's EventAccumulator and
every scalar is checked against the job's own events (WatchJob): the values as float32.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lockstep_client import Client, LockstepError, state_name
from test_client import client, cluster, spec  # noqa: F401  (the fixtures)


def load(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in acc.Scalars(tag)}


def f32(x: float) -> float:
    return float(np.float32(x))


def test_event_files_hold_the_jobs_values(client: Client, cluster: Path) -> None:  # noqa: F811
    job = client.submit(spec(name="tb", steps=30, eval={"every_steps": 10}))
    events = list(client.watch(job.id, timeout=120))
    assert state_name(client.wait(job.id, timeout=30).state) == "SUCCEEDED"
    steps = {e.step.step: e.step for e in events if e.step is not None}
    evals = {e.eval.step: e.eval for e in events if e.eval is not None}
    assert sorted(steps) == list(range(1, 31)) and sorted(evals) == [10, 20, 30]

    folder = cluster / "state" / "tensorboard" / job.id
    files = list(folder.glob("events.out.tfevents.*"))
    assert len(files) == 1, f"expected one event file in {folder}: {files}"
    acc = load(folder)
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/accuracy", "eval/loss", "eval/accuracy", "perf/samples_per_sec",
            "time/compute_ms", "time/allreduce_ms", "time/update_ms",
            "train/learning_rate"} <= tags

    def check(tag: str, want: dict[int, float]) -> None:
        got = scalars(acc, tag)
        assert got == {s: f32(v) for s, v in want.items()}, tag

    check("train/loss", {s: e.loss for s, e in steps.items()})
    check("train/accuracy", {s: e.accuracy for s, e in steps.items()})
    check("perf/samples_per_sec", {s: e.samples_per_sec for s, e in steps.items()})
    check("time/compute_ms", {s: e.compute_ms for s, e in steps.items()})
    check("time/allreduce_ms", {s: e.allreduce_ms for s, e in steps.items()})
    check("time/update_ms", {s: e.update_ms for s, e in steps.items()})
    check("train/learning_rate", {s: 0.001 for s in steps})
    check("eval/loss", {s: e.test_loss for s, e in evals.items()})
    check("eval/accuracy", {s: e.test_accuracy for s, e in evals.items()})
    assert any(e.compute_ms > 0 for e in steps.values())  # the split is really there
    # The points' wall times are the events' own.
    wall = {e.step: e.wall_time for e in acc.Scalars("train/loss")}
    for e in events:
        if e.step is not None:
            assert wall[e.step.step] == pytest.approx(e.unix_ms / 1000, abs=1e-3)


def test_a_named_folder_in_the_jobs_folder(client: Client, cluster: Path) -> None:  # noqa: F811
    job = client.submit(spec(steps=5, tensorboard_dir="runs/first"))
    assert state_name(client.wait(job.id, timeout=60).state) == "SUCCEEDED"
    acc = load(cluster / "state" / "tensorboard" / job.id / "runs" / "first")
    assert sorted(scalars(acc, "train/loss")) == [1, 2, 3, 4, 5]
    for bad in ("/tmp/tb", "runs/../../elsewhere"):
        with pytest.raises(LockstepError) as e:
            client.submit(spec(steps=5, tensorboard_dir=bad))
        assert e.value.code == "INVALID_ARGUMENT" and "tensorboard_dir" in e.value.message
