"""Plain data types of the SDK: element types, kernels, launch bindings, memory usage, device
info, and the CubeCL metadata block every builtin launch carries (docs/kernel-abi.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._proto import types_pb2

DTypeLike = Union[np.dtype, type, str]
"""Anything numpy.dtype() accepts: ``np.float32``, ``"f4"``, ``"float32"``..."""

try:  # bfloat16 is not a numpy type: ml_dtypes (a dependency of the package) provides it.
    import ml_dtypes as _ml_dtypes
    BFLOAT16: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - only without the declared dependency
    BFLOAT16 = None
"""numpy's dtype for bf16 (``ml_dtypes.bfloat16``), or None when ml_dtypes is not installed."""

_ELEM: Dict[np.dtype, int] = {
    np.dtype("<f4"): types_pb2.ELEM_TYPE_F32,
    np.dtype("<f8"): types_pb2.ELEM_TYPE_F64,
    np.dtype("<i4"): types_pb2.ELEM_TYPE_I32,
    np.dtype("<u4"): types_pb2.ELEM_TYPE_U32,
    np.dtype("<i8"): types_pb2.ELEM_TYPE_I64,
    np.dtype("<f2"): types_pb2.ELEM_TYPE_F16,
    np.dtype("i1"): types_pb2.ELEM_TYPE_I8,
    np.dtype("u1"): types_pb2.ELEM_TYPE_U8,
    np.dtype("<i2"): types_pb2.ELEM_TYPE_I16,
    np.dtype("<u2"): types_pb2.ELEM_TYPE_U16,
    np.dtype(np.bool_): types_pb2.ELEM_TYPE_BOOL,
}
# Each element type's one dtype object (wire_dtype).
_CANONICAL: Dict[np.dtype, np.dtype] = {dt: dt for dt in _ELEM}
if BFLOAT16 is not None:
    _ELEM[BFLOAT16] = types_pb2.ELEM_TYPE_BF16
_DTYPE: Dict[int, np.dtype] = {v: k for k, v in _ELEM.items()}

_FLOAT_ELEMS = (types_pb2.ELEM_TYPE_F32, types_pb2.ELEM_TYPE_F64, types_pb2.ELEM_TYPE_F16,
                types_pb2.ELEM_TYPE_BF16)
_UINT_ELEMS = (types_pb2.ELEM_TYPE_U32, types_pb2.ELEM_TYPE_U8, types_pb2.ELEM_TYPE_U16,
               types_pb2.ELEM_TYPE_BOOL)

KERNEL_DTYPES: Tuple[np.dtype, ...] = tuple(_ELEM)
"""The element types the builtin kernels compute on (little-endian): f32, f64, i32, u32, i64,
f16, i8, u8, i16, u16, bool (numpy's bool_, one byte) and bf16 (``ml_dtypes.bfloat16``)."""

UNITS_PER_CUBE = 256
"""Units per cube assumed when a cube count is derived from an element count."""
MAX_CUBES_PER_DIM = 65535
"""Largest cube count used per dimension when deriving one (every backend accepts it)."""
MAX_RANK = 8
"""Most dimensions a tensor may have."""


def wire_dtype(dtype: DTypeLike) -> np.dtype:
    """``dtype`` as stored on the daemon: numpy's dtype in little-endian byte order."""
    dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    if dt.byteorder != ">":
        return dt
    # numpy makes a new object for each swapped dtype: the element type's own object instead,
    # one per type, as the launch memo's keys want (Note [Launch memo] in _native.py).
    little = dt.newbyteorder("<")
    return _CANONICAL.get(little, little)


def elem_type(dtype: DTypeLike) -> int:
    """The ElemType enum value of ``dtype``; TypeError for dtypes no kernel supports."""
    dt = wire_dtype(dtype)
    try:
        return _ELEM[dt]
    except KeyError:
        raise TypeError(f"dtype {dt} is not a cubed kernel element type "
                        "(float32, float64, int32, uint32, int64, float16, bfloat16, int8, "
                        "uint8, int16, uint16, bool)") from None


