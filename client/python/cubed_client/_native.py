"""The native client core: the C++ SDK's session stream through its C ABI
(libcubed_client_c.so, client/c_api/cubed_client_c.h; Note [One client core] there), loaded with
ctypes. NativeTransport has the methods of StreamTransport (_transport.py), so the Client above
is the same whichever core carries its commands; connect(core="native") picks it.

Where the library is found: _native_lib.py (client/python/README.md, "The native core", says the
same for users).

Futures (_NativeFuture): an answering command's Future is resolved by the thread that asks for
its result (the C library blocks that thread, without the GIL, until the answer is in; an answer
that came first is taken at once: no other thread runs), or, once it has done callbacks
(read_async), by one thread per transport that takes the answers nobody waited for from
cubed_client_next_done. Each answer is claimed once: by whoever pops it from _pending first.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import tempfile
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from ._errors import error_from_number
from . import _wire
from ._proto import session_pb2, types_pb2
from ._types import _FLOAT_ELEMS, _UINT_ELEMS, Scalars, elem_type
# The library itself (_native_lib.py); available, library_path, load and _prepared under the
# names callers know from this module.
from ._native_lib import (  # noqa: F401
    _DEADLINE_EXCEEDED, _Error, _Options, _ptr, _raise, _size, _u64, _i32, _prepare, _prepared,
    available, library_path, load)

try:  # Note [Compiled launch]
    from . import _speedups
except ImportError:
    _speedups = None

# Note [Compiled launch]
# A pipelined builtin launch from Python (P2: fill of 1 x f32, 20,000 then a sync) cost 5.2 us
# of the Python thread on the 2-core VM, against 0.82 us a command for the C++ SDK: the
# interpreter, not the library (cubed_client_send itself ~0.85 us). 1.6 us of it assembled the
# Command (_wire.execute's joins and length prefixes) and called the library through ctypes (an
# _Error, byref, argument conversion), and an `a + b` spent as much again on its output's
# empty (cubed_client_next_id and the send: two more ctypes calls). The extension
# cubed_client._speedups (_speedups.c, CPython's stable ABI, so a build on Python 3.11 loads on
# 3.12) does both in C: it writes the Command from the launch's encoded parts (or the empty's id
# and size) into a stack buffer and calls the library through the addresses of its functions,
# releasing the GIL around the send as ctypes does. Nothing else moves: the launch key, its
# cached parts and the bindings stay Client._launch's, and the bytes are those _wire.execute and
# _wire.empty build (tests/test_speedups.py compares them); _wire.binding (a new output's
# encoded Binding) is the extension's too. With the scalars' cache key made cheaper
# (_launch.scalar_field), a launch costs 1.9 us and an `a + b` 5.5 us (were 5.2 and 10.7;
# docs/benchmarks.md, "fifteenth session"). setup.py builds the extension where a C
# compiler and Python's headers are (deploy/setup.sh installs python3-dev); without it, or with
# CUBED_NO_SPEEDUPS=1 at install, empty and execute_views run as before in Python.
# COMPILED_LAUNCH says which one this process runs.
COMPILED_LAUNCH = _speedups is not None
# Whether the extension sends through prepared launches (Note [Prepared C ABI launches] in
# client/c_api/cubed_client_c_launch.cc); an extension built before them assembles the command.
_PREPARED_LAUNCH = COMPILED_LAUNCH and hasattr(_speedups, "launch")
# Note [Launch memo]
# A Python launch spent ~1.9 us of its ~2.4 us (the 2-core VM; 2.3 us and 0.44x the C++ SDK's P2
# on an H100, GPU run 92) building its key in Python (each tensor's layout, a tuple of seven
# fields hashed with its dtypes every call), the scalars' cache key and the prepared launch's
# lookup; the send itself ~0.5 us. _speedups.memo_launch does all of it in one C call: the key
# is the addresses of the launch's objects (the kernel's name, its dtypes, each tensor's layout,
# which Tensor._launch_view interns so that equal layouts are one object, each scalar group's
# dtype) and its numbers (axis, allow_tf32, how many tensors and groups), looked up in a dict
# whose entries hold every object their key names (so no address in a key can be taken by
# another object while the entry lives) and the prepared launch; the scalars' values are encoded
# in C as ScalarGroup.to_proto would, for values of exactly float, int or bool (a subclass may
# convert otherwise than its stored value). A miss returns the key and the views it was made of,
# for Client._launch to take its Python path once with them and remember the result
# (remember_launch); a launch the memo does not take (numpy scalars, more than 16 tensors) takes
# the Python path every time. The memo is the
# process's, as the prepared launches are: key bytes -> (prepared launch address, each scalar
# group's elem and kind, what the entry holds); cleared when full, as the interned layouts are.
_launch_memo: Dict[bytes, Tuple[int, bytes, Any]] = {}
_MAX_MEMO = 4096
_MEMO_LAUNCH = _PREPARED_LAUNCH and hasattr(_speedups, "memo_launch")
# How memo_launch encodes a group's values (kKind* in _speedups.c).
_FLOAT, _UINT, _BOOL, _INT = 0, 1, 2, 3


def scalar_kinds(scalars: Sequence[Scalars]) -> bytes:
    """A memo entry's groups bytes (Note [Launch memo] in _native.py): each group's elem and
    how its values are encoded, as ScalarGroup.to_proto chooses the field."""
    kinds = bytearray()
    for group in scalars:
        elem = elem_type(group.dtype)
        kinds += bytes((elem, _FLOAT if elem in _FLOAT_ELEMS else _BOOL
                        if elem == types_pb2.ELEM_TYPE_BOOL else _UINT
                        if elem in _UINT_ELEMS else _INT))
    return bytes(kinds)



def _pem_file(value: Any, files: List[str]) -> Optional[bytes]:
    """A file path for a PEM given as a path or as bytes (written to a temporary file that the
    caller removes: ``files``)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        fd, path = tempfile.mkstemp(prefix="cubed-pem-")
        files.append(path)
        with os.fdopen(fd, "wb") as f:
            f.write(value)
        return path.encode()
    return os.fsencode(value)


