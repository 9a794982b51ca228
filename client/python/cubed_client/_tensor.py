"""Tensor: a handle to daemon memory plus its layout (shape, strides in elements, dtype, offset).
Views (transpose, slicing, broadcasting) share the handle; the daemon memory is released when the
last Tensor over it is garbage-collected, or at once by close()."""

from __future__ import annotations

import math
import weakref
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from . import _import, _interop, _wire
from ._types import BFLOAT16, dense_strides

if TYPE_CHECKING:
    from ._client import Client

Index = Union[int, slice, type(Ellipsis), None, Tuple[Any, ...]]


class _Handle:
    """One daemon allocation owned by this process: its id and size in bytes. Released (once)
    when this object is collected or closed: ``release(id)`` runs from __del__ (a weakref
    finalizer costs a registry entry per tensor), on whatever thread dropped the last
    reference, so it must only record the id."""

    __slots__ = ("id", "nbytes", "_release", "export", "keep", "__weakref__")

    def __init__(self, id: int, nbytes: int, release: Optional[Callable[[int], None]],
                 keep: Any = None) -> None:
        self.id = id
        self.nbytes = nbytes
        self._release = release
        # The page opened in this process for DLPack / __cuda_array_interface__ (_interop.Mapping,
        # Note [Tensor export]), closed with the handle, before its release.
        self.export: Any = None
        # An imported handle's producer (_import.Imported, Note [Tensor import]); else None.
        self.keep = keep

    def close(self) -> bool:
        """Detaches the GC release; True when this call took it over (release now)."""
        if self.export is not None:
            raise BufferError("the tensor is shared with another library (DLPack or "
                              "__cuda_array_interface__): drop every reference to it instead of "
                              "closing it, so that no importer is left with freed memory")
        release, self._release = self._release, None
        return release is not None

    def __del__(self) -> None:
        export, self.export = self.export, None
        if export is not None:
            try:
                export.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown: the mapping dies with it.
                pass
        release, self._release = self._release, None
        if release is not None:
            try:
                release(self.id)
            except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to release to.
                pass


# Tensor._launch_view's layouts, each the one object of its value (Note [Launch memo]).
_LAYOUTS: dict = {}
_MAX_LAYOUTS = 4096


