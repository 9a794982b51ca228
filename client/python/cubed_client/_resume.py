"""Resuming the session stream on a daemon that restored the session from a checkpoint
(connect(resume_timeout=...); docs/reliability.md, "Checkpoint and restore"): one attempt over
each carrier, and the errors that tell a caller what the restart did to its commands.
StreamTransport (_transport.py) decides when to try and what to do with the answer."""

from __future__ import annotations

import threading
from typing import Any, Iterator, Optional, Sequence, Tuple

import grpc

from ._errors import CubedError, error_for, error_from_rpc
from ._proto import session_pb2
from ._ring import Ring, RingCall, RingClosed

# Note [Resume in Python]
# The Python SDK resumes the way the C++ SDK does (Note [Stream resume] in
# client/stream_transport.h): when the stream ends UNAVAILABLE without the client asking, the
# reader thread opens new streams with `open {resume_session}` every RETRY_S (UNAVAILABLE and
# CANCELLED answers are retried: no daemon yet, or the old one still stopping) until one is
# answered with the session or resume_timeout passes. "Written" is the highest seq a gRPC
# request generator took from the queue, or a sender wrote into the command ring. Then:
# commands awaiting a reply up to written fail UNAVAILABLE, saying whether they ran (seq <=
# opened.resumed_seq) or not; commands queued after written go out on the new stream; commands
# resumed_seq + 1 .. written did not run, and the first sync still queued (else the next one
# sent) fails UNAVAILABLE naming them, so none is lost silently. A refusal (NOT_FOUND: the new
# daemon did not restore the session) or the timeout ends the stream as without resume, the
# error saying the session was lost and why the resume failed (Note [Session lost]).
# Beyond the C++ SDK, the command ring resumes: the old ring's memory was shared with the old
# daemon, so each attempt creates a new ring on the ring socket whose first request is the
# resume. The ring has no queue: a thread that sends while a resume is in progress waits for
# it (at most resume_timeout), then writes on the new ring or raises the stream's end. Over
# gRPC each request generator belongs to one wire generation: the broken stream's returns
# without taking more commands, and an attempt's sends the resume and then parks until the
# attempt is decided. Shared-memory regions are not re-registered (their memory was mapped by
# the old daemon, and a create or read in flight through one cannot be told apart from one
# that ran): connect() turns them off with resume_timeout, as the C++ SDK does. Unary calls
# have nothing to resume: the restored session answers under its id, and a call made while
# the daemon is down raises UnavailableError at once (it is not repeated: whether it ran is
# not known).

RETRY_S = 0.05
"""Pause between resume attempts, seconds (the C++ SDK's 50 ms)."""

RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
"""Answers to an attempt after which the next one may succeed (no daemon yet, or the old one
cancelled the attempt while it stopped)."""


def resume_request(session: int) -> session_pb2.SessionRequest:
    """The first request of a stream that takes ``session`` back."""
    return session_pb2.SessionRequest(
        open=session_pb2.SessionRequest.Open(resume_session=session))


def _opened(first: session_pb2.SessionResponse, session: int,
            cancel: Any) -> session_pb2.SessionResponse.Opened:
    if not first.HasField("opened") or first.opened.session != session:
        cancel()
        raise error_for(grpc.StatusCode.INTERNAL,
                        "SessionStream: the resume was answered without the session")
    return first.opened


def open_grpc(channel: grpc.Channel, requests: Iterator[bytes], metadata: Sequence[Tuple[str, str]],
              timeout: float, session: int) -> Tuple[Any, session_pb2.SessionResponse.Opened]:
    """A gRPC session stream on ``channel`` whose requests are ``requests`` (serialized, the
    first one resume_request(session)), and its `opened`; the rest of the stream's responses
    are read by iterating the returned call. CubedError when the daemon refused or did not
    answer within ``timeout`` (CANCELLED)."""
    start = channel.stream_stream("/cubed.v1.SessionStream/Session",
                                  request_serializer=lambda b: b,
                                  response_deserializer=session_pb2.SessionResponse.FromString)
    call = start(requests, metadata=list(metadata))
    timer = threading.Timer(timeout, call.cancel)
    timer.daemon = True
    timer.start()
    try:
        first = next(call)
    except grpc.RpcError as e:
        raise error_from_rpc(e, "SessionStream (resume)") from None
    except StopIteration:
        raise error_for(grpc.StatusCode.UNAVAILABLE,
                        "SessionStream: the daemon ended the stream at the resume") from None
    finally:
        timer.cancel()
    return call, _opened(first, session, call.cancel)


def open_ring(socket_path: str, timeout: float,
              session: int) -> Tuple[RingCall, session_pb2.SessionResponse.Opened]:
    """A new command ring at ``socket_path`` whose stream resumes ``session``, and its
    `opened`. CubedError when there is no ring socket (UNAVAILABLE), or the daemon refused."""
    try:
        ring = Ring(socket_path, timeout=timeout)
    except OSError as e:
        raise error_for(grpc.StatusCode.UNAVAILABLE, f"ring socket {socket_path}: {e}") from None
    call: Optional[RingCall] = None
    try:
        call = RingCall(ring, resume_request(session))
        return call, _opened(call.first_response(timeout), session, call.cancel)
    except RingClosed:
        ring.close()
        raise error_for(grpc.StatusCode.UNAVAILABLE,
                        "SessionStream: the daemon closed the command ring at the resume") from None
    except BaseException:
        ring.close()
        raise


def lost_commands(first: int, last: int, session: int) -> CubedError:
    """What the first sync after a resume reports for commands ``first`` .. ``last``."""
    return error_for(grpc.StatusCode.UNAVAILABLE,
                     f"commands {first} .. {last} of session {session} did not run: the daemon "
                     "restarted before them (checkpoint and restore); the handles they would "
                     "have made do not exist")


def cut_reply(seq: int, resumed_seq: int) -> CubedError:
    """The error of command ``seq`` whose reply the restart cut off."""
    if seq <= resumed_seq:
        return error_for(grpc.StatusCode.UNAVAILABLE,
                         f"command {seq} ran, but the daemon restarted before its reply")
    return error_for(grpc.StatusCode.UNAVAILABLE,
                     f"command {seq} did not run: the daemon restarted before it")
