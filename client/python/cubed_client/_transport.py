"""The two ways a Client talks to the daemon: the pipelined session stream (default; carried by
the daemon's command ring for a daemon on this host, by gRPC otherwise) and one unary RPC per call
(fallback). Both expose the same methods; answering methods return a
concurrent.futures.Future, the others return once the command is queued (stream) or done (unary).

Stream batching: commands are queued; a request generator (run by gRPC on its own thread) sends
them as one SessionRequest when BATCH_COMMANDS are queued, as soon as an answering command is
queued, or BATCH_DELAY_S after the first queued one. A reader thread resolves answering commands
by seq. When the stream ends, every pending future gets the stream's error, and so does every
later command (unless it resumes: Note [Resume in Python] in _resume.py).
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import grpc

from ._errors import CubedError, error_for, error_from_number, error_from_rpc
from ._proto import compute_pb2, compute_pb2_grpc, session_pb2, types_pb2
from . import _resume, _wire
from ._ring import open_ring_call

Metadata = Sequence[Tuple[str, str]]

BATCH_COMMANDS = 256
BATCH_DELAY_S = 0.0002
MAX_PER_REQUEST = 4096
MAX_QUEUED_COMMANDS = 65536
MAX_QUEUED_BYTES = 256 << 20
# Empties and releases that wait for the next command over the ring (Note [Held commands]).
HELD_COMMANDS = 64


def _as_bytes(request: bytes) -> bytes:
    """The session stream's request serializer: the requests are serialized already."""
    return request


def _resolved(value: object) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def _raiser(error: CubedError) -> Callable[[session_pb2.Reply], object]:
    """A reply converter that raises ``error`` whatever the reply (Note [Resume in Python])."""
    def convert(reply: session_pb2.Reply) -> object:
        raise error

    return convert


def _from_grpc_future(call: grpc.Future, convert: Callable[[object], object], what: str) -> Future:
    out: Future = Future()

    def done(c: grpc.Future) -> None:
        try:
            out.set_result(convert(c.result()))
        except grpc.RpcError as e:
            out.set_exception(error_from_rpc(e, what))
        except Exception as e:  # noqa: BLE001 - handed to the caller
            out.set_exception(e)

    call.add_done_callback(done)
    return out


