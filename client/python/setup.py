"""Build hooks of the turnstile Python package (metadata: pyproject.toml).

The protobuf messages and gRPC stubs (turnstile/v1/lock_pb2.py,
lock_pb2_grpc.py) are not kept in the source tree: they are generated from
the contract, turnstile/v1/lock.proto, whenever the package is built (a
wheel, `pip install`, or an editable install).

Where the .proto is read from, first found:
  protos/turnstile/v1/lock.proto           next to this file: an sdist carries
                                           its copy there;
  ../../protos/turnstile/v1/lock.proto     the repository's, in a checkout.

The generator, first found:
  protoc and grpc_python_plugin on PATH    Debian's protobuf-compiler and
                                           protobuf-compiler-grpc (what the
                                           repository's CMake build uses);
                                           taken only if protoc is 3.20 or
                                           newer, whose code also runs on
                                           protobuf 4.x;
  python3 -m grpc_tools.protoc             grpcio-tools (PyPI), or Debian's
                                           python3-grpc-tools.
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = "turnstile/v1/lock.proto"
PROTO_ROOTS = [os.path.join(HERE, "protos"),
               os.path.normpath(os.path.join(HERE, "..", "..", "protos"))]
LICENSE_FILES = [os.path.join(HERE, "LICENSE"),
                 os.path.normpath(os.path.join(HERE, "..", "..", "LICENSE"))]


def _first_file(paths):
    for p in paths:
        if os.path.isfile(p):
            return p
    return None


def proto_root() -> str:
    found = _first_file(os.path.join(r, PROTO) for r in PROTO_ROOTS)
    if found is None:
        raise SystemExit(
            "turnstile: cannot find %s under %s. Build from the repository "
            "(client/python inside it) or from an sdist, or copy the "
            "repository's protos/ directory into %s." % (PROTO, " or ".join(PROTO_ROOTS), HERE))
    return found[:-len(PROTO) - 1]


def _protoc_version(protoc: str):
    try:
        out = subprocess.run([protoc, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def generator():
    """The command that runs protoc with a Python gRPC plugin, and its name."""
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if protoc and plugin:
        version = _protoc_version(protoc)
        if version and version >= (3, 20):
            return [protoc, "--plugin=protoc-gen-grpc_python=" + plugin], protoc
    try:
        import grpc_tools.protoc  # noqa: F401
    except ImportError:
        raise SystemExit(
            "turnstile: generating the gRPC stubs needs protoc (3.20 or newer) and "
            "grpc_python_plugin on PATH (Debian: apt-get install protobuf-compiler "
            "protobuf-compiler-grpc), or the Python module grpc_tools (grpcio-tools; "
            "Debian: python3-grpc-tools)")
    return [sys.executable, "-m", "grpc_tools.protoc"], "grpc_tools.protoc"


def generate(out_dir: str) -> None:
    """Writes turnstile/v1/lock_pb2.py, lock_pb2_grpc.py and a copy of
    lock.proto under out_dir."""
    root = proto_root()
    cmd, name = generator()
    os.makedirs(os.path.join(out_dir, "turnstile", "v1"), exist_ok=True)
    includes = ["-I" + root]  # google/protobuf/*.proto: each generator finds its own
    print("turnstile: generating turnstile/v1 stubs from %s with %s" % (
        os.path.join(root, PROTO), name))
    subprocess.run(cmd + includes + ["--python_out=" + out_dir, "--grpc_python_out=" + out_dir,
                                     os.path.join(root, PROTO)], check=True)
    # The contract itself ships too, next to its stubs (turnstile/v1/lock.proto).
    shutil.copyfile(os.path.join(root, PROTO), os.path.join(out_dir, PROTO))


class BuildPyWithStubs(build_py):
    """build_py, then the generated stubs into the built package (into the
    source tree itself for an editable install, where it is imported from)."""

    def run(self):
        super().run()
        generate(HERE if getattr(self, "editable_mode", False) else self.build_lib)


class SdistWithProto(sdist):
    """An sdist carries the .proto (and the licence) it is built from."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        dest = os.path.join(base_dir, "protos", PROTO)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(proto_root(), PROTO), dest)
        licence = _first_file(LICENSE_FILES)
        if licence and not os.path.exists(os.path.join(base_dir, "LICENSE")):
            shutil.copyfile(licence, os.path.join(base_dir, "LICENSE"))


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto})
