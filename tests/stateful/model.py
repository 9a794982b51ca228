"""The model of the stateful fuzzer (stateful_test.py): what a CPU cubed daemon must answer.

Pure Python, no gRPC: given the model's state and a request, each predict_* function returns what
the daemon must do (and updates the state as the daemon must), or raises Fail with the status
code it must answer. Sources of each rule: docs/api.md and docs/error-model.md (codes),
session.proto (stream semantics, poisoning), docs/kernel-abi.md (builtin launches) and
docs/api.md "MemoryUsage" (what the four numbers count). Where those documents leave an order
open (which of two bad fields is reported), the model follows the daemon's code
(server/service/compute_service.cc: request checks first, then the session, then handles).

What is exact and what is a bound (CPU backend):
  * number_allocs and bytes_in_use: exact (a tensor's size is product(shape) * elem_size).
  * bytes_padding: exact (each size rounded up to the alignment) unless a freed exclusive page
    (> 16 MiB, or a fallback under the memory limit) may be reused: that adds up to 1/8 of the
    rounded size, so the model keeps a [lo, hi] range per allocation.
  * bytes_reserved: the model does not simulate pool pages. It checks what is certain: nothing
    but an allocation or a cleanup changes it; an allocation away from the limit adds 0 or one
    page; a cleanup never adds; in_use + padding <= reserved <= memory_limit; 0 after a cleanup
    with nothing allocated.
  * RESOURCE_EXHAUSTED from the memory limit: certain when size > max_allocation or when the
    rounded live sizes plus this one pass the limit; forbidden when the last observed reserved
    bytes plus a new page fit under the limit; either answer is accepted in between
    (fragmentation of pages the model does not simulate).
  * Contents: exact for creates, for empties of a session that never freed memory (zeros:
    docs/security.md, "Memory isolation") and for integer kernels and copy/fill; unknown
    (not checked) after float arithmetic or an empty that may reuse the session's own bytes.
"""

import itertools

OK = "OK"
IA = "INVALID_ARGUMENT"
NF = "NOT_FOUND"
FP = "FAILED_PRECONDITION"
RE = "RESOURCE_EXHAUSTED"
PD = "PERMISSION_DENIED"
UNIMPLEMENTED = "UNIMPLEMENTED"

