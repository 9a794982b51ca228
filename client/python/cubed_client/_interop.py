"""Sharing CUDA tensors with PyTorch, CuPy and JAX without copies: DLPack capsules and
``__cuda_array_interface__`` over the CUDA IPC handles of the daemon's memory.

See Note [Tensor export] below.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from ._types import BFLOAT16

# Note [Tensor export]
# A cubed tensor lives in the daemon's CUDA context. GetResource names the storage page behind it
# (cuIpcGetMemHandle of the page, and the tensor's byte offset in it); this process opens the
# handle in the primary context of the same GPU (found by UUID, so CUDA_VISIBLE_DEVICES may
# differ), which is the context PyTorch, CuPy and JAX use, and hands out page base + offset.
# Lifetime: the opened page belongs to the tensor's handle (one mapping per page, counted over
# handles), closed when the handle is collected; a DLPack capsule, and whatever consumer took it,
# holds the tensor, so the daemon keeps the memory while any importer holds it. Client.close()
# while exported handles live is deferred until the last of them is collected (never a dangling
# pointer). Ordering: the export waits for every command of the session (sync), so the consumer
# sees the data on any stream; afterwards both sides see each other's writes, and the user orders
# them (torch.cuda.synchronize() before cubed reads what torch wrote, client.sync() before torch
# reads what cubed writes next), as with any memory two streams share.

# DLPack (dlpack.h, v0.8 unversioned ABI): device types and type codes.
DL_CPU, DL_CUDA = 1, 2
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _Deleter)]


def dl_dtype(dtype: np.dtype) -> Tuple[int, int]:
    """DLPack's (type code, bits) of a cubed dtype."""
    if BFLOAT16 is not None and dtype == BFLOAT16:
        return _DL_BFLOAT, 16
    code = {"b": _DL_BOOL, "i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT}[dtype.kind]
    return code, dtype.itemsize * 8


# --- the CUDA driver, loaded on first export --------------------------------------------------


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class _Driver:
    """libcuda through ctypes: the few calls an export needs. One per process (driver())."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise BufferError(f"cannot share CUDA memory: libcuda.so.1 does not load ({e})") from None
        lib = self.lib
        lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle,
                                              ctypes.c_uint]
        lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        lib.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
        lib.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self.check("cuInit", lib.cuInit(0))
        self.contexts: Dict[str, Tuple[int, ctypes.c_void_p]] = {}  # uuid -> (ordinal, context)

    def check(self, call: str, result: int) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            what = name.value.decode() if name.value else f"CUresult {result}"
            raise BufferError(f"cannot share CUDA memory: {call} failed: {what}")

    def device(self, uuid: str) -> Tuple[int, ctypes.c_void_p]:
        """This process's ordinal of the GPU `uuid` and its retained primary context."""
        found = self.contexts.get(uuid)
        if found is not None:
            return found
        count = ctypes.c_int()
        self.check("cuDeviceGetCount", self.lib.cuDeviceGetCount(ctypes.byref(count)))
        for ordinal in range(count.value):
            dev = ctypes.c_int()
            self.check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(dev), ordinal))
            raw = (ctypes.c_ubyte * 16)()
            self.check("cuDeviceGetUuid_v2", self.lib.cuDeviceGetUuid_v2(raw, dev))
            if format_uuid(bytes(raw)) == uuid:
                ctx = ctypes.c_void_p()
                self.check("cuDevicePrimaryCtxRetain",
                           self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
                self.contexts[uuid] = (ordinal, ctx)
                return ordinal, ctx
        raise BufferError(f"cannot share CUDA memory: the daemon's GPU {uuid} is not among this "
                          f"process's {count.value} CUDA device(s) (another host, or hidden by "
                          "CUDA_VISIBLE_DEVICES)")

    def in_context(self, ctx: ctypes.c_void_p, fn: Callable[[], Any]) -> Any:
        self.check("cuCtxPushCurrent", self.lib.cuCtxPushCurrent_v2(ctx))
        try:
            return fn()
        finally:
            old = ctypes.c_void_p()
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(old))


