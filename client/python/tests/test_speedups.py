"""The compiled launch (cubed_client._speedups; Note [Compiled launch] in cubed_client/_native.py):
the Command it assembles is byte for byte _wire.execute's, a refusal comes back as its code and
message, bad arguments are TypeErrors, and launches through it and through the Python path give
the same results on the real daemon."""

from __future__ import annotations

import ctypes
import os
import random
import sys

import numpy as np
import pytest

import cubed_client
from cubed_client import _native, _wire
from cubed_client._errors import FailedPreconditionError
from cubed_client._proto import session_pb2, types_pb2

from conftest import Daemon

try:
    from cubed_client import _speedups as speedups
except ImportError:
    speedups = None


def test_the_extension_is_built_where_python_has_its_headers() -> None:
    """run_tests.sh sets CUBED_EXPECT_SPEEDUPS where the interpreter's Python.h exists: there the
    package's install must have built the extension (a silent fallback would hide a slow SDK)."""
    if os.environ.get("CUBED_EXPECT_SPEEDUPS") != "1":
        pytest.skip("no Python headers here: the SDK runs its launches in Python")
    assert _native.COMPILED_LAUNCH, "setup.py did not build cubed_client._speedups"


class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("message", ctypes.c_void_p)]


_SEND = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                         ctypes.c_void_p, ctypes.POINTER(_Error))
_CLEAR = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Error))
_NEXT_ID = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                            ctypes.POINTER(_Error))


class Recorder:
    """cubed_client_send, cubed_error_clear and cubed_client_next_id stand-ins as C function
    pointers: they record what the extension passes and fail with ``code`` (send) or
    ``id_code`` (next_id) when not 0 (the library itself is exercised by the daemon tests
    below)."""

    def __init__(self, code: int = 0, message: bytes = b"", ids=(), id_code: int = 0) -> None:
        self.sent: list = []
        self.cleared = 0
        self._message = ctypes.create_string_buffer(message)
        self._code = code
        self._ids = iter(ids)

        def send(client, command, size, reply, error):
            self.sent.append((client, ctypes.string_at(command, size), reply))
            if self._code:
                error.contents.code = self._code
                error.contents.message = ctypes.addressof(self._message)
            return self._code

        def clear(error):
            self.cleared += 1
            error.contents.message = None

        def next_id(client, out, error):
            if id_code:
                error.contents.code = id_code
                error.contents.message = ctypes.addressof(self._message)
                return id_code
            out.contents.value = next(self._ids)
            return 0

        self._send, self._clear, self._next_id = _SEND(send), _CLEAR(clear), _NEXT_ID(next_id)
        self.target = tuple(ctypes.cast(f, ctypes.c_void_p).value
                            for f in (self._send, self._clear))
        self.target += (0x1234, ctypes.cast(self._next_id, ctypes.c_void_p).value)


needs_speedups = pytest.mark.skipif(speedups is None, reason="cubed_client._speedups not built")


@needs_speedups
@pytest.mark.parametrize("metadata_words", [0, 3, 200, 40000])
@pytest.mark.parametrize("buffers", [0, 1, 5, 64])
def test_the_command_is_wire_executes(metadata_words: int, buffers: int) -> None:
    """Small commands (the stack buffer) and large ones (40,000 metadata words: malloc), every
    length-prefix size, a list or a tuple of views, both modes."""
    rng = random.Random(metadata_words * 100 + buffers)
    kernel = types_pb2.Kernel(builtin=types_pb2.BuiltinKernel(name="add"))
    count = types_pb2.CubeCount(static_count=types_pb2.CubeCount.Static(x=70000, y=1, z=1))
    head = session_pb2.Command.Execute(kernel=kernel, count=count).SerializeToString()
    tail = types_pb2.Bindings(
        metadata=[rng.getrandbits(32) for _ in range(metadata_words)],
        scalars=[types_pb2.ScalarGroup(elem=types_pb2.ELEM_TYPE_F32, floats=[1.0, -0.5])]
    ).SerializeToString()
    views = [((i,), _wire.binding((1 << 63) + rng.getrandbits(20), rng.getrandbits(30)))
             for i in range(buffers)]
    rec = Recorder()
    for mode in (b"", _wire.mode(types_pb2.EXECUTION_MODE_CHECKED)):
        for seq in (views, tuple(views)):
            assert speedups.execute(rec.target, head, seq, tail, mode) is None
            client, command, reply = rec.sent[-1]
            assert (client, reply) == (0x1234, None)
            assert command == _wire.execute(head, [v[1] for v in views], tail, mode)
            assert session_pb2.Command.FromString(command).execute.bindings.buffers[:] == [
                types_pb2.Bindings.FromString(v[1]).buffers[0] for v in views]
    assert rec.cleared == 0


@needs_speedups
def test_a_refused_command_comes_back_as_its_code_and_message() -> None:
    rec = Recorder(code=9, message="the client is closed \u2014 bye".encode())
    got = speedups.execute(rec.target, b"", [], b"", b"")
    assert got == (9, "the client is closed \u2014 bye")
    assert rec.cleared == 1  # The library's message is freed through cubed_error_clear.


