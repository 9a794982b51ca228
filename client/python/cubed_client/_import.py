"""Importing other libraries' tensors into cubed without copies: the producer's memory described
from ``__cuda_array_interface__`` or a DLPack capsule, and on the CUDA backend the CUDA IPC
handle of its allocation, which the daemon opens (ImportMemory). See Note [Tensor import].
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from . import _interop
from ._types import BFLOAT16

# Note [Tensor import]
# Client.from_dlpack(x) makes a cubed Tensor over x's own memory. CUDA backend: the client finds
# the allocation behind x's first element (cuMemGetAddressRange), takes its CUDA IPC handle
# (cuIpcGetMemHandle of the allocation's base) and sends it with the byte range to the daemon,
# which opens it in its context (Note [Imported memory], server/compute/compute_server.h) and
# gives the session a handle over the range. Before that the client waits for the work queued on
# x's GPU in this process (cuCtxSynchronize), so the daemon sees what the producer wrote; later
# writes are ordered by the user, as for exports. Lifetime: the handle keeps x (its DLPack
# owner, or the object itself) referenced; when the handle goes, x is kept until the daemon has
# processed the release (the next answered sync or memory_usage, or the session's end), because
# the daemon may still run queued work on the memory until then and closes its mapping only
# after it. So the producer never frees memory the daemon maps. Closing the client (or the
# session's end) closes the daemon's mapping; x stays valid, it is the producer's. CPU backend:
# a daemon cannot map this process's ordinary memory, so the array is copied once into a fresh
# shared-memory region that the daemon imports in place; the tensor then lives in that region,
# and np.from_dlpack(tensor) views it without a copy.

_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9

# DLPack dtype codes back to numpy (bool as its own code, bfloat16 through ml_dtypes).
_DL_KINDS = {_interop._DL_INT: "i", _interop._DL_UINT: "u", _interop._DL_FLOAT: "f"}


@dataclass
class Producer:
    """What a producer's tensor is: its first element's address, its layout (element strides)
    and device, and ``keep``: what keeps the memory alive (the object, or its DLPack owner)."""

    pointer: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: np.dtype
    device: Tuple[int, int]  # DLPack (device type, id).
    keep: Any

    @property
    def span(self) -> int:
        """Bytes from the first element to the end of the last one (0: no element)."""
        if any(n == 0 for n in self.shape):
            return 0
        return (sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1) * \
            self.dtype.itemsize


class _DLPackOwner:
    """A consumed DLPack capsule's DLManagedTensor: calls its deleter once collected."""

    def __init__(self, address: int) -> None:
        self._address = address

    def __del__(self) -> None:
        try:
            m = _interop._DLManagedTensor.from_address(self._address)
            if m.deleter:
                m.deleter(ctypes.cast(self._address, ctypes.POINTER(_interop._DLManagedTensor)))
        except Exception:  # noqa: BLE001 - interpreter shutdown: the producer dies with it.
            pass


_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi))
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))


def _dl_numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    if lanes != 1:
        raise TypeError(f"from_dlpack: vector dtypes ({lanes} lanes) have no cubed type")
    if code == _interop._DL_BOOL and bits == 8:
        return np.dtype(np.bool_)
    if code == _interop._DL_BFLOAT and bits == 16 and BFLOAT16 is not None:
        return BFLOAT16
    kind = _DL_KINDS.get(code)
    if kind is None or bits % 8:
        raise TypeError(f"from_dlpack: DLPack dtype (code {code}, {bits} bits) has no cubed type")
    return np.dtype(f"<{kind}{bits // 8}")


def _from_capsule(capsule: Any) -> Producer:
    """Consumes a legacy "dltensor" capsule (renamed "used_dltensor"; its deleter runs when the
    returned Producer's ``keep`` goes)."""
    if not _IsValid(capsule, _interop._NAME):
        raise BufferError("from_dlpack: __dlpack__() returned no unconsumed \"dltensor\" capsule")
    address = _GetPointer(capsule, _interop._NAME)
    _SetName(capsule, b"used_dltensor")
    owner = _DLPackOwner(address)
    t = _interop._DLManagedTensor.from_address(address).dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    dtype = _dl_numpy_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:  # NULL: compact row-major.
        strides = _interop_dense(shape)
    return Producer((t.data or 0) + t.byte_offset, shape, strides, dtype,
                    (t.device.device_type, t.device.device_id), owner)


