"""The launch memo (Note [Launch memo] in cubed_client/_native.py): its keys name objects their
entries hold, the scalars it encodes are byte for byte protobuf's, launches it does not take fall
back to the Python path, and on the real daemon a repeated launch is served from it with the same
results as the Python path gives."""

from __future__ import annotations

import ctypes
import math
import struct

import numpy as np
import pytest

import cubed_client
from cubed_client import _native, _tensor, _wire
from cubed_client._errors import FailedPreconditionError
from cubed_client._proto import types_pb2

from conftest import Daemon

try:
    from cubed_client import _speedups as speedups
except ImportError:
    speedups = None

needs_memo = pytest.mark.skipif(speedups is None or not hasattr(speedups, "memo_launch"),
                                reason="the compiled extension is not installed")

_SendLaunch = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_void_p,
                               ctypes.c_size_t, ctypes.c_void_p)
_Clear = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("message", ctypes.c_char_p)]


class _Odd(float):
    def __float__(self) -> float:
        return 42.0


class _OddInt(int):
    def __int__(self) -> int:
        return 42


class _FakeTensor:
    """What memo_launch reads of a Tensor: its dtype and its launch view."""

    def __init__(self, dtype: np.dtype, handle: int, offset: int, layout: tuple) -> None:
        self._dtype = dtype
        self._wire = (layout, _wire.binding(handle, offset))


class _Library:
    """A send_launch and an error_clear standing in for the library's: they record what the
    extension hands them, and answer `code` (with `message`)."""

    def __init__(self, code: int = 0, message: bytes = b"") -> None:
        self.calls: list = []
        self.cleared = 0
        self._message = ctypes.create_string_buffer(message)

        def send(client, launch, buffers, count, scalars, size, error):  # noqa: ANN001
            self.calls.append((client, launch, [buffers[i] for i in range(3 * count)],
                               ctypes.string_at(scalars, size) if size else b""))
            if code:
                err = ctypes.cast(error, ctypes.POINTER(_Error)).contents
                err.code = code
                err.message = ctypes.addressof(self._message)
            return code

        def clear(error):  # noqa: ANN001
            self.cleared += 1

        self._send = _SendLaunch(send)
        self._clear = _Clear(clear)
        send_address = ctypes.cast(self._send, ctypes.c_void_p).value
        # (send, error_clear, client, next_id): only error_clear and the client are used.
        self.target = (send_address, ctypes.cast(self._clear, ctypes.c_void_p).value, 0x5150,
                       send_address)
        self.send_launch = send_address


def _memo_launch(lib: _Library, memo: dict, name: str, inputs: list, out: _FakeTensor,
                 scalars: list, dtype=None, axis: int = 0, index_dtype=None,
                 allow_tf32: bool = False):
    return speedups.memo_launch(memo, lib.target, lib.send_launch, name, dtype, axis, index_dtype,
                                allow_tf32, inputs, out, scalars)


def _remember(memo: dict, answer: list, address: int, scalars: list) -> None:
    key, keep = answer
    memo[key] = (address, _native.scalar_kinds(scalars), keep)


GROUPS = [
    [],
    [cubed_client.Scalars(np.float32, [1.0])],
    [cubed_client.Scalars(np.float32, [-0.0, math.inf, -math.inf, 1e300, 5e-324, 0.1])],
    [cubed_client.Scalars(np.float64, [math.nan, 3, -(2 ** 60)])],
    [cubed_client.Scalars(np.float16, [65504.0]), cubed_client.Scalars(np.int32, [-1, 7])],
    [cubed_client.Scalars(np.int64, [-(2 ** 63), 2 ** 63 - 1, 0, True])],
    [cubed_client.Scalars(np.uint32, [0, 1, 2 ** 32 - 1]), cubed_client.Scalars(np.uint8, [255])],
    [cubed_client.Scalars(np.bool_, [True, False, 0, 5])],
    [cubed_client.Scalars(np.int8, [-128]), cubed_client.Scalars(np.uint16, [])],
    [cubed_client.Scalars("bfloat16", (0.5, -2.0))],
]


@needs_memo
@pytest.mark.parametrize("scalars", GROUPS)
def test_a_hit_sends_the_buffers_and_protobufs_scalars(scalars: list) -> None:
    lib, memo = _Library(), {}
    layout_a, layout_b = ((4,), (1,), 4, 0, 16), ((2, 3), (3, 1), 8, 5, 128)
    a = _FakeTensor(np.dtype(np.float32), 7, 0, layout_a)
    out = _FakeTensor(np.dtype(np.float64), 2 ** 40, 40, layout_b)
    answer = _memo_launch(lib, memo, "add", [a], out, scalars, axis=-3)
    assert isinstance(answer, list) and not lib.calls  # A miss sends nothing.
    key, keep = answer
    words = struct.unpack(f"<{len(key) // 8}Q", key)
    # Held directly, or as a held view's layout.
    held = {id(o) for o in keep} | {id(o[0]) for o in keep if isinstance(o, tuple)}
    named = [words[0], words[1], words[2], words[3]] + list(words[6:])
    assert all(w in held for w in named), "every object the key names is held"
    assert words[4] == 2 ** 64 - 3  # The axis, as a number.
    _remember(memo, answer, 0xABC0, scalars)
    assert _memo_launch(lib, memo, "add", [a], out, scalars, axis=-3) is None
    (client, launch, buffers, encoded), = lib.calls
    assert (client, launch) == (0x5150, 0xABC0)
    assert buffers == [7, 0, 0, 2 ** 40, 40, 0]
    expected = types_pb2.Bindings(scalars=[s.to_proto() for s in scalars])
    assert encoded == expected.SerializeToString()


