"""Graph: a sequence of kernel launches recorded once on the daemon and replayed with one command
(Client.record; session.proto, "Graphs"; Note [Recorded graphs] in server/channel/graph.h)."""

# Note [Graph replays]:
# A replay is the hot path (a 1000-kernel graph, or a small one called per token). It checks each
# binding against its parameter's recorded layout and writes the command by hand
# (_wire.replay_graph: the graph id encoded once at recording, then one varint per handle id),
# both from Tensor._graph_view, computed once per tensor: its layout (dtype, shape, strides,
# offset, allocation bytes) and its handle id's varint (which costs more than the rest of a
# replay's check). So a replay builds no message object and encodes no number. Nothing answers a
# replay: its failure poisons what the graph writes and surfaces at the next sync or read, like a
# launch's.

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import grpc

from . import _wire
from ._errors import CubedError, FailedPreconditionError, InvalidArgumentError
from ._tensor import Tensor

if TYPE_CHECKING:
    from ._client import Client

# A Graph's life: created by Client.record, recording inside its with block, ready to replay
# once the daemon answered end_graph, closed once released (or when its recording failed).
_NEW, _RECORDING, _READY, _CLOSED = "new", "recording", "ready", "closed"

# A parameter's recorded layout: (dtype, shape, strides, offset, allocation bytes), as
# Tensor._graph_view gives it.
Layout = Tuple[Any, ...]