def format_uuid(raw: bytes) -> str:
    """A cuDeviceGetUuid value as nvidia-smi (and DeviceInfo.uuid) print it."""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_driver: Optional[_Driver] = None
_lock = threading.Lock()  # Guards _driver and _pages.


def _the_driver() -> _Driver:
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver


# Opened pages: (uuid, IPC handle bytes) -> [base address, handles holding it].
_pages: Dict[Tuple[str, bytes], list] = {}


class Mapping:
    """One handle's hold on an opened page: ``pointer`` is the handle's first byte in this
    process. close() (idempotent; the handle calls it when collected) drops the hold, closing the
    page with its last holder, then tells ``on_close``."""

    __slots__ = ("pointer", "_key", "_on_close")

    def __init__(self, uuid: str, ipc_handle: bytes, offset: int,
                 on_close: Optional[Callable[[], None]]) -> None:
        key = (uuid, bytes(ipc_handle))
        with _lock:
            page = _pages.get(key)
            if page is None:
                driver = _the_driver()
                _, ctx = driver.device(uuid)
                handle = _IpcHandle()  # All 64 bytes (field assignment stops at a NUL).
                ctypes.memmove(ctypes.addressof(handle), key[1], ctypes.sizeof(handle))
                base = ctypes.c_uint64()
                driver.in_context(ctx, lambda: driver.check(
                    "cuIpcOpenMemHandle",
                    driver.lib.cuIpcOpenMemHandle_v2(ctypes.byref(base), handle, 1)))
                page = _pages[key] = [base.value, 0]
            page[1] += 1
        self.pointer = page[0] + offset
        self._key: Optional[Tuple[str, bytes]] = key
        self._on_close = on_close

    def close(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        with _lock:
            page = _pages[key]
            page[1] -= 1
            if page[1] == 0:
                del _pages[key]
                driver = _the_driver()
                _, ctx = driver.device(key[0])
                driver.in_context(ctx, lambda: driver.lib.cuIpcCloseMemHandle(page[0]))
        if self._on_close is not None:
            self._on_close()


def open_pages() -> int:
    """Pages this process has open (tests: back to 0 once every exported tensor is gone)."""
    with _lock:
        return len(_pages)


def local_ordinal(uuid: str) -> int:
    """This process's CUDA ordinal of the daemon's GPU `uuid` (for __dlpack_device__)."""
    with _lock:
        return _the_driver().device(uuid)[0]


# --- DLPack capsules ----------------------------------------------------------------------------

# Note [Capsules without destructors]
# A DLPack capsule's consumer renames it ("used_dltensor") and calls the DLManagedTensor's deleter
# once done; a capsule no consumer took must release the tensor itself. A capsule destructor
# written in Python cannot do that safely: a consumer that refuses the capsule (numpy on a
# bfloat16 tensor) drops it with its exception still set, and a Python callback then fails on
# its first C call and wipes that exception (numpy then raises SystemError, and the export
# leaked). So our capsules have no destructor: this module holds each one it hands out
# (`_handed`) until a sweep (the next export, exported_capsules()) finds it consumed (renamed:
# the deleter will release it) or held by nobody else (never consumed: released then).
_NAME = ctypes.create_string_buffer(b"dltensor")
_NAME_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
# What each live DLManagedTensor keeps alive, by its address: the struct, its shape and strides
# arrays and the owning tensor (so the daemon memory outlives every importer).
_live: Dict[int, Tuple[Any, ...]] = {}
# Capsules handed out and not yet seen consumed or abandoned, by their DLManagedTensor's address:
# (the capsule, the address of the name it was made with).
_handed: Dict[int, Tuple[Any, int]] = {}


def _release(address: int) -> None:
    _live.pop(address, None)


@_Deleter
def _deleter(managed: Any) -> None:  # The consumer is done with it.
    _release(ctypes.addressof(managed.contents))


_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_pyapi.PyCapsule_GetName.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetName.argtypes = [ctypes.py_object]


def _sweep() -> None:
    """Note [Capsules without destructors]: forgets the capsules a consumer took, and releases
    the tensors of those nobody holds any more that no consumer took."""
    for address in list(_handed):
        entry = _handed.get(address)
        if entry is None:
            continue
        if _pyapi.PyCapsule_GetName(entry[0]) != entry[1]:  # Renamed: consumed.
            del _handed[address]
        elif sys.getrefcount(entry[0]) <= 2:  # Held only by `entry` and this call's argument.
            del _handed[address]
            _release(address)


def _hand_out(address: int, name: Any) -> Any:
    """A destructor-less capsule over the DLManagedTensor at `address`, named `name`."""
    _sweep()
    capsule_object = _pyapi.PyCapsule_New(address, ctypes.addressof(name), None)
    _handed[address] = (capsule_object, ctypes.addressof(name))
    return capsule_object


def capsule(owner: Any, pointer: int, device: Tuple[int, int]) -> Any:
    """A "dltensor" PyCapsule describing `owner` (a Tensor: shape, element strides, dtype) at
    `pointer` on `device`; it keeps `owner` alive until the consumer's deleter or the unconsumed
    capsule's destruction."""
    ndim = owner.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*owner.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*owner.strides)
    m = _DLManagedTensor()
    code, bits = dl_dtype(owner.dtype)
    m.dl_tensor = _DLTensor(pointer, _DLDevice(*device), ndim, _DLDataType(code, bits, 1),
                            shape, strides, 0)
    m.deleter = _deleter
    address = ctypes.addressof(m)
    m.manager_ctx = address
    _live[address] = (m, shape, strides, owner)
    return _hand_out(address, _NAME)