@needs_memo
def test_keys_tell_apart_what_the_launch_depends_on() -> None:
    lib, memo = _Library(), {}
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    layout = _tensor._LAYOUTS.setdefault(((4,), (1,), 4, 0, 16), ((4,), (1,), 4, 0, 16))
    out = _FakeTensor(f32, 1, 0, layout)
    first = _memo_launch(lib, memo, "neg", [out], out, [])
    _remember(memo, first, 0x10, [])
    variants = [
        dict(name="abs"), dict(dtype=f64), dict(axis=1), dict(index_dtype=np.dtype(np.int32)),
        dict(allow_tf32=True), dict(inputs=[]), dict(inputs=[out, out]),
        dict(scalars=[cubed_client.Scalars(np.float32, [1.0])]),
        dict(out=_FakeTensor(f64, 1, 0, layout)),
        dict(out=_FakeTensor(f32, 1, 0, ((4,), (1,), 4, 0, 32))),
    ]
    for v in variants:
        args = dict(name="neg", inputs=[out], out=out, scalars=[])
        args.update(v)
        answer = _memo_launch(lib, memo, args.pop("name"), args.pop("inputs"), args.pop("out"),
                              args.pop("scalars"), **args)
        assert isinstance(answer, list), f"{v} must miss"
    # Another tensor of an equal, interned layout on another handle hits.
    other = _FakeTensor(f32, 9, 4, layout)
    assert _memo_launch(lib, memo, "neg", [other], other, []) is None
    assert lib.calls[-1][2] == [9, 4, 0, 9, 4, 0]


@needs_memo
def test_launches_the_memo_does_not_take_are_false_and_send_nothing() -> None:
    lib, memo = _Library(), {}
    layout = ((1,), (1,), 4, 0, 4)
    t = _FakeTensor(np.dtype(np.float32), 3, 0, layout)
    groups = {
        "np.float32 value": [cubed_client.Scalars(np.float32, [np.float32(1.5)])],
        "float for an int": [cubed_client.Scalars(np.int32, [1.5])],
        "negative uint": [cubed_client.Scalars(np.uint32, [-1])],
        "int64 overflow": [cubed_client.Scalars(np.int64, [2 ** 63])],
        "a numpy array": [cubed_client.Scalars(np.float32, np.ones(2, np.float32))],
        # Subclasses may convert otherwise than their stored value (to_proto calls float()).
        "a float subclass": [cubed_client.Scalars(np.float32, [_Odd(1.5)])],
        "an int subclass": [cubed_client.Scalars(np.int32, [_OddInt(3)])],
        "an np.float64": [cubed_client.Scalars(np.float64, [np.float64(2.5)])],
    }
    for what, scalars in groups.items():
        memo.clear()
        answer = _memo_launch(lib, memo, "fill", [], t, scalars)
        _remember(memo, answer, 0x20, scalars)
        assert _memo_launch(lib, memo, "fill", [], t, scalars) is False, what
    assert _memo_launch(lib, memo, "fill", [], t, [], axis=1.0) is False
    assert _memo_launch(lib, memo, "fill", [], t, [], allow_tf32=1) is False
    assert _memo_launch(lib, memo, "fill", [t] * 16, t, []) is False
    assert _memo_launch(lib, memo, "fill", (t for t in []), t, []) is False
    assert speedups.memo_launch(memo, None, lib.send_launch, "fill", None, 0, None, False, [],
                                t, []) is False
    assert not lib.calls


@needs_memo
def test_a_refusal_comes_back_as_its_code_and_message_and_bad_views_raise() -> None:
    lib, memo = _Library(code=9, message=b"the client is closed"), {}
    t = _FakeTensor(np.dtype(np.float32), 3, 0, ((1,), (1,), 4, 0, 4))
    _remember(memo, _memo_launch(lib, memo, "fill", [], t, []), 0x30, [])
    assert _memo_launch(lib, memo, "fill", [], t, []) == (9, "the client is closed")
    assert lib.cleared == 1
    t._wire = (t._wire[0], b"not a binding")
    with pytest.raises(TypeError, match="view"):
        _memo_launch(lib, memo, "fill", [], t, [])
    with pytest.raises(TypeError):
        speedups.memo_launch(memo, lib.target, lib.send_launch)
    with pytest.raises(AttributeError):
        _memo_launch(lib, memo, "fill", [], object(), [])


