"""Copies between devices (issue 17): a tensor of one client's session copied into another
client's session on another device of the same daemon (or the same device), by the daemon
(``CopyToDevice``; Note [Copies between devices] in server/channel/device.h).

Ordering. The daemon runs the copy after every task already queued on the source's device and
queues it before anything the target's device is given after its answer. The SDK makes the
client's own order match: it waits until the daemon has taken every command the source client
sent before (and, for a copy into ``out``, every command the target client sent before), sends
the copy, and returns once the daemon answered, so commands sent afterwards on either client
run after the copy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import grpc

from ._errors import InvalidArgumentError, error_for, error_from_rpc
from ._proto import compute_pb2, compute_pb2_grpc, types_pb2
from ._tensor import Tensor

if TYPE_CHECKING:
    from ._client import Client


def _taken(client: "Client") -> None:
    """Returns once the daemon has run every command ``client`` sent so far (an answer on its
    stream comes after all of them; unary calls have run already)."""
    client._wait(client._live(flush_releases=True).memory_usage(client.device))


def copy_to_device(source: "Client", tensor: Tensor, target: "Client",
                   out: Optional[Tensor] = None) -> Tensor:
    """``source.copy_to_device``: see its docstring."""
    t = source._own(tensor, "copy_to_device")
    if not hasattr(target, "_own") or not hasattr(target, "session"):
        raise TypeError(f"copy_to_device: target must be a Client, got {type(target).__name__}")
    if target.closed:
        raise error_for(grpc.StatusCode.FAILED_PRECONDITION,
                        "copy_to_device: the target client is closed")
    if out is not None:
        target._own(out, "copy_to_device: out")
        if out.nbytes != t.nbytes or not out.is_contiguous:
            raise InvalidArgumentError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"copy_to_device: out {out} must be contiguous and hold {t.nbytes} bytes, as "
                f"{t} does")
    if t.size == 0:
        return out if out is not None else target.empty(t.shape, t.dtype)
    if not t.is_contiguous:
        t = t.copy()  # A dense copy on the source's device first: the daemon copies bytes.
    itemsize = t.dtype.itemsize
    start = t.offset * itemsize
    request = compute_pb2.CopyToDeviceRequest(
        session=source.session,
        source=types_pb2.Binding(handle=t.id, offset_start=start,
                                 offset_end=t.allocation_bytes - start - t.nbytes),
        target_session=target.session)
    if out is not None:
        request.target_handle = out.id
        request.target_offset = out.offset * itemsize
        _taken(target)
    _taken(source)
    try:
        reply = compute_pb2_grpc.ComputeStub(source._channel).CopyToDevice(
            request, timeout=source._timeout, metadata=source._metadata)
    except grpc.RpcError as e:
        raise error_from_rpc(e, "CopyToDevice") from None
    if out is not None:
        return out
    return Tensor(target, target._handle(reply.handle, reply.size), t.shape, t.strides, t.dtype)
