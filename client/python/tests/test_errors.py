"""The bad-input table of docs/error-model.md, through the SDK: each row raises the CubedError
subclass of its gRPC code, with the daemon's message, and the client keeps working. On the
stream, errors of commands that do not answer surface at the next sync."""

from __future__ import annotations

import gc

import grpc
import numpy as np
import pytest

import conftest
import cubed_client
from cubed_client import BuiltinKernel
from cubed_client._proto import types_pb2

MiB = 1 << 20
DIM = types_pb2.CubeDim(x=1, y=1, z=1)


def expect(client, code, words, fn):
    """fn() (then a sync) raises a CubedError with `code` whose message has every word; memory
    usage is unchanged and the session still works."""
    gc.collect()  # Outputs a wrapper allocated for the failed kernel are released by the GC.
    client.sync()
    before = client.memory_usage()
    with pytest.raises(cubed_client.CubedError) as info:
        fn()
        client.sync()
    e = info.value
    assert e.code == code, f"{e!r}"
    assert isinstance(e, cubed_client._errors._BY_CODE[code])
    for w in words:
        assert w.lower() in e.message.lower(), e.message
    gc.collect()
    after = client.memory_usage()
    assert (after.number_allocs, after.bytes_in_use) == (before.number_allocs, before.bytes_in_use)
    np.testing.assert_array_equal(client.read(client.create(np.arange(3))), np.arange(3))
    return e


def add_buffers(client):
    a, b = client.create(np.float32([1, 2, 3, 4])), client.create(np.float32([10, 20, 30, 40]))
    out = client.empty(4, np.float32)
    client.execute(BuiltinKernel("add", np.float32), None, [a, b, out])
    np.testing.assert_array_equal(client.read(out), [11, 22, 33, 44])
    return a, b, out


def test_unknown_handle(client):
    expect(client, grpc.StatusCode.NOT_FOUND, ["handle"],
           lambda: client.read(client.adopt(987654321, 16)))


def test_another_sessions_handle(daemon, client):
    with cubed_client.connect(daemon.address) as other:
        theirs = other.create(b"not yours")
        other.sync()
        expect(client, grpc.StatusCode.NOT_FOUND, ["handle"],
               lambda: client.read(client.adopt(theirs.id, 9)))


def test_unknown_session(daemon, client):
    joined = cubed_client.connect(daemon.address, session=client.session ^ 0x5A5A5A5A5A5A5A5A)
    with pytest.raises(cubed_client.NotFoundError, match="session"):
        joined.create(b"orphan")
    joined.close()


def test_offset_past_the_end(client):
    t = client.create(b"x" * 16)
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["offset"],
           lambda: client.read_raw([cubed_client.Binding(t, 17, 0)]))


def test_offsets_overlap(client):
    t = client.create(b"x" * 16)
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["offset"],
           lambda: client.read_raw([cubed_client.Binding(t, 10, 10)]))


def test_shape_product_overflows(client):
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["shape"],
           lambda: client.empty((1 << 32, 1 << 32, 16), np.float32))


def test_zero_size_empty(client):
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["size"], lambda: client.empty_bytes(0))


def test_huge_empty(client):
    expect(client, grpc.StatusCode.RESOURCE_EXHAUSTED, ["1152921504606846976"],
           lambda: client.empty_bytes(1 << 60))


def test_over_memory_limit(client):
    e = expect(client, grpc.StatusCode.RESOURCE_EXHAUSTED, ["limit"],
               lambda: client.empty_bytes(100 * MiB))
    assert isinstance(e, MemoryError)


def test_over_memory_limit_in_total(client):
    first = client.empty_bytes(40 * MiB)
    client.sync()
    expect(client, grpc.StatusCode.RESOURCE_EXHAUSTED, ["limit"],
           lambda: client.empty_bytes(40 * MiB))
    first.close()


def test_unknown_kernel(client):
    bufs = add_buffers(client)
    expect(client, grpc.StatusCode.NOT_FOUND, ["no_such_kernel"],
           lambda: client.execute(BuiltinKernel("no_such_kernel", np.float32), None, bufs))