# google.rpc.Code numbers, as stream replies carry them.
CODE_NUMBER = {"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3,
               "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5, "ALREADY_EXISTS": 6,
               "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
               "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13,
               "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16}
CODE_NAME = {v: k for k, v in CODE_NUMBER.items()}

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
FIRST_CLIENT_ID = 2**63
MAX_RANK = 8
MAX_BINDINGS = 1024
MAX_RELEASE = 65536
MAX_BUFFERS = 64
MAX_METADATA_WORDS = 65536
MAX_LEASE_MS = 7 * 24 * 3600 * 1000
MAX_TRACE_EVENTS = 1_000_000
MAX_CUBE_COUNT = (2**31 - 1, 65535, 65535)
MIB = 2**20

# Content is predicted only for launches and tensor reads this small (Python is slow).
MAX_MODELLED_ELEMENTS = 4096

# ElemType wire value -> (name, size, struct format or None, kind) for the element types.
ELEM = {1: ("f32", 4, "<f", "float"), 2: ("f64", 8, "<d", "float"), 3: ("i32", 4, "<i", "int"),
        4: ("u32", 4, "<I", "uint"), 5: ("i64", 8, "<q", "int"), 6: ("f16", 2, None, "float"),
        7: ("bf16", 2, None, "float"), 8: ("i8", 1, "<b", "int"), 9: ("u8", 1, "<B", "uint"),
        10: ("i16", 2, "<h", "int"), 11: ("u16", 2, "<H", "uint"), 12: ("bool", 1, "<B", "bool")}
SIGNED = {1, 2, 3, 5, 6, 7, 8, 10}
NUMERIC = set(ELEM) - {12}
# The builtin kernels the fuzzer launches (docs/kernel-abi.md): buffers, dtypes, shape rule,
# min rank, whether it takes the fill scalar, whether it may write in place.
KERNELS = {
    "fill": (1, set(ELEM), "any", 0, True, False),
    "copy": (2, set(ELEM), "same", 0, False, True),
    "neg": (2, SIGNED, "same", 0, False, True),
    "add": (3, NUMERIC, "broadcast", 0, False, True),
    "sum": (2, NUMERIC, "reduce", 1, False, False),
}
# Names no builtin kernel has (the fuzzer sends no other names: the model knows only KERNELS).
UNKNOWN_KERNELS = ("no_such_kernel", "ADD", "add ", "sum\x00", "k" * 64)


class Fail(Exception):
    """The daemon must answer `code`. A stream failure (and the poison it leaves) also knows the
    start of its message, `prefix` ("command 7 (execute) failed: "); its whole `message` is
    learnt the first time the daemon shows it, and must be the same on every later use."""

    def __init__(self, code, prefix=None):
        super().__init__(code, prefix)
        self.code = code
        self.prefix = prefix
        self.message = None
        self.poison = False  # A stream failure: reported (and poisons) unchanged when met again.

    def check_message(self, actual):
        """'' when `actual` is this failure's message (learning it), else what differs."""
        if self.prefix is None:
            return ""
        if self.message is not None:
            return "" if actual == self.message else f"expected message {self.message!r}"
        if not actual.startswith(self.prefix):
            return f"expected a message starting {self.prefix!r}"
        self.message = actual
        return ""


class Ambiguous(Exception):
    """The model cannot tell between `code` and going on (a dynamic cube count read from bytes
    the model does not know)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def round_up(n, a):
    return (n + a - 1) // a * a


def prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


class Handle:
    def __init__(self, size, content, pad_lo, pad_hi, maybe_exclusive, tensor=None):
        self.size = size
        self.content = content  # bytearray, or None when unknown.
        self.pad_lo, self.pad_hi = pad_lo, pad_hi
        self.maybe_exclusive = maybe_exclusive
        self.tensor = tensor  # (shape, strides, elem_size) for tensors.
        self.poison = None  # Fail of the execute that poisoned this live handle (stream).
        self.where = None  # (storage_id, byte offset in it) once GetResource told.
        self.holds = 0  # Recorded graphs (and a recording) that hold its slice.


class Graph:
    """A recorded graph (Note [Recorded graphs], server/channel/graph.h): its parameters (ids and
    sizes at begin_graph), its steps and the handles it holds (every non-parameter handle a step
    binds: the Handle objects, which outlive their ids as orphans)."""

    def __init__(self, gid, params, sizes):
        self.id = gid
        self.params = list(params)
        self.sizes = list(sizes)
        self.steps = []    # (launch, refs, tensors): refs[i] is ("p", index) or ("h", Handle)
        self.held = []     # Handle objects, each once
        self.writes = set()  # Parameter indices some step writes


class Region:
    """A shared-memory region of a session (docs/api.md, "Shared-memory regions"): its size and
    the bytes the model knows it holds (None once a read wrote bytes the model does not know)."""

    def __init__(self, size, content):
        self.size = size
        self.content = content


MAX_REGIONS = 64


def region_bytes(s, region, offset, size):
    """Device::RegionBytes: the Region of a RegionSlice that fits, or NOT_FOUND /
    INVALID_ARGUMENT (size 0 or outside the region, without overflow)."""
    r = s.regions.get(region)
    if r is None:
        raise Fail(NF)
    if size == 0 or offset > r.size or size > r.size - offset:
        raise Fail(IA)
    return r


def predict_read_into(m, s, kind, bindings, into):
    """A read or read_tensor with `into` (after the request checks and the seq): (total bytes,
    [bytes or None] per binding), or the failure. Raw reads resolve their bindings first
    (CheckBulkRead), then the region; tensor reads the region first. No message limit: the
    total must fit into.size (INVALID_ARGUMENT)."""
    region, offset, size = into
    if kind == "read":
        views = [m.resolve(s, *b) for b in bindings]
        r = region_bytes(s, region, offset, size)
        parts = [None if h.content is None else bytes(h.content[vs:vs + vl])
                 for h, vs, vl in views]
        total = sum(vl for _, _, vl in views)
    else:
        r = region_bytes(s, region, offset, size)
        result = predict_read_tensor(m, s, bindings, max_read=None)
        parts = [data for _, data in result]
        total = sum(n for n, _ in result)
    if total > size:
        raise Fail(IA)
    return r, total, parts


class Recording:
    """A recording in progress: its graph, or the first failure (then graph is None)."""

    def __init__(self, graph, failure):
        self.graph = graph
        self.failure = failure


class Session:
    def __init__(self, sid, stream):
        self.id = sid
        self.stream = stream
        self.handles = {}   # id -> Handle
        self.poisoned = {}  # id -> Fail: stream ids poisoned by a failed create (no memory).
        self.profile = False
        self.freed_any = False  # Empty may return this session's own freed bytes.
        self.last_seq = None
        self.failures = []  # Stream: failures since the previous sync, in order.
        self.next_client_id = FIRST_CLIENT_ID + 1
        self.graphs = {}     # graph id -> Graph
        self.recording = None  # Recording, between begin_graph and end_graph
        self.orphans = []    # Handles whose id was released while a graph holds their slice
        self.next_graph_id = 1
        self.regions = {}    # region id -> Region (shared memory registered for the session)

    def poison_of(self, hid):
        h = self.handles.get(hid)
        if h is not None and h.poison is not None:
            return h.poison
        return self.poisoned.get(hid)

    def in_use(self, hid):
        return hid in self.handles or hid in self.poisoned


class Model:
    def __init__(self, limit, alignment, max_read):
        self.limit = limit
        self.alignment = alignment
        self.max_alloc = limit
        self.max_read = max_read
        # Note [Pool layout] (storage/memory_manager.cc): (page size, largest slice), capped.
        levels = []
        for page, largest in ((8 * MIB, MIB), (64 * MIB, 16 * MIB)):
            page = min(page, limit - limit % alignment)
            largest = min(largest, page)
            if levels and levels[-1][0] == page:
                levels[-1] = (page, max(levels[-1][1], largest))
            else:
                levels.append((page, largest))
        self.levels = levels
        self.sessions = {}
        self.seen_handles = {}      # Every handle id ever returned, any session (ordered).
        self.closed_sessions = []
        self.reserved = 0           # bytes_reserved as last observed.
        self.pending_pages = 0      # Most bytes of pages allocations may have added since.
        self.new_pages = []         # The page each of those allocations may have added.
        self.maybe_free_exclusive = False
        self.maybe_alloc = False    # An allocation since the observation was near the limit.
        self.cleaned = False        # A cleanup ran since the observation...
        self.clean_empty = False    # ... with nothing allocated then or since.

    # ---- sessions and handles ----

    def session(self, sid):
        s = self.sessions.get(sid)
        if s is None:
            raise Fail(NF)
        return s

    def resolve(self, s, hid, start, end):
        """(handle, view start, view length) of a binding, or the daemon's error (Resolve)."""
        poison = s.poison_of(hid)
        if poison is not None:
            raise poison
        h = s.handles.get(hid)
        if h is None:
            raise Fail(NF)
        if start > h.size:
            raise Fail(IA)
        if end > h.size - start:
            raise Fail(IA)
        return h, start, h.size - start - end

    def live(self):
        """Every allocation: live handles and orphans (slices only graphs keep)."""
        for s in self.sessions.values():
            yield from s.handles.values()
            yield from s.orphans

    def usage(self):
        hs = list(self.live())
        return (len(hs), sum(h.size for h in hs), sum(h.pad_lo for h in hs),
                sum(h.pad_hi for h in hs))

    # ---- memory ----

    def new_page(self, size):
        for page, largest in self.levels:
            if size <= largest:
                return page
        return round_up(size, self.alignment)

    def check_alloc(self, size):
        """'must' (it fits for certain), 'maybe' (either answer), or raises RESOURCE_EXHAUSTED."""
        if size > self.max_alloc:
            raise Fail(RE)
        rounded = sum(round_up(h.size, self.alignment) for h in self.live())
        if rounded + round_up(size, self.alignment) > self.limit:
            raise Fail(RE)
        if self.reserved + self.pending_pages + self.new_page(size) <= self.limit:
            return "must"
        return "maybe"

    def add_handle(self, s, hid, size, content, mode, tensor=None):
        r = round_up(size, self.alignment)
        exclusive = size > self.levels[-1][1] or mode == "maybe"
        hi = r + r // 8 - size if exclusive and self.maybe_free_exclusive else r - size
        h = Handle(size, content, r - size, hi, exclusive, tensor)
        s.handles[hid] = h
        self.seen_handles[hid] = None
        self.pending_pages += self.new_page(size)
        self.new_pages.append(self.new_page(size))
        self.maybe_alloc = self.maybe_alloc or mode == "maybe"
        self.clean_empty = False
        return h

    def free_handle(self, s, hid):
        """The id goes; its memory too unless a graph holds it (then it is an orphan, still
        accounted to the session: Note [Recorded graphs])."""
        h = s.handles.pop(hid)
        s.poisoned.pop(hid, None)
        s.freed_any = True
        if h.holds > 0:
            s.orphans.append(h)
            return
        if h.maybe_exclusive:
            self.maybe_free_exclusive = True

    def drop_holds(self, s, graph):
        """A graph (or failed recording) goes: the orphans only it held are freed."""
        for h in graph.held:
            h.holds -= 1
            if h.holds == 0 and any(o is h for o in s.orphans):
                s.orphans = [o for o in s.orphans if o is not h]
                if h.maybe_exclusive:
                    self.maybe_free_exclusive = True

    def cleanup(self):
        self.maybe_free_exclusive = False
        self.cleaned = True
        self.clean_empty = not any(True for _ in self.live())

    def empty_content(self, s, size):
        """Zeros, unless the session freed memory it may get back (or it is too big to model)."""
        return None if s.freed_any or size > 16 * MIB else bytearray(size)

    def reserved_range(self):
        """[lo, hi] that bytes_reserved must lie in now, from the last observation."""
        allocs, in_use, pad_lo, _ = self.usage()
        floor = in_use + pad_lo
        if self.cleaned and self.clean_empty:
            return 0, 0  # A cleanup returns every free page.
        if self.maybe_alloc:
            return floor, self.limit
        hi = self.reserved + self.pending_pages
        lo = floor if self.cleaned else self.reserved
        return lo, hi

    def reserved_choices(self):
        """The exact values bytes_reserved may take when the model knows them (no cleanup and no
        allocation near the limit since the observation): the observed value plus the pages of
        some of the allocations since (each fit in a held page or took one new page)."""
        if self.cleaned or self.maybe_alloc or len(self.new_pages) > 10:
            return None
        sums = {self.reserved}
        for page in self.new_pages:
            sums |= {x + page for x in sums}
        return sums

    def observe(self, reserved):
        self.reserved = reserved
        self.pending_pages = 0
        self.new_pages = []
        self.maybe_alloc = False
        self.cleaned = False
        self.clean_empty = False

    def close(self, sid):
        s = self.sessions.pop(sid)
        released = len(s.handles)
        for g in list(s.graphs.values()) + ([s.recording.graph] if s.recording is not None and
                                             s.recording.graph is not None else []):
            for h in g.held:
                h.holds -= 1
        s.graphs, s.recording = {}, None
        for hid in list(s.handles):
            self.free_handle(s, hid)
        if s.orphans and any(h.maybe_exclusive for h in s.orphans):
            self.maybe_free_exclusive = True
        s.orphans = []
        self.closed_sessions.append(sid)
        return released


# ---- request checks shared by unary calls and stream commands ----

def check_tensor_shape(shape, elem_size):
    """CheckTensorShape (request_conversion.cc): the dense byte size, or INVALID_ARGUMENT."""
    if not 1 <= len(shape) <= MAX_RANK:
        raise Fail(IA)
    if any(d == 0 for d in shape):
        raise Fail(IA)
    if not 1 <= elem_size <= 16:
        raise Fail(IA)
    size = prod(shape) * elem_size
    if size >= 2**63:
        raise Fail(IA)
    return size


def check_read_tensor_request(bindings):
    """ToTensorRefs: bindings = [(hid, start, end, shape, strides, elem_size)]."""
    if not 1 <= len(bindings) <= MAX_BINDINGS:
        raise Fail(IA)
    for (_, _, _, shape, strides, es) in bindings:
        check_tensor_shape(shape, es)
        if len(strides) != len(shape):
            raise Fail(IA)


def check_read_request(bindings):
    if not 1 <= len(bindings) <= MAX_BINDINGS:
        raise Fail(IA)


def predict_read(m, s, bindings):
    """Device::Read: the bytes of each binding (None where unknown)."""
    out, total = [], 0
    for (hid, start, end) in bindings:
        h, vs, vl = m.resolve(s, hid, start, end)
        total += vl
        out.append(None if h.content is None else bytes(h.content[vs:vs + vl]))
    if total > m.max_read:
        raise Fail(RE)
    return out


def span_elements(shape, strides):
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * st for d, st in zip(shape, strides))


