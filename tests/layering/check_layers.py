#!/usr/bin/env python3
"""The layering rules of ARCHITECTURE.md §2, checked on every include line of the project.

    daemon -> service (+ stream, ring) -> metrics -> channel -> compute (+ cpu, cuda)
           -> storage (+ cuda), kernels (+ cpu, cuda), auth -> common (+ cuda, crypto)

common/crypto (SHA-256 over OpenSSL) is a leaf of its own, apart from common, which the C++ SDK
installs: only kernels/cuda (the kernel cache) and server/daemon (checkpoints) use it.

Each folder below may include headers of the folders listed for it (and its own), nothing else of
the project: a lower layer never includes a higher one. Below the service layer nothing includes
gRPC (grpcpp/, grpc/) or generated protobuf (*.pb.h, google/protobuf/). Tests beside the code
(*_test.cc, *_conformance.*, *_test_util.*) may include what their test target links, so only the
gRPC/protobuf rule applies to them where they sit below the service layer... except that they are
tests: they are checked for neither. The build enforces the same through per-library include roots
(Note [Layer include roots], cmake/layers.cmake); this check also names the rule that was broken.

Usage: check_layers.py PROJECT_ROOT   (exit 0: clean; 1: violations, one line each)
"""

import os
import re
import sys

COMMON = ["common"]
# folder -> folders (besides itself) whose headers it may include.
ALLOWED = {
    "common": [],
    "common/cuda": ["common"],
    "common/crypto": [],
    "storage": ["common"],
    "storage/cuda": ["storage", "common/cuda", "common"],
    "kernels": ["common"],  # The catalogue: neutral, so it never includes an implementation.
    "kernels/cpu": ["kernels", "common"],
    "kernels/cuda": ["kernels", "common/cuda", "common/crypto", "common"],
    "server/auth": ["common"],
    "server/compute": ["storage", "kernels", "common", "server/compute/cpu",
                       "server/compute/cuda"],  # Only the registry includes the backends.
    "server/compute/cpu": ["server/compute", "storage", "kernels/cpu", "kernels", "common"],
    "server/compute/cuda": ["server/compute", "storage", "storage/cuda", "kernels",
                            "kernels/cuda", "common/cuda", "common"],
    "server/channel": ["server/compute", "server/auth", "storage", "kernels", "common"],
    "server/metrics": ["server/channel", "server/compute", "server/auth", "storage", "kernels",
                       "common"],
    "server/service": ["server/metrics", "server/channel", "server/compute", "server/auth",
                       "storage", "kernels", "common", "proto"],
    "server/service/stream": ["server/service", "server/metrics", "server/channel",
                              "server/compute", "server/auth", "storage", "kernels", "common",
                              "proto"],
    "server/service/ring": ["server/service", "server/service/stream", "server/metrics",
                            "server/channel", "server/compute", "server/auth", "storage",
                            "kernels", "common", "proto"],
    "server/daemon": ["server/service", "server/service/stream", "server/service/ring",
                      "server/metrics",
                      "server/channel", "server/compute", "server/auth", "storage", "kernels",
                      "common/crypto", "common", "proto"],
    "client": ["common", "proto"],
    "client/cubectl": ["client", "common", "proto"],
    "client/c_api": ["client", "common", "proto"],
}
# Folders where gRPC and generated protobuf may appear.
PROTO_OK = {"server/service", "server/service/stream", "server/service/ring", "server/daemon",
            "client",
            "client/cubectl", "client/c_api"}
# The only file of server/compute allowed to include a backend: the registry.
REGISTRY = "server/compute/backend_registry.cc"

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
GRPC_OR_PROTO = re.compile(r'^(grpcpp/|grpc/|google/protobuf/)|\.pb\.h$')


def is_test(path):
    name = os.path.basename(path)
    return (name.endswith("_test.cc") or "_conformance." in name or "_test_util." in name
            or name.startswith("test_"))


def folder_of_header(include):
    """The project folder a quoted include names, or None (a system or library header)."""
    if include.startswith("cubed/v1/") or include.startswith("grpc/health/"):
        return "proto"
    folder = os.path.dirname(include)
    while folder:
        if folder in ALLOWED:
            return folder
        folder = os.path.dirname(folder)
    return None


def check(root):
    problems = []
    for folder in sorted(ALLOWED):
        directory = os.path.join(root, folder)
        if not os.path.isdir(directory):
            problems.append(f"{folder}/: the folder of this layer is missing")
            continue
        for name in sorted(os.listdir(directory)):
            if not name.endswith((".h", ".cc", ".cuh")):
                continue
            path = f"{folder}/{name}"
            if is_test(path):
                continue
            with open(os.path.join(root, path), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    include = m.group(2)
                    close = '"' if m.group(1) == '"' else ">"
                    where = f"{path}:{number}: #include {m.group(1)}{include}{close}"
                    if GRPC_OR_PROTO.search(include) and folder not in PROTO_OK:
                        problems.append(f"{where}: gRPC or generated protobuf below the service "
                                        f"layer ({folder}); convert at the edge "
                                        f"(server/service/wire_conversion.h)")
                        continue
                    if m.group(1) != '"':
                        continue
                    target = folder_of_header(include)
                    if target is None or target == folder:
                        continue
                    if target in ("server/compute/cpu", "server/compute/cuda") and \
                            folder == "server/compute" and path != REGISTRY:
                        problems.append(f"{where}: only {REGISTRY} may name a backend")
                        continue
                    if target not in ALLOWED[folder]:
                        problems.append(f"{where}: {folder} may not include {target} (allowed: "
                                        f"{', '.join(ALLOWED[folder]) or 'nothing'})")
    return problems


def self_test():
    """Plants one violation of each kind in a scratch tree: the check must find exactly those."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for folder in ALLOWED:
            os.makedirs(os.path.join(root, folder), exist_ok=True)
        planted = {
            "storage/pool.h": '#include "server/channel/device.h"\n',     # Upward.
            "common/log.cc": "#include <grpcpp/grpcpp.h>\n",               # gRPC in common.
            "server/channel/x.cc": '#include "cubed/v1/session.pb.h"\n',  # Protobuf in channel.
            "server/compute/y.cc": '#include "server/compute/cpu/cpu_server.h"\n',  # Not registry.
            "kernels/validate.cc": '#include "kernels/cpu/cpu_kernels.h"\n',  # Spec on a backend.
            "server/service/ok.cc": '#include "server/channel/device.h"\n#include <grpcpp/x.h>\n',
            "server/channel/ok_test.cc": '#include "server/service/compute_service.h"\n',
            # OpenSSL stays out of what the SDK installs (common) and out of the SDK.
            "common/digest.cc": '#include "common/crypto/sha256.h"\n',
            "client/digest.cc": '#include "common/crypto/sha256.h"\n',
            "kernels/cuda/ok.cc": '#include "common/crypto/sha256.h"\n',
        }
        for path, text in planted.items():
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(root)
        expected = ["storage/pool.h", "common/log.cc", "server/channel/x.cc",
                    "server/compute/y.cc", "kernels/validate.cc", "common/digest.cc",
                    "client/digest.cc"]
        ok = len(found) == len(expected) and all(
            any(p.startswith(e + ":") for p in found) for e in expected)
        print("\n".join(found))
        print("self-test:", "passed" if ok else "FAILED")
        return 0 if ok else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering violation(s); ARCHITECTURE.md §2 gives the rule")
        return 1
    print("layering: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