def _check(lib: ctypes.CDLL, reply: int) -> None:
    """Raises the CubedError of a completed reply that failed (the daemon's, or the stream's when
    no answer came)."""
    if lib.cubed_reply_status(reply, None) == 0:
        return
    err = _Error()
    code = lib.cubed_reply_status(reply, ctypes.byref(err))
    message = ctypes.string_at(err.message).decode("utf-8", "replace") if err.message else ""
    lib.cubed_error_clear(ctypes.byref(err))
    raise error_from_number(code, message, lib.cubed_reply_failed_commands(reply))


def _reply_message(lib: ctypes.CDLL, reply: int) -> session_pb2.Reply:
    """A completed reply's Reply message (its read data left out)."""
    data, size, err = _ptr(), _size(), _Error()
    code = lib.cubed_reply_bytes(reply, ctypes.byref(data), ctypes.byref(size), ctypes.byref(err))
    if code:
        _raise(lib, code, err)
    return session_pb2.Reply.FromString(ctypes.string_at(data.value, size.value))


# Converters of completed replies into what the Futures give: (library, cubed_reply) -> value.
def _data(lib: ctypes.CDLL, reply: int) -> List[bytes]:
    _check(lib, reply)
    out = []
    data, size = _ptr(), _u64()
    for i in range(lib.cubed_reply_data_count(reply)):
        lib.cubed_reply_data(reply, i, ctypes.byref(data), ctypes.byref(size), None)
        out.append(ctypes.string_at(data.value, size.value) if size.value else b"")
    return out


def _status(lib: ctypes.CDLL, reply: int) -> None:
    _check(lib, reply)


def _field(name: str) -> Callable[[ctypes.CDLL, int], Any]:
    def convert(lib: ctypes.CDLL, reply: int) -> Any:
        _check(lib, reply)
        return getattr(_reply_message(lib, reply), name)

    return convert


_memory_usage = _field("memory_usage")
_duration_ns = _field("duration_ns")
_region_bytes = _field("region_bytes")
_graph_steps = _field("graph_steps")

Convert = Callable[[ctypes.CDLL, int], Any]