class UnaryTransport:
    """One blocking RPC per call on a session opened with OpenSession (or joined)."""

    # The launch memo (Note [Launch memo] in _native.py): the native transport's only.
    launch_memo: Optional[Dict[bytes, Any]] = None

    kind = "unary"

    def __init__(self, channel: grpc.Channel, metadata: Metadata, timeout: float, device: int,
                 lease_ms: int, session: int = 0, wait_for_ready: bool = False) -> None:
        """``wait_for_ready``: a call made while the daemon cannot be reached waits for it (up
        to the call's deadline) instead of failing UNAVAILABLE; nothing was sent, so nothing
        runs twice (Note [Resume in Python] in _resume.py)."""
        self._stub = compute_pb2_grpc.ComputeStub(channel)
        self._md = list(metadata)
        self._timeout = timeout
        self._ready = False  # connect() fails at once when no daemon listens.
        self._joined = session != 0
        self.lease_ms = 0
        if session:
            self.session = session
        else:
            r = self._call("OpenSession", compute_pb2.OpenSessionRequest(device=device,
                                                                         lease_ms=lease_ms))
            self.session = r.session
            self.lease_ms = r.lease_ms
        self._ready = wait_for_ready

    @staticmethod
    def wait(future: Future, timeout: float) -> Any:
        """``future.result(timeout)`` (the StreamTransport's counterpart reads the ring)."""
        return future.result(timeout=timeout)

    def _call(self, method: str, request: object) -> object:
        try:
            return getattr(self._stub, method)(request, timeout=self._timeout, metadata=self._md,
                                               wait_for_ready=self._ready)
        except grpc.RpcError as e:
            raise error_from_rpc(e, method) from None

    def _future(self, method: str, request: object, convert: Callable[[object], object]) -> Future:
        call = getattr(self._stub, method).future(request, timeout=self._timeout, metadata=self._md,
                                                  wait_for_ready=self._ready)
        return _from_grpc_future(call, convert, method)

    def create(self, data: bytes) -> int:
        return self._call("Create", compute_pb2.CreateRequest(session=self.session,
                                                              data=data)).handle

    def empty(self, size: int) -> int:
        return self._call("Empty", compute_pb2.EmptyRequest(session=self.session, size=size)).handle

    def execute(self, kernel: types_pb2.Kernel, count: types_pb2.CubeCount,
                bindings: Union[types_pb2.Bindings, Dict[str, Any]], mode: int) -> None:
        self._call("Execute", compute_pb2.ExecuteRequest(session=self.session, kernel=kernel,
                                                         count=count, bindings=bindings, mode=mode))

    def execute_views(self, head: bytes, views: Sequence[Tuple[Any, bytes]], tail: bytes,
                      mode: bytes, scalars: bytes = b"") -> None:
        """execute() of a builtin launch in its encoded parts (_wire.execute's arguments, each
        view a Tensor._launch_view() pair, the scalars field apart from the tail)."""
        e = session_pb2.Command.FromString(
            _wire.execute(head, [v[1] for v in views], tail + scalars, mode)).execute
        self.execute(e.kernel, e.count, e.bindings, e.mode)

    def release(self, ids: List[int]) -> None:
        self._call("Release", compute_pb2.ReleaseRequest(session=self.session, handles=ids))

    def read(self, bindings: List[types_pb2.Binding]) -> Future:
        return self._future("Read", compute_pb2.ReadRequest(session=self.session,
                                                            bindings=bindings),
                            lambda r: list(r.data))

    def read_tensor(self, bindings: List[types_pb2.BindingWithMeta]) -> Future:
        return self._future("ReadTensor", compute_pb2.ReadTensorRequest(session=self.session,
                                                                        bindings=bindings),
                            lambda r: list(r.data))

    def flush(self) -> None:
        self._call("Flush", compute_pb2.FlushRequest(session=self.session))

    def sync(self) -> Future:
        return self._future("Sync", compute_pb2.SyncRequest(session=self.session), lambda r: None)

    def memory_usage(self, device: int) -> Future:
        return self._future("MemoryUsage", compute_pb2.MemoryUsageRequest(device=device),
                            lambda r: r.usage)

    def memory_cleanup(self, device: int) -> Future:
        return _resolved(self._call("MemoryCleanup",
                                    compute_pb2.MemoryCleanupRequest(device=device)).usage)

    def start_profile(self) -> None:
        self._call("StartProfile", compute_pb2.StartProfileRequest(session=self.session))

    def end_profile(self) -> Future:
        return self._future("EndProfile", compute_pb2.EndProfileRequest(session=self.session),
                            lambda r: r.duration_ns)

    def close(self, timeout: float) -> None:
        if self._joined:
            return
        try:
            self._stub.CloseSession(compute_pb2.CloseSessionRequest(session=self.session),
                                    timeout=timeout, metadata=self._md)
        except grpc.RpcError:
            pass  # The session may have expired already; nothing is left to free then.