# DLPack 1.x (dlpack.h v1.0): the versioned capsule, whose flags say whether the consumer may
# write (numpy makes arrays from unversioned capsules read-only).
_FLAG_IS_COPIED = 1 << 1


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_DeleterVersioned = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensorVersioned))
_DLManagedTensorVersioned._fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                      ("deleter", _DeleterVersioned), ("flags", ctypes.c_uint64),
                                      ("dl_tensor", _DLTensor)]


@_DeleterVersioned
def _deleter_versioned(managed: Any) -> None:
    _release(ctypes.addressof(managed.contents))


def capsule_versioned(owner: Any, pointer: int, device: Tuple[int, int], copied: bool) -> Any:
    """As capsule(), a DLPack 1.0 "dltensor_versioned" capsule (writable; IS_COPIED when
    ``copied``), for consumers that asked for max_version >= (1, 0)."""
    ndim = owner.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*owner.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*owner.strides)
    m = _DLManagedTensorVersioned()
    m.version = _DLPackVersion(1, 0)
    code, bits = dl_dtype(owner.dtype)
    m.dl_tensor = _DLTensor(pointer, _DLDevice(*device), ndim, _DLDataType(code, bits, 1),
                            shape, strides, 0)
    m.deleter = _deleter_versioned
    m.flags = _FLAG_IS_COPIED if copied else 0
    address = ctypes.addressof(m)
    m.manager_ctx = address
    _live[address] = (m, shape, strides, owner)
    return _hand_out(address, _NAME_VERSIONED)


def exported_capsules() -> int:
    """DLPack capsules whose consumer (or the capsule itself) still holds a tensor."""
    _sweep()
    return len(_live)


def release_hook(client_ref: "weakref.ReferenceType[Any]") -> Callable[[], None]:
    """What an exported handle's Mapping calls once closed: the client may finish a deferred
    close (Client._export_closed)."""
    def hook() -> None:
        client = client_ref()
        if client is not None:
            client._export_closed()
    return hook
