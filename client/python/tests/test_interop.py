"""Tensors shared with PyTorch, CuPy and numpy without copies. Export (Note [Tensor export] in
_interop.py): DLPack and __cuda_array_interface__ on the CUDA backend, values, device pointers and
writes seen on both sides, memory back to the baseline once both let go; on the CPU backend a
copy, or a view of the region an imported tensor lives in. Import (Client.from_dlpack, Note
[Tensor import] in _import.py): the daemon maps the producer's own memory (CUDA IPC; on the CPU
backend a region), writes show on both sides, the producer lives while the handle does, every bad
input is refused with nothing left behind. CUDA tests skip unless --backend=cuda with torch (or
CuPy) on a GPU."""

from __future__ import annotations

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

import cubed_client
from cubed_client import _import, _interop, _region
from cubed_client._address import region_socket_path
from cubed_client._proto import compute_pb2, types_pb2


def backend(client: cubed_client.Client) -> str:
    return client.info().backend


def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    return torch


def test_the_cpu_backend_exports_a_copy_of_pool_memory(client):
    if backend(client) != "cpu":
        pytest.skip("CPU backend only")
    x = np.arange(6, dtype=np.float32)
    t = client.create(x)
    assert t.__dlpack_device__() == (_interop.DL_CPU, 0)
    a = np.from_dlpack(t)  # The daemon's own memory: read into a fresh array.
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(np.from_dlpack(t.T if t.ndim > 1 else t[1::2]), x[1::2])
    with pytest.raises(BufferError, match="without a copy"):
        t.__dlpack__(copy=False)
    assert not hasattr(t, "__cuda_array_interface__")
    t.close()  # Never shared: closes as always.


def test_a_read_does_not_keep_its_tensor_alive(client):
    # An exported page closes, and daemon memory goes back, with the last user reference: no
    # finished read may hold on to the tensor (its future's callbacks outlive the read).
    for shape in ((6,), (40, 3)):
        t = client.create(np.ones(shape, np.float32))
        t.read()
        t.T.read()  # Strided: read_tensor.
        handle = weakref.ref(t._handle)
        del t
        gc.collect()
        assert handle() is None


def test_capsules_refused_dropped_or_held_release_their_tensor_once(client):
    """Note [Capsules without destructors]: numpy refuses a bfloat16 capsule with its own error
    (no SystemError), and the export is released; an unconsumed capsule is kept while held and
    released once dropped; a consumed one when its consumer lets go."""
    if backend(client) != "cpu":
        pytest.skip("numpy imports host tensors only: the CPU backend's exports")
    before = usage(client)
    t = client.create(np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16))
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        np.from_dlpack(t)
    assert _interop.exported_capsules() == 0
    f = client.create(np.arange(8, dtype=np.float32))
    capsule = f.__dlpack__()
    gc.collect()
    assert _interop.exported_capsules() == 1  # Held, not consumed: kept.
    del capsule
    assert _interop.exported_capsules() == 0  # Dropped unconsumed: released.
    a = np.from_dlpack(f)
    assert _interop.exported_capsules() == 1  # numpy holds it.
    np.testing.assert_array_equal(a, np.arange(8, dtype=np.float32))
    del a, t, f
    gc.collect()
    assert _interop.exported_capsules() == 0
    client.sync()
    assert usage(client) == before


def test_dlpack_dtypes_map_to_dlpack_codes():
    assert _interop.dl_dtype(np.dtype(np.float32)) == (2, 32)
    assert _interop.dl_dtype(np.dtype(ml_dtypes.bfloat16)) == (4, 16)
    assert _interop.dl_dtype(np.dtype(np.float16)) == (2, 16)
    assert _interop.dl_dtype(np.dtype(np.int64)) == (0, 64)
    assert _interop.dl_dtype(np.dtype(np.uint8)) == (1, 8)
    assert _interop.dl_dtype(np.dtype(np.bool_)) == (6, 8)
    assert _interop.format_uuid(bytes(range(0, 256, 16))) == \
        "GPU-00102030-4050-6070-8090-a0b0c0d0e0f0"


