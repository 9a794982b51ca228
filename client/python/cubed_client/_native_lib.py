"""The C ABI library of the native client core (libcubed_client_c.so,
client/c_api/cubed_client_c.h): where it is found, loading it with its functions typed, its
error and option structs, and its prepared launches. _native.py speaks the session stream
through it.

Where the library is found (first that exists): $CUBED_CLIENT_LIBRARY (a path); next to this
package (cubed_client/libcubed_client_c.so, which `pip install` copies there when
$CUBED_CLIENT_LIBRARY names it at install time); the dynamic loader's search (`cmake --install`,
ldconfig).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path
from typing import Dict, Optional, Tuple

import grpc

from ._errors import CubedError, error_for, error_from_number
from . import _wire
from ._types import cache_put

LIBRARY_ENV = "CUBED_CLIENT_LIBRARY"
LIBRARY_NAME = "libcubed_client_c.so"
ABI_VERSION = 3  # CUBED_C_API_VERSION this module speaks.

_DEADLINE_EXCEEDED = 4

_u64 = ctypes.c_uint64
_i64 = ctypes.c_int64
_i32 = ctypes.c_int32
_ptr = ctypes.c_void_p
_size = ctypes.c_size_t


class _Error(ctypes.Structure):
    _fields_ = [("code", _i32), ("message", _ptr)]


class _Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("address", ctypes.c_char_p),
                ("timeout_ms", _i64), ("device", ctypes.c_uint32), ("lease_ms", _i64),
                ("max_message_bytes", _i64), ("token", ctypes.c_char_p),
                ("tls_ca_file", ctypes.c_char_p), ("tls_cert_file", ctypes.c_char_p),
                ("tls_key_file", ctypes.c_char_p), ("tls_server_name", ctypes.c_char_p),
                ("session", _u64), ("transport", _i32), ("carrier", _i32),
                ("bulk_threshold", _u64), ("bulk_chunk", _u64), ("region_threshold", _u64),
                ("resume_timeout_ms", _i64), ("reply_spin_us", _i64),
                ("bulk_lanes", ctypes.c_uint32)]


class _Usage(ctypes.Structure):
    _fields_ = [("number_allocs", _u64), ("bytes_in_use", _u64), ("bytes_padding", _u64),
                ("bytes_reserved", _u64)]


_P = ctypes.POINTER
_SIGNATURES = {
    "cubed_c_api_version": (_i32, []),
    "cubed_error_clear": (None, [_P(_Error)]),
    "cubed_connect_options_init": (None, [_P(_Options)]),
    "cubed_client_connect": (_i32, [_P(_Options), _P(_ptr), _P(_Error)]),
    "cubed_client_close": (None, [_ptr]),
    "cubed_client_free": (None, [_ptr]),
    "cubed_client_cancel": (None, [_ptr]),
    "cubed_client_session": (_u64, [_ptr]),
    "cubed_client_lease_ms": (_i64, [_ptr]),
    "cubed_client_transport": (_i32, [_ptr]),
    "cubed_client_carrier": (_i32, [_ptr]),
    "cubed_client_resume_state": (None, [_ptr, _P(_u64), _P(_i32)]),
    "cubed_client_call": (_i32, [_ptr, ctypes.c_char_p, ctypes.c_char_p, _size, _ptr,
                                 _P(_Error)]),
    "cubed_client_next_id": (_i32, [_ptr, _P(_u64), _P(_Error)]),
    "cubed_reply_create": (_ptr, [_u64]),
    "cubed_client_send": (_i32, [_ptr, ctypes.c_char_p, _size, _ptr, _P(_Error)]),
    "cubed_client_create": (_i32, [_ptr, _ptr, _u64, _P(_u64), _P(_Error)]),
    "cubed_client_empty": (_i32, [_ptr, _u64, _P(_u64), _P(_Error)]),
    "cubed_client_execute": (_i32, [_ptr, ctypes.c_char_p, _size, _P(_Error)]),
    "cubed_client_release": (_i32, [_ptr, _P(_u64), _size, _P(_Error)]),
    "cubed_launch_prepare": (_i32, [ctypes.c_char_p, _size, _P(_ptr), _P(_Error)]),
    "cubed_launch_free": (None, [_ptr]),
    "cubed_client_send_launch": (_i32, [_ptr, _ptr, _P(_u64), _size, ctypes.c_char_p, _size,
                                        _P(_Error)]),
    "cubed_client_read": (_i32, [_ptr, _u64, _u64, _u64, _ptr, _P(_Error)]),
    "cubed_client_read_into_async": (_i32, [_ptr, _u64, _u64, _u64, _ptr, _u64, _ptr,
                                             _P(_Error)]),
    "cubed_reply_read_size": (_u64, [_ptr]),
    "cubed_client_read_into": (_i32, [_ptr, _u64, _u64, _u64, _ptr, _u64, _P(_u64), _i64,
                                      _P(_Error)]),
    "cubed_client_reply_spin_us": (_i64, [_ptr]),
    "cubed_client_flush": (_i32, [_ptr, _P(_Error)]),
    "cubed_client_memory_usage": (_i32, [_ptr, _P(_Usage), _P(_Error)]),
    "cubed_client_next_done": (_i32, [_ptr, _i64, _P(_u64), _P(_Error)]),
    "cubed_reply_wait": (_i32, [_ptr, _i64, _P(_Error)]),
    "cubed_reply_done": (_i32, [_ptr]),
    "cubed_reply_notify": (None, [_ptr]),
    "cubed_reply_status": (_i32, [_ptr, _P(_Error)]),
    "cubed_reply_failed_commands": (_u64, [_ptr]),
    "cubed_reply_bytes": (_i32, [_ptr, _P(_ptr), _P(_size), _P(_Error)]),
    "cubed_reply_data_count": (_size, [_ptr]),
    "cubed_reply_data": (_i32, [_ptr, _size, _P(_ptr), _P(_u64), _P(_Error)]),
    "cubed_reply_free": (None, [_ptr]),
}

_lib: Optional[ctypes.CDLL] = None
_lib_lock = threading.Lock()


def library_path() -> Optional[str]:
    """Where the native core would be loaded from (see the module's docstring), or None."""
    env = os.environ.get(LIBRARY_ENV, "").strip()
    if env:
        return env
    beside = Path(__file__).resolve().parent / LIBRARY_NAME
    if beside.exists():
        return str(beside)
    return ctypes.util.find_library("cubed_client_c")


def load() -> ctypes.CDLL:
    """The loaded library, its functions typed. FailedPreconditionError naming where it looked
    when it is not found or cannot be loaded, or speaks another ABI version."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if path is None:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION,
                            f"the native client core ({LIBRARY_NAME}) was not found: set "
                            f"${LIBRARY_ENV}, install the package from a built tree "
                            "(client/python/README.md), or install the library")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION,
                            f"the native client core {path} cannot be loaded: {e}") from None
        # The version first: a library of another version may lack functions named below.
        lib.cubed_c_api_version.restype, lib.cubed_c_api_version.argtypes = _i32, []
        version = lib.cubed_c_api_version()
        if version != ABI_VERSION:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION,
                            f"the native client core {path} speaks C ABI version {version}, "
                            f"this SDK version {ABI_VERSION}")
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        _lib = lib
        return lib


class _PreparedLaunch:
    """A cubed_launch* of the library (Note [Prepared C ABI launches] in
    client/c_api/cubed_client_c_launch.cc), freed with this object: an entry of _prepared."""

    __slots__ = ("address", "_lib")

    def __init__(self, lib: ctypes.CDLL, address: int) -> None:
        self._lib = lib
        self.address = address

    def __del__(self) -> None:
        self._lib.cubed_launch_free(self.address)


# (head, tail, mode) of a launch key (_launch.parts) -> its _PreparedLaunch, for every client of
# the process (a prepared launch belongs to no client); bounded like the launch cache. An entry
# dropped while a launch of another thread still uses it stays alive in that launch's frame.
_prepared: Dict[Tuple[bytes, bytes, bytes], _PreparedLaunch] = {}


def _prepare(lib: ctypes.CDLL, head: bytes, tail: bytes, mode: bytes) -> _PreparedLaunch:
    """The prepared launch of an Execute of `head`, bindings `tail` and `mode` (execute_views'
    parts without buffers or scalars), made and cached; the library's error as CubedError."""
    execute = head + b"\x1a" + _wire.varint(len(tail)) + tail + mode
    address, err = _ptr(), _Error()
    code = lib.cubed_launch_prepare(execute, len(execute), ctypes.byref(address),
                                    ctypes.byref(err))
    if code:
        _raise(lib, code, err)
    return cache_put(_prepared, (head, tail, mode), _PreparedLaunch(lib, address.value))


def available() -> bool:
    """Whether the native core loads."""
    try:
        load()
        return True
    except CubedError:
        return False


def _raise(lib: ctypes.CDLL, code: int, err: _Error) -> None:
    """Raises the CubedError of a failed call (``code``, ``err``'s message), freeing it."""
    message = ctypes.string_at(err.message).decode("utf-8", "replace") if err.message else ""
    lib.cubed_error_clear(ctypes.byref(err))
    raise error_from_number(code, message)
