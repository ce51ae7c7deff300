"""Generates the gRPC/protobuf modules from ../../proto (generate.py) whenever the package
is built or installed, editable included, before setuptools looks at the package
directories. The metadata is in pyproject.toml."""
import sys
from pathlib import Path

from setuptools import setup

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import generate  # noqa: E402

generate()
setup()