def test_torch_reads_and_writes_a_cubed_tensor_in_place(client):
    if backend(client) != "cuda":
        pytest.skip("CUDA backend only")
    torch = torch_cuda()
    before = client.memory_usage().bytes_in_use
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = client.create(x)
    tt = torch.from_dlpack(t)
    assert tt.device.type == "cuda" and tt.shape == (3, 4) and tt.dtype == torch.float32
    assert tt.data_ptr() == t.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(tt.cpu().numpy(), x)
    tt += 100  # torch writes the daemon's memory...
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.read(), x + 100)  # ...and cubed reads it, no copy.
    u = t * 2  # cubed writes, torch reads after the export's sync.
    np.testing.assert_array_equal(torch.from_dlpack(u).cpu().numpy(), (x + 100) * 2)
    # Views: a transpose and a slice keep their strides and offsets.
    tv = torch.from_dlpack(t.T[1:])
    np.testing.assert_array_equal(tv.cpu().numpy(), (x + 100).T[1:])
    assert tv.stride() == (1, 4)
    del t, tt, u, tv
    gc.collect()
    assert _interop.exported_capsules() == 0
    assert _interop.open_pages() == 0
    assert client.memory_usage().bytes_in_use == before


@pytest.mark.parametrize("dtype, torch_name", [(np.float16, "float16"),
                                               (ml_dtypes.bfloat16, "bfloat16"),
                                               (np.int64, "int64"), (np.uint8, "uint8"),
                                               (np.bool_, "bool")])
def test_every_kind_of_dtype_exports(client, dtype, torch_name):
    if backend(client) != "cuda":
        pytest.skip("CUDA backend only")
    torch = torch_cuda()
    x = (np.arange(10) % 3).astype(dtype)
    tt = torch.from_dlpack(client.create(x))  # The capsule alone keeps the tensor alive.
    gc.collect()
    assert tt.dtype == getattr(torch, torch_name)
    np.testing.assert_array_equal(tt.cpu().float().numpy(), x.astype(np.float32))


def test_cupy_through_both_protocols(client):
    if backend(client) != "cuda":
        pytest.skip("CUDA backend only")
    cupy = pytest.importorskip("cupy")
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    t = client.create(x)
    a = cupy.asarray(t)  # __cuda_array_interface__: CuPy keeps t as the memory's owner.
    assert a.data.ptr == t.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(cupy.asnumpy(a), x)
    b = cupy.from_dlpack(t.T)
    np.testing.assert_array_equal(cupy.asnumpy(b), x.T)
    a[0, 0] = 7
    cupy.cuda.runtime.deviceSynchronize()
    assert t.read()[0, 0] == 7
    with pytest.raises(BufferError, match="shared with another library"):
        t.close()  # Closing would free memory CuPy still uses.
    del a, b, t
    gc.collect()
    assert _interop.open_pages() == 0


def test_closing_the_client_waits_for_the_importers(daemon):
    c = cubed_client.connect(daemon.address, timeout=30)
    if backend(c) != "cuda":
        c.close()
        pytest.skip("CUDA backend only")
    torch = torch_cuda()
    x = np.arange(1000, dtype=np.float32)
    tt = torch.from_dlpack(c.create(x))
    c.close()  # Deferred: torch still holds the memory.
    assert c.closed
    with pytest.raises(cubed_client.FailedPreconditionError):
        c.create(x)
    np.testing.assert_array_equal(tt.cpu().numpy(), x)  # Still valid memory.
    del tt
    gc.collect()  # The last importer let go: the session closes now.
    assert _interop.open_pages() == 0
    assert c._close_deferred is False


# --- import: Client.from_dlpack -----------------------------------------------------------------


def daemon_import_maps(daemon) -> int:
    """Mappings of import regions in the daemon (memfd:cubed-import), on the CPU backend."""
    with open(f"/proc/{daemon.proc.pid}/maps") as f:
        return f.read().count("memfd:cubed-import")


def usage(c_or_usage):
    """What imports must leave as it was: live allocations and their bytes (pages may stay)."""
    u = c_or_usage.memory_usage() if hasattr(c_or_usage, "memory_usage") else c_or_usage
    return (u.number_allocs, u.bytes_in_use)


def fill(client, t, value):
    """cubed writes ``value`` into every element of ``t`` (the builtin fill kernel)."""
    client._launch("fill", [], t, scalars=[cubed_client.Scalars(t.dtype, [value])])


