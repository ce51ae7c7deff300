"""Builds lockstep_client with its gRPC/protobuf modules, generated from the protos
(generate.py) into the build tree by build_py, so that they go into the wheel and nothing
is written into the checkout: setuptools' build/ and .egg-info folders go to a temporary
folder too, removed when the build ends. An sdist carries the protos (proto/) instead of
generated code. The metadata is in pyproject.toml."""
import atexit
import shutil
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from generate import generate, proto_dir  # noqa: E402


class BuildPyWithGeneratedCode(build_py):
    """build_py, then the generated package lockstep_client._gen into build_lib."""

    def run(self) -> None:
        super().run()
        generate(Path(self.build_lib) / "lockstep_client" / "_gen")


class SdistWithProtos(sdist):
    """An sdist that can build the wheel away from the repository: it carries the protos."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        shutil.copytree(proto_dir() / "lockstep" / "v1", Path(base_dir) / "proto" / "lockstep" / "v1")


scratch = tempfile.mkdtemp(prefix="lockstep-client-build-")
atexit.register(shutil.rmtree, scratch, ignore_errors=True)
setup(
    cmdclass={"build_py": BuildPyWithGeneratedCode, "sdist": SdistWithProtos},
    options={"build": {"build_base": f"{scratch}/build"}, "egg_info": {"egg_base": scratch}},
)
