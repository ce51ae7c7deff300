"""Plots a job's loss curve from its `watch()` events: the training loss of every step and
the test loss of every evaluation, written as a PNG (matplotlib's Agg backend: no display).

    python clients/python/examples/plot_loss.py JOB [-o loss.png]
    python clients/python/examples/plot_loss.py --submit examples/mlp.yaml -o loss.png

Follows the job until it ends (the stream resumes by itself if it breaks), so it also
plots a job that is still running once it has finished. A job that has ended is plotted from
the steps the coordinator keeps of it (every step up to its --history_steps, default 2,000;
past that every 2nd, 4th, ... step and the last). Finds the coordinator and its
credentials as the `lockstep` CLI does ($LOCKSTEP_COORDINATOR, $LOCKSTEP_CREDENTIALS, or the
local cluster of `lockstep cluster up`). Exit status: 0 if the job succeeded, 1 otherwise.

Needs matplotlib besides the client: `pip install 'clients/python[plot]'` (or
`pip install -r clients/python/examples/requirements.txt`).
"""
from __future__ import annotations

import argparse
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot_loss.py needs matplotlib: pip install 'clients/python[plot]'")

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from lockstep_client import Client, state_name  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("job", nargs="?", help="the job's id")
    which.add_argument("--submit", metavar="SPEC", help="submit this spec file and plot its job")
    parser.add_argument("-o", "--output", default="loss.png", help="the PNG to write")
    args = parser.parse_args()

    steps: list[int] = []
    losses: list[float] = []
    eval_steps: list[int] = []
    eval_losses: list[float] = []
    with Client() as client:
        job_id = client.submit(args.submit).id if args.submit else args.job
        for event in client.watch(job_id):
            if event.step is not None:
                steps.append(event.step.step)
                losses.append(event.step.loss)
            elif event.eval is not None:
                eval_steps.append(event.eval.step)
                eval_losses.append(event.eval.test_loss)
        job = client.wait(job_id)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, losses, linewidth=1, label="training loss (per step)")
    if eval_steps:
        ax.plot(eval_steps, eval_losses, "o-", label="test loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"{job_id} ({job.spec.name or job.spec.model.kind}): {state_name(job.state)}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"{args.output}: {len(steps)} steps, {len(eval_steps)} evaluations of {job_id} "
          f"({state_name(job.state)})")
    return 0 if state_name(job.state) == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