@needs_speedups
def test_arguments_of_the_wrong_shape_are_type_errors() -> None:
    rec = Recorder()
    good = (rec.target, b"h", [((1,), b"\x0a\x00")], b"t", b"")
    assert speedups.execute(*good) is None
    bad = [
        (rec.target, b"h", [], b"t"),  # Four arguments.
        (rec.target[:3], b"h", [], b"t", b""),  # A target of three.
        ((0,) + rec.target[1:], b"h", [], b"t", b""),  # A null send.
        (("x",) + rec.target[1:], b"h", [], b"t", b""),  # Not an address.
        (rec.target, "h", [], b"t", b""),  # A str head.
        (rec.target, b"h", {}, b"t", b""),  # Views not a list or tuple.
        (rec.target, b"h", [b"\x0a\x00"], b"t", b""),  # A view not a pair.
        (rec.target, b"h", [((1,), "x")], b"t", b""),  # A binding not bytes.
        (rec.target, b"h", [], b"t", None),  # No mode.
    ]
    for args in bad:
        with pytest.raises((TypeError, OverflowError)):
            speedups.execute(*args)
    for args in [(rec.target,), (rec.target[:3], 8), (rec.target, -1), (rec.target, 1 << 64),
                 (rec.target, 8.0)]:
        with pytest.raises((TypeError, OverflowError)):
            speedups.empty(*args)
    assert len(rec.sent) == 1  # Nothing of the bad calls was sent.


@needs_speedups
def test_an_empty_is_wire_empties() -> None:
    """Every varint length of the id and the size, the id taken from cubed_client_next_id."""
    ids = [0, 1, 127, 128, 16384, (1 << 63), (1 << 63) + (1 << 28), (1 << 64) - 1]
    sizes = [0, 1, 255, 1 << 20, (1 << 56) + 3, (1 << 64) - 1, 7, 300]
    rec = Recorder(ids=ids)
    for i, size in zip(ids, sizes):
        assert speedups.empty(rec.target, size) == i
        client, command, reply = rec.sent[-1]
        assert (client, reply) == (0x1234, None)
        assert command == _wire.empty(i, size)
        assert session_pb2.Command.FromString(command) == session_pb2.Command(
            empty=session_pb2.Command.Empty(id=i, size=size))


@needs_speedups
def test_an_empty_that_fails_sends_nothing_or_reports_the_send() -> None:
    rec = Recorder(message=b"the client is closed", id_code=9)
    assert speedups.empty(rec.target, 64) == (9, "the client is closed")
    assert rec.sent == [] and rec.cleared == 1
    rec = Recorder(code=14, message=b"stream ended", ids=[5])
    assert speedups.empty(rec.target, 64) == (14, "stream ended")
    assert len(rec.sent) == 1 and rec.cleared == 1


@needs_speedups
def test_a_binding_is_the_pythons() -> None:
    """_wire.binding is the extension's where it is built: the same bytes as the Python
    encoding (test_wire.py compares those with protobuf's) for every varint length."""
    assert _wire.binding is speedups.binding
    edges = [0, 1, 127, 128, 16383, 16384, (1 << 21) - 1, 1 << 28, (1 << 56) - 1, 1 << 63,
             (1 << 63) + (1 << 28), (1 << 64) - 1]
    rng = random.Random(11)
    values = edges + [rng.getrandbits(rng.randrange(1, 65)) for _ in range(500)]
    for handle, offset in zip(values, reversed(values)):
        assert speedups.binding(handle, offset) == _wire.python_binding(handle, offset)
    for bad in ((-1, 0), (0, -1), (1 << 64, 0), (1.0, 0)):
        with pytest.raises((OverflowError, TypeError)):
            speedups.binding(*bad)


def _launches(c: cubed_client.Client) -> list:
    """Launches of several shapes: views at offsets, scalars, a reduction, a matmul."""
    x = np.arange(64 * 33, dtype=np.float32).reshape(64, 33)
    t = c.create(x)
    view = t[3:, 5:]
    return [c.add(view, view).numpy(), c.add(view, 1.5).numpy(),
            c.full((7, 3), -0.0, np.float32).numpy(), c.sum(t, axis=1).numpy(),
            (t @ t.T[:, :4]).numpy()]


@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_launches_agree_with_and_without_the_extension(daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address, core="native") as c:
        transport = c._transport
        assert isinstance(transport, _native.NativeTransport)
        assert (transport._target is not None) == _native.COMPILED_LAUNCH
        compiled = _launches(c)
        transport._target = None  # The same launches through _wire.execute and ctypes.
        plain = _launches(c)
    for a, b in zip(compiled, plain):
        np.testing.assert_array_equal(a, b)
        assert a.tobytes() == b.tobytes()  # -0.0 too.