def _interop_dense(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _from_cai(obj: Any, cai: dict) -> Producer:
    dtype = np.dtype(cai["typestr"])
    if dtype.byteorder == ">":
        raise TypeError(f"from_dlpack: big-endian dtype {dtype} has no cubed type")
    shape = tuple(int(n) for n in cai["shape"])
    if cai.get("strides") is None:
        strides = _interop_dense(shape)
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(s % dtype.itemsize for s in byte_strides):
            raise BufferError(f"from_dlpack: strides {byte_strides} bytes are not whole "
                              f"{dtype.itemsize}-byte elements")
        strides = tuple(s // dtype.itemsize for s in byte_strides)
    pointer = int(cai["data"][0] or 0)
    return Producer(pointer, shape, strides, dtype, (_interop.DL_CUDA, -1), obj)


def describe(x: Any, cuda: bool) -> Producer:
    """The producer's tensor ``x``: through ``__cuda_array_interface__`` when ``cuda`` and it has
    one (the object keeps its memory), else its ``__dlpack__()`` capsule. TypeError when ``x``
    speaks neither; negative strides are refused (BufferError)."""
    p: Optional[Producer] = None
    if cuda:
        try:
            cai = getattr(x, "__cuda_array_interface__", None)
        except Exception:  # noqa: BLE001 - torch refuses it for bfloat16 (KeyError) and for
            cai = None     # tensors that require grad (RuntimeError): DLPack then.
        if cai is not None:
            p = _from_cai(x, cai)
    if p is None:
        if not hasattr(x, "__dlpack__"):
            raise TypeError(f"from_dlpack: {type(x).__name__} has neither __dlpack__ nor "
                            "__cuda_array_interface__")
        p = _from_capsule(x.__dlpack__())
    if any(s < 0 for s in p.strides):
        raise BufferError(f"from_dlpack: negative strides {p.strides} cannot be imported; "
                          "make a copy first")
    return p


# --- CUDA: the allocation behind a pointer, and its IPC handle ------------------------------


def _driver() -> "_interop._Driver":
    driver = _interop._the_driver()
    lib = driver.lib
    if not getattr(driver, "import_ready", False):
        lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_interop._IpcHandle), ctypes.c_uint64]
        lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
        driver.import_ready = True
    return driver


def cuda_ipc_range(pointer: int, span: int, daemon_uuid: str) -> Tuple[bytes, int]:
    """The IPC handle of the allocation holding [pointer, pointer + span) and the range's byte
    offset in it, after the work queued on its GPU in this process finished. BufferError when the
    memory is on another GPU than the daemon's ``daemon_uuid``, is not device memory of one
    allocation, or the driver refuses IPC for it (e.g. PyTorch's expandable segments)."""
    with _interop._lock:
        driver = _driver()
        ordinal, ctx = driver.device(daemon_uuid)
        lib = driver.lib

        def inside() -> Tuple[bytes, int]:
            device = ctypes.c_int(-1)
            r = lib.cuPointerGetAttribute(ctypes.byref(device),
                                          _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer)
            if r != 0:
                driver.check("cuPointerGetAttribute (is it CUDA device memory?)", r)
            if device.value != ordinal:
                raise BufferError(f"cannot import: the tensor is on CUDA device {device.value} "
                                  f"of this process, the daemon's GPU {daemon_uuid} is device "
                                  f"{ordinal}; move it there first")
            driver.check("cuCtxSynchronize", lib.cuCtxSynchronize())
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            driver.check("cuMemGetAddressRange", lib.cuMemGetAddressRange_v2(
                ctypes.byref(base), ctypes.byref(size), pointer))
            offset = pointer - base.value
            if offset + span > size.value:
                raise BufferError(f"cannot import: the tensor's {span} bytes at offset {offset} "
                                  f"pass the end of its {size.value}-byte allocation")
            handle = _interop._IpcHandle()
            r = lib.cuIpcGetMemHandle(ctypes.byref(handle), base.value)
            if r != 0:
                name = ctypes.c_char_p()
                lib.cuGetErrorName(r, ctypes.byref(name))
                raise BufferError(
                    "cannot import: cuIpcGetMemHandle refused the tensor's allocation "
                    f"({(name.value or b'?').decode()}); memory from cuMemCreate (PyTorch's "
                    "expandable_segments, CUDA's virtual memory API) or cudaMallocAsync pools "
                    "cannot be shared through CUDA IPC")
            return ctypes.string_at(ctypes.addressof(handle), 64), offset

        return driver.in_context(ctx, inside)


# --- the Tensor over the import -------------------------------------------------------------


class Imported:
    """What an imported handle holds (``_Handle.keep``): the producer's memory owner, the address
    of the handle's first byte in this process (exports hand it out again) and, on the CPU
    backend, the region's mapping (``region``) that the bytes live in."""

    __slots__ = ("producer", "pointer", "region", "view")

    def __init__(self, producer: Any, pointer: int, region: Any = None,
                 view: Optional[np.ndarray] = None) -> None:
        self.producer = producer
        self.pointer = pointer
        self.region = region
        self.view = view  # The region's bytes as an array: keeps the mapping open while used.


def release_import(client_ref: Any, keep: Imported, handle_id: int) -> None:
    """An imported handle's release (from its __del__, any thread): the id goes out with the
    next batch of releases, and ``keep`` stays referenced until the daemon answered a command
    sent after it (Note [Tensor import])."""
    client = client_ref()
    if client is not None and not client._closed:
        # The id first: a sync that counts ``keep`` in the graveyard then sends its release.
        client._gc_releases.append(handle_id)
        client._import_graveyard.append(keep)


