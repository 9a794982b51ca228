"""The hand-encoded commands (cubed_client/_wire.py, Note [Hand-encoded commands]) against the
protobuf library: every form parses back to the message the library builds itself; and a
launch's encoded command reaches the real daemon as the kernel it names."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cubed_client import _wire
from cubed_client._proto import session_pb2, types_pb2

from conftest import Daemon

import cubed_client

# Around every length and value boundary of a varint (7, 14, 28, 56 and 63 bits) and of the
# client ids' fast path (2^63 up to 2^63 + 2^28).
EDGES = sorted({0, 1, 127, 128, 255, 16383, 16384, 16385, (1 << 21) - 1, 1 << 21, (1 << 28) - 1,
                1 << 28, (1 << 56) - 1, 1 << 56, (1 << 63) - 1, 1 << 63, (1 << 63) + 1,
                (1 << 63) + 16383, (1 << 63) + 16384, (1 << 63) + (1 << 28) - 1,
                (1 << 63) + (1 << 28), (1 << 64) - 1})


def values(n: int = 2000):
    rng = random.Random(7)
    return EDGES + [rng.getrandbits(rng.randrange(1, 65)) for _ in range(n)]


def test_varints_are_the_librarys() -> None:
    for n in values():
        got = session_pb2.Command.Release.FromString(b"\x08" + _wire.varint(n))
        assert list(got.ids) == [n], n
        # Byte for byte as the library writes an unpacked field of one value.
        assert _wire.varint(n) == types_pb2.Binding(handle=n).SerializeToString()[1:] or n == 0


def test_a_binding_is_the_librarys() -> None:
    vs = values(300)
    for handle, offset in zip(vs, reversed(vs)):
        encoded = _wire.binding(handle, offset)
        expected = types_pb2.Bindings(buffers=[types_pb2.Binding(handle=handle,
                                                                 offset_start=offset)])
        assert encoded == expected.SerializeToString()
        assert types_pb2.Bindings.FromString(encoded) == expected


@pytest.mark.parametrize("metadata_words", [0, 3, 200, 40000])
def test_an_execute_parses_to_the_librarys(metadata_words: int) -> None:
    kernel = types_pb2.Kernel(builtin=types_pb2.BuiltinKernel(name="add"))
    count = types_pb2.CubeCount(static_count=types_pb2.CubeCount.Static(x=70000, y=1, z=1))
    metadata = [(i * 2654435761) % (1 << 32) for i in range(metadata_words)]
    scalars = [types_pb2.ScalarGroup(elem=types_pb2.ELEM_TYPE_F32, floats=[1.0, -0.5])]
    buffers = [types_pb2.Binding(handle=(1 << 63) + i * 977, offset_start=i * 300)
               for i in range(5)]
    head = session_pb2.Command.Execute(kernel=kernel, count=count).SerializeToString()
    tail = types_pb2.Bindings(metadata=metadata, scalars=scalars).SerializeToString()
    for mode in (0, types_pb2.EXECUTION_MODE_CHECKED):
        encoded = _wire.execute(head, [_wire.binding(b.handle, b.offset_start) for b in buffers],
                                tail, _wire.mode(mode))
        expected = session_pb2.Command(execute=session_pb2.Command.Execute(
            kernel=kernel, count=count, mode=mode,
            bindings=types_pb2.Bindings(buffers=buffers, metadata=metadata, scalars=scalars)))
        assert session_pb2.Command.FromString(encoded) == expected


def test_a_session_request_numbers_its_commands() -> None:
    commands = [_wire.empty((1 << 63) + 5, 4096),
                session_pb2.Command(release=session_pb2.Command.Release(
                    ids=[(1 << 63) + 5])).SerializeToString(),
                _wire.empty(1 << 63, 1)]
    for first in (1, 127, 128, 16383, 1 << 40):
        request = session_pb2.SessionRequest.FromString(_wire.session_request(commands, first))
        assert [c.seq for c in request.commands] == [first, first + 1, first + 2]
        assert request.commands[0].empty == session_pb2.Command.Empty(id=(1 << 63) + 5,
                                                                      size=4096)
        assert list(request.commands[1].release.ids) == [(1 << 63) + 5]
        assert request.commands[2].empty.id == 1 << 63
    assert _wire.session_request([], 1) == b""
    # numbered() entries concatenate into the same request.
    joined = b"".join(_wire.numbered(c, 40 + i) for i, c in enumerate(commands))
    assert joined == _wire.session_request(commands, 40)


def test_a_replay_is_the_librarys() -> None:
    """_wire.replay_graph (Note [Graph replays]) parses to the library's ReplayGraph, and is its
    serialization byte for byte: no bindings, one, repeated ones, and a varint-long payload."""
    vs = values(50)
    handle_lists = [[], [1 << 63], [(1 << 63) + 5] * 3, vs[:7], vs, [0, 1, (1 << 64) - 1]]
    for graph in (1, 127, 128, 16384, 1 << 40, (1 << 64) - 1):
        for handles in handle_lists:
            encoded = _wire.replay_graph(_wire.replay_graph_head(graph),
                                         [_wire.varint(h) for h in handles])
            expected = session_pb2.Command(replay_graph=session_pb2.Command.ReplayGraph(
                graph=graph, bindings=handles))
            assert session_pb2.Command.FromString(encoded) == expected
            assert encoded == expected.SerializeToString()


@pytest.fixture
def client_any(daemon: Daemon):
    with cubed_client.connect(daemon.address) as c:
        yield c


@pytest.mark.parametrize("carrier", ["ring", "stream", "unary"])
def test_encoded_launches_run_on_the_daemon(daemon: Daemon, carrier: str) -> None:
    """The encoded path on each carrier (the ring writes the bytes, the gRPC stream and unary
    calls parse them back): views at offsets, a scalar launch, a launch key reused."""
    kw = ({"transport": "unary"} if carrier == "unary" else
          {"transport": "stream", "carrier": "ring" if carrier == "ring" else "grpc"})
    with cubed_client.connect(daemon.address, **kw) as c:
        if carrier != "unary":
            assert c._transport.carrier == ("ring" if carrier == "ring" else "grpc")
        x = np.arange(64 * 33, dtype=np.float32).reshape(64, 33)
        t = c.create(x)
        view = t[3:, 5:]  # An offset and strides.
        np.testing.assert_array_equal(c.add(view, view).numpy(), x[3:, 5:] * 2)
        np.testing.assert_array_equal(c.add(view, 1.5).numpy(), x[3:, 5:] + 1.5)
        f = c.full((7, 3), 2.25, np.float32)
        np.testing.assert_array_equal(f.numpy(), np.full((7, 3), 2.25, np.float32))
        for _ in range(3):  # The same launch key again, with new outputs.
            np.testing.assert_array_equal((t @ t.T[:, :4]).numpy(), x @ x.T[:, :4])


def test_cached_scalars_keep_the_sign_of_zero_and_the_type(client_any) -> None:
    """Launch scalars are cached by value (_launch.scalar_field): 0.0 and -0.0, 1 and 1.0 and
    True each give the bytes of their own launch."""
    c = client_any
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):
        a = c.full((3,), first, np.float32).read()
        b = c.full((3,), second, np.float32).read()
        assert list(np.signbit(a)) == [np.signbit(first)] * 3
        assert list(np.signbit(b)) == [np.signbit(second)] * 3
    assert c.full((2,), 1, np.int32).read().tolist() == [1, 1]
    assert c.full((2,), 1.0, np.float64).read().tolist() == [1.0, 1.0]
    assert c.full((2,), True, np.bool_).read().tolist() == [True, True]
    x = c.create(np.arange(8, dtype=np.float32).reshape(2, 4))
    for eps in (1e-5, 1e-3):  # The same launch key, another scalar.
        want = (np.arange(8, dtype=np.float64).reshape(2, 4) - [[1.5], [5.5]]) / np.sqrt(1.25 + eps)
        np.testing.assert_allclose(c.layer_norm(x, eps=eps).read(), want, rtol=1e-5)