def dtype_of(elem: int) -> np.dtype:
    """The numpy dtype of an ElemType enum value; TypeError for bf16 without ml_dtypes."""
    if elem == types_pb2.ELEM_TYPE_BF16 and BFLOAT16 is None:
        raise TypeError("bf16 needs the ml_dtypes package (pip install ml_dtypes)")
    return _DTYPE[elem]


@dataclass(frozen=True)
class BuiltinKernel:
    """A kernel of the daemon's builtin library (docs/kernel-abi.md lists them).

    Attributes:
        name: kernel name, e.g. ``"add"``, ``"matmul"``, ``"sum"``.
        dtype: element type of the inputs.
        out_dtype: output element type for ``cast`` (ignored otherwise; argmax writes int64).
        axis: the reduced axis for sum, max, min, mean and argmax; the table's axis for gather.
        index_dtype: element type of gather's indices, int32 or int64 (None: int64).
        allow_tf32: matmul of float32 only: it may run on TF32 tensor cores (Client.allow_tf32).
    """

    name: str
    dtype: DTypeLike
    out_dtype: Optional[DTypeLike] = None
    axis: int = 0
    index_dtype: Optional[DTypeLike] = None
    allow_tf32: bool = False

    def to_proto(self) -> types_pb2.Kernel:
        """The wire form (cubed.v1.Kernel)."""
        out = self.out_dtype if self.out_dtype is not None else self.dtype
        builtin = types_pb2.BuiltinKernel(name=self.name, dtype=elem_type(self.dtype),
                                          out_dtype=elem_type(out), axis=self.axis)
        if self.index_dtype is not None:
            builtin.index_dtype = elem_type(self.index_dtype)
        builtin.allow_tf32 = self.allow_tf32
        return types_pb2.Kernel(builtin=builtin)


@dataclass(frozen=True)
class Scalars:
    """Scalars of one element type passed to a kernel, in kernel-parameter order."""

    dtype: DTypeLike
    values: Sequence[Union[int, float]]

    def to_proto(self) -> types_pb2.ScalarGroup:
        """The wire form (cubed.v1.ScalarGroup): floats, ints or uints by the element type."""
        elem = elem_type(self.dtype)
        g = types_pb2.ScalarGroup(elem=elem)
        if elem in _FLOAT_ELEMS:
            g.floats.extend(float(v) for v in self.values)
        elif elem in _UINT_ELEMS:  # bool: 0 or 1.
            g.uints.extend(int(bool(v)) if elem == types_pb2.ELEM_TYPE_BOOL else int(v)
                           for v in self.values)
        else:
            g.ints.extend(int(v) for v in self.values)
        return g


@dataclass
class MemoryUsage:
    """CubeCL's memory usage of one device, exact when it was taken.

    Attributes:
        number_allocs: live allocations.
        bytes_in_use: sum of their requested sizes, bytes.
        bytes_padding: alignment padding attached to them, bytes.
        bytes_reserved: memory held from the device's storage (pool pages), bytes.
    """

    number_allocs: int
    bytes_in_use: int
    bytes_padding: int
    bytes_reserved: int

    @staticmethod
    def from_proto(u: types_pb2.MemoryUsage) -> "MemoryUsage":
        """From the wire form (cubed.v1.MemoryUsage)."""
        return MemoryUsage(u.number_allocs, u.bytes_in_use, u.bytes_padding, u.bytes_reserved)


