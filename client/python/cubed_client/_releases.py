"""Releases of collected tensors: queued by the garbage collector on any thread, sent by
Client._live with the client's next command, in batches."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Deque, List

if TYPE_CHECKING:
    from ._client import Client

# Collected tensors whose releases are sent together (Client._live).
RELEASE_BATCH = 32
# Note [Large releases]: a collected tensor of this many bytes or more is released with the next
# command instead of waiting for a batch. Batching saves a command per small tensor in a chain of
# small operations; for a large one the daemon would hold dead memory (32 of 512 MiB would be 16
# GiB) and a loop like ``y = x.cast(...)`` would allocate new pages while its last round's outputs
# waited to be freed (GPU run 92: the first samples of each new output size in
# kernels_vs_torch.py's casts ran 20-40% slow on the daemon's new pages).
LARGE_RELEASE = 1 << 20


def collected(client_ref: "weakref.ReferenceType[Client]", handle_id: int,
              now: bool = False) -> None:
    """A collected tensor's release, queued on its client (a no-op once the client is gone or
    closed); ``now`` (a large tensor, Note [Large releases]) makes the next command send the
    queue. Runs from the garbage collector on any thread: an append (atomic) and a flag's store."""
    client = client_ref()
    if client is not None and not client._closed:
        client._gc_releases.append(handle_id)
        if now:
            client._gc_release_now = True


def take_all(queue: Deque[Any]) -> List[Any]:
    """Everything in `queue`, taken out oldest first, while other threads may still append."""
    taken = []
    while queue:
        try:
            taken.append(queue.popleft())
        except IndexError:
            break
    return taken