class Graph:
    """Kernel launches recorded on the daemon, replayed with one command (``client.record``).

    ::

        with client.record(x, y) as g:   # x, y become the graph's parameters
            z = x * 2 + y                 # recorded, not run; z is allocated now
        g.steps                           # the launches recorded
        g.replay(x2, y2)                  # runs them with x2, y2 in place of x, y
        z.read()                          # what the last replay wrote

    Inside the ``with`` block the daemon records every execute of the session (kernel wrappers
    and ``client.execute``, from any thread) instead of running it; allocations, creates, reads
    and releases run as usual. So, as in CUDA or PyTorch graph capture, nothing recorded runs
    until the first replay: tensors allocated inside the block (``z``, intermediates) are the
    graph's static outputs and scratch, written again by each replay, and reading them inside
    the block gives their uninitialized bytes. The graph keeps the memory of every tensor it
    uses that is not a parameter, also after that tensor is collected or closed, until the graph
    is released. Parameters are bound by handle: a replay puts another tensor's allocation where
    the parameter's was, so each replacement must have the parameter's exact layout.

    Thread-safety: replay and close may be called from any thread; one recording at a time per
    client. Needs the session stream (UnimplementedError from ``record`` on unary calls).
    """

    def __init__(self, client: "Client", graph_id: int, parameters: Tuple[Tensor, ...]) -> None:
        """Internal: use Client.record."""
        self._client = client
        self._id = graph_id
        self._head = _wire.replay_graph_head(graph_id)
        # Held until the recording ended, so that no parameter is released while it records.
        self._parameters: Tuple[Tensor, ...] = parameters
        self._layouts: List[Layout] = [t._graph_view()[0] for t in parameters]
        self._state = _NEW
        self._steps: Optional[int] = None

    @property
    def id(self) -> int:
        """The graph's id in its session (chosen by the client)."""
        return self._id

    @property
    def steps(self) -> Optional[int]:
        """The launches the graph holds, as the daemon counted them at the end of the recording
        (None until then)."""
        return self._steps

    @property
    def closed(self) -> bool:
        """True once the graph was released (close(), a failed recording, or its client
        closed)."""
        return self._state is _CLOSED or self._client.closed

    def __repr__(self) -> str:
        return (f"Graph(id={self._id}, parameters={len(self._layouts)}, steps={self._steps}, "
                f"{'closed' if self.closed else self._state})")

    # --- recording ------------------------------------------------------------------------------

    def __enter__(self) -> "Graph":
        """Starts recording. FailedPreconditionError when this graph was recorded already or
        another graph of the client is recording (recordings do not nest)."""
        client = self._client
        with client._graph_lock:
            if self._state is not _NEW:
                raise FailedPreconditionError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"graph {self._id} was recorded already; record another with "
                    "client.record()")
            if client._recording is not None:
                raise FailedPreconditionError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"record: graph {client._recording.id} is recording; recordings do not nest")
            client._live().begin_graph(self._id, [t.id for t in self._parameters])
            client._recording = self
            self._state = _RECORDING
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Ends the recording and waits for the daemon's answer. Raises the recording's first
        failure (a launch that failed its checks, e.g. on a poisoned or unknown tensor, which
        also poisons its outputs and counts for the next sync like any failed launch; a bad
        parameter; a limit): then no graph exists. When the block raised, the graph is released
        and the block's exception goes on."""
        client = self._client
        try:
            with client._graph_lock:
                try:
                    answer = client._live().end_graph()
                finally:
                    client._recording = None
                    self._parameters = ()
            steps = client._wait(answer)
        except CubedError:
            self._state = _CLOSED  # No graph exists (after a timeout: none this client uses).
            if exc_type is None:
                raise
            return False
        self._steps = steps
        self._state = _READY
        if exc_type is not None:
            try:
                self.close()
            except CubedError:
                pass  # The stream ended: the session and the graph are gone.
        return False

    # --- replaying ------------------------------------------------------------------------------

    def replay(self, *bindings: Tensor) -> None:
        """Runs the recorded launches once, in order, after every earlier command of the session
        and before every later one, with ``bindings[i]`` in place of parameter i (give none for
        a graph without parameters; one tensor may fill several places). Returns once the
        command is queued (Note [Graph replays]).

        Each binding must be a tensor of this client with exactly its parameter's dtype, shape,
        strides and offset, on an allocation of the same byte size: otherwise
        InvalidArgumentError (a ValueError) naming the argument and what differs, before
        anything is sent. FailedPreconditionError for a graph not recorded yet, released, or
        while any recording of the client runs. A failure on the daemon (a binding released or
        poisoned meanwhile) poisons the tensors the graph writes and surfaces at the next sync
        or read, like a launch's."""
        client = self._client
        layouts = self._layouts
        if self._state is not _READY or len(bindings) != len(layouts) or (
                client._recording is not None):
            self._refuse(len(bindings))
        handles = []
        for t, layout in zip(bindings, layouts):
            try:
                view = t._graph_wire or t._graph_view()
                bound = t._client is client and view[0] == layout
            except AttributeError:  # Not a Tensor.
                bound = False
            if not bound:
                self._refuse_binding(len(handles), t)
            handles.append(view[1])
        client._live().replay_graph(_wire.replay_graph(self._head, handles))

    def _refuse(self, given: int) -> None:
        """Raises why replay() cannot send (the slow path of its first check)."""
        recording = self._client._recording
        if self._state is _NEW or self._state is _RECORDING:
            why = "has not been recorded yet: replay it after its with block"
        elif self._state is _CLOSED:
            why = "is released"
        elif recording is not None:
            why = (f"cannot be replayed while graph {recording.id} records (leave that with "
                   "block first)")
        else:
            raise InvalidArgumentError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"replay of graph {self._id}: {given} tensors given, the graph has "
                f"{len(self._layouts)} parameters")
        raise FailedPreconditionError(grpc.StatusCode.FAILED_PRECONDITION,
                                      f"graph {self._id} {why}")

    def _refuse_binding(self, i: int, t: Any) -> None:
        """Raises why ``t`` cannot be argument i of a replay: not a tensor of this client
        (TypeError, ValueError), or another layout than parameter i's (InvalidArgumentError)."""
        self._client._own(t, f"replay of graph {self._id}: argument {i}")
        dtype, shape, strides, offset, nbytes = self._layouts[i]
        differs = []
        if t.dtype != dtype:
            differs.append(f"dtype {t.dtype}, not {dtype}")
        if t.shape != shape:
            differs.append(f"shape {t.shape}, not {shape}")
        if t.strides != strides:
            differs.append(f"strides {t.strides}, not {strides}")
        if t.offset != offset:
            differs.append(f"offset {t.offset}, not {offset}")
        if t.allocation_bytes != nbytes:
            differs.append(f"an allocation of {t.allocation_bytes} bytes, not {nbytes}")
        raise InvalidArgumentError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"replay of graph {self._id}: argument {i} has "
            f"{'; '.join(differs) or 'another layout'} (as parameter "
            f"{i} was recorded)")

    # --- releasing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Releases the graph on the daemon, and with it the memory it alone kept (tensors it
        used that were collected or closed since). Idempotent; also done when the graph is
        garbage-collected (with the client's next command) and when the client closes.
        FailedPreconditionError while it records."""
        with self._client._graph_lock:  # One release, also when threads close at once.
            if self._state is _RECORDING:
                raise FailedPreconditionError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"graph {self._id} is recording; it can be closed after its with block")
            was_ready, self._state = self._state is _READY, _CLOSED
        if was_ready and not self._client.closed:
            self._client._live().release_graph(self._id)

    def __del__(self) -> None:
        # Runs from the garbage collector on any thread: only records the id (Client._live
        # sends the release), as a tensor's handle does.
        if self.__dict__.get("_state") is _READY:
            self._state = _CLOSED
            try:
                client = self._client
                if not client._closed:
                    client._gc_graph_releases.append(self._id)
            except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to release to.
                pass