class StreamTransport:
    """The client end of cubed.v1.SessionStream/Session: one stream is one session."""

    # The launch memo (Note [Launch memo] in _native.py): the native transport's only.
    launch_memo: Optional[Dict[bytes, Any]] = None

    kind = "stream"

    def __init__(self, channel: grpc.Channel, metadata: Metadata, timeout: float, device: int,
                 lease_ms: int, ring_socket: Optional[str] = None,
                 require_ring: bool = False, spin: Optional[float] = None,
                 reconnect: Optional[Callable[[], grpc.Channel]] = None,
                 resume_timeout: float = 0.0) -> None:
        """``ring_socket``: carry the stream through the daemon's command ring there
        (cubed_client/_ring.py) when it opens one, gRPC otherwise (an error when
        ``require_ring``). ``spin``: seconds a thread waiting for an answer polls the ring
        before it sleeps (None: what the daemon suggests when it opened the ring).
        ``resume_timeout`` > 0: resume the session for that long when the daemon ends the
        stream (Note [Resume in Python] in _resume.py), over gRPC on channels ``reconnect``
        makes, one per attempt."""
        self._timeout = timeout
        self._metadata = list(metadata)
        self._ring_socket = ring_socket
        self._reconnect = reconnect
        self._resume_timeout = resume_timeout if reconnect is not None else 0.0
        # For Note [Resume in Python] (_resume.py): a resume in progress; the stream broke (the
        # gRPC writer parks); the generation of the gRPC request generator that may send; the
        # highest seq handed to the wire; the error the next sync reports; resumes so far;
        # rings a resume replaced and channels it opened (closed with the transport).
        self._resuming = False
        self._broken = False
        self._wire_gen = 0
        self._written_seq = 0
        self._lost: Optional[CubedError] = None
        self.resumes = 0
        self._retired: List[Any] = []
        self._half_closed: Any = None  # The ring close() half-closed.
        self._cv = threading.Condition()
        # gRPC carrier: numbered commands on the wire (_wire.numbered), waiting for the writer.
        self._queue: List[bytes] = []
        self._queued_bytes = 0
        self._first_queued = 0.0
        self._push_now = False
        self._closing = False
        self._ended = False
        self._end_error: Optional[CubedError] = None
        self._next_seq = 1
        self._pending: Dict[int, Tuple[Future, Callable[[session_pb2.Reply], object]]] = {}
        self._opened: Future = Future()
        self._open = session_pb2.SessionRequest(
            open=session_pb2.SessionRequest.Open(device=device, lease_ms=lease_ms))
        self._call: Any = open_ring_call(ring_socket, self._open) if ring_socket else None
        if self._call is None and require_ring:
            raise error_for(grpc.StatusCode.UNAVAILABLE,
                            f"command ring: the daemon offers none at {ring_socket}")
        self.carrier = "ring" if self._call is not None else "grpc"
        # Four times what the daemon suggests (at most 1 ms): its suggestion is sized for the C++
        # SDK, and an answer takes longer to reach Python (GPU run 51, 4-byte read: 101 us with
        # the suggested 50 us of polling, 81 us with 200 us, 105 us with none).
        suggested = min(4 * getattr(self._call, "suggested_spin", 0.0), 1e-3)
        self.spin = suggested if spin is None else max(0.0, float(spin))
        # Over the ring each command is written by its sender (no queue, no writer thread).
        self._direct = getattr(self._call, "direct", False)
        self._write_lock = threading.Lock()  # Taken before _cv, never while holding it.
        # Note [Held commands]: empties and releases waiting for the next command (ring only).
        self._held: List[bytes] = []
        if self._call is None:
            # The requests go out as the bytes _requests() joins (Note [Hand-encoded commands]).
            session = channel.stream_stream(
                "/cubed.v1.SessionStream/Session", request_serializer=_as_bytes,
                response_deserializer=session_pb2.SessionResponse.FromString)
            self._call = session(self._requests(0, self._open.SerializeToString()),
                                 metadata=list(metadata))
        self._reader = threading.Thread(target=self._read_loop, name="cubed-stream-reader",
                                        daemon=True)
        self._reader.start()
        try:
            opened = self._opened.result(timeout=timeout)
        except (CubedError, TimeoutError) as e:
            self._call.cancel()
            if self._direct:
                self._reader.join(5)
                self._call.close()
            if isinstance(e, CubedError):
                raise
            raise error_for(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"SessionStream: no `opened` within {timeout} s") from None
        self.session = opened.session
        self.lease_ms = opened.lease_ms
        # Client ids from the daemon's first one up (next() is atomic under the GIL).
        self._ids = itertools.count(opened.first_client_id)

    # --- threads -------------------------------------------------------------------------------

    def _requests(self, gen: int, first: bytes):  # noqa: ANN202 - consumed by gRPC
        """The serialized SessionRequests of the stream of wire generation ``gen``: ``first``
        (the open), then batches of the queue while ``gen`` is the live generation (Note
        [Resume in Python]: parked while a resume decides, ended once replaced)."""
        yield first
        while True:
            with self._cv:
                if not self._may_take(gen):
                    return
                if not self._closing and not self._push_now and len(self._queue) < BATCH_COMMANDS:
                    due = self._first_queued + BATCH_DELAY_S
                    now = time.monotonic()
                    if now < due:
                        self._cv.wait(due - now)
                        if not self._may_take(gen):
                            return
                batch = self._queue[:MAX_PER_REQUEST]
                del self._queue[:MAX_PER_REQUEST]
                # Seqs are consecutive in the queue: the last one taken is written.
                self._written_seq = self._next_seq - 1 - len(self._queue)
                self._queued_bytes -= sum(len(c) for c in batch)
                if self._queue:
                    self._first_queued = time.monotonic()
                else:
                    self._push_now = False
                self._cv.notify_all()
            yield b"".join(batch)

    def _may_take(self, gen: int) -> bool:
        """With _cv held: waits until the generator of ``gen`` may take queued commands (True)
        or must end (False: the stream ended, was replaced, or closes with nothing queued)."""
        while True:
            if self._ended or self._wire_gen != gen:
                return False
            if not self._broken:
                if self._queue:
                    return True
                if self._closing:
                    return False
            self._cv.wait()

    def _on_response(self, response: session_pb2.SessionResponse) -> None:
        """Completes the Futures ``response`` answers; on the thread that reads the stream."""
        if response.HasField("opened") and not self._opened.done():
            self._opened.set_result(response.opened)
        for reply in response.replies:
            with self._cv:
                entry = self._pending.pop(reply.seq, None)
            if entry is None:
                continue
            future, convert = entry
            if future.done():  # Timed out and abandoned by its caller.
                continue
            try:
                future.set_result(convert(reply))
            except CubedError as e:
                future.set_exception(e)

    def _read_wire(self) -> CubedError:
        """Hands the responses of the current wire to _on_response until it ends; why it
        ended."""
        try:
            if self._direct:
                self._call.serve(self._on_response)
            else:
                for response in self._call:
                    self._on_response(response)
        except grpc.RpcError as e:
            return error_from_rpc(e, "SessionStream")
        except CubedError as e:  # The command ring's end (cubed_client/_ring.py).
            return e
        return error_for(grpc.StatusCode.FAILED_PRECONDITION, "the session stream is closed")

    def _read_loop(self) -> None:
        while True:
            error = self._read_wire()
            resumed, error = self._resume(error)
            if not resumed:
                break
        with self._cv:
            # Note [Session lost] (client/stream_transport.cc): an end the client did not ask for.
            session = getattr(self, "session", 0)  # Set once `opened` arrived.
            if error.code == grpc.StatusCode.UNAVAILABLE and not self._closing and session:
                error = error_for(grpc.StatusCode.UNAVAILABLE,
                                  f"session {session} lost: {error.message} (the daemon "
                                  "ended the stream: it stopped or restarted, and the session's "
                                  "tensors are gone; connect again)")
            self._ended = True
            self._resuming = False  # Senders waiting for a resume see the end.
            self._end_error = error
            pending, self._pending = self._pending, {}
            self._cv.notify_all()
        if not self._opened.done():
            self._opened.set_exception(error)
        for seq in sorted(pending):
            future, _ = pending[seq]
            if not future.done():
                future.set_exception(error)

    def _resume(self, error: CubedError) -> Tuple[bool, CubedError]:
        """Note [Resume in Python]: after the wire ended with ``error``, (True, error) when a new
        wire carries the session on (then it is self._call), else (False, why the stream ends:
        ``error``, with why the resume failed when it was tried)."""
        session = getattr(self, "session", 0)
        if self._resume_timeout <= 0 or not session or error.code != grpc.StatusCode.UNAVAILABLE:
            return False, error
        with self._write_lock:  # A ring sender writing now finishes first: its seq is written.
            with self._cv:
                if self._closing:
                    return False, error
                self._resuming = True
                self._broken = True  # The gRPC request generator parks.
                written = self._written_seq
                self._cv.notify_all()
        give_up = time.monotonic() + self._resume_timeout
        while True:
            try:
                call, opened = self._resume_once(session)
                break
            except CubedError as e:
                with self._cv:
                    self._wire_gen += 1  # The attempt's request generator ends.
                    self._cv.notify_all()
                    closing = (e.code in _resume.RETRIED and time.monotonic() < give_up and
                               self._cv.wait_for(lambda: self._closing, _resume.RETRY_S))
                if e.code not in _resume.RETRIED or time.monotonic() >= give_up or closing:
                    return False, error_for(
                        grpc.StatusCode.UNAVAILABLE,
                        f"{error.message}; resuming the session for {self._resume_timeout:g} s "
                        f"failed: {e.message}")
        resumed = opened.resumed_seq
        with self._write_lock, self._cv:
            if self._direct:
                self._retired.append(self._call)  # Waiters may still look at its memory.
            self._call = call
            if self._closing and self._direct:  # close() half-closed the old ring.
                self._half_close()
            self.resumes += 1
            self.lease_ms = opened.lease_ms
            if written > resumed:
                self._report_lost(_resume.lost_commands(resumed + 1, written, session), written)
            cut = sorted((seq, entry) for seq, entry in self._pending.items() if seq <= written)
            for seq, _ in cut:
                del self._pending[seq]
            self._broken = False
            self._resuming = False
            self._cv.notify_all()
        for seq, (future, _) in cut:
            if not future.done():
                future.set_exception(_resume.cut_reply(seq, resumed))
        return True, error

    def _resume_once(self, session: int) -> Tuple[Any, session_pb2.SessionResponse.Opened]:
        """One attempt of _resume: a new wire (a ring over a ring, a gRPC stream on a fresh
        channel otherwise) that took ``session`` back, and its `opened`; CubedError when it
        failed."""
        if self._direct:
            return _resume.open_ring(self._ring_socket, self._timeout,  # type: ignore[arg-type]
                                     session)
        with self._cv:
            self._wire_gen += 1
            gen = self._wire_gen
        channel = self._reconnect()  # type: ignore[misc]
        first = _resume.resume_request(session).SerializeToString()
        try:
            call, opened = _resume.open_grpc(channel, self._requests(gen, first), self._metadata,
                                             self._timeout, session)
        except BaseException:
            channel.close()
            raise
        self._retired.append(channel)  # Closed with the transport.
        return call, opened

    def _report_lost(self, lost: CubedError, written: int) -> None:
        """With _cv held: the first sync queued after ``written`` reports ``lost`` (one queued
        during the resume would otherwise answer OK); without one, the next sync sent."""
        for seq in sorted(self._pending):
            future, convert = self._pending[seq]
            if seq > written and convert is self._sync_reply:
                self._pending[seq] = (future, _raiser(lost))
                return
        self._lost = lost

    # --- sending -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        """Raises why no command can be sent: the stream's end, or the client closing. With _cv
        held."""
        if self._ended:
            raise self._end_error  # type: ignore[misc]
        if self._closing:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION, "the client is closed")

    def _check_writable(self) -> None:
        """_check_open for the ring's writers, taking _cv only when the stream ended or closes
        (the flags are plain reads otherwise)."""
        if self._ended or self._closing:
            with self._cv:
                self._check_open()

    def _send_direct(self, command: Union[session_pb2.Command, bytes],
                     convert: Optional[Callable[[session_pb2.Reply], object]]) -> Optional[Future]:
        """Writes ``command`` (a message, or its wire bytes without seq: Note [Hand-encoded
        commands]) after the held ones, in one ring message. While a resume is in progress,
        waits for its end first (Note [Resume in Python])."""
        while True:
            if self._resuming:
                with self._cv:
                    self._cv.wait_for(lambda: not self._resuming)
            with self._write_lock:
                if self._resuming:  # Began after the look above.
                    continue
                self._check_writable()
                commands, self._held = self._held, []
                commands.append(command if isinstance(command, bytes)
                                else command.SerializeToString())
                request = _wire.session_request(commands, self._next_seq)
                self._next_seq += len(commands)
                self._written_seq = self._next_seq - 1
                future: Optional[Future] = None
                if convert is not None:
                    future = Future()
                    with self._cv:  # The reader fails what is pending when the stream ends.
                        self._check_open()
                        self._pending[self._next_seq - 1] = (future,
                                                             self._with_lost(convert))
                # A failed write means the ring ended: the reader fails what is pending (or a
                # resume reports it: Note [Resume in Python]).
                self._call.write_bytes(request)
                return future

    # Note [Held commands]
    # Over the ring, an empty or a release (which answer nothing, and which the device needs only
    # when a later command uses the handle, or to reuse the memory) waits to go out with the next
    # command, in the same ring message: a kernel wrapper's output then costs no message and no
    # wake-up of its own, nor does closing a tensor. Order is kept (held commands go first,
    # numbered first); at most HELD_COMMANDS wait, and every other command, a sync, a flush, a
    # read or a memory usage included, takes them along. So another client (of a joined session,
    # or another process asking for the device's memory usage) sees a new handle, or a closed
    # tensor's memory back, once this client's next command went out: flush() sends them now.
    def _hold(self, command: bytes) -> None:
        """Holds ``command`` (an empty's or a release's wire bytes) for the next write (Note
        [Held commands])."""
        with self._write_lock:
            self._check_writable()
            if len(self._held) < HELD_COMMANDS:
                self._held.append(command)
                return
        self._send_direct(command, None)

    def _send(self, command: Union[session_pb2.Command, bytes],
              convert: Optional[Callable[[session_pb2.Reply], object]] = None) -> Optional[Future]:
        """Sends ``command`` (a message, or its wire bytes without seq) in order; the Future of
        its reply when ``convert`` is given."""
        if self._direct:
            return self._send_direct(command, convert)
        wire = command if isinstance(command, bytes) else command.SerializeToString()
        size = len(wire)
        with self._cv:
            self._check_open()
            while (self._queue and not self._ended and
                   (len(self._queue) >= MAX_QUEUED_COMMANDS or
                    self._queued_bytes + size > MAX_QUEUED_BYTES)):
                self._push_now = True
                self._cv.notify_all()
                self._cv.wait()
            if self._ended:
                raise self._end_error  # type: ignore[misc]
            seq = self._next_seq
            self._next_seq += 1
            entry = _wire.numbered(wire, seq)
            if not self._queue:
                self._first_queued = time.monotonic()
            self._queue.append(entry)
            self._queued_bytes += len(entry)
            future: Optional[Future] = None
            if convert is not None:
                future = Future()
                self._pending[seq] = (future, self._with_lost(convert))
                self._push_now = True
            self._cv.notify_all()
            return future

    def _with_lost(self, convert: Callable[[session_pb2.Reply], object]
                   ) -> Callable[[session_pb2.Reply], object]:
        """With _cv held: ``convert``, or for a sync while commands a resume found lost are
        unreported, what reports them (Note [Resume in Python])."""
        if self._lost is None or convert is not self._sync_reply:
            return convert
        lost, self._lost = self._lost, None
        return _raiser(lost)

    def wait(self, future: Future, timeout: float) -> Any:
        """``future.result(timeout)``; over the ring the calling thread first polls for the
        answers itself, ``spin`` seconds (Note [Waiter reads] in cubed_client/_ring.py)."""
        if self._direct and self.spin and not future.done():
            self._call.serve_until(self._on_response, future.done, min(self.spin, timeout))
        return future.result(timeout=timeout)

    def _new_id(self) -> int:
        return next(self._ids)

    @staticmethod
    def _check(reply: session_pb2.Reply) -> None:
        if reply.code != 0:
            raise error_from_number(reply.code, reply.message, reply.failed_commands)

    @staticmethod
    def _sync_reply(reply: session_pb2.Reply) -> None:
        """A sync's reply (_check under its own name: a resume finds queued syncs by it)."""
        StreamTransport._check(reply)

    @classmethod
    def _data(cls, reply: session_pb2.Reply) -> List[bytes]:
        cls._check(reply)
        return list(reply.read.data)

    def create(self, data: bytes) -> int:
        i = self._new_id()
        self._send(session_pb2.Command(create=session_pb2.Command.Create(id=i, data=data)))
        return i

    def empty(self, size: int) -> int:
        i = self._new_id()
        if self._direct:
            self._hold(_wire.empty(i, size))
        else:
            self._send(session_pb2.Command(empty={"id": i, "size": size}))
        return i

    def execute(self, kernel: types_pb2.Kernel, count: types_pb2.CubeCount,
                bindings: Union[types_pb2.Bindings, Dict[str, Any]], mode: int) -> None:
        # One constructor from a dict: half the cost of building the nested messages one by one.
        self._send(session_pb2.Command(execute={"kernel": kernel, "count": count,
                                                "bindings": bindings, "mode": mode}))

    def execute_views(self, head: bytes, views: Sequence[Tuple[Any, bytes]], tail: bytes,
                      mode: bytes, scalars: bytes = b"") -> None:
        """execute() of a builtin launch in its encoded parts (_wire.execute's arguments, each
        view a Tensor._launch_view() pair, the scalars field apart from the tail; Note
        [Hand-encoded commands])."""
        self._send(_wire.execute(head, [v[1] for v in views], tail + scalars, mode))

    def release(self, ids: List[int]) -> None:
        for start in range(0, len(ids), 65536):
            command = session_pb2.Command(
                release=session_pb2.Command.Release(ids=ids[start:start + 65536]))
            if self._direct:
                self._hold(command.SerializeToString())
            else:
                self._send(command)

    def read(self, bindings: List[types_pb2.Binding]) -> Future:
        return self._send(session_pb2.Command(read=session_pb2.Command.Read(bindings=bindings)),
                          self._data)  # type: ignore[return-value]

    def read_tensor(self, bindings: List[types_pb2.BindingWithMeta]) -> Future:
        return self._send(session_pb2.Command(
            read_tensor=session_pb2.Command.ReadTensor(bindings=bindings)),
            self._data)  # type: ignore[return-value]

    # Shared-memory regions (cubed_client/_region.py): the bytes stay in the region.
    def create_from_region(self, region: int, offset: int, size: int) -> int:
        i = self._new_id()
        self._send(session_pb2.Command(create=session_pb2.Command.Create(
            id=i, region=types_pb2.RegionSlice(region=region, offset=offset, size=size))))
        return i

    def _region_bytes(self, reply: session_pb2.Reply) -> int:
        self._check(reply)
        return reply.region_bytes

    def read_into_region(self, bindings: List[types_pb2.Binding], region: int, offset: int,
                         size: int) -> Future:
        into = types_pb2.RegionSlice(region=region, offset=offset, size=size)
        return self._send(session_pb2.Command(read=session_pb2.Command.Read(
            bindings=bindings, into=into)), self._region_bytes)  # type: ignore[return-value]

    def read_tensor_into_region(self, bindings: List[types_pb2.BindingWithMeta], region: int,
                                offset: int, size: int) -> Future:
        into = types_pb2.RegionSlice(region=region, offset=offset, size=size)
        return self._send(session_pb2.Command(read_tensor=session_pb2.Command.ReadTensor(
            bindings=bindings, into=into)), self._region_bytes)  # type: ignore[return-value]

    def release_region(self, region: int) -> None:
        self._send(session_pb2.Command(
            release_region=session_pb2.Command.ReleaseRegion(region=region)))

    # Recorded graphs (cubed_client/_graph.py; session.proto, "Graphs"). The unary transport
    # has none: Client.record refuses it.
    def begin_graph(self, graph: int, parameters: List[int]) -> None:
        """Starts recording ``graph`` with the handles ``parameters``; a failure is answered by
        end_graph."""
        self._send(session_pb2.Command(begin_graph=session_pb2.Command.BeginGraph(
            graph=graph, parameters=parameters)))

    def end_graph(self) -> Future:
        """Ends the recording; the Future resolves to the graph's step count or raises the
        recording's first failure."""
        def convert(reply: session_pb2.Reply) -> int:
            self._check(reply)
            return reply.graph_steps

        return self._send(session_pb2.Command(end_graph=session_pb2.Command.EndGraph()),
                          convert)  # type: ignore[return-value]

    def replay_graph(self, command: bytes) -> None:
        """Sends a replay encoded by _wire.replay_graph (without seq); failures surface at the
        next sync."""
        self._send(command)

    def release_graph(self, graph: int) -> None:
        self._send(session_pb2.Command(release_graph=session_pb2.Command.ReleaseGraph(
            graph=graph)))

    def flush(self) -> None:
        self._send(session_pb2.Command(flush=session_pb2.Command.Flush()))

    def sync(self) -> Future:
        return self._send(session_pb2.Command(sync=session_pb2.Command.Sync()),
                          self._sync_reply)  # type: ignore[return-value]

    def memory_usage(self, device: int) -> Future:
        def convert(reply: session_pb2.Reply) -> types_pb2.MemoryUsage:
            self._check(reply)
            return reply.memory_usage

        return self._send(session_pb2.Command(memory_usage=session_pb2.Command.MemoryUsage()),
                          convert)  # type: ignore[return-value]

    def memory_cleanup(self, device: int) -> Future:
        self._send(session_pb2.Command(memory_cleanup=session_pb2.Command.MemoryCleanup()))
        return self.memory_usage(device)

    def start_profile(self) -> None:
        self._send(session_pb2.Command(start_profile=session_pb2.Command.StartProfile()))

    def end_profile(self) -> Future:
        def convert(reply: session_pb2.Reply) -> int:
            self._check(reply)
            return reply.duration_ns

        return self._send(session_pb2.Command(end_profile=session_pb2.Command.EndProfile()),
                          convert)  # type: ignore[return-value]

    def close(self, timeout: float) -> None:
        """Half-closes the stream (the daemon runs what was sent, then closes the session and
        frees its memory) and waits up to ``timeout`` for the end; cancels it after that."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        if self._direct:
            with self._write_lock:
                self._half_close()
        self._reader.join(timeout)
        if self._reader.is_alive():
            self._call.cancel()
            self._reader.join(5)
        if self._direct:
            self._call.close()
        for retired in self._retired:  # Rings and channels a resume replaced or opened.
            retired.close()

    def _half_close(self) -> None:
        """Over the ring, with _write_lock held: no more requests on the current ring (once)."""
        if self._half_closed is not self._call:
            self._half_closed = self._call
            self._call.done_writing()