def gather(content, start, shape, strides, es):
    """The dense row-major bytes of a strided tensor in content[start:]."""
    out = bytearray()
    for idx in itertools.product(*[range(d) for d in shape]):
        off = start + es * sum(i * st for i, st in zip(idx, strides))
        out += content[off:off + es]
    return bytes(out)


def predict_read_tensor(m, s, bindings, max_read=0):
    """Device::ReadTensor after the request checks: dense bytes per binding (None: unknown).
    max_read: the message limit (0: the model's; None: none, a read into a region)."""
    max_read = m.max_read if max_read == 0 else max_read
    out, total = [], 0
    resolved = []
    for (hid, start, end, shape, strides, es) in bindings:
        h, vs, vl = m.resolve(s, hid, start, end)
        span = span_elements(shape, strides)
        if span * es > vl or span * es >= 2**64 or span >= 2**64:
            raise Fail(IA)
        size = prod(shape) * es
        total += size
        if total >= 2**64:
            raise Fail(IA)
        resolved.append((h, vs, shape, strides, es, size))
    if max_read is not None and total > max_read:
        raise Fail(RE)
    for (h, vs, shape, strides, es, size) in resolved:
        if h.content is None or size // es > MAX_MODELLED_ELEMENTS:
            out.append((size, None))
        else:
            out.append((size, gather(h.content, vs, shape, strides, es)))
    return out


def predict_release(s, ids):
    """Device::Release, checked before anything is released: the ids to drop."""
    drops = {}
    for hid in ids:
        if hid not in s.handles and hid in s.poisoned:
            drops[hid] = drops.get(hid, 0) + 1
            if drops[hid] > 1:
                raise Fail(IA)
            continue
        if hid not in s.handles:
            raise Fail(NF)
        drops[hid] = drops.get(hid, 0) + 1
        if drops[hid] > 1:  # Every handle is held once.
            raise Fail(IA)
    return list(drops)


def apply_release(m, s, ids):
    for hid in ids:
        if hid in s.handles:
            m.free_handle(s, hid)
        else:
            s.poisoned.pop(hid, None)


# ---- execute (docs/kernel-abi.md) ----