class _RpcError(grpc.RpcError):
    """A failed unary call through the native core, as grpc's own (code(), details())."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


_CODES = {c.value[0]: c for c in grpc.StatusCode}


class _UnaryCall:
    """A unary method of the daemon called through the C++ SDK's channel (a stub's attribute)."""

    def __init__(self, transport: "NativeTransport", method: str,
                 serializer: Optional[Callable[[Any], bytes]],
                 deserializer: Optional[Callable[[bytes], Any]]) -> None:
        self._transport = transport
        self._method = method.encode()
        self._serializer = serializer
        self._deserializer = deserializer

    def __call__(self, request: Any, timeout: Optional[float] = None, metadata: Any = None,
                 credentials: Any = None, wait_for_ready: Optional[bool] = None,
                 compression: Any = None) -> Any:
        """The response; _RpcError (a grpc.RpcError) when the call failed. The deadline and
        the metadata are the client's (connect's timeout and token)."""
        data = self._serializer(request) if self._serializer else request
        response = self._transport._call_unary(self._method, data)
        return self._deserializer(response) if self._deserializer else response


class _Unsupported:
    """A streaming method: the native channel carries unary calls only."""

    def __init__(self, method: str) -> None:
        self._method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise _RpcError(grpc.StatusCode.UNIMPLEMENTED,
                        f"{self._method}: the native core's channel has unary calls only")


class NativeChannel:
    """What the Client makes its unary calls on (info(), trace(), GetResource, ...) with the
    native core: the C++ SDK's own channel, so that they reach the daemon the session lives on
    (a fleet name may resolve to several) with the same token and TLS. The grpc.Channel methods
    the generated stubs use."""

    def __init__(self, transport: "NativeTransport") -> None:
        self._transport = transport

    def unary_unary(self, method: str, request_serializer: Any = None,
                    response_deserializer: Any = None, **kwargs: Any) -> _UnaryCall:
        return _UnaryCall(self._transport, method, request_serializer, response_deserializer)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> _Unsupported:
        return _Unsupported(method)

    stream_unary = unary_stream
    stream_stream = unary_stream

    def close(self) -> None:
        """Nothing to close: the channel ends with the transport."""


class _NativeFuture(Future):
    """A Future whose result() waits for the answer on the calling thread (see the module's
    docstring)."""

    def __init__(self, transport: "NativeTransport", tag: int) -> None:
        super().__init__()
        self._cubed_transport = transport
        self._cubed_tag = tag
        self._cubed_callbacks = False

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self.done() and not self._cubed_transport._claim(self, timeout):
            raise FutureTimeout()
        return super().result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        if not self.done() and not self._cubed_transport._claim(self, timeout):
            raise FutureTimeout()
        return super().exception(timeout)

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        super().add_done_callback(fn)
        if not self._cubed_callbacks:
            self._cubed_callbacks = True  # The replies thread resolves it from now on.
            self._cubed_transport._notify(self._cubed_tag)


class NativeTransport:
    """The session stream of the C++ SDK (libcubed_client_c.so) behind StreamTransport's
    methods. Thread-safe; commands sent from one thread go out in that order."""

    kind = "stream"
    creates_arrays = True  # create() takes a C-contiguous ndarray too (Client.create).

    def __init__(self, target: str, timeout: float, device: int, lease_ms: int, carrier: str,
                 token: Optional[str] = None, root_certificates: Any = None,
                 certificate_chain: Any = None, private_key: Any = None,
                 server_name: Optional[str] = None, max_message_bytes: int = 1 << 30,
                 resume_timeout: float = 0.0, spin: Optional[float] = None) -> None:
        """Connects and opens the session; the CubedError the C++ SDK's Connect returned.
        ``spin``: connect()'s (seconds a waiting thread polls for its answer before it sleeps;
        None: the C++ SDK's default, four times what the daemon suggests)."""
        self._lib = lib = load()
        self._timeout = timeout
        options = _Options()
        lib.cubed_connect_options_init(ctypes.byref(options))
        options.address = target.encode()
        options.timeout_ms = max(1, int(timeout * 1000))
        options.device = device
        options.lease_ms = lease_ms
        options.max_message_bytes = max_message_bytes
        options.carrier = {"auto": 0, "ring": 1, "grpc": 2}[carrier]
        if carrier == "ring" and not target.startswith("unix:"):
            options.carrier = 0  # As the pure core: the ring only of a daemon on this host.
        # Creates of the region_threshold's sizes go through the Python SDK's own staging region
        # (Staging in _region.py) before they reach this transport: no second region here.
        options.region_threshold = 0
        options.resume_timeout_ms = int(resume_timeout * 1000)
        options.reply_spin_us = -1 if spin is None else int(spin * 1e6)
        keep: List[bytes] = []  # The strings stay alive until connect returned.
        if token:
            keep.append(token.encode())
            options.token = keep[-1]
        files: List[str] = []
        try:
            if root_certificates or certificate_chain or private_key:
                options.tls_ca_file = _pem_file(root_certificates, files)
                options.tls_cert_file = _pem_file(certificate_chain, files)
                options.tls_key_file = _pem_file(private_key, files)
            if server_name:
                keep.append(server_name.encode())
                options.tls_server_name = keep[-1]
            client = _ptr()
            err = _Error()
            code = lib.cubed_client_connect(ctypes.byref(options), ctypes.byref(client),
                                            ctypes.byref(err))
        finally:
            for path in files:
                os.unlink(path)
        if code:
            _raise(lib, code, err)
        self._client = client.value
        self.session = lib.cubed_client_session(self._client)
        self.lease_ms = lib.cubed_client_lease_ms(self._client)
        self.carrier = "ring" if lib.cubed_client_carrier(self._client) == 1 else "grpc"
        # Waits poll this long (seconds) before they sleep: in cubed_reply_wait and
        # cubed_client_read_into (Note [Waiting awake] in client/client.h).
        self.spin = lib.cubed_client_reply_spin_us(self._client) / 1e6
        self._tags = itertools.count(1)
        # The seq the next command goes out with (the C++ SDK numbers them in the order sent; a
        # count kept here, for tests that name the seq of a command, as of the Python core).
        self._next_seq = 1
        self._held: List[bytes] = []  # Nothing is held (Note [Held commands] is the Python core's).
        # What empty and execute_views hand the compiled extension (Note [Compiled launch]): the
        # addresses of cubed_client_send and cubed_error_clear, the client, the address of
        # cubed_client_next_id; valid while this transport lives (the client is freed in
        # __del__). None without the extension.
        self._target: Optional[Tuple[int, int, int, int]] = None if _speedups is None else (
            ctypes.cast(lib.cubed_client_send, _ptr).value,
            ctypes.cast(lib.cubed_error_clear, _ptr).value, self._client,
            ctypes.cast(lib.cubed_client_next_id, _ptr).value)
        # Note [Compiled read]: Client.read's small read goes through _speedups.read_into (one C
        # call, the GIL released while it waits) where the extension has it (built for the
        # stable ABI of 3.11 or later, whose buffer protocol it uses): the address of
        # cubed_client_read_into, else None. Through ctypes the same call paid ~2 us more a read
        # on a GPU host (the error and size structs, the byrefs, nine converted arguments), a
        # fifth of a 4-byte read's round trip.
        self._read_target: Optional[int] = None
        # The address of cubed_client_send_launch (execute_views' prepared launches).
        self._send_launch = ctypes.cast(lib.cubed_client_send_launch, _ptr).value
        # Client._launch's memo where the extension has it (Note [Launch memo]), else None.
        self.launch_memo = _launch_memo if self._target is not None and _MEMO_LAUNCH else None
        if self._target is not None and hasattr(_speedups, "read_into"):
            self._read_target = ctypes.cast(lib.cubed_client_read_into, _ptr).value
        # tag -> (Future, converter, cubed_reply): answers nobody claimed yet.
        self._pending: Dict[int, Tuple[_NativeFuture, Convert, int]] = {}
        self._closed = False
        self._done_thread = threading.Thread(target=self._done_loop, name="cubed-native-replies",
                                             daemon=True)
        self._done_thread.start()

    def _resume_state(self) -> Tuple[int, bool]:
        n, now = _u64(), _i32()
        self._lib.cubed_client_resume_state(self._client, ctypes.byref(n), ctypes.byref(now))
        return n.value, bool(now.value)

    @property
    def resumes(self) -> int:
        """Resumes of the stream so far (connect(resume_timeout=...); Note [Stream resume])."""
        return self._resume_state()[0]

    @property
    def _resuming(self) -> bool:
        """Whether a resume is in progress (as StreamTransport._resuming)."""
        return self._resume_state()[1]

    @property
    def _call(self) -> "NativeTransport":
        """What StreamTransport._call is to tests: cancel() ends the stream from this side."""
        return self

    def cancel(self) -> None:
        """Ends the stream at once from this side (cubed_client_cancel): what awaits an answer
        fails CANCELLED; the daemon closes the session."""
        self._lib.cubed_client_cancel(self._client)

    def channel(self) -> NativeChannel:
        """The channel the Client's unary calls use (NativeChannel)."""
        return NativeChannel(self)

    def _call_unary(self, method: bytes, request: bytes) -> bytes:
        """One unary RPC on the C++ SDK's channel; _RpcError when it failed."""
        lib, err = self._lib, _Error()
        reply = lib.cubed_reply_create(0)
        try:
            code = lib.cubed_client_call(self._client, method, request, len(request), reply,
                                         ctypes.byref(err))
            if code:
                message = ctypes.string_at(err.message).decode("utf-8", "replace") \
                    if err.message else ""
                lib.cubed_error_clear(ctypes.byref(err))
                # FromGrpcStatus prefixed the method; the callers name it themselves.
                prefix = method.decode() + ": "
                if message.startswith(prefix):
                    message = message[len(prefix):]
                raise _RpcError(_CODES.get(code, grpc.StatusCode.UNKNOWN), message)
            return _data(lib, reply)[0]
        finally:
            lib.cubed_reply_free(reply)

    # --- answers -------------------------------------------------------------------------------

    def _resolve(self, future: Future, convert: Convert, reply: int) -> None:
        """Resolves ``future`` with ``convert`` of the completed ``reply``, and frees it."""
        try:
            value = convert(self._lib, reply)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            if not future.done():
                future.set_exception(e)
        else:
            if not future.done():
                future.set_result(value)
        finally:
            self._lib.cubed_reply_free(reply)

    def _done_loop(self) -> None:
        """Resolves the answers nobody waits for, until the client closed and all came."""
        lib, client = self._lib, self._client
        tag, err = _u64(), _Error()
        pending = self._pending
        while True:
            code = lib.cubed_client_next_done(client, 1000, ctypes.byref(tag), ctypes.byref(err))
            if code == 0:
                entry = pending.pop(tag.value, None)  # Unless a result() claimed it.
                if entry is not None:
                    self._resolve(*entry)
                continue
            lib.cubed_error_clear(ctypes.byref(err))
            if code != _DEADLINE_EXCEEDED:
                return

    @staticmethod
    def wait(future: Future, timeout: float) -> Any:
        """``future.result(timeout)`` (a _NativeFuture waits for its answer on this thread)."""
        return future.result(timeout=timeout)

    def _claim(self, future: "_NativeFuture", timeout: Optional[float]) -> bool:
        """Waits for ``future``'s answer on this thread and resolves it, unless another thread
        claimed it (it resolves it then). False when the answer did not come within
        ``timeout`` seconds (None: no limit)."""
        tag = future._cubed_tag
        entry = self._pending.pop(tag, None)
        if entry is None:
            return True
        ms = -1 if timeout is None else int(timeout * 1000)
        if self._lib.cubed_reply_wait(entry[2], ms, None):
            self._pending[tag] = entry  # Still to come: someone may wait again.
            return False
        self._resolve(*entry)
        return True

    def _notify(self, tag: int) -> None:
        """Has the replies thread resolve the answer of ``tag`` when it comes (or now, when it
        came already), for a Future with done callbacks."""
        entry = self._pending.get(tag)
        if entry is not None:
            self._lib.cubed_reply_notify(entry[2])

    # --- sending -------------------------------------------------------------------------------

    def _send(self, command: Union[session_pb2.Command, bytes],
              convert: Optional[Convert] = None) -> Optional[Future]:
        wire = command if isinstance(command, bytes) else command.SerializeToString()
        lib = self._lib
        self._next_seq += 1
        if convert is None:
            err = _Error()
            code = lib.cubed_client_send(self._client, wire, len(wire), None, ctypes.byref(err))
            if code:
                _raise(lib, code, err)
            return None
        return self._ask(convert, lambda reply, err_ref: lib.cubed_client_send(
            self._client, wire, len(wire), reply, err_ref))

    def _ask(self, convert: Convert, call: Callable[[int, Any], int]) -> Future:
        """A Future of ``convert``'s result for the reply that ``call(reply, error_ref)`` (a
        library call that sends a command and hands it ``reply``; returns its code) fills. The
        reply is filed before the call: its answer may come before the call returns. When the
        call fails, nothing was sent: the reply is unfiled and freed and its error raised."""
        lib, err = self._lib, _Error()
        tag = next(self._tags)
        reply = lib.cubed_reply_create(tag)
        future = _NativeFuture(self, tag)
        self._pending[tag] = (future, convert, reply)
        code = call(reply, ctypes.byref(err))
        if code:
            del self._pending[tag]
            lib.cubed_reply_free(reply)
            _raise(lib, code, err)
        return future

    def _new_id(self) -> int:
        i, err = _u64(), _Error()
        code = self._lib.cubed_client_next_id(self._client, ctypes.byref(i), ctypes.byref(err))
        if code:
            _raise(self._lib, code, err)
        return i.value

    def create(self, data: Union[bytes, np.ndarray]) -> int:
        """Stores ``data``: bytes, or the bytes of a C-contiguous non-empty array, read in place
        (cubed_client_create returns once it has them: copied into a message or a staging
        region, or uploaded)."""
        self._next_seq += 1
        i, err = _u64(), _Error()
        if isinstance(data, np.ndarray):
            where, n = data.ctypes.data, data.nbytes
        else:
            where, n = data, len(data)
        code = self._lib.cubed_client_create(self._client, where, n, ctypes.byref(i),
                                             ctypes.byref(err))
        if code:
            _raise(self._lib, code, err)
        return i.value

    def empty(self, size: int) -> int:
        # Sent as built here: a size the daemon refuses (0) poisons the handle, as on the Python
        # core, instead of failing now.
        if self._target is None:
            i = self._new_id()
            self._send(_wire.empty(i, size))
            return i
        got = _speedups.empty(self._target, size)  # Note [Compiled launch].
        if type(got) is tuple:
            raise error_from_number(*got)
        self._next_seq += 1
        return got

    def execute(self, kernel: types_pb2.Kernel, count: types_pb2.CubeCount,
                bindings: Union[types_pb2.Bindings, Dict[str, Any]], mode: int) -> None:
        self._send(session_pb2.Command(execute={"kernel": kernel, "count": count,
                                                "bindings": bindings, "mode": mode}))

    def execute_views(self, head: bytes, views: Sequence[Tuple[Any, bytes]], tail: bytes,
                      mode: bytes, scalars: bytes = b"") -> None:
        """execute() of a builtin launch in its encoded parts (_wire.execute's arguments, each
        view a Tensor._launch_view() pair, the scalars field apart from the tail): sent through
        a prepared launch of the library by the compiled extension where it is installed (Note
        [Compiled launch]; Note [Prepared C ABI launches] in
        client/c_api/cubed_client_c_launch.cc), else assembled in Python."""
        if self._target is None:
            self._send(_wire.execute(head, [v[1] for v in views], tail + scalars, mode))
            return
        if _PREPARED_LAUNCH:
            prepared = _prepared.get((head, tail, mode))
            if prepared is None:
                prepared = _prepare(self._lib, head, tail, mode)
            failed = _speedups.launch(self._target, self._send_launch, prepared.address, views,
                                      scalars)
        else:  # An extension built before prepared launches (a stale in-place build).
            failed = _speedups.execute(self._target, head, views, tail + scalars, mode)
        if failed is not None:
            raise error_from_number(*failed)
        self._next_seq += 1

    def remember_launch(self, key: bytes, keep: Any, head: bytes, tail: bytes, mode: bytes,
                        scalars: Sequence[Scalars]) -> None:
        """Enters a launch that memo_launch missed (`key`, `keep`: its answer) into the memo,
        after execute_views sent it (so its prepared launch exists): the prepared launch and how
        each scalar group is encoded (Note [Launch memo] in _native.py)."""
        prepared = _prepared.get((head, tail, mode))
        if prepared is None or self.launch_memo is None:
            return
        if len(self.launch_memo) >= _MAX_MEMO:
            self.launch_memo.clear()
        self.launch_memo[key] = (prepared.address, scalar_kinds(scalars), (keep, prepared))

    def release(self, ids: List[int]) -> None:
        self._next_seq += (len(ids) + 65535) // 65536
        array = (_u64 * len(ids))(*ids)
        err = _Error()
        code = self._lib.cubed_client_release(self._client, array, len(ids), ctypes.byref(err))
        if code:
            _raise(self._lib, code, err)

    def read(self, bindings: List[types_pb2.Binding]) -> Future:
        if len(bindings) == 1:  # Client.read's: no Command built here.
            b = bindings[0]
            self._next_seq += 1
            return self._ask(_data, lambda reply, err_ref: self._lib.cubed_client_read(
                self._client, b.handle, b.offset_start, b.offset_end, reply, err_ref))
        return self._send(session_pb2.Command(read=session_pb2.Command.Read(bindings=bindings)),
                          _data)  # type: ignore[return-value]

    def read_into(self, plan: Tuple[int, int, int], out: np.ndarray,
                  timeout: Optional[float]) -> None:
        """Reads (handle, offset_start, offset_end) ``plan`` into C-contiguous ``out`` (exactly
        its bytes) and waits for it on this thread, polling first: one call into the library,
        no Future, no reply object (Client.read's small reads, Note [Small reads]). The read's
        CubedError; FutureTimeout after ``timeout`` seconds."""
        self._next_seq += 1
        ms = -1 if timeout is None else max(1, int(timeout * 1000))
        if self._read_target is not None and self._target is not None:  # Note [Compiled read].
            try:
                failed = _speedups.read_into(self._target, self._read_target, plan[0], plan[1],
                                             plan[2], out, ms)
            except (BufferError, ValueError):  # A dtype the buffer protocol cannot name.
                failed = False  # Nothing was sent: ctypes below.
            if failed is None:
                return
            if failed:
                if failed[0] == _DEADLINE_EXCEEDED:
                    raise FutureTimeout()
                raise error_from_number(*failed)
        lib, err, size = self._lib, _Error(), _u64()
        nbytes = out.nbytes
        try:  # The array's first byte without out.ctypes, which costs ~0.8 us.
            where: Any = ctypes.byref(ctypes.c_char.from_buffer(out))
        except ValueError:  # A dtype the buffer protocol cannot name (bfloat16).
            where = out.ctypes.data
        code = lib.cubed_client_read_into(self._client, plan[0], plan[1], plan[2], where, nbytes,
                                          ctypes.byref(size), ms, ctypes.byref(err))
        if code == _DEADLINE_EXCEEDED:
            lib.cubed_error_clear(ctypes.byref(err))
            raise FutureTimeout()
        if code:
            _raise(lib, code, err)
        if size.value != nbytes:
            raise error_from_number(13, f"read: the daemon answered {size.value} bytes, not "
                                        f"{nbytes}")

    def read_into_async(self, plan: Tuple[int, int, int], out: np.ndarray) -> Future:
        """Reads (handle, offset_start, offset_end) ``plan`` into C-contiguous ``out`` (exactly its
        bytes) without waiting (cubed_client_read_into_async: a large read is downloaded straight
        into it); the Future resolves to ``out`` once every byte is there, or raises the read's
        CubedError. ``out`` is the Future's until then."""
        self._next_seq += 1
        nbytes = out.nbytes

        def filled(lib: ctypes.CDLL, reply: int) -> np.ndarray:
            _check(lib, reply)
            n = lib.cubed_reply_read_size(reply)
            if n != nbytes:
                raise error_from_number(13, f"read: the daemon answered {n} bytes, not {nbytes}")
            return out

        return self._ask(filled, lambda reply, err_ref: self._lib.cubed_client_read_into_async(
            self._client, plan[0], plan[1], plan[2], out.ctypes.data, nbytes, reply, err_ref))

    def read_tensor(self, bindings: List[types_pb2.BindingWithMeta]) -> Future:
        return self._send(session_pb2.Command(
            read_tensor=session_pb2.Command.ReadTensor(bindings=bindings)),
            _data)  # type: ignore[return-value]

    def create_from_region(self, region: int, offset: int, size: int) -> int:
        i = self._new_id()
        self._send(session_pb2.Command(create=session_pb2.Command.Create(
            id=i, region=types_pb2.RegionSlice(region=region, offset=offset, size=size))))
        return i

    def read_into_region(self, bindings: List[types_pb2.Binding], region: int, offset: int,
                         size: int) -> Future:
        into = types_pb2.RegionSlice(region=region, offset=offset, size=size)
        return self._send(session_pb2.Command(read=session_pb2.Command.Read(
            bindings=bindings, into=into)), _region_bytes)  # type: ignore[return-value]

    def read_tensor_into_region(self, bindings: List[types_pb2.BindingWithMeta], region: int,
                                offset: int, size: int) -> Future:
        into = types_pb2.RegionSlice(region=region, offset=offset, size=size)
        return self._send(session_pb2.Command(read_tensor=session_pb2.Command.ReadTensor(
            bindings=bindings, into=into)), _region_bytes)  # type: ignore[return-value]

    def release_region(self, region: int) -> None:
        self._send(session_pb2.Command(
            release_region=session_pb2.Command.ReleaseRegion(region=region)))

    def begin_graph(self, graph: int, parameters: List[int]) -> None:
        self._send(session_pb2.Command(begin_graph=session_pb2.Command.BeginGraph(
            graph=graph, parameters=parameters)))

    def end_graph(self) -> Future:
        return self._send(session_pb2.Command(end_graph=session_pb2.Command.EndGraph()),
                          _graph_steps)  # type: ignore[return-value]

    def replay_graph(self, command: bytes) -> None:
        self._send(command)

    def release_graph(self, graph: int) -> None:
        self._send(session_pb2.Command(release_graph=session_pb2.Command.ReleaseGraph(
            graph=graph)))

    def flush(self) -> None:
        self._next_seq += 1
        err = _Error()
        code = self._lib.cubed_client_flush(self._client, ctypes.byref(err))
        if code:
            _raise(self._lib, code, err)

    def sync(self) -> Future:
        return self._send(session_pb2.Command(sync=session_pb2.Command.Sync()),
                          _status)  # type: ignore[return-value]

    def memory_usage(self, device: int) -> Future:
        return self._send(session_pb2.Command(memory_usage=session_pb2.Command.MemoryUsage()),
                          _memory_usage)  # type: ignore[return-value]

    def memory_cleanup(self, device: int) -> Future:
        self._send(session_pb2.Command(memory_cleanup=session_pb2.Command.MemoryCleanup()))
        return self.memory_usage(device)

    def start_profile(self) -> None:
        self._send(session_pb2.Command(start_profile=session_pb2.Command.StartProfile()))

    def end_profile(self) -> Future:
        return self._send(session_pb2.Command(end_profile=session_pb2.Command.EndProfile()),
                          _duration_ns)  # type: ignore[return-value]

    def close(self, timeout: float) -> None:
        """Closes the session (the daemon runs what was sent first) and fails what still awaits
        an answer. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._lib.cubed_client_close(self._client)
        self._done_thread.join(timeout + 5)
        for tag in list(self._pending):  # Answers the loop did not get to (it timed out).
            entry = self._pending.pop(tag, None)
            if entry is not None:
                self._resolve(*entry)

    def __del__(self) -> None:
        # Freed only with the transport: calls after close() get FAILED_PRECONDITION "the
        # client is closed" from the library instead of touching freed memory.
        client = getattr(self, "_client", None)
        if client is not None:
            self.close(0)
            self._lib.cubed_client_free(client)