def test_wrong_binding_count_for_add(client):
    a, b, out = add_buffers(client)
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["add", "3"],
           lambda: client.execute(BuiltinKernel("add", np.float32), None, [a, out]))


def test_unsupported_dtype(client):
    x = client.create(np.arange(4, dtype=np.int32))
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["exp", "i32"], lambda: client.exp(x))
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["mean"], lambda: client.mean(x))


def test_elem_type_unspecified(client):
    bufs = add_buffers(client)
    kernel = types_pb2.Kernel(builtin=types_pb2.BuiltinKernel(name="add"))
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["dtype"],
           lambda: client.execute(kernel, None, bufs))
    with pytest.raises(TypeError):
        BuiltinKernel("add", np.complex64).to_proto()


@pytest.mark.parametrize("count", [(0, 1, 1), (1 << 31, 1, 1)])
def test_bad_cube_count(client, count):
    bufs = add_buffers(client)
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["count"],
           lambda: client.execute(BuiltinKernel("add", np.float32), count, bufs))


def test_dynamic_cube_count_binding_too_small(client):
    bufs = add_buffers(client)
    small = client.create(b"\1" * 8)
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["12"],
           lambda: client.execute(BuiltinKernel("add", np.float32), small, bufs))


def test_unchecked_mode_not_allowed(client):
    bufs = add_buffers(client)
    expect(client, grpc.StatusCode.PERMISSION_DENIED, ["unchecked"],
           lambda: client.execute(BuiltinKernel("add", np.float32), None, bufs,
                                  mode="unchecked"))


def test_end_profile_without_start(client):
    expect(client, grpc.StatusCode.FAILED_PRECONDITION, ["profile"], client.end_profile)


@pytest.mark.parametrize("kernel", [
    types_pb2.Kernel(cuda_source=types_pb2.CudaSourceKernel(source="x", entry_point="k", cube_dim=DIM)),
    types_pb2.Kernel(ptx=types_pb2.PtxKernel(ptx="x", entry_point="k", cube_dim=DIM))])
@pytest.mark.skipif(conftest.BACKEND != "cpu", reason="the CPU backend's answer to CUDA kernels")
def test_cuda_kernels_on_cpu(client, kernel):
    bufs = add_buffers(client)
    expect(client, grpc.StatusCode.UNIMPLEMENTED, ["cuda"],
           lambda: client.execute(kernel, 1, bufs))


def test_read_with_zero_bindings(client):
    expect(client, grpc.StatusCode.INVALID_ARGUMENT, ["bindings"], lambda: client.read_raw([]))


def test_release_unknown_handle(client):
    keep = client.create(b"still here")
    expect(client, grpc.StatusCode.NOT_FOUND, ["987654321"],
           lambda: client.adopt(987654321, 4).close())
    assert client.read_raw([keep]) == [b"still here"]


def test_poisoned_output_reports_original_error(stream_client):
    c = stream_client
    a, b, out = add_buffers(c)
    bad = c.empty(4, np.float32)
    c.execute(BuiltinKernel("add", np.float32), (0, 1, 1), [a, b, bad])
    with pytest.raises(cubed_client.InvalidArgumentError, match="count") as info:
        c.read(bad)
    assert "failed" in info.value.message
    with pytest.raises(cubed_client.InvalidArgumentError) as info:
        c.sync()
    assert info.value.failed_commands == 1


def test_client_side_shape_errors(client):
    a = client.create(np.ones((2, 3), np.float32))
    with pytest.raises(cubed_client.InvalidArgumentError):
        a + client.create(np.ones((4,), np.float32))
    with pytest.raises(cubed_client.InvalidArgumentError):
        a @ a


def test_unreachable_daemon(tmp_path):
    with pytest.raises(cubed_client.UnavailableError):
        cubed_client.connect(f"unix:{tmp_path}/nothing.sock", timeout=5)
