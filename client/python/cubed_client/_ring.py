"""The command ring: the session stream through shared memory, for a daemon on this host.

Note [Command ring] in common/shm_ring.h is the layout and the protocol; this is the same in
Python. The client creates a memfd sealed against shrinking, writes a fresh header, and passes it
over the daemon's ring socket (the Unix socket's path plus ``.ring``; proto/cubed/v1/ring.proto);
the daemon answers with three eventfds. SessionRequests then go into the command ring and
SessionResponses come out of the reply ring, in chunks of an 8-byte header (length, kind and a
"more" flag) and a payload padded to 8 bytes. The connection stays open for the session's life.

Ordering: every position is an aligned 8-byte word of the shared mapping, written once per
publish (after the chunk's bytes) and read once per look. Python has no fences of its own: after
a publish this side takes an uncontended Lock (an atomic read-modify-write, a full barrier on
x86) before it reads the daemon's waiting word, and before it sleeps it drains its own doorbell,
a system call, between setting its waiting word and its last look. (A wake-up lost anyway costs
at most the daemon's 1 s sleep.)
"""

from __future__ import annotations

import fcntl
import mmap
import os
import select
import socket
import struct
import threading
import time
from typing import Callable, List, Optional, Tuple

import grpc

from ._errors import CubedError, error_for, error_from_number
from ._proto import ring_pb2, session_pb2

MAGIC = 0x474E524445425543  # "CUBEDRNG"
VERSION = 1
HEADER_BYTES = 4096
MORE = 0x100
REQUEST, REQUESTS_DONE, RESPONSE, END = 1, 2, 3, 4
# Word indices (8-byte words) and waiting-word indices (4-byte words) of the header.
_COMMAND_TAIL, _COMMAND_HEAD, _REPLY_TAIL, _REPLY_HEAD = 8, 16, 24, 32
_DAEMON_WAITING, _CLIENT_REPLY_WAITING, _CLIENT_SPACE_WAITING = 80, 96, 112
_HEADER = struct.Struct("<II")


def _pad8(n: int) -> int:
    return (n + 7) & ~7


class RingClosed(Exception):
    """The daemon ended the ring: ``status`` is its end record (code, message), or None when
    the connection went away without one."""

    def __init__(self, status: Optional[Tuple[int, str]]) -> None:
        super().__init__(status)
        self.status = status


