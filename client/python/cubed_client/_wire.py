"""The protobuf wire bytes of the stream's hottest commands, built without message objects.

Note [Hand-encoded commands] below says why.
"""

from __future__ import annotations

from typing import Iterable, List

# Note [Hand-encoded commands]
# A builtin launch over the command ring used to build a Command message (kernel, cube count,
# bindings, mode), wrap it in a SessionRequest and serialize both: in CPython that is most of a
# launch's cost, though almost all of it repeats from launch to launch. Protobuf's wire format is
# a concatenation of fields (tag, length, bytes), in any order, so the repeating parts are
# serialized once by the protobuf library (the kernel, the cube count, the metadata block: cached
# per layout in _client.py) and only what changes is written here: the bindings' handles and
# offsets, the command's seq, the lengths around them. Only three encodings are hand-written
# (varint, a length-delimited field, a Binding); tests/test_wire.py parses every form back with
# the library and compares it with the message the library builds itself. A graph's replay
# (_graph.py) is encoded the same way: its graph id once, then its bindings' handle ids.
#
# The gRPC carrier sends the same bytes: its queue holds numbered commands (numbered()) and each
# request is their concatenation, given to gRPC already serialized.
#
# Field numbers are those of proto/cubed/v1/session.proto and types.proto; the constants below
# name them.

# Tags: (field number << 3) | wire type (0 varint, 2 length-delimited).
_SEQ = b"\x08"                      # Command.seq = 1
_EMPTY = 0x22                       # Command.empty = 4
_EXECUTE = 0x32                     # Command.execute = 6
_BINDINGS = 0x1a                    # Command.Execute.bindings = 3
_MODE = b"\x20"                     # Command.Execute.mode = 4
_BUFFER = 0x0a                      # Bindings.buffers = 1
_HANDLE, _OFFSET = b"\x08", b"\x10"  # Binding.handle = 1, Binding.offset_start = 2
_ID, _SIZE = b"\x08", b"\x10"        # Command.Empty.id = 1, size = 2
_COMMANDS = 0x12                    # SessionRequest.commands = 2
_REPLAY_GRAPH = b"\x9a\x01"          # Command.replay_graph = 19 (a tag of two bytes)
_GRAPH = b"\x08"                     # Command.ReplayGraph.graph = 1
_GRAPH_BINDINGS = b"\x12"            # Command.ReplayGraph.bindings = 2 (packed, as proto3's)

_SMALL = [bytes([n]) for n in range(128)]
# Every 14-bit group as two varint bytes, both with the continuation bit: a handle id (2^63 and
# up, 10 bytes on the wire) takes four lookups and a last byte or two instead of ten steps.
_PAIRS = [bytes(((g & 0x7F) | 0x80, (g >> 7) | 0x80)) for g in range(1 << 14)]


_CLIENT_IDS = 1 << 63
_CLIENT_ID_TOP = b"\x80\x80\x80\x80\x80\x01"  # Bits 28..62 zero, bit 63 set.


def varint(n: int) -> bytes:
    """The base-128 varint of 0 <= n < 2^64 (protobuf's uint64)."""
    if n < 128:
        return _SMALL[n]
    if n < 16384:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    k = n - _CLIENT_IDS
    if 0 <= k < 1 << 28:  # A client id (2^63 and up, docs/api.md): the top six bytes fixed.
        return _PAIRS[k & 0x3FFF] + _PAIRS[k >> 14] + _CLIENT_ID_TOP
    parts = []
    while n >= 16384:
        parts.append(_PAIRS[n & 0x3FFF])
        n >>= 14
    if n < 128:
        parts.append(_SMALL[n])
    else:
        parts.append(bytes(((n & 0x7F) | 0x80, n >> 7)))
    return b"".join(parts)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte (field number < 16), length and payload."""
    n = len(payload)
    return bytes((tag, n)) + payload if n < 128 else bytes((tag,)) + varint(n) + payload


def binding(handle: int, offset_start: int) -> bytes:
    """Bindings.buffers entry: a Binding of ``handle`` from ``offset_start`` bytes on."""
    inner = _HANDLE + varint(handle) if handle else b""  # The library omits zeros.
    if offset_start:
        inner += _OFFSET + varint(offset_start)
    return field(_BUFFER, inner)


python_binding = binding
try:  # The same bytes from C where the compiled launch is built (Note [Compiled launch]).
    from ._speedups import binding  # noqa: F811
except ImportError:
    pass


def mode(value: int) -> bytes:
    """Command.Execute.mode (empty for 0, as the library omits a default)."""
    return _MODE + varint(value) if value else b""


def execute(head: bytes, buffers: Iterable[bytes], tail: bytes, mode_field: bytes) -> bytes:
    """A Command whose `execute` is ``head`` (its serialized kernel and count fields), bindings
    of ``buffers`` (binding() each) followed by ``tail`` (the serialized metadata and scalars
    fields of Bindings), and ``mode_field``; no seq yet."""
    bindings = b"".join(buffers) + tail
    return field(_EXECUTE, head + field(_BINDINGS, bindings) + mode_field)


def empty(handle: int, size: int) -> bytes:
    """A Command `empty` of ``size`` bytes as ``handle``; no seq yet."""
    return field(_EMPTY, _ID + varint(handle) + _SIZE + varint(size))


def replay_graph_head(graph: int) -> bytes:
    """The graph field of a Command.ReplayGraph of ``graph`` (1 .. 2^64 - 1), for
    replay_graph()."""
    return _GRAPH + varint(graph)


def replay_graph(head: bytes, handles: List[bytes]) -> bytes:
    """A Command `replay_graph` of the graph ``head`` names (replay_graph_head()) bound to
    ``handles`` (varint() of each binding's handle id, in parameter order); no seq yet."""
    if handles:
        ids = b"".join(handles)
        n = len(ids)
        payload = head + _GRAPH_BINDINGS + (_SMALL[n] if n < 128 else varint(n)) + ids
    else:
        payload = head
    n = len(payload)
    return _REPLAY_GRAPH + (_SMALL[n] if n < 128 else varint(n)) + payload


def numbered(command: bytes, seq: int) -> bytes:
    """SessionRequest.commands entry: ``command`` (a Command without seq) given ``seq``. Entries
    concatenate into a SessionRequest."""
    return field(_COMMANDS, command + _SEQ + varint(seq))  # Fields may come in any order.


def session_request(commands: List[bytes], first_seq: int) -> bytes:
    """A SessionRequest of ``commands`` (Commands without seq) numbered from ``first_seq``."""
    return b"".join([numbered(c, first_seq + i) for i, c in enumerate(commands)])