def test_cpu_import_lives_in_a_region_that_numpy_views(client, daemon):
    if backend(client) != "cpu":
        pytest.skip("CPU backend only")
    before = client.memory_usage()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = client.from_dlpack(x)
    assert t.shape == (3, 4) and t.dtype == np.float32
    np.testing.assert_array_equal(t.read(), x)
    np.testing.assert_array_equal((t * 2).read(), x * 2)
    if client.transport == "unary":  # No regions over unary calls: a plain copy each way.
        assert t._handle.keep is None
        with pytest.raises(BufferError):
            t.__dlpack__(copy=False)
        return
    assert daemon_import_maps(daemon) == 1
    v = np.from_dlpack(t)  # A view of the region: no copy.
    np.testing.assert_array_equal(v, x)
    x[0, 0] = -5  # The original array is not shared (it was copied into the region)...
    assert t.read()[0, 0] == 0
    v[0, 0] = 100  # ...but numpy's view is: cubed reads numpy's write,
    assert t.read()[0, 0] == 100
    fill(client, t, 7.0)  # and numpy sees cubed's once the work ran.
    client.sync()
    np.testing.assert_array_equal(v, np.full((3, 4), 7, np.float32))
    np.testing.assert_array_equal(np.from_dlpack(t.T), v.T)  # Views keep their layout.
    assert client.memory_usage().bytes_in_use == before.bytes_in_use  # Not the pool's memory.
    handle_id = t.id
    del t
    gc.collect()
    np.testing.assert_array_equal(v, np.full((3, 4), 7, np.float32))  # numpy still holds it.
    del v
    gc.collect()
    client.sync()  # The release has run: the daemon unmapped the region.
    assert daemon_import_maps(daemon) == 0
    assert not client._import_graveyard
    with pytest.raises(cubed_client.NotFoundError):
        client._rpc("GetResource", compute_pb2.GetResourceRequest(
            session=client.session, binding=types_pb2.Binding(handle=handle_id)))
    assert usage(client) == usage(before)


def test_cpu_import_takes_every_layout_and_dtype(stream_client):
    if backend(stream_client) != "cpu":
        pytest.skip("CPU backend only")
    base = np.arange(24, dtype=np.int64).reshape(4, 6)
    for x in (base, np.asfortranarray(base), base[:, 1::2], base.astype(np.float16),
              base.astype(ml_dtypes.bfloat16), base % 2 == 0, np.zeros((0, 3), np.float32)):
        t = stream_client.from_dlpack(x)
        assert t.shape == x.shape and t.dtype == x.dtype
        np.testing.assert_array_equal(t.read(), x)
        if x.dtype != ml_dtypes.bfloat16:  # numpy's DLPack import knows no bfloat16.
            np.testing.assert_array_equal(np.from_dlpack(t), x)


def test_cpu_import_bad_inputs_leave_nothing(stream_client, daemon):
    c = stream_client
    if backend(c) != "cpu":
        pytest.skip("CPU backend only")
    before = c.memory_usage()

    def imported(**source):
        return c._rpc("ImportMemory", compute_pb2.ImportMemoryRequest(session=c.session,
                                                                        **source))
    ipc = compute_pb2.CudaIpcMemory(ipc_handle=bytes(64), offset=0, size=64, device_uuid="GPU-x")
    with pytest.raises(cubed_client.UnimplementedError, match="cpu backend"):
        imported(cuda_ipc=ipc)
    with pytest.raises(cubed_client.InvalidArgumentError, match="source"):
        imported()
    with pytest.raises(cubed_client.NotFoundError, match="region"):
        imported(region=types_pb2.RegionSlice(region=12345, offset=0, size=8))
    region = _region.SharedRegion(region_socket_path(c.address), c.session, 4096,
                                  name="cubed-import")
    try:
        for offset, size in ((0, 0), (4000, 97), (4097, 1), (1 << 63, 1 << 63)):
            with pytest.raises(cubed_client.InvalidArgumentError, match="region"):
                imported(region=types_pb2.RegionSlice(region=region.id, offset=offset, size=size))
    finally:
        c._transport.release_region(region.id)
    c.sync()
    assert daemon_import_maps(daemon) == 0
    with pytest.raises(BufferError, match="DLPack device"):
        c.from_dlpack(_OnDevice((_interop.DL_CUDA, 0)))
    with pytest.raises(TypeError, match="__dlpack__"):
        c.from_dlpack(object())
    assert usage(c) == usage(before)


class _OnDevice:
    """An object that claims a DLPack device and offers nothing else."""

    def __init__(self, device):
        self.device = device

    def __dlpack_device__(self):
        return self.device


def test_closing_the_session_unmaps_its_imports(daemon):
    c = cubed_client.connect(daemon.address, timeout=30)
    if backend(c) != "cpu":
        c.close()
        pytest.skip("CPU backend only")
    x = np.arange(1000, dtype=np.float32)
    t = c.from_dlpack(x)
    v = np.from_dlpack(t)
    assert daemon_import_maps(daemon) == 1
    c.close()  # The session's end drops the daemon's mapping; numpy's view stays valid.
    assert daemon_import_maps(daemon) == 0
    np.testing.assert_array_equal(v, x)
    with pytest.raises(cubed_client.FailedPreconditionError):
        c.from_dlpack(x)


# --- import on the CUDA backend -------------------------------------------------------------