class _HostCopy:
    """A host array in the shape a DLPack capsule is made from (_interop.capsule): the copy a
    CPU-backend export hands out when the tensor's bytes are not in a region."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.ndim, self.shape, self.dtype = array.ndim, array.shape, array.dtype
        self.strides = tuple(s // array.dtype.itemsize for s in array.strides)


def host_capsule(client: Any, t: Any, copy: Optional[bool], max_version: Any = None) -> Any:
    """Tensor.__dlpack__ on the CPU backend: a view of the region the tensor lives in (an
    import, Note [Tensor import]) after the session's earlier commands, else (unless ``copy`` is
    False: BufferError) a capsule over a fresh read() of it. A DLPack 1.0 capsule (writable)
    when ``max_version`` allows one, else the unversioned kind."""
    keep = t._handle.keep
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    if keep is not None and keep.view is not None and not copy:
        client.sync()
        pointer, device = keep.pointer + t.offset * t.dtype.itemsize, (_interop.DL_CPU, 0)
        if versioned:
            return _interop.capsule_versioned(t, pointer, device, copied=False)
        return _interop.capsule(t, pointer, device)
    if copy is False:
        raise BufferError("cannot export without a copy: the tensor's bytes are in the daemon's "
                          "memory (only tensors imported with client.from_dlpack live in memory "
                          "this process maps)")
    owner = _HostCopy(client.read(t))
    if versioned:
        return _interop.capsule_versioned(owner, owner.array.ctypes.data, (_interop.DL_CPU, 0),
                                          copied=True)
    return _interop.capsule(owner, owner.array.ctypes.data, (_interop.DL_CPU, 0))


def import_cuda(client: Any, x: Any, uuid: str) -> Any:
    """Client.from_dlpack on the CUDA backend (Note [Tensor import])."""
    from ._proto import compute_pb2
    from ._types import wire_dtype

    p = describe(x, cuda=True)
    if p.device[0] != _interop.DL_CUDA:
        raise BufferError(f"from_dlpack: the tensor is on DLPack device {p.device}, not in CUDA "
                          "device memory; copy it with client.create(numpy array) instead")
    dt = wire_dtype(p.dtype)
    if p.span == 0:  # No element: nothing to share.
        return client.empty(p.shape, dt)
    ipc, offset = cuda_ipc_range(p.pointer, p.span, uuid)
    r = client._rpc("ImportMemory", compute_pb2.ImportMemoryRequest(
        session=client.session, cuda_ipc=compute_pb2.CudaIpcMemory(
            ipc_handle=ipc, offset=offset, size=p.span, device_uuid=uuid)))
    return client._imported(r.handle, r.size, Imported(p.keep, p.pointer), p.shape, p.strides, dt)


def import_host(client: Any, x: Any, socket_path: Optional[str]) -> Any:
    """Client.from_dlpack on the CPU backend: the array copied once into a fresh region that the
    daemon imports in place, or (no region socket) client.create(array)."""
    from ._errors import CubedError
    from ._proto import compute_pb2, types_pb2
    from ._region import SharedRegion
    from ._types import dense_strides, wire_dtype

    device = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (_interop.DL_CPU, 0)
    if tuple(device)[0] != _interop.DL_CPU:
        raise BufferError(f"from_dlpack: the tensor is on DLPack device {tuple(device)}; a daemon "
                          "of the CPU backend imports host memory only (copy it to the host)")
    if not isinstance(x, np.ndarray) and not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack: {type(x).__name__} has no __dlpack__")
    a = x if isinstance(x, np.ndarray) else np.from_dlpack(x)
    dt = wire_dtype(a.dtype)
    if a.ndim >= 2 and a.flags.f_contiguous and not a.flags.c_contiguous:  # As create() keeps it.
        stored = np.ascontiguousarray(a.T, dtype=dt)
        strides = tuple(reversed(dense_strides(tuple(reversed(a.shape)))))
    else:
        stored = np.ascontiguousarray(a, dtype=dt)
        strides = dense_strides(a.shape)
    n = stored.nbytes
    if n == 0 or socket_path is None:
        return client.create(a) if n else client.empty(a.shape, dt)
    try:
        region = SharedRegion(socket_path, client.session, n, name="cubed-import")
    except (CubedError, OSError):
        return client.create(a)  # No region socket here: a plain copy.
    view = np.frombuffer(region.mmap, np.uint8, n)
    view[:] = stored.reshape(-1).view(np.uint8)
    try:
        r = client._rpc("ImportMemory", compute_pb2.ImportMemoryRequest(
            session=client.session, region=types_pb2.RegionSlice(region=region.id, offset=0,
                                                                  size=n)))
    finally:
        # The import (if any) keeps the daemon's mapping; the session need not hold the region.
        client._transport.release_region(region.id)
    keep = Imported(None, view.ctypes.data, region, view)
    return client._imported(r.handle, r.size, keep, a.shape, strides, dt)
