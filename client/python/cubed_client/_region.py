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
from concurrent.futures import Future
from typing import Any, Optional

import grpc
import numpy as np

from ._errors import CubedError, error_for, error_from_number
from ._proto import region_pb2, types_pb2


class SharedRegion:
    """``size`` bytes of sealed memfd memory (named ``name`` in /proc maps), mapped here and
    registered for ``session``.

    ``view`` is a writable memoryview over the whole region. Thread-safe to read and write; the
    daemon reads a create's bytes when the command runs and writes a read's before its reply.
    Closing unmaps this process's side; the daemon's registration ends with the session (or a
    release_region command).
    """

    def __init__(self, socket_path: str, session: int, size: int,
                 name: str = "cubed-region") -> None:
        if size <= 0:
            raise ValueError(f"region size {size}; need at least 1 byte")
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
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


class Staging:
    """The staging region behind a Client's create() and read() of large arrays: one user at a
    time (acquire() .. release(), from any thread), grown by doubling, released on the daemon
    after the commands that used it. Off when ``socket_path`` is None, ``threshold`` is 0, or
    the daemon refused a region once (no region socket)."""

    def __init__(self, socket_path: Optional[str], session: int, transport: Any,
                 threshold: int) -> None:
        self._socket_path = socket_path
        self._session = session
        self._transport = transport
        self._threshold = threshold if socket_path else 0
        self._region: Optional[SharedRegion] = None
        self._lock = threading.Lock()

    def wanted(self, nbytes: int) -> bool:
        """Whether ``nbytes`` should go through the region."""
        return self._threshold > 0 and nbytes >= self._threshold

    def acquire(self, nbytes: int) -> Optional[SharedRegion]:
        """Waits for the region, takes it and returns it, at least ``nbytes`` large; None (and
        nothing to release) when regions are off."""
        self._lock.acquire()
        if self._region is not None and self._region.size >= nbytes:
            return self._region
        size = max(nbytes, 2 * self._region.size if self._region else 0)
        size = (size + (2 << 20) - 1) // (2 << 20) * (2 << 20)
        try:
            region = SharedRegion(self._socket_path, self._session, size)  # type: ignore[arg-type]
        except (CubedError, OSError):
            self._threshold = 0  # No region socket (an older daemon, or turned off).
            self._lock.release()
            return None
        if self._region is not None:
            self._transport.release_region(self._region.id)  # After the commands using it.
            self._region.close()
        self._region = region
        return region

    def release(self) -> None:
        self._lock.release()

    def read(self, transport: Any, t: Any, start: int) -> Optional[Future]:
        """Client.read_async of Tensor ``t`` (its binding starting ``start`` bytes into the
        allocation) through the region, which stays taken until the bytes were copied out into
        the resulting ndarray; None when regions are off."""
        region = self.acquire(t.nbytes)
        if region is None:
            return None
        try:
            binding = types_pb2.Binding(handle=t.id, offset_start=start)
            if t.is_contiguous:
                binding.offset_end = t.allocation_bytes - start - t.nbytes
                raw = transport.read_into_region([binding], region.id, 0, t.nbytes)
            else:
                raw = transport.read_tensor_into_region([types_pb2.BindingWithMeta(
                    binding=binding, shape=t.shape, strides=t.strides,
                    elem_size=t.dtype.itemsize)], region.id, 0, t.nbytes)
        except BaseException:
            self.release()
            raise
        out: Future = Future()
        # The callback keeps the layout, not the tensor: a finished future may be held on to
        # (its callbacks with it), and the tensor must die with its last user reference.
        dtype, shape, count = t.dtype, t.shape, t.nbytes // t.dtype.itemsize

        def convert(f: Future) -> None:
            try:
                f.result()
                out.set_result(np.frombuffer(region.mmap, dtype, count).reshape(shape).copy())
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                out.set_exception(e)
            finally:
                self.release()

        raw.add_done_callback(convert)
        return out

    def close(self) -> None:
        """Unmaps this side (the daemon's ends with the session)."""
        with self._lock:
            if self._region is not None:
                self._region.close()
                self._region = None