class Ring:
    """The client's end of one command ring. ``write`` on one thread, ``read`` on another,
    ``cancel`` on any."""

    def __init__(self, socket_path: str, capacity: int = 4 << 20, timeout: float = 10.0) -> None:
        self._cap = capacity
        size = HEADER_BYTES + 2 * capacity
        fd = os.memfd_create("cubed-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            self._mmap = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._view = memoryview(self._mmap)
            self._words = self._view[:HEADER_BYTES].cast("Q")
            self._waiting = self._view[:HEADER_BYTES].cast("I")
            struct.pack_into("<QIIQQ", self._mmap, 0, MAGIC, VERSION, 0, capacity, capacity)
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._sock.settimeout(timeout)
                self._sock.connect(socket_path)
                request = ring_pb2.OpenRingRequest(client="cubed-python").SerializeToString()
                socket.send_fds(self._sock, [request], [fd])
                answer, fds, _, _ = socket.recv_fds(self._sock, 4096, 4)
            except OSError as e:
                self._sock.close()
                raise error_for(grpc.StatusCode.UNAVAILABLE,
                                f"ring socket {socket_path}: {e}") from None
        finally:
            os.close(fd)  # The mappings keep the memory alive.
        if not answer and not fds:  # A success may be empty on the wire (every field 0).
            self._sock.close()
            raise error_for(grpc.StatusCode.UNAVAILABLE,
                            f"ring socket {socket_path}: the daemon closed the connection")
        response = ring_pb2.OpenRingResponse.FromString(answer)
        if response.code != 0:
            for f in fds:
                os.close(f)
            self._sock.close()
            raise error_from_number(response.code, response.message, 0)
        if len(fds) != 3:
            for f in fds:
                os.close(f)
            self._sock.close()
            raise error_for(grpc.StatusCode.INTERNAL,
                            f"ring socket: the answer carries {len(fds)} descriptors, not 3")
        self._sock.setblocking(True)
        # The polling the daemon suggests (Note [Waiter reads]); at most 1 ms, as the C++ SDK.
        self.suggested_spin = min(response.spin_us, 1000) / 1e6
        self._daemon_bell, self._reply_bell, self._space_bell = fds
        self._commands = HEADER_BYTES
        self._replies = HEADER_BYTES + capacity
        self._tail = 0  # Command ring: what this side published.
        self._head = 0  # Reply ring: what this side consumed.
        self._cancelled = False
        self._lock = threading.Lock()  # cancel / close against the threads.
        # Whoever reads the reply ring holds it (Note [Waiter reads]); also guards _parts.
        self.read_lock = threading.Lock()
        self._parts: List[bytes] = []  # Chunks of a reply message not yet complete.
        self._part_size = 0
        self._part_kind = 0
        self._max_message = 1 << 31
        self._fence = threading.Lock()  # Only for its barrier (_ring_daemon).

    # --- waiting -------------------------------------------------------------------------------

    def _wait(self, bell: int, waiting: int, ready, timeout: float = 0.0) -> None:  # noqa: ANN001
        """Sleeps on ``bell`` until ``ready()`` (or, with ``timeout``, once about that long);
        RingClosed when the connection ended."""
        while True:
            if self._cancelled:
                raise RingClosed(None)
            self._waiting[waiting] = 1
            try:
                os.eventfd_read(bell)  # Drains the bell; a system call before the last look.
            except BlockingIOError:
                pass
            if ready():
                self._waiting[waiting] = 0
                return
            r, _, _ = select.select([bell, self._sock], [], [], timeout or 1.0)
            self._waiting[waiting] = 0
            if ready():
                return
            if self._sock in r:  # The daemon sends nothing after its answer: this is its end.
                raise RingClosed(None)
            if timeout:
                return

    def _ring_daemon(self) -> None:
        """Rings the daemon when it sleeps. The position just published must be visible before
        the waiting word is read (a store then a load: x86 may reorder them): an uncontended
        Lock's acquire is an atomic read-modify-write, a full barrier there."""
        self._fence.acquire()
        self._fence.release()
        if self._waiting[_DAEMON_WAITING]:
            try:
                os.eventfd_write(self._daemon_bell, 1)
            except OSError:
                pass

    # --- writing -------------------------------------------------------------------------------

    def write(self, kind: int, payload: bytes) -> None:
        """Appends one message of ``kind``, waiting for room; RingClosed when the ring ended."""
        if self._cancelled:
            raise RingClosed(None)
        cap, base, view, words = self._cap, self._commands, self._view, self._words
        n_total = len(payload)
        chunk = 16 + ((n_total - 1) & ~7) if n_total else 8  # Header + payload padded to 8.
        tail = self._tail
        head = words[_COMMAND_HEAD]
        used = tail - head
        if 0 <= used <= cap - chunk and not head & 7:  # The common case: one chunk fits.
            at = tail & (cap - 1)
            _HEADER.pack_into(self._mmap, base + at, n_total, kind)
            at = (tail + 8) & (cap - 1)
            part = min(n_total, cap - at)
            view[base + at:base + at + part] = payload[:part] if part < n_total else payload
            if part < n_total:
                view[base:base + n_total - part] = payload[part:]
            self._tail = tail + chunk
            words[_COMMAND_TAIL] = self._tail
            self._ring_daemon()
            return
        data = memoryview(payload)
        pos, first = 0, True
        while True:
            head = words[_COMMAND_HEAD]
            used = self._tail - head
            if used < 0 or used > cap or head & 7:
                raise RingClosed((15, "command ring: the daemon's head is out of range"))
            free = cap - used
            published = False
            while (first or pos < n_total) and free >= 8 + (8 if pos < n_total else 0):
                first = False
                n = min(n_total - pos, free - 8)
                more = pos + n < n_total
                at = self._tail & (cap - 1)
                _HEADER.pack_into(self._mmap, base + at, n, kind | (MORE if more else 0))
                at = (self._tail + 8) & (cap - 1)
                part = min(n, cap - at)
                view[base + at:base + at + part] = data[pos:pos + part]
                if part < n:
                    view[base:base + n - part] = data[pos + part:pos + n]
                chunk = 8 + _pad8(n)
                self._tail += chunk
                free -= chunk
                pos += n
                words[_COMMAND_TAIL] = self._tail
                published = True
                if not more:
                    self._ring_daemon()
                    return
            if published:
                self._ring_daemon()
            self._wait(self._space_bell, _CLIENT_SPACE_WAITING,
                       lambda: cap - (self._tail - words[_COMMAND_HEAD]) >= 16)

    # --- reading -------------------------------------------------------------------------------

    def try_read(self, only: int = 0) -> Optional[Tuple[int, bytes]]:
        """The next whole message of the reply ring as (kind, bytes), or None when it is not all
        published yet (the chunks read so far are kept for the next call). With ``only``, also
        None when the next message is of another kind (left in the ring). The caller holds
        ``read_lock``. RingClosed when the ring is corrupt."""
        cap, base, view, words = self._cap, self._replies, self._view, self._words
        while True:
            tail = words[_REPLY_TAIL]
            published = tail - self._head
            if published < 0 or published > cap or tail & 7:
                raise RingClosed((15, "command ring: the daemon's reply tail is out of range"))
            if published == 0:
                return None
            at = self._head & (cap - 1)
            length, flags = _HEADER.unpack_from(self._mmap, base + at)
            chunk_kind = flags & 0xFF
            chunk = 8 + _pad8(length)
            parts = self._parts
            if flags & ~(0xFF | MORE) or not 1 <= chunk_kind <= 4 or chunk > published or (
                    parts and chunk_kind != self._part_kind) or (
                    self._part_size + length > self._max_message):
                raise RingClosed((15, "command ring: a corrupt chunk in the reply ring"))
            if only and not parts and chunk_kind != only:
                return None
            at = (self._head + 8) & (cap - 1)
            part = min(length, cap - at)
            piece = bytes(view[base + at:base + at + part])
            if part < length:
                piece += bytes(view[base:base + length - part])
            parts.append(piece)
            self._part_size += length
            self._part_kind = chunk_kind
            self._head += chunk
            words[_REPLY_HEAD] = self._head
            self._ring_daemon()  # It may wait for room for a reply.
            if not flags & MORE:
                self._parts, self._part_size = [], 0
                return chunk_kind, parts[0] if len(parts) == 1 else b"".join(parts)

    def has_reply(self) -> bool:
        """Whether the daemon published reply bytes not yet read (a look, no lock needed)."""
        return self._words[_REPLY_TAIL] != self._head

    def wait_reply(self, timeout: float = 1.0) -> None:
        """Sleeps until the daemon published reply bytes, at most about ``timeout``; RingClosed
        when the connection ended. Without ``read_lock``, or with it on a waiter's thread."""
        self._wait(self._reply_bell, _CLIENT_REPLY_WAITING, self.has_reply, timeout)

    # Note [Waiter reads]
    # A thread that waits for an answer first polls the reply ring itself for a while
    # (RingCall.serve_until; connect(spin=...)) instead of sleeping until the reader thread is
    # woken by the daemon's bell and hands the answer over: two thread wake-ups fewer when the
    # answer comes within the poll. read_lock makes one thread at a time the reader; replies
    # are handled in ring order by whoever holds it, so every Future still completes in order
    # and exactly once. While a waiter polls, it clears the reply waiting word, so the daemon
    # rings no bell and the reader thread sleeps on; before it lets go it sets the word again,
    # passes a barrier, and rings the reader thread's bell itself when bytes arrived meanwhile
    # or a message that is not a response (the end record) waits. The waiter never sleeps on
    # the bell: the reader thread sleeps there (two sleepers would both wake), and it handles
    # the stream's end, as before.
    def quiet_replies(self) -> None:
        """A waiter took the reader's place (Note [Waiter reads]): the daemon rings no bell."""
        self._waiting[_CLIENT_REPLY_WAITING] = 0

    def hand_back_replies(self) -> None:
        """The waiter is done (Note [Waiter reads]): bells again, and the reader thread woken
        when there is something to read. With read_lock held."""
        self._waiting[_CLIENT_REPLY_WAITING] = 1
        self._fence.acquire()  # The word must be visible before the look below.
        self._fence.release()
        if self.has_reply() and not self._cancelled:
            try:
                os.eventfd_write(self._reply_bell, 1)
            except OSError:
                pass

    # --- ending --------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Ends the ring at once: the daemon ends the stream; waiting threads see RingClosed."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            for bell in (self._reply_bell, self._space_bell):
                os.eventfd_write(bell, 1)

    def close(self) -> None:
        """Releases this side's descriptors (after every thread is done with the ring)."""
        self.cancel()
        with self._lock:
            if self._sock.fileno() < 0:
                return
            self._sock.close()
            for bell in (self._daemon_bell, self._reply_bell, self._space_bell):
                os.close(bell)


class RingCall:
    """The command ring in the shape the stream transport needs: ``write`` sends one
    SessionRequest (the caller keeps writes one at a time and in order), ``serve`` (the reader
    thread) and ``serve_until`` (a thread waiting for an answer) hand the SessionResponses
    over, ``cancel()`` ends it and ``close()`` releases it once nothing uses it."""

    direct = True  # Each command is written by its sender; no writer thread.

    def __init__(self, ring: Ring, first: session_pb2.SessionRequest) -> None:
        self._ring = ring
        self.suggested_spin = ring.suggested_spin  # Seconds (OpenRingResponse.spin_us).
        ring.write(REQUEST, first.SerializeToString())

    def write(self, request: session_pb2.SessionRequest) -> bool:
        """Sends ``request``, waiting for room; False once the ring ended."""
        try:
            self._ring.write(REQUEST, request.SerializeToString())
            return True
        except RingClosed:
            return False

    def write_bytes(self, request: bytes) -> bool:
        """Sends a serialized SessionRequest, waiting for room; False once the ring ended."""
        try:
            self._ring.write(REQUEST, request)
            return True
        except RingClosed:
            return False

    def done_writing(self) -> None:
        """The half-close: no more requests."""
        try:
            self._ring.write(REQUESTS_DONE, b"")
        except RingClosed:
            pass

    def _handle(self, kind: int, data: bytes,
                handle: Callable[[session_pb2.SessionResponse], None]) -> bool:
        """Hands a response to ``handle``; True at the end record; CubedError for a failed end
        or a chunk that has no place in the reply ring."""
        if kind == RESPONSE:
            handle(session_pb2.SessionResponse.FromString(data))
            return False
        if kind == END:
            end = ring_pb2.RingEnd.FromString(data)
            if end.code != 0:
                raise error_from_number(end.code, f"SessionStream: {end.message}", 0)
            return True
        raise error_for(grpc.StatusCode.DATA_LOSS,
                        "SessionStream: a request chunk in the reply ring")

    @staticmethod
    def _closed(e: RingClosed) -> CubedError:
        if e.status is not None:
            return error_from_number(e.status[0], e.status[1], 0)
        return error_for(grpc.StatusCode.UNAVAILABLE,
                         "SessionStream: the daemon closed the command ring")

    def serve(self, handle: Callable[[session_pb2.SessionResponse], None]) -> None:
        """The reader thread: hands every SessionResponse to ``handle`` in order, holding the
        ring's read_lock, until the daemon's end record (returns) or the stream's failure
        (raises CubedError). Ends the ring either way."""
        ring = self._ring
        try:
            while True:
                with ring.read_lock:
                    while True:
                        message = ring.try_read()
                        if message is None:
                            break
                        if self._handle(message[0], message[1], handle):
                            return
                ring.wait_reply()
        except RingClosed as e:
            raise self._closed(e) from None
        finally:
            ring.cancel()

    def first_response(self, timeout: float) -> session_pb2.SessionResponse:
        """The stream's first SessionResponse (its `opened`), read before any reader thread
        serves the ring; CubedError when the daemon ended the stream instead (its code: e.g.
        NOT_FOUND for a refused resume) or sent nothing within ``timeout`` seconds
        (UNAVAILABLE)."""
        ring = self._ring
        give_up = time.monotonic() + timeout
        try:
            while True:
                with ring.read_lock:
                    message = ring.try_read()
                if message is not None:
                    kind, data = message
                    if kind == RESPONSE:
                        return session_pb2.SessionResponse.FromString(data)
                    if self._handle(kind, data, lambda _: None):  # The end record, code 0.
                        raise error_for(grpc.StatusCode.UNAVAILABLE,
                                        "SessionStream: the daemon ended the stream at open")
                left = give_up - time.monotonic()
                if left <= 0:
                    raise error_for(grpc.StatusCode.UNAVAILABLE,
                                    f"SessionStream: no `opened` within {timeout} s")
                ring.wait_reply(min(left, 1.0))
        except RingClosed as e:
            raise self._closed(e) from None

    def serve_until(self, handle: Callable[[session_pb2.SessionResponse], None],
                    done: Callable[[], bool], spin: float) -> None:
        """A waiting thread polls the reply ring in the reader thread's place (Note [Waiter
        reads]): hands responses to ``handle`` until ``done()`` or ``spin`` seconds passed
        without it. Returns at once when another thread reads, and when the stream ends (the
        reader thread reports that)."""
        ring = self._ring
        if not ring.read_lock.acquire(blocking=False):
            return
        try:
            ring.quiet_replies()
            spin_until = time.monotonic() + spin
            while not done():
                message = ring.try_read(only=RESPONSE)
                if message is not None:
                    handle(session_pb2.SessionResponse.FromString(message[1]))
                    continue
                if ring.has_reply() or time.monotonic() >= spin_until:
                    return  # The end record, a message being written, or time: the reader's.
        except RingClosed:
            return  # The reader thread meets the same and ends the stream.
        finally:
            ring.hand_back_replies()
            ring.read_lock.release()

    def cancel(self) -> None:
        self._ring.cancel()

    def close(self) -> None:
        """Releases the ring's descriptors: after the iteration ended and the last write."""
        self._ring.close()


def open_ring_call(socket_path: str, first: session_pb2.SessionRequest) -> Optional[RingCall]:
    """A RingCall over a new ring with the daemon at ``socket_path`` that sent ``first`` (the
    stream's open), or None when the daemon offers no ring there (no socket, refused): the
    caller uses gRPC."""
    try:
        ring = Ring(socket_path)
    except (CubedError, OSError):
        return None
    try:
        return RingCall(ring, first)
    except RingClosed:
        ring.close()
        return None