class Tensor:
    """A tensor on the daemon (CubeCL's handle with its layout). Created by Client.create,
    Client.empty and every kernel wrapper; never constructed directly.

    Arithmetic operators run builtin kernels through the owning client (``a + b``, ``a @ b``,
    ``-a``...); they are pipelined like every other command, so their errors surface at the next
    read or sync. ``np.asarray(t)`` reads it.

    ``<``, ``<=``, ``>`` and ``>=`` compare elementwise into a bool tensor, but ``==`` and ``!=``
    are identity, as for any Python object (so tensors stay hashable and ``t in a_list`` makes
    no kernel call): compare elements with ``t.eq(x)`` / ``t.ne(x)`` or ``client.eq(a, b)``.
    """

    __array_priority__ = 1000  # So ndarray + Tensor defers to Tensor.__radd__.
    # (layout, encoded binding) once a launch used this view (_launch_view).
    _wire: Optional[Tuple[Tuple[Any, ...], bytes]] = None
    # (layout, encoded handle id) once a graph bound this view (_graph_view).
    _graph_wire: Optional[Tuple[Tuple[Any, ...], bytes]] = None
    # Client.read's plan for this view once it read it (Note [Small reads] in _client.py):
    # (handle id, offset_start, offset_end) of a contiguous view below the client's staging
    # threshold, or False for a view that takes the general path.
    _small_read: Any = None

    def __init__(self, client: "Client", handle: _Handle, shape: Sequence[int],
                 strides: Sequence[int], dtype: np.dtype, offset: int = 0) -> None:
        self._set(client, handle, tuple(map(int, shape)), tuple(map(int, strides)),
                  dtype if isinstance(dtype, np.dtype) else np.dtype(dtype), int(offset))

    def _set(self, client: "Client", handle: _Handle, shape: Tuple[int, ...],
             strides: Tuple[int, ...], dtype: np.dtype, offset: int) -> None:
        self._client, self._handle, self._shape = client, handle, shape
        self._strides, self._dtype, self._offset = strides, dtype, offset

    @classmethod
    def _make(cls, client: "Client", handle: _Handle, shape: Tuple[int, ...],
              strides: Tuple[int, ...], dtype: np.dtype, offset: int) -> "Tensor":
        """__init__ without its conversions: ``shape`` and ``strides`` are tuples of ints,
        ``dtype`` a numpy dtype, ``offset`` an int (the SDK's own layouts)."""
        t = cls.__new__(cls)
        t._set(client, handle, shape, strides, dtype, offset)
        return t

    def _launch_view(self) -> Tuple[Tuple[Any, ...], bytes]:
        """This view's part of a launch: its layout in the launch key (shape, strides, itemsize,
        offset, allocation bytes) and its Bindings.buffers entry on the wire (Note [Hand-encoded
        commands]). Computed once: a tensor's layout never changes."""
        w = self._wire
        if w is None:
            itemsize = self._dtype.itemsize
            layout = (self._shape, self._strides, itemsize, self._offset, self._handle.nbytes)
            # Note [Launch memo] in _native.py: equal layouts are one object, whose address
            # the memo's keys hold. Bounded: a layout dropped here only costs a miss.
            if len(_LAYOUTS) >= _MAX_LAYOUTS:
                _LAYOUTS.clear()
            w = self._wire = (_LAYOUTS.setdefault(layout, layout),
                              _wire.binding(self._handle.id, self._offset * itemsize))
        return w

    def _graph_view(self) -> Tuple[Tuple[Any, ...], bytes]:
        """This view as a recorded graph's parameter or a replay's binding (Note [Graph replays]
        in _graph.py): its layout (dtype, shape, strides, offset, allocation bytes), which a
        binding must match exactly, and its handle id as a varint. Computed once."""
        g = self._graph_wire
        if g is None:
            g = self._graph_wire = ((self._dtype, self._shape, self._strides, self._offset,
                                     self._handle.nbytes), _wire.varint(self._handle.id))
        return g

    # --- layout ---------------------------------------------------------------------------------

    @property
    def client(self) -> "Client":
        """The client (session) the tensor belongs to."""
        return self._client

    @property
    def id(self) -> int:
        """The daemon's handle id (valid in this client's session only)."""
        return self._handle.id

    @property
    def shape(self) -> Tuple[int, ...]:
        """Extent of each dimension, outermost first."""
        return self._shape

    @property
    def strides(self) -> Tuple[int, ...]:
        """Step of each dimension in ELEMENTS (numpy's ndarray.strides are bytes)."""
        return self._strides

    @property
    def dtype(self) -> np.dtype:
        """Element type (little-endian on the wire)."""
        return self._dtype

    @property
    def offset(self) -> int:
        """Elements from the start of the allocation to element [0, ..., 0]."""
        return self._offset

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements (product of the shape)."""
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (size * itemsize)."""
        return self.size * self._dtype.itemsize

    @property
    def allocation_bytes(self) -> int:
        """Bytes of the daemon allocation behind the tensor (shared by its views)."""
        return self._handle.nbytes

    @property
    def is_contiguous(self) -> bool:
        """True when the elements are dense in row-major order (size-1 dims ignored)."""
        return all(s == d for s, d, n in zip(self._strides, dense_strides(self._shape),
                                             self._shape) if n != 1)

    def __repr__(self) -> str:
        return (f"Tensor(id={self.id}, shape={self._shape}, dtype={self._dtype}, "
                f"strides={self._strides}, offset={self._offset})")

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def _view(self, shape: Sequence[int], strides: Sequence[int], offset: int) -> "Tensor":
        return Tensor._make(self._client, self._handle, tuple(map(int, shape)),
                            tuple(map(int, strides)), self._dtype, int(offset))

    # --- views ----------------------------------------------------------------------------------

    def transpose(self, *axes: int) -> "Tensor":
        """A view with the dimensions permuted (reversed when no axes are given); no copy."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(reversed(range(self.ndim)))
        axes = tuple(a % self.ndim if self.ndim else a for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} are not a permutation of {self.ndim} dimensions")
        return self._view([self._shape[a] for a in axes], [self._strides[a] for a in axes],
                          self._offset)

    @property
    def T(self) -> "Tensor":  # noqa: N802 - numpy's name
        """The transposed view (dimensions reversed)."""
        return self.transpose()

    def swapaxes(self, a: int, b: int) -> "Tensor":
        """A view with dimensions ``a`` and ``b`` exchanged."""
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return self.transpose(*axes)

    def reshape(self, *shape: int) -> "Tensor":
        """A view with another shape of the same size, as numpy's: no copy where the new shape
        can step through the same elements (a contiguous tensor; splitting or merging dims whose
        strides chain, as in a column slice split into heads); otherwise it is first copied
        densely (the ``copy`` kernel). One dimension may be -1."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if shape.count(-1) == 1:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.size // known if s == -1 and known else s for s in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape a tensor of shape {self._shape} into {shape}")
        strides = _reshaped_strides(self._shape, self._strides, shape)
        if strides is not None:
            return self._view(shape, strides, self._offset)
        source = self._client.copy(self)
        return source._view(shape, dense_strides(shape), source._offset)

    def broadcast_to(self, shape: Sequence[int]) -> "Tensor":
        """A read-only view broadcast to ``shape`` (numpy rules; stride 0 on repeated dims)."""
        shape = tuple(int(s) for s in shape)
        if len(shape) < self.ndim:
            raise ValueError(f"cannot broadcast shape {self._shape} to {shape}")
        pad = len(shape) - self.ndim
        strides = [0] * pad
        for i, (n, s) in enumerate(zip(self._shape, self._strides)):
            target = shape[pad + i]
            if n == target:
                strides.append(s if n != 1 else 0)
            elif n == 1:
                strides.append(0)
            else:
                raise ValueError(f"cannot broadcast shape {self._shape} to {shape}")
        return self._view(shape, strides, self._offset)

    def __getitem__(self, index: Index) -> "Tensor":
        """Basic indexing as numpy's: ints, slices with a positive step, ``...`` and ``None``;
        returns a view (no copy). A negative step is refused: daemon strides are unsigned."""
        if not isinstance(index, tuple):
            index = (index,)
        if sum(1 for i in index if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
        if consumed > self.ndim:
            raise IndexError(f"too many indices for a tensor of {self.ndim} dimensions")
        expanded = []
        for i in index:
            if i is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - consumed))
            else:
                expanded.append(i)
        expanded.extend([slice(None)] * (self.ndim - sum(1 for i in expanded if i is not None)))
        shape, strides, offset, dim = [], [], self._offset, 0
        for i in expanded:
            if i is None:
                shape.append(1)
                strides.append(0)
                continue
            n, s = self._shape[dim], self._strides[dim]
            if isinstance(i, slice):
                start, stop, step = i.indices(n)
                if step <= 0:
                    raise IndexError("negative slice steps are not supported (strides are "
                                     "unsigned on the daemon)")
                length = max(0, -(-(stop - start) // step))
                if length:
                    offset += start * s
                shape.append(length)
                strides.append(s * step)
            else:
                k = int(i)
                if not -n <= k < n:
                    raise IndexError(f"index {k} is out of bounds for axis {dim} with size {n}")
                offset += (k % n) * s
            dim += 1
        return self._view(shape, strides, offset)

    # --- reading --------------------------------------------------------------------------------

    def read(self) -> np.ndarray:
        """The elements as a new ndarray (after all earlier work of the session)."""
        return self._client.read(self)

    def read_async(self) -> "Future[np.ndarray]":
        """Like read(), as a concurrent.futures.Future."""
        return self._client.read_async(self)

    numpy = read

    def __array__(self, dtype: Optional[np.dtype] = None, copy: Optional[bool] = None
                  ) -> np.ndarray:
        a = self.read()
        return a if dtype is None else a.astype(dtype)

    def close(self) -> None:
        """Releases the daemon memory (for this tensor and every view of it): at once over unary
        calls and the gRPC stream; over the command ring with this client's next command (or
        its flush(), Note [Held commands]). Later use of any of them fails with NotFoundError.
        Idempotent. BufferError for a tensor shared through DLPack or
        ``__cuda_array_interface__`` (its memory lives while any reference does)."""
        if self._handle.close():
            self._client._release_now(self._handle.id, self._handle.keep)

    # --- sharing with PyTorch, CuPy, JAX (Note [Tensor export] in _interop.py) -------------------

    def __dlpack_device__(self) -> Tuple[int, int]:
        """DLPack's (device type, device id): (kDLCUDA, this process's ordinal of the daemon's
        GPU) on the CUDA backend, (kDLCPU, 0) on the CPU backend."""
        return self._client._export_device()

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Optional[bool] = None) -> Any:
        """A DLPack capsule over this tensor's daemon memory, no copy (``torch.from_dlpack(t)``,
        ``cupy.from_dlpack(t)``, ``jax.dlpack.from_dlpack(t)``): CUDA backend, same host. Waits
        for the session's earlier commands, so the data is ready on any consumer stream. The
        consumer shares the memory (writes show on both sides) and keeps it alive. ``copy=True``
        exports a fresh copy. CPU backend (``np.from_dlpack(t)``): a view of the shared-memory
        region an imported tensor lives in (Client.from_dlpack), else a copy read now
        (BufferError with ``copy=False``). BufferError for another ``dl_device`` or when the
        driver refuses IPC."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export to device {tuple(dl_device)}: the tensor is on "
                              f"{self.__dlpack_device__()}")
        if self.__dlpack_device__()[0] == _interop.DL_CPU:
            return _import.host_capsule(self._client, self._client._own(self, "export"), copy,
                                        max_version)
        source = self._client.copy(self) if copy else self
        pointer = self._client._export_pointer(source)
        return _interop.capsule(source, pointer, self.__dlpack_device__())

    @property
    def __cuda_array_interface__(self) -> dict:
        """Numba's CUDA array interface (version 3: CuPy, Numba, JAX, PyTorch read it), over this
        tensor's daemon memory after the session's earlier commands; AttributeError on the CPU
        backend and for bfloat16 (no typestr). The consumer must keep this tensor referenced
        (CuPy and Numba do)."""
        if BFLOAT16 is not None and self._dtype == BFLOAT16:
            raise AttributeError("__cuda_array_interface__ has no bfloat16 type: use DLPack")
        try:
            pointer = self._client._export_pointer(self)
        except BufferError as e:
            raise AttributeError(str(e)) from None
        itemsize = self._dtype.itemsize
        strides = (None if self.is_contiguous
                   else tuple(s * itemsize for s in self._strides))
        return {"shape": self._shape, "typestr": self._dtype.str, "data": (pointer, False),
                "strides": strides, "version": 3, "stream": None}

    # --- kernels as methods / operators ---------------------------------------------------------

    def astype(self, dtype: Any) -> "Tensor":
        """A converted copy (the ``cast`` kernel)."""
        return self._client.cast(self, dtype)

    def copy(self) -> "Tensor":
        """A dense copy (the ``copy`` kernel)."""
        return self._client.copy(self)

    def to(self, target: "Client", out: Optional["Tensor"] = None) -> "Tensor":
        """A copy on ``target``'s session, usually on another device of the same daemon
        (``client.copy_to_device(self, target, out)``)."""
        return self._client.copy_to_device(self, target, out)

    def sum(self, axis: Any = None, keepdims: bool = False) -> "Tensor":
        """Client.sum(self, ...)."""
        return self._client.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> "Tensor":
        """Client.mean(self, ...)."""
        return self._client.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> "Tensor":
        """Client.max(self, ...)."""
        return self._client.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> "Tensor":
        """Client.min(self, ...)."""
        return self._client.min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis: Optional[int] = None, keepdims: bool = False) -> "Tensor":
        """Client.argmax(self, ...)."""
        return self._client.argmax(self, axis=axis, keepdims=keepdims)

    def __add__(self, other: Any) -> "Tensor":
        return self._client.add(self, other)

    def __radd__(self, other: Any) -> "Tensor":
        return self._client.add(other, self)

    def __sub__(self, other: Any) -> "Tensor":
        return self._client.sub(self, other)

    def __rsub__(self, other: Any) -> "Tensor":
        return self._client.sub(other, self)

    def __mul__(self, other: Any) -> "Tensor":
        return self._client.mul(self, other)

    def __rmul__(self, other: Any) -> "Tensor":
        return self._client.mul(other, self)

    def __truediv__(self, other: Any) -> "Tensor":
        return self._client.div(self, other)

    def __rtruediv__(self, other: Any) -> "Tensor":
        return self._client.div(other, self)

    def __pow__(self, other: Any) -> "Tensor":
        return self._client.pow(self, other)

    def __matmul__(self, other: Any) -> "Tensor":
        return self._client.matmul(self, other)

    def __rmatmul__(self, other: Any) -> "Tensor":
        return self._client.matmul(other, self)

    def eq(self, other: Any) -> "Tensor":
        """self == other elementwise, as a bool tensor (Client.eq; ``==`` itself is identity)."""
        return self._client.eq(self, other)

    def ne(self, other: Any) -> "Tensor":
        """self != other elementwise, as a bool tensor (Client.ne; ``!=`` itself is identity)."""
        return self._client.ne(self, other)

    def __lt__(self, other: Any) -> "Tensor":
        return self._client.lt(self, other)

    def __le__(self, other: Any) -> "Tensor":
        return self._client.le(self, other)

    def __gt__(self, other: Any) -> "Tensor":
        return self._client.gt(self, other)

    def __ge__(self, other: Any) -> "Tensor":
        return self._client.ge(self, other)

    def __neg__(self) -> "Tensor":
        return self._client.neg(self)

    def __abs__(self) -> "Tensor":
        return self._client.abs(self)


def _reshaped_strides(shape: Tuple[int, ...], strides: Tuple[int, ...],
                      new_shape: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    """Strides that view the elements of (shape, strides) in row-major order as ``new_shape``
    (same size), or None when no strides can (numpy's no-copy reshape rule): each group of old
    dims merged into new ones must chain, stride[i] == shape[i + 1] * stride[i + 1]. Dims of
    size 1 have no stride that matters; they get the stride after them."""
    if math.prod(shape) == 0:
        return dense_strides(new_shape)
    old = [(n, st) for n, st in zip(shape, strides) if n != 1]
    out = [0] * len(new_shape)
    oi = ni = 0
    while oi < len(old) and ni < len(new_shape):
        oj, nj = oi + 1, ni + 1
        op, np_ = old[oi][0], new_shape[ni]
        while op != np_:  # The smallest groups of old and new dims of equal size.
            if np_ < op:
                np_ *= new_shape[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new_shape[k]
        oi, ni = oj, nj
    last = out[ni - 1] if ni > 0 else 1
    for k in range(ni, len(new_shape)):  # Trailing dims of size 1.
        out[k] = last
    return tuple(out)
