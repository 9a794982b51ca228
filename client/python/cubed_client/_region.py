"""Shared-memory regions: memory of this process that a cubed daemon on the same host maps.

A region is a memfd sealed against shrinking (so the daemon's mapping can never lose pages),
registered for one session over the daemon's region socket (the Unix socket's path plus
``.regions``; proto/cubed/v1/region.proto). Creates then take their bytes from it and reads
write theirs into it, so no gRPC message carries them (docs/api.md, "Shared-memory regions").
"""

import fcntl
import mmap
import os
import socket
import threading
from typing import Optional

import grpc

from ._errors import error_for, error_from_number
from ._proto import region_pb2


def region_socket_path(target: str) -> Optional[str]:
    """The region socket of a daemon reached at gRPC target ``target``, or None for TCP."""
    if target.startswith("unix:"):
        return target[len("unix:"):] + ".regions"
    return None


class SharedRegion:
    """``size`` bytes of sealed memfd memory, mapped here and registered for ``session``.

    ``view`` is a writable memoryview over the whole region. Thread-safe to read and write; the
    daemon reads a create's bytes when the command runs and writes a read's before its reply.
    Closing unmaps this process's side; the daemon's registration ends with the session (or a
    release_region command).
    """

    def __init__(self, socket_path: str, session: int, size: int) -> None:
        if size <= 0:
            raise ValueError(f"region size {size}; need at least 1 byte")
        fd = os.memfd_create("cubed-region", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            self.mmap = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.id = _register(socket_path, session, fd)
        finally:
            os.close(fd)  # The mappings keep the memory alive.
        self.size = size
        self.view = memoryview(self.mmap)
        self.lock = threading.Lock()  # Held by whoever stages bytes in the region.

    def close(self) -> None:
        self.view.release()
        self.mmap.close()


def _register(socket_path: str, session: int, fd: int) -> int:
    request = region_pb2.RegisterRegionRequest(session=session).SerializeToString()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        try:
            s.connect(socket_path)
        except OSError as e:
            raise error_for(grpc.StatusCode.UNAVAILABLE,
                            f"region socket {socket_path}: {e.strerror}") from None
        socket.send_fds(s, [request], [fd])
        answer = s.recv(2048)
    if not answer:
        raise error_for(grpc.StatusCode.UNAVAILABLE,
                        f"region socket {socket_path}: the daemon closed the connection")
    response = region_pb2.RegisterRegionResponse.FromString(answer)
    if response.code != 0:
        raise error_from_number(response.code, response.message, 0)
    return response.region