@dataclass
class Info:
    """Limits and features of the client's device and the daemon (GetInfo).

    Attributes:
        version: the daemon's version.
        devices: how many devices the daemon serves.
        device: this device's index.
        backend: ``"cpu"`` or ``"cuda"``.
        name: human-readable device name.
        memory_total: bytes of device memory (CPU: physical RAM).
        memory_limit: bytes the daemon may reserve on the device (--memory_limit).
        max_allocation: largest single allocation, bytes.
        alignment: allocation alignment, bytes.
        compute_units: CPU cores or CUDA SMs.
        compute_capability: e.g. ``"9.0"`` on CUDA; empty on CPU.
        dtypes: element types the builtin kernels support.
        builtin_kernels: names of the builtin kernels.
        features: e.g. ``"cuda_source"``, ``"ptx"``, ``"profiling"``.
        raw: the full cubed.v1.DeviceInfo message.
        matmul_types: builtin matmul's input and accumulator types, e.g. ``"bf16*bf16+f32"``.
        uuid: CUDA: the GPU's UUID as nvidia-smi prints it (``"GPU-..."``); empty on CPU.
    """

    version: str
    devices: int
    device: int
    backend: str
    name: str
    memory_total: int
    memory_limit: int
    max_allocation: int
    alignment: int
    compute_units: int
    compute_capability: str
    dtypes: List[np.dtype]
    builtin_kernels: List[str]
    features: List[str]
    raw: types_pb2.DeviceInfo = field(repr=False)
    matmul_types: List[str] = field(default_factory=list)
    uuid: str = ""


# Entries one of the SDK's memo caches holds before it is cleared and refills (a model repeats a
# few shapes and layouts; any program stays bounded).
CACHE_LIMIT = 4096


def cache_put(cache: Dict[Any, Any], key: Any, value: Any) -> Any:
    """Stores ``value`` under ``key`` in one of the SDK's memo caches (cleared first once it
    holds CACHE_LIMIT entries) and returns it."""
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def dense_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """Row-major strides, in elements, of a dense tensor of ``shape``."""
    key = tuple(shape)
    strides = _dense_strides_cache.get(key)
    if strides is None:
        out = []
        step = 1
        for extent in reversed(key):
            out.append(step)
            step *= max(int(extent), 1)
        strides = cache_put(_dense_strides_cache, key, tuple(reversed(out)))
    return strides


_dense_strides_cache: Dict[Tuple[int, ...], Tuple[int, ...]] = {}


def encode_metadata(buffer_len: Sequence[int],
                    layouts: Sequence[Tuple[Sequence[int], Sequence[int]]]) -> List[int]:
    """The u32 metadata block for ``len(buffer_len)`` buffers of which the first ``len(layouts)``
    are tensors given as (shape, strides); see docs/kernel-abi.md. ValueError past 32 bits."""
    n, t = len(buffer_len), len(layouts)
    ranks = [len(shape) for shape, _ in layouts]
    static = 2 * n + 3 * t
    logical = [math.prod(shape) for shape, _ in layouts]
    logical += list(buffer_len[t:])
    shape_offsets, stride_offsets = [], []
    at = static
    for r in ranks:
        shape_offsets.append(at)
        at += r
    for r in ranks:
        stride_offsets.append(at)
        at += r
    words = list(buffer_len) + logical + ranks + shape_offsets + stride_offsets
    for shape, _ in layouts:
        words.extend(shape)
    for _, strides in layouts:
        words.extend(strides)
    words = [int(w) for w in words]
    for w in words:
        if not 0 <= w <= 0xFFFFFFFF:
            raise ValueError(f"kernel metadata value {w} does not fit in 32 bits")
    return words


def cube_count_for(elements: int) -> Tuple[int, int, int]:
    """A cube count covering ``elements`` units at UNITS_PER_CUBE per cube, spilling from x into
    y and z (each at most MAX_CUBES_PER_DIM); at least 1 in every dimension."""
    cubes = max(-(-elements // UNITS_PER_CUBE), 1)
    x = min(cubes, MAX_CUBES_PER_DIM)
    cubes = -(-cubes // x)
    y = min(cubes, MAX_CUBES_PER_DIM)
    cubes = -(-cubes // y)
    z = min(cubes, MAX_CUBES_PER_DIM)
    return x, y, z
