"""Build hook of cubed-client: generates the gRPC stubs from cubed's .proto files.

The protos are found, in this order, in $CUBED_PROTO_DIR, in ./proto (the copy an sdist carries)
and in ../../proto (the repository checkout: `pip install ./client/python`). They are compiled
with grpc_tools.protoc (grpcio-tools, a build requirement from PyPI) into the package
`cubed_client._proto`, with the generated `from cubed.v1 import ...` lines made relative so that
nothing is installed under the top-level name `cubed` (an unrelated PyPI project). The runtime
lower bounds of grpcio and protobuf are read from the generated code, so the wheel always
requires the runtime its stubs were generated for.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PROTOS = ["cubed/v1/types.proto", "cubed/v1/compute.proto", "cubed/v1/session.proto",
          "cubed/v1/region.proto", "cubed/v1/ring.proto"]
PACKAGE_DIR = "cubed_client/_proto"


def proto_root() -> Path:
    """The directory holding cubed/v1/*.proto."""
    candidates = [os.environ.get("CUBED_PROTO_DIR"), HERE / "proto", HERE.parent.parent / "proto"]
    for c in candidates:
        if c and all((Path(c) / p).is_file() for p in PROTOS):
            return Path(c)
    raise SystemExit(
        "cubed-client: cannot find cubed/v1/{types,compute,session}.proto in $CUBED_PROTO_DIR, "
        f"{HERE / 'proto'} or {HERE.parent.parent / 'proto'}; build from the cubed repository "
        "(pip install ./client/python) or from an sdist, or set CUBED_PROTO_DIR")


_generated: Optional[Path] = None


def generated() -> Path:
    """Runs protoc once per build into a temporary directory and returns it (flat *_pb2*.py)."""
    global _generated
    if _generated is not None:
        return _generated
    from grpc_tools import protoc  # A build requirement (pyproject.toml).

    out = Path(tempfile.mkdtemp(prefix="cubed-client-stubs-"))
    raw = out / "raw"
    raw.mkdir()
    root = proto_root()
    args = ["grpc_tools.protoc", f"-I{root}", f"--python_out={raw}", f"--grpc_python_out={raw}",
            *[str(root / p) for p in PROTOS]]
    # Type stubs (.pyi) where the bundled protoc can write them (protobuf >= 3.20 builds; not
    # Debian 12's grpc_tools); the modules themselves either way.
    if protoc.main(args[:3] + [f"--pyi_out={raw}"] + args[3:]) != 0 and protoc.main(args) != 0:
        raise SystemExit(f"cubed-client: grpc_tools.protoc failed on {root}: {' '.join(args)}")
    flat = out / "flat"
    flat.mkdir()
    for f in sorted((raw / "cubed" / "v1").iterdir()):
        if f.suffix not in (".py", ".pyi"):
            continue
        text = f.read_text()
        text = re.sub(r"^from cubed\.v1 import ", "from . import ", text, flags=re.M)
        text = re.sub(r"^import cubed\.v1\.(\w+) as ", r"from . import \1 as ", text, flags=re.M)
        (flat / f.name).write_text(text)
    _generated = flat
    return flat


def runtime_requirements() -> List[str]:
    """grpcio/protobuf lower bounds the generated code needs, plus numpy and ml_dtypes (bf16)."""
    grpc_min, pb_min = "1.51", "3.20"
    flat = generated()
    for f in flat.glob("*_pb2_grpc.py"):
        m = re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", f.read_text())
        if m:
            grpc_min = m.group(1)
    for f in flat.glob("*_pb2.py"):
        m = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*"
                      r"(\d+),\s*(\d+),\s*(\d+),", f.read_text())
        if m:
            pb_min = ".".join(m.groups())
    return [f"grpcio>={grpc_min}", f"protobuf>={pb_min}", "numpy>=1.21", "ml_dtypes>=0.3"]


NATIVE_LIBRARY = "libcubed_client_c.so"


class BuildPyWithStubs(build_py):
    """build_py that also writes the generated stubs into cubed_client/_proto, and copies the
    native client core next to the package when $CUBED_CLIENT_LIBRARY names it at build time
    (optional: without it the package is pure Python; cubed_client/_native.py says where the
    library is looked for at run time)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / PACKAGE_DIR
        target.mkdir(parents=True, exist_ok=True)
        for f in generated().iterdir():
            shutil.copy2(f, target / f.name)
        library = os.environ.get("CUBED_CLIENT_LIBRARY", "").strip()
        bundled = Path(self.build_lib) / "cubed_client" / NATIVE_LIBRARY
        if library:
            if not Path(library).is_file():
                raise SystemExit(f"cubed-client: CUBED_CLIENT_LIBRARY={library} is not a file "
                                 f"(build it: ninja -C build cubed_client_c)")
            shutil.copy2(library, bundled)
        elif bundled.exists():
            # A copy left in the reused build directory by an earlier install with the variable
            # set: without it the package is pure Python, not bundled with a stale library.
            bundled.unlink()


class SdistWithProtos(sdist):
    """sdist that carries the .proto files (in ./proto), so the sdist builds anywhere."""

    def make_release_tree(self, base_dir: str, files: List[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for p in PROTOS:
            dst = Path(base_dir) / "proto" / p
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / p, dst)


# The compiled launch (cubed_client/_speedups.c; Note [Compiled launch] in _native.py): CPython's
# stable ABI of the building Python, 3.10 or 3.11 (3.11 brings the buffer protocol its compiled
# read needs), so the one build loads on later versions too. Optional: without a C compiler or
# Python's headers (Debian: python3-dev) the build goes on and the SDK runs the same launch in
# Python. CUBED_NO_SPEEDUPS=1 leaves it out on purpose (the suite's pure-Python run).
LIMITED_API = (0x030B0000, "cp311") if sys.version_info >= (3, 11) else (0x030A0000, "cp310")
SPEEDUPS = [] if os.environ.get("CUBED_NO_SPEEDUPS") == "1" else [
    Extension("cubed_client._speedups", ["cubed_client/_speedups.c"], py_limited_api=True,
              define_macros=[("Py_LIMITED_API", hex(LIMITED_API[0]))], optional=True,
              extra_compile_args=["-O2"])]

setup(install_requires=runtime_requirements(), ext_modules=SPEEDUPS,
      options={"bdist_wheel": {"py_limited_api": LIMITED_API[1]}}
      if sys.version_info >= (3, 10) else {},
      cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos})
