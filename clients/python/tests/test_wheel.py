"""`pip wheel clients/python` / `pip install` of the wheel: the generated gRPC/protobuf code is
inside the wheel, the build writes nothing into the checkout (not even ignored files), and
the wheel installed into a fresh venv imports from there. Needs no cluster; pip fetches the
wheel's dependencies (grpcio, protobuf, PyYAML) from the index, as a user's install does.
"""
from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # clients/python


def checkout_state() -> str:
    """`git status` of clients/python, ignored files included."""
    run = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all",
                          "--", "."], cwd=HERE, capture_output=True, text=True)
    if run.returncode != 0:
        pytest.skip(f"not a git checkout: {run.stderr.strip()}")
    # The test venv's own files and pytest's bytecode are not the build's.
    return "\n".join(line for line in run.stdout.splitlines()
                     if "/.venv/" not in line and "__pycache__" not in line)


def test_the_wheel_carries_the_generated_code_and_the_build_writes_nothing_here(
        tmp_path: Path) -> None:
    before = checkout_state()
    wheels = tmp_path / "wheels"
    # The test venv has setuptools and grpcio-tools: no build isolation, nothing downloaded.
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "--no-build-isolation", "-w", str(wheels), str(HERE)],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert build.returncode == 0, build.stdout + build.stderr
    assert checkout_state() == before
    [wheel] = wheels.glob("lockstep_client-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = email.message_from_bytes(
            z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    for module in ("job_pb2.py", "job_pb2.pyi", "job_pb2_grpc.py", "spec_pb2.py",
                   "worker_pb2.py", "registry_pb2.py"):
        assert f"lockstep_client/_gen/lockstep/v1/{module}" in names, sorted(names)
    assert "lockstep_client/py.typed" in names
    # The repository's license (LICENSE), named in the metadata (PEP 639).
    assert metadata.get("License-Expression") == "Apache-2.0", metadata.items()
    # pip install 'clients/python[plot]' brings matplotlib (examples/plot_loss.py).
    assert "plot" in metadata.get_all("Provides-Extra")
    assert any(r.startswith("matplotlib") and 'extra == "plot"' in r
               for r in metadata.get_all("Requires-Dist")), metadata.get_all("Requires-Dist")

    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    install = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(wheel)],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert install.returncode == 0, install.stdout + install.stderr
    imported = subprocess.run(
        [str(py), "-c", "import lockstep_client, lockstep_client._gen.lockstep.v1.job_pb2_grpc as g;"
         "print(lockstep_client.__file__); print(lockstep_client.JobSpec.DESCRIPTOR.full_name);"
         "print(g.JobServiceStub.__name__)"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    where, spec_name, stub = imported.stdout.split()
    assert Path(where).is_relative_to(venv), where
    assert (spec_name, stub) == ("lockstep.v1.JobSpec", "JobServiceStub")
    assert checkout_state() == before