def _launches(c: cubed_client.Client) -> list:
    """Launches of several shapes and scalars: views at offsets, fills at the edges of their
    types, a reduction, a matmul, a comparison."""
    x = np.arange(64 * 33, dtype=np.float32).reshape(64, 33)
    t = c.create(x)
    view = t[3:, 5:]
    return [c.add(view, view).numpy(), c.add(view, 1.5).numpy(),
            c.full((7, 3), -0.0, np.float32).numpy(), c.full((3,), math.nan, np.float64).numpy(),
            c.full((2,), -(2 ** 63), np.int64).numpy(), c.full((2,), 255, np.uint8).numpy(),
            c.sum(t, axis=1).numpy(), (t @ t.T[:, :4]).numpy(), (view < 100.0).numpy()]


@needs_memo
@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_repeated_launches_come_from_the_memo_and_agree_with_the_python_path(
        daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address, core="native") as c:
        transport = c._transport
        assert transport.launch_memo is _native._launch_memo
        first = _launches(c)
        entries = len(_native._launch_memo)
        python_path = []
        execute_views = transport.execute_views
        transport.execute_views = lambda *a: (python_path.append(a), execute_views(*a))
        second = _launches(c)
        assert not python_path, "a repeated launch takes the memo"
        assert len(_native._launch_memo) == entries
        transport.launch_memo = None  # The Python path (the prepared launches still).
        plain = _launches(c)
        assert python_path, "without the memo, launches take the Python path"
    for a, b, p in zip(first, second, plain):
        assert a.tobytes() == b.tobytes() == p.tobytes()  # -0.0 and NaN too.


@needs_memo
@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_the_memo_and_the_layouts_stay_bounded(daemon: Daemon,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "_MAX_MEMO", 8)
    monkeypatch.setattr(_tensor, "_MAX_LAYOUTS", 8)
    with cubed_client.connect(daemon.address, core="native") as c:
        x = c.create(np.arange(64, dtype=np.float32))
        for n in range(1, 40):
            np.testing.assert_array_equal(c.neg(x[:n]).numpy(), -np.arange(n, dtype=np.float32))
            assert len(_native._launch_memo) <= 8 and len(_tensor._LAYOUTS) <= 8


@needs_memo
@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_a_refused_launch_raises_its_error_and_closes_its_output(
        daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _Library(code=9, message=b"refused by the stand-in library")
    with cubed_client.connect(daemon.address, core="native") as c:
        t = c.create(np.ones(4, np.float32))
        c.neg(t)
        c.neg(t)  # The launch's key is in the memo.
        out = c._alloc((4,), np.dtype(np.float32))
        monkeypatch.setattr(c._transport, "_target", lib.target)
        monkeypatch.setattr(c._transport, "_send_launch", lib.send_launch)
        with pytest.raises(FailedPreconditionError, match="refused by the stand-in library"):
            c._launch("neg", [t], out)
        assert len(lib.calls) == 1 and lib.cleared == 1
        assert out._handle._release is None  # Closed: its release went out.
        monkeypatch.undo()
        np.testing.assert_array_equal(c.neg(t).numpy(), -np.ones(4, np.float32))


def test_a_swapped_dtype_is_its_element_types_one_object() -> None:
    # A new object per call would miss the memo every time (and crowd out its other entries).
    from cubed_client._types import wire_dtype
    assert wire_dtype(">f4") is wire_dtype(np.dtype(">f4")) is np.dtype("<f4")
    assert wire_dtype(">i8") is np.dtype("<i8")


@needs_memo
@pytest.mark.skipif(not _native.available(), reason="the native core is not installed")
def test_threads_launching_into_a_full_ring_and_threads_reading_all_finish(
        daemon: Daemon) -> None:
    # A launch that waits for room in the ring gives the GIL up (memo_launch), and the room
    # comes from the daemon alone: launching and reading threads all get through. 80,000
    # fills of 64K elements keep the daemon busy for a second or more while the launchers write
    # them in a fraction of that: past the 4,096 a stream may have in flight, the 4 MiB ring
    # (~58,000 such commands) fills, and the launchers wait for room.
    import threading
    with cubed_client.connect(daemon.address, core="native") as c:
        one = [cubed_client.Scalars(np.float32, [1.0])]
        outs = [c.create(np.zeros(1 << 16, np.float32)) for _ in range(4)]
        failures: list = []

        def launch(i: int) -> None:
            try:
                for n in range(20000):
                    c._launch("fill", [], outs[i], scalars=[cubed_client.Scalars(
                        np.float32, [float(n)])] if n % 997 == 0 else one)
                c.sync()
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)

        def read() -> None:
            try:
                probe = c.create(np.arange(8, dtype=np.float32))
                for _ in range(300):
                    np.testing.assert_array_equal(c.read(probe), np.arange(8, dtype=np.float32))
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)

        threads = [threading.Thread(target=launch, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a thread did not finish in 120 s"
        assert not failures, failures
        for t in outs:
            np.testing.assert_array_equal(c.read(t), np.ones(1 << 16, np.float32))
