"""Exceptions: every failure of a cubed call is a CubedError carrying the gRPC code and the
daemon's message (docs/error-model.md). One subclass per code, so callers may catch either."""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class CubedError(Exception):
    """A failed cubed call.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode``), e.g. ``grpc.StatusCode.NOT_FOUND``.
        message: the daemon's message naming what was wrong (or the SDK's, for a request the SDK
            refused before sending it).
        failed_commands: for a failed ``sync`` on the session stream, how many commands failed
            since the previous sync (``message`` describes the first); 0 otherwise.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, code: grpc.StatusCode, message: str, failed_commands: int = 0) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.failed_commands = failed_commands


class InvalidArgumentError(CubedError, ValueError):
    """INVALID_ARGUMENT: the request is malformed (a field out of bounds, sizes that disagree)."""


class NotFoundError(CubedError, LookupError):
    """NOT_FOUND: an unknown session, handle or kernel name."""


class FailedPreconditionError(CubedError):
    """FAILED_PRECONDITION: valid, but not now (e.g. ending a profile that was not started)."""


class ResourceExhaustedError(CubedError, MemoryError):
    """RESOURCE_EXHAUSTED: over a limit (the daemon's --memory_limit, a message size)."""


class PermissionDeniedError(CubedError, PermissionError):
    """PERMISSION_DENIED: refused by the daemon's configuration."""


class UnauthenticatedError(CubedError, PermissionError):
    """UNAUTHENTICATED: missing or wrong credentials (token or client certificate)."""


class UnimplementedError(CubedError, NotImplementedError):
    """UNIMPLEMENTED: the daemon's backend lacks the feature."""


class UnavailableError(CubedError, ConnectionError):
    """UNAVAILABLE: the daemon cannot be reached, is shutting down, or lost its device."""


class DeadlineExceededError(CubedError, TimeoutError):
    """DEADLINE_EXCEEDED: no answer within the client's timeout."""


class InternalError(CubedError):
    """INTERNAL: a bug in cubed (report it with the daemon's log)."""


_BY_CODE: Dict[grpc.StatusCode, Type[CubedError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INTERNAL: InternalError,
}
_BY_NUMBER: Dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def error_for(code: grpc.StatusCode, message: str, failed_commands: int = 0) -> CubedError:
    """The CubedError subclass for ``code``, carrying ``message``."""
    cls = _BY_CODE.get(code, CubedError)
    return cls(code, message, failed_commands)


def error_from_number(number: int, message: str, failed_commands: int = 0) -> CubedError:
    """Like error_for, from a google.rpc.Code number (as the session stream's replies carry)."""
    return error_for(_BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN), message, failed_commands)


def error_from_rpc(e: grpc.RpcError, what: Optional[str] = None) -> CubedError:
    """Converts a grpc.RpcError (a failed call) into a CubedError."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    message = details or code.name
    if what and code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        message = f"{what}: {message}"
    return error_for(code, message)