class _DLPackOnly:
    """A producer that speaks DLPack alone (as JAX arrays and many others do)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def cuda_client(client):
    if backend(client) != "cuda":
        pytest.skip("CUDA backend only")
    return torch_cuda()


def test_torch_tensor_imported_without_copy(client):
    torch = cuda_client(client)
    before = client.memory_usage()
    torch.cuda.synchronize()
    torch_before = torch.cuda.memory_allocated()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    tt = torch.from_numpy(x).cuda()
    producer = weakref.ref(tt)
    t = client.from_dlpack(tt)
    assert t.shape == (3, 4) and t.dtype == np.float32 and t.strides == (4, 1)
    np.testing.assert_array_equal(t.read(), x)
    tt += 100  # torch writes its memory: cubed reads it, the same bytes.
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.read(), x + 100)
    fill(client, t, 7.0)  # cubed writes the same memory: torch reads it after the sync.
    client.sync()
    np.testing.assert_array_equal(tt.cpu().numpy(), np.full((3, 4), 7, np.float32))
    np.testing.assert_array_equal((t * 2).read(), np.full((3, 4), 14, np.float32))
    # Exported back, the tensor is torch's own memory at torch's own address.
    assert torch.from_dlpack(t).data_ptr() == tt.data_ptr()
    assert t.__cuda_array_interface__["data"][0] == tt.data_ptr()
    # The daemon's mapping is another process's address of the same memory.
    r = client._rpc("GetResource", compute_pb2.GetResourceRequest(
        session=client.session, binding=types_pb2.Binding(handle=t.id)))
    assert r.device_pointer != 0 and r.size == 48 and not r.ipc_handle
    assert client.memory_usage().bytes_in_use == before.bytes_in_use  # Not the pool's memory.
    handle_id = t.id
    del tt
    gc.collect()
    assert producer() is not None  # The cubed handle keeps torch's tensor.
    del r
    del t
    gc.collect()
    client.sync()  # The daemon ran the release and closed its mapping: torch's tensor goes.
    gc.collect()
    assert producer() is None
    with pytest.raises(cubed_client.NotFoundError):
        client._rpc("GetResource", compute_pb2.GetResourceRequest(
            session=client.session, binding=types_pb2.Binding(handle=handle_id)))
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == torch_before
    assert usage(client) == usage(before)


def test_torch_views_and_the_dlpack_path(client):
    torch = cuda_client(client)
    base = torch.arange(60, dtype=torch.float32, device="cuda").reshape(6, 10)
    expect = base.cpu().numpy()
    for view, want in ((base.T, expect.T), (base[2:, 3:7], expect[2:, 3:7]),
                       (base[1], expect[1])):
        t = client.from_dlpack(view)  # Strided, and at an offset inside torch's allocation.
        np.testing.assert_array_equal(t.read(), want)
        t2 = client.from_dlpack(_DLPackOnly(view))  # The DLPack capsule instead of the CAI.
        np.testing.assert_array_equal(t2.read(), want)
        assert torch.from_dlpack(t2).data_ptr() == view.data_ptr()
    for dtype in (torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool):
        src = (torch.arange(10, device="cuda") % 3).to(dtype)
        t = client.from_dlpack(_DLPackOnly(src))
        np.testing.assert_array_equal(t.read().astype(np.float32),
                                      src.cpu().float().numpy())
    empty = client.from_dlpack(torch.zeros(0, 3, device="cuda"))
    assert empty.shape == (0, 3)
    with pytest.raises(BufferError, match="not in CUDA device memory"):
        client.from_dlpack(torch.zeros(3))  # A CPU tensor into a CUDA daemon.


def test_cupy_array_imported_without_copy(client):
    if backend(client) != "cuda":
        pytest.skip("CUDA backend only")
    cupy = pytest.importorskip("cupy")
    a = cupy.linspace(-1, 1, 20, dtype=cupy.float32).reshape(4, 5)
    t = client.from_dlpack(a)
    np.testing.assert_array_equal(t.read(), cupy.asnumpy(a))
    a[0, 0] = 42
    cupy.cuda.runtime.deviceSynchronize()
    assert t.read()[0, 0] == 42
    fill(client, t, 3.0)
    client.sync()
    np.testing.assert_array_equal(cupy.asnumpy(a), np.full((4, 5), 3, np.float32))


def test_cuda_import_bad_inputs_leave_nothing(stream_client):
    c = stream_client
    torch = cuda_client(c)
    before = c.memory_usage()
    uuid = c.info().uuid
    tt = torch.ones(256, device="cuda")
    ipc, offset = _import.cuda_ipc_range(tt.data_ptr(), 1024, uuid)

    def imported(**fields):
        request = dict(ipc_handle=ipc, offset=offset, size=1024, device_uuid=uuid)
        request.update(fields)
        return c._rpc("ImportMemory", compute_pb2.ImportMemoryRequest(
            session=c.session, cuda_ipc=compute_pb2.CudaIpcMemory(**request)))

    cases = [(dict(ipc_handle=ipc[:63]), "63 bytes"), (dict(ipc_handle=bytes(64)), "cannot open"),
             (dict(size=0), "size: 0"), (dict(offset=1 << 62), "exceeds"),
             (dict(size=1 << 62), "exceeds"),
             (dict(device_uuid="GPU-00000000-0000-0000-0000-000000000000"), "device_uuid")]
    for fields, why in cases:
        with pytest.raises(cubed_client.InvalidArgumentError, match=why):
            imported(**fields)
    region = _region.SharedRegion(region_socket_path(c.address), c.session, 4096)
    try:  # Host memory is not the CUDA backend's to import.
        with pytest.raises(cubed_client.UnimplementedError, match="cuda backend"):
            c._rpc("ImportMemory", compute_pb2.ImportMemoryRequest(
                session=c.session, region=types_pb2.RegionSlice(region=region.id, offset=0,
                                                                size=8)))
    finally:
        c._transport.release_region(region.id)
    t = c.from_dlpack(tt)  # A good import still works, and the memory is as before.
    np.testing.assert_array_equal(t.read(), np.ones(256, np.float32))
    del t
    gc.collect()
    assert usage(c) == usage(before)


def test_closing_the_client_with_an_import_alive(daemon):
    c = cubed_client.connect(daemon.address, timeout=30)
    if backend(c) != "cuda":
        c.close()
        pytest.skip("CUDA backend only")
    torch = torch_cuda()
    torch.cuda.synchronize()
    torch_before = torch.cuda.memory_allocated()
    tt = torch.arange(1000, dtype=torch.float32, device="cuda")
    t = c.from_dlpack(tt)
    fill(c, t, 2.0)
    c.close()  # The session's end ran the fill, then closed the daemon's mapping.
    assert c.closed
    np.testing.assert_array_equal(tt.cpu().numpy(), np.full(1000, 2, np.float32))
    with pytest.raises(cubed_client.FailedPreconditionError):
        t.read()
    del t, tt
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == torch_before


def test_jax_reads_a_cubed_tensor(client):
    """Export to JAX through DLPack: jax.dlpack.from_dlpack reads the daemon's memory; whether
    JAX keeps it as a view or copies it is JAX's choice (it may copy into its own allocator), so
    the values are checked, and that the export lets go of the daemon's memory afterwards."""
    if backend(client) != "cuda":
        pytest.skip("CUDA backend only")
    import os
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # Leave the GPU to the daemon.
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("jax has no GPU here")
    before = client.memory_usage().bytes_in_use
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = client.create(x)
    j = jax.dlpack.from_dlpack(t)
    assert j.shape == (4, 6) and j.dtype == jax.numpy.float32
    np.testing.assert_array_equal(np.asarray(j), x)
    # A transposed view travels as strides (JAX takes only compact strides: a permutation of the
    # dims, not a slice of them).
    np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(t.T)), x.T)
    np.testing.assert_array_equal(np.asarray(j * 2), x * 2)
    del t, j
    gc.collect()
    assert _interop.exported_capsules() == 0
    assert client.memory_usage().bytes_in_use == before


def test_jax_array_imported_without_copy(client):
    if backend(client) != "cuda":
        pytest.skip("CUDA backend only")
    import os
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # Leave the GPU to the daemon.
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("jax has no GPU here")
    x = jax.device_put(jax.numpy.arange(24, dtype=jax.numpy.float32).reshape(4, 6), gpus[0])
    before = usage(client)
    try:
        t = client.from_dlpack(x)  # Through its __cuda_array_interface__, else its DLPack capsule.
    except BufferError as e:
        # The JAX on the H200 machine (GPU runs 62-63) allocates memory CUDA IPC cannot share
        # (cuMemCreate or a cudaMallocAsync pool), with its default and its platform allocator
        # alike: the import must refuse it, naming why, and leave nothing behind.
        assert "cuIpcGetMemHandle refused" in str(e)
        assert usage(client) == before
        pytest.skip("this JAX's memory cannot be shared through CUDA IPC (the refusal was checked)")
    np.testing.assert_array_equal(t.read(), np.arange(24, dtype=np.float32).reshape(4, 6))
    np.testing.assert_array_equal((t.T * 2).read(), np.arange(24).reshape(4, 6).T * 2)
