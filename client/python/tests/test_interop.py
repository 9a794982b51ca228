"""Tensors shared with PyTorch and CuPy without copies (Note [Tensor export] in _interop.py):
DLPack and __cuda_array_interface__ on the CUDA backend, values, device pointers and writes
seen on both sides, and memory back to the baseline once both let go. The CPU backend refuses
with BufferError."""

from __future__ import annotations

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

import cubed_client
from cubed_client import _interop


def backend(client: cubed_client.Client) -> str:
    return client.info().backend


def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    return torch


def test_the_cpu_backend_refuses_to_export(client):
    if backend(client) != "cpu":
        pytest.skip("CPU backend only")
    t = client.create(np.arange(6, dtype=np.float32))
    assert t.__dlpack_device__() == (_interop.DL_CPU, 0)
    with pytest.raises(BufferError, match="CPU backend"):
        t.__dlpack__()
    assert not hasattr(t, "__cuda_array_interface__")
    t.close()  # Never exported: closes as always.


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
