"""Client: a connection to a cubed daemon and one session on it (docs/api.md). Mirrors CubeCL's
ComputeServer trait (create, empty, read, execute, sync, memory usage, profiling) and adds numpy
conveniences: a wrapper per builtin kernel, computing output shapes the numpy way."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import math
import threading
import weakref
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Deque, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from ._errors import (CubedError, InvalidArgumentError, UnimplementedError, error_for,
                      error_from_number, error_from_rpc)
from ._graph import Graph
from . import _devices
from . import _import, _interop, _launch, _releases
from ._proto import compute_pb2, compute_pb2_grpc, types_pb2
from ._address import region_socket_path
from ._kernels import KernelMethods
from ._region import Staging
from ._tensor import Tensor, _Handle
from ._trace import Trace
from ._types import (BuiltinKernel, DTypeLike, Info, MemoryUsage, Scalars,
                     cube_count_for, dense_strides, dtype_of, encode_metadata, wire_dtype)
try:  # The compiled extension (Note [Compiled launch] in _native.py); None without it.
    from . import _speedups
except ImportError:
    _speedups = None

_MAX_BYTES = (1 << 63) - 1
# read_async of this many bytes or more on the native core lands straight in the new array
# (the C++ SDK's bulk_threshold: such reads are downloaded in bulk lanes).
_LARGE_READ = 4 << 20


@dataclass(frozen=True)
class Binding:
    """A byte view of a tensor's allocation (CubeCL's Binding): ``offset_start`` bytes skipped at
    the front, ``offset_end`` bytes cut from the back. Used by read_raw and execute."""

    tensor: Tensor
    offset_start: int = 0
    offset_end: int = 0


class Profile:
    """The result of a ``with client.profile() as p:`` block; filled in when the block ends."""

    duration_ns: Optional[int] = None
    """Device time of the work inside the block, nanoseconds (None until the block ended)."""

    @property
    def duration(self) -> Optional[float]:
        """Device time of the work inside the block, seconds (None until the block ended)."""
        return None if self.duration_ns is None else self.duration_ns / 1e9

    def __repr__(self) -> str:
        return f"Profile(duration_ns={self.duration_ns})"


def _close_transport(transport: Any, channel: grpc.Channel, timeout: float) -> None:
    try:
        transport.close(timeout)
    finally:
        channel.close()


class Client(KernelMethods):
    """A session on a cubed daemon; create one with connect(). A context manager: leaving the
    ``with`` block closes it. Thread-safe; commands from one thread run in the order sent.

    On the stream transport (the default), allocations, executes and releases return at once and
    their errors surface at the next read or sync touching what they wrote (the daemon poisons
    those handles); on the unary transport every call raises its own error.
    """

    def __init__(self, channel: grpc.Channel, transport: Any, metadata: List[Tuple[str, str]],
                 timeout: float, device: int, target: str, region_threshold: int = 0) -> None:
        """Internal: use connect()."""
        self._channel = channel
        self._transport = transport
        self._metadata = metadata
        self._timeout = timeout
        self._device = device
        self._target = target
        self._closed = False
        # Handles shared with other libraries (Note [Tensor export]), and whether close() waits
        # for them; the backend and GPU UUID of this client's device, asked on first export.
        # (A count, not a WeakSet: a handle's __del__ closes its export before weak references
        # to it are cleared.)
        self._exports = 0
        self._exports_lock = threading.Lock()
        self._close_deferred = False
        self._export_gpu: Optional[Tuple[str, str]] = None
        self.allow_tf32 = False
        """Whether float32 matmuls may run on TF32 tensor cores (PyTorch's
        ``torch.backends.cuda.matmul.allow_tf32``; matmul(allow_tf32=...) overrides it per call).
        A permission: where ``info().matmul_types`` lists no ``"tf32*tf32+f32"`` (the CPU
        backend) the product stays exact."""
        self._gc_releases: Deque[int] = collections.deque()
        # Set when a large tensor's release is queued: the next command sends the queue (Note
        # [Large releases]).
        self._gc_release_now = False
        # Producers of imported handles already released here, kept until the daemon answered a
        # command sent after their releases (Note [Tensor import] in _import.py).
        self._import_graveyard: Deque[Any] = collections.deque()
        self._self_ref = weakref.ref(self)
        # What a collected tensor's handle calls with its id (Client._live sends the releases).
        self._release_collected = functools.partial(_releases.collected, self._self_ref)
        self._release_collected_now = functools.partial(_releases.collected, self._self_ref,
                                                        now=True)
        self._finalizer = weakref.finalize(self, _close_transport, transport, channel, timeout)
        # Recorded graphs (_graph.py): ids from 1 up, the graph recording now (one at a time,
        # set under _graph_lock), and the ids of collected graphs that _live releases.
        self._graph_ids = itertools.count(1)
        self._graph_lock = threading.Lock()
        self._recording: Optional[Graph] = None
        self._gc_graph_releases: Deque[int] = collections.deque()
        # The staging region of create() and read() (None until first needed); its lock is held
        # from staging bytes until they were used.
        self._staging = Staging(region_socket_path(target) if transport.kind == "stream" else None,
                                transport.session, transport, region_threshold)

    # --- session --------------------------------------------------------------------------------

    @property
    def session(self) -> int:
        """The session id (unary calls and cubectl may name it)."""
        return self._transport.session

    @property
    def device(self) -> int:
        """The index of the device this client's session lives on (``connect(device=...)``);
        every tensor of the client is on it."""
        return self._device

    @property
    def transport(self) -> str:
        """``"stream"`` or ``"unary"``: how this client talks to the daemon."""
        return self._transport.kind

    @property
    def carrier(self) -> str:
        """``"ring"`` or ``"grpc"``: what carries the stream (``"grpc"`` for unary calls)."""
        return getattr(self._transport, "carrier", "grpc")

    @property
    def lease(self) -> float:
        """The lease the daemon granted, seconds (0 for a joined session)."""
        return self._transport.lease_ms / 1000.0

    @property
    def address(self) -> str:
        """The gRPC target this client is connected to."""
        return self._target

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    def close(self) -> None:
        """Closes the session: the daemon releases every handle it holds (all tensors of this
        client become unusable) and runs what was already sent first. Idempotent. While tensors
        shared through DLPack or ``__cuda_array_interface__`` live, the client refuses new calls
        at once but the session (and their memory) stays until the last of them is collected
        (Note [Tensor export])."""
        if self._closed:
            return
        with self._exports_lock:
            self._closed = True
            self._close_deferred = self._exports > 0
        if not self._close_deferred:
            self._finish_close()

    def _finish_close(self) -> None:
        self._finalizer()  # The session's end unmaps the daemon's side of the staging region.
        self._staging.close()
        self._import_graveyard.clear()  # The session's end closed the daemon's imports.

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"session={self.session}"
        return f"Client({self._target!r}, {self.transport}, {state})"

    # --- plumbing -------------------------------------------------------------------------------

    def _live(self, flush_releases: bool = False) -> Any:
        """The transport. Releases of collected tensors go out with it once RELEASE_BATCH are
        queued, when one of them is large (Note [Large releases]), or now when
        ``flush_releases`` (before anything that answers: reads, sync, memory usage, profiles),
        so that a chain of operations does not send one release per step and an answer never
        reports memory that was already let go."""
        if self._closed:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION, "the client is closed")
        if self._gc_releases and (flush_releases or self._gc_release_now
                                  or len(self._gc_releases) >= _releases.RELEASE_BATCH):
            self._gc_release_now = False  # Before draining: a release queued meanwhile sets it.
            ids = _releases.take_all(self._gc_releases)
            if ids:
                try:
                    self._transport.release(ids)
                except CubedError:
                    pass  # Unary: a handle whose session expired; nothing left to free.
        if self._gc_graph_releases:  # Graphs keep memory: released with the next command.
            for graph in _releases.take_all(self._gc_graph_releases):
                self._transport.release_graph(graph)
        return self._transport

    def _wait(self, future: "Future[Any]") -> Any:
        try:
            return self._transport.wait(future, self._timeout)
        except FutureTimeout:
            raise error_for(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"no answer within {self._timeout} s (connect(timeout=...))") from None

    def _release_now(self, handle_id: int, keep: Any = None) -> None:
        if not self._closed:
            self._live().release([handle_id])
            if keep is not None:  # An import's producer waits for the daemon (Note [Tensor import]).
                self._import_graveyard.append(keep)

    def _answered(self, future: "Future[Any]", buried: int) -> Any:
        """_wait for an answer to a command sent after the releases of the first ``buried``
        producers of the import graveyard, which the daemon has then processed: they go."""
        result = self._wait(future)
        for _ in range(buried):
            try:
                self._import_graveyard.popleft()
            except IndexError:
                break
        return result

    def _handle(self, handle_id: int, nbytes: int) -> _Handle:
        return _Handle(handle_id, nbytes, self._release_collected_now
                       if nbytes >= _releases.LARGE_RELEASE else self._release_collected)

    def _own(self, t: Tensor, what: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
        if t.client is not self:
            raise ValueError(f"{what}: the tensor belongs to another client (session)")
        return t

    def _alloc(self, shape: Sequence[int], dtype: DTypeLike) -> Tensor:
        dt = dtype if isinstance(dtype, np.dtype) and dtype.byteorder != ">" else wire_dtype(dtype)
        if type(shape) is not tuple:  # The SDK's own shapes are tuples of ints already.
            shape = tuple(map(int, shape))
        if shape and min(shape) < 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"shape {shape} has a negative extent")
        nbytes = dt.itemsize * math.prod(shape)
        if nbytes > _MAX_BYTES:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"shape {shape}: the product of the shape times the "
                                       "element size overflows 63 bits")
        size = nbytes or 1
        handle_id = self._live().empty(size)
        return Tensor._make(self, self._handle(handle_id, size), shape, dense_strides(shape), dt,
                            0)

    # --- trait: create / empty / read -----------------------------------------------------------

    def create(self, array: Union[np.ndarray, Sequence[Any], bytes, int, float]) -> Tensor:
        """Stores an array on the daemon (trait: create) and returns its Tensor, keeping shape,
        dtype and layout: C-ordered arrays keep row-major strides, Fortran-ordered ones their
        column-major strides; any other layout (a strided view) is stored densely packed.
        ``bytes`` are stored as a uint8 vector. Returns at once on the stream."""
        if isinstance(array, Tensor):
            raise TypeError("create: already a Tensor (use .copy() for a copy on the daemon)")
        if isinstance(array, (bytes, bytearray, memoryview)):
            array = np.frombuffer(bytes(array), dtype=np.uint8)
        a = np.asarray(array)
        if a.dtype.hasobject:
            raise TypeError(f"create: cannot store an array of dtype {a.dtype}")
        dt = wire_dtype(a.dtype)
        if a.ndim >= 2 and a.flags.f_contiguous and not a.flags.c_contiguous:
            stored = np.ascontiguousarray(a.T, dtype=dt)  # Same memory order as `a`.
            strides = tuple(reversed(dense_strides(tuple(reversed(a.shape)))))
        else:
            stored = np.ascontiguousarray(a, dtype=dt)
            strides = dense_strides(a.shape)
        transport = self._live()
        region = self._staging.acquire(stored.nbytes) if self._staging.wanted(stored.nbytes) else None
        if region is not None:
            try:
                n = stored.nbytes
                np.frombuffer(region.mmap, np.uint8, n)[:] = stored.reshape(-1).view(np.uint8)
                handle_id = transport.create_from_region(region.id, 0, n)
                # The create has run once a later answer came: the staging bytes are free again
                # (memory_usage answers in order without touching sync's failures).
                self._wait(transport.memory_usage(self._device))
            finally:
                self._staging.release()
            return Tensor(self, self._handle(handle_id, n), a.shape, strides, dt)
        if stored.nbytes and getattr(transport, "creates_arrays", False):
            # The native core reads the array where it is (no bytes object in between).
            handle_id = transport.create(stored)
            return Tensor(self, self._handle(handle_id, stored.nbytes), a.shape, strides, dt)
        data = stored.tobytes() if stored.nbytes else b"\0"
        handle_id = transport.create(data)
        return Tensor(self, self._handle(handle_id, len(data)), a.shape, strides, dt)

    def empty(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32) -> Tensor:
        """Reserves an uninitialized dense tensor (trait: empty)."""
        return self._alloc((int(shape),) if isinstance(shape, (int, np.integer))
                           else tuple(map(int, shape)), dtype)

    def empty_bytes(self, size: int) -> Tensor:
        """Reserves ``size`` uninitialized bytes, as a uint8 vector (trait: empty, exactly)."""
        handle_id = self._live().empty(int(size))
        return Tensor(self, self._handle(handle_id, int(size)), (int(size),), (1,), np.uint8)

    def adopt(self, handle_id: int, nbytes: int, shape: Optional[Sequence[int]] = None,
              dtype: DTypeLike = np.uint8) -> Tensor:
        """Wraps handle ``handle_id`` of this session (e.g. one created by another client of a
        joined session) in a Tensor of ``shape`` (default: ``nbytes`` uint8 elements) whose
        collection releases one reference. Makes no call; an unknown id fails at use."""
        dt = wire_dtype(dtype)
        shape = (nbytes // dt.itemsize,) if shape is None else tuple(shape)
        return Tensor(self, self._handle(int(handle_id), int(nbytes)), shape,
                      dense_strides(shape), dt)

    def read_async(self, tensor: Tensor) -> "Future[np.ndarray]":
        """Starts reading ``tensor`` (trait: read / read_tensor) after all earlier work of the
        session; the Future resolves to a new ndarray of its shape and dtype, or raises the
        CubedError that read (or the command that poisoned the tensor) failed with."""
        t = self._own(tensor, "read")
        transport = self._live(flush_releases=True)
        if t.size == 0:
            done: Future = Future()
            done.set_result(np.empty(t.shape, t.dtype))
            return done
        start = t.offset * t.dtype.itemsize
        if self._staging.wanted(t.nbytes):
            staged = self._staging.read(transport, t, start)
            if staged is not None:
                return staged
        into_async = getattr(transport, "read_into_async", None)
        if t.is_contiguous and into_async is not None and t.nbytes >= _LARGE_READ:
            # The native core downloads a large read straight into the new array.
            return into_async(self._read_range(t, start), np.empty(t.shape, t.dtype))
        if t.is_contiguous:
            raw = transport.read([self._binding(self._read_range(t, start))])
        else:
            raw = transport.read_tensor([types_pb2.BindingWithMeta(
                binding=types_pb2.Binding(handle=t.id, offset_start=start), shape=t.shape,
                strides=t.strides, elem_size=t.dtype.itemsize)])
        out: Future = Future()
        dtype, shape = t.dtype, t.shape  # Not the tensor: see Staging.read.

        def convert(f: Future) -> None:
            try:
                data = f.result()[0]
                out.set_result(np.frombuffer(data, dtype=dtype).reshape(shape).copy())
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                out.set_exception(e)

        raw.add_done_callback(convert)
        return out

    def copy_to_device(self, tensor: Tensor, target: "Client",
                       out: Optional[Tensor] = None) -> Tensor:
        """Copies ``tensor`` of this client into ``target``'s session, a client of the same
        daemon, usually on another device (``connect(address, device=1)``; the same device
        works too): into a new tensor of the same shape, dtype and strides, or over ``out``
        (a contiguous tensor of ``target`` with as many bytes). The daemon copies the bytes
        (docs/api.md, "Several devices"); nothing goes through this process. Ordered as the
        clients' commands are: every command either client sent before runs before the copy,
        every command sent after it runs after. Both sessions must belong to the caller's
        principal. Blocks until the daemon answered; raises its error (NotFoundError for an
        unknown or foreign session or handle, ResourceExhaustedError over the target's memory
        limit, UnavailableError for a lost device), after which nothing was allocated."""
        return _devices.copy_to_device(self, tensor, target, out)

    @staticmethod
    def _read_range(t: Tensor, start: int) -> Tuple[int, int, int]:
        """(handle, offset_start, offset_end) of contiguous ``t``, ``start`` bytes into its
        allocation."""
        end = t.allocation_bytes - start - t.nbytes
        if end < 0:
            raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"read: {t} extends past its {t.allocation_bytes}-byte "
                                       "allocation")
        return (t.id, start, end)

    @staticmethod
    def _binding(read_range: Tuple[int, int, int]) -> types_pb2.Binding:
        handle, start, end = read_range
        return types_pb2.Binding(handle=handle, offset_start=start, offset_end=end)

    # Note [Small reads]
    # A small read's cost is mostly fixed: on the native core one library call that sends the
    # read, polls for its answer and copies the bytes into the array (cubed_client_read_into),
    # and around it the Python that finds what to read. That Python is done once per view: its
    # layout never changes, so whether it is contiguous, below the staging threshold, and which
    # handle and offsets it reads are kept on the Tensor (_small_read) at its first read. On the
    # 2-core VM the Python around the call went from ~5 us to ~2 us (CPU backend).
    def _small_read_plan(self, t: Tensor) -> Any:
        """``t._small_read`` (Note [Small reads]), computed at the first read of ``t``."""
        plan = t._small_read
        if plan is None:
            if t.size and t.is_contiguous and not self._staging.wanted(t.nbytes):
                plan = self._read_range(t, t.offset * t.dtype.itemsize)
            else:
                plan = False
            t._small_read = plan
        return plan

    def read(self, tensor: Tensor) -> np.ndarray:
        """Reads ``tensor`` into a new ndarray (blocks up to the client's timeout)."""
        t = tensor if type(tensor) is Tensor and tensor._client is self else \
            self._own(tensor, "read")
        plan = self._small_read_plan(t)
        if plan:
            # A small read: read_async's path without its second Future and callback.
            transport = self._live(flush_releases=True)
            read_into = getattr(transport, "read_into", None)
            if read_into is not None:  # The native core: one call, the waiter polls.
                out = np.empty(t._shape, t._dtype)
                try:
                    read_into(plan, out, self._timeout)
                except FutureTimeout:
                    raise error_for(grpc.StatusCode.DEADLINE_EXCEEDED,
                                    f"no answer within {self._timeout} s "
                                    "(connect(timeout=...))") from None
                return out
            raw = transport.read([self._binding(plan)])
            data = self._wait(raw)[0]
            return np.frombuffer(data, dtype=t.dtype).reshape(t.shape).copy()
        return self._wait(self.read_async(tensor))

    async def aread(self, tensor: Tensor) -> np.ndarray:
        """``await client.aread(t)``: read_async for asyncio code."""
        return await asyncio.wrap_future(self.read_async(tensor))

    def read_many(self, tensors: Sequence[Tensor]) -> List[np.ndarray]:
        """Reads several tensors; the reads are pipelined."""
        futures = [self.read_async(t) for t in tensors]
        return [self._wait(f) for f in futures]

    def read_raw(self, bindings: Sequence[Union[Binding, Tensor]]) -> List[bytes]:
        """The bytes of each binding, exactly as the trait's read: no layout applied."""
        proto = []
        for b in bindings:
            if isinstance(b, Tensor):
                b = Binding(b)
            self._own(b.tensor, "read_raw")
            proto.append(types_pb2.Binding(handle=b.tensor.id, offset_start=b.offset_start,
                                           offset_end=b.offset_end))
        return self._wait(self._live(flush_releases=True).read(proto))

    # --- trait: execute -------------------------------------------------------------------------

    def _buffer(self, b: Union[Binding, Tensor], what: str) -> Tuple[types_pb2.Binding, Tensor, int]:
        if isinstance(b, Binding):
            t, start, end = b.tensor, b.offset_start, b.offset_end
        else:
            t, start, end = b, b.offset * b.dtype.itemsize, 0
        self._own(t, what)
        length = (t.allocation_bytes - start - end) // t.dtype.itemsize
        return types_pb2.Binding(handle=t.id, offset_start=start, offset_end=end), t, max(length, 0)

    def execute(self, kernel: Union[BuiltinKernel, types_pb2.Kernel],
                count: Union[None, int, Tuple[int, int, int], Binding, Tensor] = None,
                bindings: Sequence[Union[Tensor, Binding]] = (), *,
                metadata: Optional[Sequence[int]] = None, scalars: Sequence[Scalars] = (),
                mode: str = "checked") -> None:
        """Runs a kernel (trait: execute).

        Args:
            kernel: a BuiltinKernel, or a cubed.v1.Kernel message (cuda_source / ptx kernels).
            count: cube count: None (derived from the last buffer's element count, 256 units per
                cube), an int (x), an (x, y, z) tuple, or a Binding/Tensor holding three u32 read
                when the kernel runs (dynamic count).
            bindings: buffers in kernel-parameter order, inputs first, then outputs. A Tensor
                binds its view (its offset); a Binding binds raw bytes.
            metadata: the u32 metadata block; None builds it from the tensors' layouts (every
                buffer a tensor, as builtin kernels expect; docs/kernel-abi.md).
            scalars: one Scalars per element type.
            mode: ``"checked"`` or ``"unchecked"`` (needs a daemon with --allow_unchecked).

        Returns once the launch is queued. Errors: raised here on the unary transport; on the
        stream they poison the outputs and surface at the next sync or read of them.
        """
        proto_kernel = kernel.to_proto() if isinstance(kernel, BuiltinKernel) else kernel
        buffers, layouts, lengths = [], [], []
        for i, b in enumerate(bindings):
            pb, t, n = self._buffer(b, f"execute: bindings[{i}]")
            buffers.append(pb)
            layouts.append((t.shape, t.strides))
            lengths.append(n)
        if metadata is None:
            try:
                metadata = encode_metadata(lengths, layouts)
            except ValueError as e:
                raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        if count is None:
            size = math.prod(layouts[-1][0]) if layouts else 1
            count = cube_count_for(size)
        if isinstance(count, (Binding, Tensor)):
            pb, _, _ = self._buffer(count, "execute: count")
            proto_count = types_pb2.CubeCount(dynamic=pb)
        else:
            x, y, z = (count, 1, 1) if isinstance(count, int) else count
            proto_count = types_pb2.CubeCount(
                static_count=types_pb2.CubeCount.Static(x=x, y=y, z=z))
        if mode not in ("checked", "unchecked"):
            raise ValueError(f"mode must be 'checked' or 'unchecked', got {mode!r}")
        proto_mode = (types_pb2.EXECUTION_MODE_UNCHECKED if mode == "unchecked"
                      else types_pb2.EXECUTION_MODE_CHECKED)
        proto_bindings = types_pb2.Bindings(buffers=buffers, metadata=metadata,
                                            scalars=[s.to_proto() for s in scalars])
        self._live().execute(proto_kernel, proto_count, proto_bindings, proto_mode)

    def _launch(self, name: str, inputs: Sequence[Tensor], out: Tensor, *,
                dtype: Optional[np.dtype] = None, axis: int = 0,
                scalars: Sequence[Scalars] = (), index_dtype: Optional[np.dtype] = None,
                allow_tf32: bool = False) -> Tensor:
        """Runs builtin ``name`` on tensors of this client (the wrappers' own execute, Note
        [Launch fast path] in _launch.py); returns ``out``."""
        missed = None
        try:
            transport = self._live()
            memo = transport.launch_memo
            if memo is not None:  # Note [Launch memo] in _native.py.
                sent = _speedups.memo_launch(memo, transport._target, transport._send_launch,
                                             name, dtype, axis, index_dtype, allow_tf32, inputs,
                                             out, scalars)
                if sent is None:
                    transport._next_seq += 1
                    return out
                if sent.__class__ is tuple:
                    raise error_from_number(*sent)
                if sent:  # A miss, [key, keep]: the dtype and views its key was made of.
                    missed = sent
            if missed is not None:
                keep = missed[1]
                dt, views = keep[3], list(keep[4:5 + len(inputs)])
            else:
                dt = dtype if dtype is not None else (inputs[0]._dtype if inputs else out._dtype)
                views = [t._wire or t._launch_view() for t in (*inputs, out)]
            key = (name, dt, out._dtype, axis, index_dtype, allow_tf32,
                   tuple([v[0] for v in views]))
            head, tail = _launch.parts(key)
            transport.execute_views(head, views, tail, _launch.CHECKED,
                                    _launch.scalar_field(scalars) if scalars else b"")
        except BaseException:
            out.close()  # Unary: the launch failed; its output must not outlive the error.
            raise
        if missed is not None:  # Sent: what the memo remembers is no longer the launch's fate.
            transport.remember_launch(missed[0], missed[1], head, tail, _launch.CHECKED, scalars)
        return out

    # --- recorded graphs (_graph.py) ------------------------------------------------------------

    def record(self, *parameters: Tensor) -> Graph:
        """A Graph that records, inside its ``with`` block, the launches of this session (kernel
        wrappers and execute) instead of running them, for ``graph.replay(...)`` to run them
        later with one command each time. ``parameters``: tensors of this client, on distinct
        allocations, whose places each replay fills with other tensors of the same layout; every
        other tensor a launch uses is captured as it is (the graph keeps its memory). Nothing
        recorded runs until the first replay. See Graph.

        Raises UnimplementedError on the unary transport (graphs need the session stream),
        InvalidArgumentError for two parameters on one allocation."""
        if self._transport.kind != "stream":
            raise UnimplementedError(
                grpc.StatusCode.UNIMPLEMENTED,
                "record: recorded graphs need the session stream, and this client uses unary "
                "calls (connect with transport='stream' or 'auto'; a joined session is unary)")
        if self._closed:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION, "the client is closed")
        first = {}
        for i, t in enumerate(parameters):
            self._own(t, f"record: parameters[{i}]")
            j = first.setdefault(t.id, i)
            if j != i:
                raise InvalidArgumentError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"record: parameters[{j}] and parameters[{i}] are on one allocation (handle "
                    f"{t.id}); a graph's parameters must be distinct handles")
        return Graph(self, next(self._graph_ids), tuple(parameters))

    # --- trait: sync, flush, memory, profile, info ----------------------------------------------

    def sync(self) -> None:
        """Waits until every earlier command of the session has finished (trait: sync). On the
        stream, raises the first error of the commands since the previous sync (its
        ``failed_commands`` says how many failed) and forgets them."""
        buried = len(self._import_graveyard)
        self._answered(self._live(flush_releases=True).sync(), buried)

    def flush(self) -> None:
        """Pushes queued work to the device (trait: flush); also keeps an idle session's lease."""
        self._live(flush_releases=True).flush()

    def memory_usage(self) -> MemoryUsage:
        """The device's memory usage now (trait: memory_usage; all sessions together)."""
        buried = len(self._import_graveyard)
        return MemoryUsage.from_proto(self._answered(
            self._live(flush_releases=True).memory_usage(self._device), buried))

    def memory_cleanup(self) -> MemoryUsage:
        """Returns free pool pages to the device (trait: memory_cleanup); the usage after it."""
        return MemoryUsage.from_proto(self._wait(self._live(flush_releases=True).memory_cleanup(self._device)))

    def start_profile(self) -> None:
        """Starts measuring the device time of the work that follows (trait: start_profile)."""
        self._live().start_profile()

    def end_profile(self) -> float:
        """Ends the measurement; the device time since start_profile, seconds (trait:
        end_profile). FailedPreconditionError when no profile was started."""
        return self._wait(self._live(flush_releases=True).end_profile()) / 1e9

    @contextlib.contextmanager
    def profile(self) -> Iterator[Profile]:
        """``with client.profile() as p: ...`` then ``p.duration`` (seconds) is the device time
        of the work sent inside the block."""
        p = Profile()
        self.start_profile()
        try:
            yield p
        except BaseException:
            with contextlib.suppress(CubedError):
                self._wait(self._live(flush_releases=True).end_profile())
            raise
        p.duration_ns = int(self._wait(self._live(flush_releases=True).end_profile()))

    @contextlib.contextmanager
    def trace(self, max_events: int = 100_000) -> Iterator[Trace]:
        """``with client.trace() as t: ...`` then ``t.events`` are the commands the daemon ran
        for this session inside the block (up to ``max_events``, at most 1,000,000; the rest
        counted in ``t.dropped``), ``t.duration_ns`` their device time, and ``t.save(path)``
        writes Chrome trace-event JSON for Perfetto or chrome://tracing. A traced profile: it
        cannot nest in profile(). The block's first and last step wait for the session's
        earlier commands, so the trace holds exactly the block's."""
        if not 0 < max_events <= 1_000_000:
            raise ValueError(f"trace: max_events must be in 1 .. 1000000, got {max_events}")
        stub = compute_pb2_grpc.ComputeStub(self._channel)

        def call(method: str, request: Any) -> Any:
            try:
                return getattr(stub, method)(request, timeout=self._timeout,
                                             metadata=self._metadata)
            except grpc.RpcError as e:
                raise error_from_rpc(e, method) from None

        t = Trace(session=self.session)
        self.sync()
        call("StartProfile", compute_pb2.StartProfileRequest(session=self.session,
                                                             trace_events=max_events))
        try:
            yield t
            self.sync()
        except BaseException:
            with contextlib.suppress(CubedError):
                call("EndProfile", compute_pb2.EndProfileRequest(session=self.session))
            raise
        t._fill(call("EndProfile", compute_pb2.EndProfileRequest(session=self.session)))

    def info(self) -> Info:
        """Limits and features of this client's device, and the daemon's version."""
        stub = compute_pb2_grpc.ComputeStub(self._channel)
        try:
            r = stub.GetInfo(compute_pb2.GetInfoRequest(device=self._device),
                             timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_from_rpc(e, "GetInfo") from None
        d = r.info
        backend = {types_pb2.DeviceInfo.BACKEND_CPU: "cpu",
                   types_pb2.DeviceInfo.BACKEND_CUDA: "cuda"}.get(d.backend, "unspecified")
        return Info(version=r.version, devices=r.devices, device=d.device, backend=backend,
                    name=d.name, memory_total=d.memory_total, memory_limit=d.memory_limit,
                    max_allocation=d.max_allocation, alignment=d.alignment,
                    compute_units=d.compute_units, compute_capability=d.compute_capability,
                    dtypes=[dtype_of(e) for e in d.elem_types if e],
                    builtin_kernels=list(d.builtin_kernels), features=list(d.features), raw=d,
                    matmul_types=list(d.matmul_types), uuid=d.uuid)

    # --- sharing with other libraries (Note [Tensor export] in _interop.py) ---------------------

    def from_dlpack(self, x: Any) -> Tensor:
        """A Tensor over another library's tensor ``x`` (PyTorch, CuPy, JAX, numpy: anything with
        ``__dlpack__``, or on CUDA ``__cuda_array_interface__``), with its shape, strides and
        dtype (Note [Tensor import] in _import.py; docs/api.md, "Importing tensors").

        CUDA backend: no copy. The daemon maps ``x``'s own device memory (CUDA IPC), so writes
        on either side show on the other; the import first waits for the work queued on ``x``'s
        GPU in this process, later writes are ordered as for exports. The tensor keeps ``x``
        alive; ``x`` must be on the daemon's GPU, in memory CUDA IPC can share (not PyTorch's
        expandable segments). CPU backend: ``x`` is copied once into a shared-memory region
        that the tensor then lives in, so ``np.from_dlpack(tensor)`` views it without a copy
        (over unary calls, a plain create()). The memory is not counted in memory_usage().

        BufferError when ``x`` cannot be imported (another GPU, IPC refused, CUDA memory into a
        CPU daemon, negative strides), TypeError for an object or dtype cubed cannot take, the
        daemon's refusals as CubedError; nothing is left behind on error."""
        if isinstance(x, Tensor):
            return self._own(x, "from_dlpack")
        if self._closed:
            raise error_for(grpc.StatusCode.FAILED_PRECONDITION, "the client is closed")
        if self._export_device()[0] == _interop.DL_CUDA:
            return _import.import_cuda(self, x, self._export_gpu[1])  # type: ignore[index]
        return _import.import_host(self, x, region_socket_path(self._target)
                                   if self._transport.kind == "stream" else None)

    def _imported(self, handle_id: int, nbytes: int, keep: Any, shape: Sequence[int],
                  strides: Sequence[int], dtype: np.dtype) -> Tensor:
        """The Tensor over a new imported handle, which holds ``keep`` (Note [Tensor import])."""
        release = functools.partial(_import.release_import, self._self_ref, keep)
        return Tensor(self, _Handle(handle_id, nbytes, release, keep), shape, strides, dtype)

    def _rpc(self, method: str, request: Any) -> Any:
        """One Compute RPC of this client's session, with its deadline and metadata."""
        stub = compute_pb2_grpc.ComputeStub(self._channel)
        try:
            return getattr(stub, method)(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_from_rpc(e, method) from None

    def _export_device(self) -> Tuple[int, int]:
        """DLPack's device of this client's tensors (the backend and GPU asked once)."""
        if self._export_gpu is None:
            info = self.info()
            self._export_gpu = (info.backend, info.uuid)
        backend, uuid = self._export_gpu
        if backend != "cuda":
            return (_interop.DL_CPU, 0)
        return (_interop.DL_CUDA, _interop.local_ordinal(uuid))

    def _export_pointer(self, t: Tensor) -> int:
        """The address, in this process, of ``t``'s element [0, ..., 0]: its handle's page
        opened through CUDA IPC (once per handle), after the session's earlier commands.
        BufferError when the tensor cannot be shared (CPU backend, IPC refused, another host)."""
        self._own(t, "export")
        if self._export_device()[0] != _interop.DL_CUDA:
            raise BufferError("cannot share a tensor of the CPU backend without a copy (its memory "
                              "is in the daemon's process): read() it into numpy instead")
        self.sync()
        handle = t._handle
        if handle.keep is not None:  # Imported: the producer's own memory in this process.
            return handle.keep.pointer + t.offset * t.dtype.itemsize
        if handle.export is None:
            if handle.nbytes == 0:
                return 0
            stub = compute_pb2_grpc.ComputeStub(self._channel)
            try:
                r = stub.GetResource(compute_pb2.GetResourceRequest(
                    session=self.session, binding=types_pb2.Binding(handle=handle.id)),
                    timeout=self._timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                raise error_from_rpc(e, "GetResource") from None
            if not r.ipc_handle:
                raise BufferError("the daemon gave no CUDA IPC handle for the tensor's memory")
            mapping = _interop.Mapping(self._export_gpu[1], r.ipc_handle, r.offset,
                                       _interop.release_hook(self._self_ref))
            with self._exports_lock:
                self._exports += 1
            handle.export = mapping
        return handle.export.pointer + t.offset * t.dtype.itemsize

    def _export_closed(self) -> None:
        """An exported handle was collected (any thread): finish a deferred close once none is
        left."""
        with self._exports_lock:
            self._exports -= 1
            finish = self._close_deferred and self._exports == 0
            if finish:
                self._close_deferred = False
        if finish:
            self._finish_close()