@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_a_launch_on_a_closed_transport_raises_the_librarys_error(daemon: Daemon) -> None:
    c = cubed_client.connect(daemon.address, core="native")
    t = c.create(np.ones(4, np.float32))
    view = t._launch_view()
    transport = c._transport
    c.close()
    head = session_pb2.Command.Execute(
        kernel=cubed_client.BuiltinKernel("fill", np.dtype(np.float32)).to_proto()
    ).SerializeToString()
    with pytest.raises(FailedPreconditionError, match="closed"):
        transport.execute_views(head, [view], b"", b"")
    with pytest.raises(FailedPreconditionError, match="closed"):
        transport.empty(64)


def _small_reads(c: cubed_client.Client) -> list:
    """Small reads of several dtypes (bfloat16, which the buffer protocol cannot name, too),
    shapes and offsets: what Client.read's small-read path serves."""
    import ml_dtypes
    x = np.arange(64 * 33, dtype=np.float32).reshape(64, 33)
    t = c.create(x)
    return [c.read(t), c.read(t[5]), c.read(t[7, 3:9]), c.read(c.create(np.int8([-3]))),
            c.read(c.create(np.float16([1.5, -0.0]))),
            c.read(c.create(np.array([2.5, -1.0], ml_dtypes.bfloat16))), c.read(c.sum(t))]


@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_small_reads_agree_with_and_without_the_compiled_read(daemon: Daemon) -> None:
    """Note [Compiled read]: the same reads through _speedups.read_into and through ctypes give
    the same dtypes, shapes and bytes; a read of an unknown handle raises the same error."""
    with cubed_client.connect(daemon.address, core="native") as c:
        transport = c._transport
        if os.environ.get("CUBED_EXPECT_SPEEDUPS") == "1" and sys.version_info >= (3, 11):
            assert transport._read_target is not None, "the extension has no read_into"
        if transport._read_target is None:
            pytest.skip("no compiled read here: both halves would go through ctypes")
        compiled = _small_reads(c)
        plan = (1 << 40, 0, 12)  # A handle this session never had.
        errors = []
        for read_target in (transport._read_target, None):
            transport._read_target = read_target
            with pytest.raises(cubed_client.CubedError) as raised:
                transport.read_into(plan, np.empty(3, np.float32), 10.0)
            errors.append((type(raised.value), str(raised.value)))
        plain = _small_reads(c)
    for a, b in zip(compiled, plain):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    assert errors[0] == errors[1]


@needs_speedups
def test_the_compiled_read_refuses_bad_arguments() -> None:
    if not hasattr(speedups, "read_into"):
        pytest.skip("built for the stable ABI of 3.10: no compiled read")
    target = (1, 1, 1, 1)
    with pytest.raises(TypeError):
        speedups.read_into(target, 1, 0, 0, 4)  # Too few.
    with pytest.raises(TypeError):
        speedups.read_into(target, 0, 1, 0, 4, np.empty(1, np.float32), -1)  # Null address.
    with pytest.raises(OverflowError):
        speedups.read_into(target, 1, -1, 0, 4, np.empty(1, np.float32), -1)
    with pytest.raises((BufferError, TypeError)):
        speedups.read_into(target, 1, 1, 0, 4, b"read-only", -1)
    with pytest.raises((BufferError, TypeError, ValueError)):
        speedups.read_into(target, 1, 1, 0, 4, np.empty((4, 4), np.float32)[:, 1], -1)


@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_a_launch_key_is_prepared_once_and_refused_parts_raise(daemon: Daemon) -> None:
    """Note [Prepared C ABI launches] (client/c_api/cubed_client_c_launch.cc): launches of one
    key share one prepared launch of the library, across clients; parts the library refuses
    raise its error and send nothing; bad views are TypeErrors."""
    if not _native.COMPILED_LAUNCH:
        pytest.skip("the SDK runs its launches in Python")
    with cubed_client.connect(daemon.address, core="native") as c, \
            cubed_client.connect(daemon.address, core="native") as d:
        before = set(_native._prepared)
        for client in (c, d):
            x = client.create(np.arange(6 * 131, dtype=np.float32))  # A shape of its own.
            np.testing.assert_array_equal(client.add(x, x).numpy(), 2 * np.arange(6 * 131))
        keys = [k for k in _native._prepared if k not in before]
        assert len(keys) == 1, keys
        transport = c._transport
        t = c.create(np.ones(4, np.float32))
        with pytest.raises(cubed_client.InvalidArgumentError, match="no kernel"):
            transport.execute_views(b"", [t._launch_view()], b"", b"")
        head, tail, mode = keys[0]
        with pytest.raises(cubed_client.InvalidArgumentError, match="scalars only"):
            transport.execute_views(head, [t._launch_view()] * 3, tail, mode, b"\xff\xff")
        with pytest.raises(TypeError):
            transport.execute_views(head, [(None, b"\x0a\x05\x08")], tail, mode)
        np.testing.assert_array_equal(c.read(c.add(t, t)), [2, 2, 2, 2])  # It goes on.
