"""The stateful fuzzer's shared pieces (stateful_test.py assembles the machine): the limits
and edge-value strategies, Run (what lives across sequences), Divergence and diverge, and
MachineBase, the machine's state and helpers: its __init__ and first sessions, unary calls and
their code checks, pick_* draws, the memory usage invariant and the end-of-sequence teardown.
"""

import time

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant
import grpc

import model as M
from daemon import SANITIZER_MARKERS, Daemon, RingStreamClient, StreamClient

LIMIT = 256 * M.MIB
MAX_MESSAGE = 4 * M.MIB
LEASE_MS = 3_600_000  # --session_lease: no session expires during a run.
RPC_TIMEOUT = 60
MAX_SESSIONS = 5
pb = None  # cubed.v1 compute_pb2, types_pb2, session_pb2 (set by main).
RING = None  # The SDK's command ring client (daemon.load_ring), when it loaded.
types_pb = None
session_pb = None

U64_EDGES = [0, 1, 2, 3, 4, 7, 8, 12, 63, 64, 65, 255, 256, 4095, 4096, 2**31 - 1, 2**31,
             2**32 - 1, 2**32, 2**32 + 1, 2**53, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2,
             2**64 - 1]
U32_EDGES = [0, 1, 2, 3, 4, 8, 16, 17, 64, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1]
SIZE_EDGES = [1, 2, 12, 63, 64, 65, 4096, M.MIB, M.MIB + 1, 16 * M.MIB, 16 * M.MIB + 1,
              MAX_MESSAGE, MAX_MESSAGE + 1, LIMIT // 2 + 1, LIMIT - 1, LIMIT, LIMIT + 1]

def mostly(common, rare, percent=85):
    """`common` percent of the time, else `rare` (both strategies)."""
    return st.integers(0, 99).flatmap(lambda i: common if i < percent else rare)


u64 = st.one_of(st.sampled_from(U64_EDGES), st.integers(0, 2**64 - 1))
u32 = st.one_of(st.sampled_from(U32_EDGES), st.integers(0, 2**32 - 1))
small = st.integers(1, 300)
sizes = st.one_of(small, small, st.sampled_from(SIZE_EDGES), u64)
elem_sizes = st.one_of(*[st.sampled_from([1, 2, 4, 8])] * 4,
                       st.sampled_from([0, 3, 16, 17, 2**32 - 1]))
dims = st.one_of(st.integers(1, 6), st.integers(1, 6), st.sampled_from(U64_EDGES))
shapes = st.one_of(*[st.lists(st.integers(1, 6), min_size=1, max_size=3)] * 4,
                   st.lists(dims, min_size=0, max_size=9))
payloads = st.one_of(st.binary(min_size=1, max_size=64), st.binary(max_size=0),
                     st.integers(1, 70000).map(lambda n: bytes(range(256)) * (n // 256) +
                                               bytes(range(n % 256))))
KERNEL_NAMES = ["fill", "copy", "neg", "add", "sum"]
DTYPES = mostly(st.sampled_from([3, 4, 5, 1]), st.sampled_from([2, 8, 9, 12, 0, 99]), 85)


class Run:
    """What lives across sequences: the daemon, the counters and the options."""

    def __init__(self, binary, seconds):
        self.binary = binary
        self.seconds = seconds
        self.daemon = None
        self.sequences = 0
        self.steps = 0
        self.restarts = 0
        self.codes = {}
        self.regions = True  # Shared-memory regions (off with --no_regions).
        self.start = time.monotonic()
        self.first_finding = None  # (seconds into the run, sequence, what): before shrinking.

    def note_finding(self, what):
        """Remembers and prints the first finding when it happens: Hypothesis then shrinks it,
        which may take minutes, so the run's end says nothing of how soon it was found."""
        if self.first_finding is not None:
            return
        self.first_finding = (time.monotonic() - self.start, self.sequences,
                              what.splitlines()[0][:300])
        print("stateful: first finding after {:.1f} s, in sequence {}: {}".format(
            *self.first_finding), flush=True)

    def count(self, what, code):
        key = f"{what}:{code}"
        self.codes[key] = self.codes.get(key, 0) + 1

    def fresh_daemon(self):
        """The daemon, started anew if it died or holds something (after a failed sequence)."""
        d = self.daemon
        if d is not None and d.alive():
            try:
                stats = d.compute.GetStats(pb.GetStatsRequest(), timeout=RPC_TIMEOUT)
                dev = stats.devices[0]
                if dev.sessions == 0 and dev.memory.number_allocs == 0:
                    return d
            except grpc.RpcError:
                pass
        if d is not None:
            d.stop()
            d.remove()
            self.restarts += 1
        self.daemon = Daemon(self.binary, [f"--memory_limit={LIMIT}",
                                           f"--max_message_bytes={MAX_MESSAGE}",
                                           f"--session_lease={LEASE_MS // 1000}s",
                                           "--log_level=warn"])
        return self.daemon


RUN = None


class Divergence(AssertionError):
    pass


def diverge(what, detail):
    RUN.note_finding(f"{what}: {detail}")
    raise Divergence(f"{what}: {detail}")


class MachineBase:
    """The machine's state and shared helpers; a mixin of stateful_test.CubedMachine (it calls
    UnaryRules' allocation and StreamRules' stream_event through self)."""

    def __init__(self):
        super().__init__()
        self.d = RUN.fresh_daemon()
        RUN.sequences += 1
        usage = self.d.compute.MemoryCleanup(pb.MemoryCleanupRequest(), timeout=RPC_TIMEOUT).usage
        info = self.d.compute.GetInfo(pb.GetInfoRequest(), timeout=RPC_TIMEOUT).info
        self.m = M.Model(LIMIT, info.alignment, MAX_MESSAGE)
        if info.max_allocation != LIMIT:
            diverge("GetInfo", f"max_allocation {info.max_allocation}, expected {LIMIT}")
        if usage.number_allocs or usage.bytes_reserved:
            diverge("MemoryCleanup", f"a daemon holding nothing still reports {usage}")
        self.m.observe(usage.bytes_reserved)
        self.streams = {}  # session id -> StreamClient
        self.region_maps = {}  # (session id, region id) -> this side's mmap of the region
        self.regions_touched = set()  # Sessions whose regions a read wrote in this batch
        self.region_bias = 3  # Creates and reads that use a region: 3 in 10 (region_batch: 8)

    @initialize(ring=st.booleans())
    def open_sessions(self, ring):
        """Every sequence starts with one unary session and one stream."""
        code, r, details = self.call("OpenSession", pb.OpenSessionRequest())
        self.check_code("OpenSession", M.OK, code, details)
        self.m.sessions[r.session] = M.Session(r.session, stream=False)
        client = self.new_stream(ring, session_pb.SessionRequest(
            open=session_pb.SessionRequest.Open()))
        ev = self.stream_event(client, "stream open")
        if ev[0] != "response" or not ev[1].HasField("opened"):
            diverge("stream open", f"expected `opened`, got {ev}")
        self.m.sessions[ev[1].opened.session] = M.Session(ev[1].opened.session, stream=True)
        self.streams[ev[1].opened.session] = client
        # And a few handles in each (unary calls may name a stream's session too): 64 bytes,
        # and two 4 x 4 tensors of 4-byte elements.
        for sid in list(self.m.sessions):
            payload = bytes(range(1, 65))
            self.allocation("Create", pb.CreateRequest(session=sid, data=payload), sid, 64,
                            lambda s: bytearray(payload))
            self.allocation("CreateTensor", pb.CreateTensorRequest(
                session=sid, data=payload, shape=[4, 4], elem_size=4), sid, 64,
                lambda s: bytearray(payload), ([4, 4], [4, 1], 4))
            self.allocation("EmptyTensor", pb.EmptyTensorRequest(
                session=sid, shape=[4, 4], elem_size=4), sid, 64,
                lambda s: self.m.empty_content(s, 64), ([4, 4], [4, 1], 4))

    # ---- helpers ----

    def new_stream(self, ring, first_request):
        """A session stream over the command ring (`ring`, when the daemon's ring client
        loaded) or gRPC: the same requests, replies and errors (docs/api.md, "The command
        ring")."""
        if ring and RING is not None:
            RUN.count("stream carrier", "ring")
            return RingStreamClient(RING, self.d.socket, first_request)
        RUN.count("stream carrier", "grpc")
        return StreamClient(self.d.stream, first_request)

    def call(self, method, request):
        RUN.steps += 1
        try:
            response = getattr(self.d.compute, method)(request, timeout=RPC_TIMEOUT)
            code, details = M.OK, ""
        except grpc.RpcError as e:
            response, code, details = None, e.code().name, e.details() or ""
        RUN.count(method, code)
        if code in ("DEADLINE_EXCEEDED", "UNAVAILABLE", "INTERNAL", "UNKNOWN"):
            diverge(method, f"{code} {details!r} (daemon alive: {self.d.alive()})\n"
                            f"{self.d.new_log()[-4000:]}")
        return code, response, details

    def check_code(self, what, expected, code, details):
        """expected: a Fail, or OK."""
        want = expected.code if isinstance(expected, M.Fail) else expected
        if code != want:
            diverge(what, f"the model predicts {want}, the daemon answered {code}: {details!r}")
        if isinstance(expected, M.Fail):
            if expected.prefix is not None:
                RUN.count("poisoned id met", "unary")
            problem = expected.check_message(details)
            if problem:
                diverge(what, f"{problem}, got {details!r}")

    def pick_session(self, data, streams=True):
        """Mostly an open session; else a closed one, one never opened, or another device's."""
        open_ids = [sid for sid, s in self.m.sessions.items() if streams or not s.stream]
        if open_ids and data.draw(st.integers(0, 9), label="open_session") < 9:
            return data.draw(st.sampled_from(open_ids), label="session")
        others = [0, 1, 2**64 - 1, 2**64 - 256, 1 << 8 | 1] + self.m.closed_sessions[-3:]
        return data.draw(st.one_of(st.sampled_from(others), u64), label="session")

    def pick_handle(self, data, s, own_percent=80, clean=False):
        """Mostly a live handle of the session (`clean`: mostly one not poisoned); else a
        poisoned id, another session's or a released handle, or an id never given out."""
        # In the order the model made them, never sorted by id: ids are random, and Hypothesis
        # must draw the same thing when it replays the same choices.
        own = list(s.handles) if s is not None else []
        if clean and data.draw(st.integers(0, 9), label="clean") > 0:
            own = [hid for hid in own if s.handles[hid].poison is None] or own
        poisoned = list(s.poisoned) if s is not None else []
        seen = list(self.m.seen_handles)
        if own and data.draw(st.integers(0, 99), label="own_handle") < own_percent:
            return data.draw(st.sampled_from(own), label="handle")
        if poisoned and data.draw(st.booleans(), label="poisoned_handle"):
            return data.draw(st.sampled_from(poisoned), label="handle")
        choices = []
        if seen:
            choices.append(st.sampled_from(seen))
        choices += [st.sampled_from([0, 1, 2**63, 2**63 + 1, 2**64 - 1]), u64]
        return data.draw(st.one_of(*choices), label="handle")

    def pick_binding(self, data, s, own_percent=80, clean=False):
        hid = self.pick_handle(data, s, own_percent, clean)
        h = s.handles.get(hid) if s is not None else None
        size = h.size if h is not None else 16
        near = st.sampled_from([0, 1, size - 1 if size else 0, size, size + 1, 2**63, 2**64 - 1])
        offset = mostly(st.just(0), st.one_of(near, st.integers(0, size), u64), 98 if clean else 90)
        return (hid, data.draw(offset, label="offset_start"),
                data.draw(offset, label="offset_end"))

    def tensor_meta(self, data, s, hid):
        """(shape, strides, elem_size) for a ReadTensor binding of handle hid."""
        h = s.handles.get(hid) if s is not None else None
        options = []
        if h is not None and h.tensor is not None:
            options.append(st.just(h.tensor))
        if h is not None and h.size:
            options.append(st.just(([h.size], [1], 1)))
            # One element repeated 2^n times (stride 0): huge reads, sums that overflow 64 bits.
            options.append(st.builds(lambda n, es: ([2**n], [0], es), st.sampled_from(
                [20, 22, 30, 31, 32, 60, 61, 62]), st.sampled_from([1, 2, 4, 8, 16])))
        wild = st.tuples(st.lists(dims, max_size=9), st.lists(u64, max_size=9), elem_sizes)
        shape, strides, es = data.draw(mostly(st.one_of(*options), wild, 80) if options else wild,
                                       label="tensor")
        if data.draw(st.integers(0, 29), label="strides_len") == 0:
            strides = list(strides) + [1]
        return list(shape), list(strides), es

    # ---- invariant: memory usage and handle counts after every step ----

    @invariant()
    def usage_matches(self):
        if not self.d.alive():
            diverge("daemon", f"exited with {self.d.proc.returncode}:\n{self.d.new_log()[-6000:]}")
        stats = self.d.compute.GetStats(pb.GetStatsRequest(), timeout=RPC_TIMEOUT)
        dev = stats.devices[0]
        self.check_usage("GetStats", dev.memory)
        handles = sum(len(s.handles) for s in self.m.sessions.values())
        if dev.sessions != len(self.m.sessions) or dev.handles != handles:
            diverge("GetStats", f"{dev.sessions} sessions and {dev.handles} handles, the model "
                                f"has {len(self.m.sessions)} and {handles}")

    def check_usage(self, what, u, observe=True):
        allocs, in_use, pad_lo, pad_hi = self.m.usage()
        lo, hi = self.m.reserved_range()
        problems = []
        if u.number_allocs != allocs or u.bytes_in_use != in_use:
            problems.append(f"number_allocs {u.number_allocs} bytes_in_use {u.bytes_in_use}, "
                            f"the model has {allocs} and {in_use}")
        if not pad_lo <= u.bytes_padding <= pad_hi:
            problems.append(f"bytes_padding {u.bytes_padding} outside [{pad_lo}, {pad_hi}]")
        if not lo <= u.bytes_reserved <= hi:
            problems.append(f"bytes_reserved {u.bytes_reserved} outside [{lo}, {hi}] (last "
                            f"observed {self.m.reserved})")
        elif (choices := self.m.reserved_choices()) and u.bytes_reserved not in choices:
            problems.append(f"bytes_reserved {u.bytes_reserved} is not the last observed "
                            f"{self.m.reserved} plus some of the pages the allocations since "
                            f"may have added {self.m.new_pages}")
        if not u.bytes_in_use + u.bytes_padding <= u.bytes_reserved <= LIMIT:
            problems.append("in_use + padding <= reserved <= memory_limit does not hold")
        if problems:
            diverge(what, "; ".join(problems))
        if observe:
            self.m.observe(u.bytes_reserved)

    # ---- the end of a sequence: nothing may be left ----

    def teardown(self):
        try:
            if not self.d.alive():
                return  # Already reported by the invariant.
            for sid, client in list(self.streams.items()):
                client.half_close()
                ev = self.stream_event(client, "teardown: stream half-close")
                if ev[0] != "end" or ev[1] != M.OK:
                    diverge("teardown", f"stream ended {ev}, expected OK")
                self.m.close(sid)
            self.streams = {}
            for sid in [sid for sid, s in self.m.sessions.items() if not s.stream]:
                code, _, details = self.call("CloseSession", pb.CloseSessionRequest(session=sid))
                self.check_code("teardown: CloseSession", M.OK, code, details)
                self.m.close(sid)
            stats = self.d.compute.GetStats(pb.GetStatsRequest(), timeout=RPC_TIMEOUT)
            dev = stats.devices[0]
            u = self.d.compute.MemoryCleanup(pb.MemoryCleanupRequest(), timeout=RPC_TIMEOUT).usage
            left = (dev.sessions, dev.handles, u.number_allocs, u.bytes_in_use, u.bytes_padding,
                    u.bytes_reserved)
            if any(left):
                diverge("leak", "after every session closed and a cleanup: sessions, handles, "
                                f"number_allocs, bytes_in_use, bytes_padding, bytes_reserved = "
                                f"{left}")
        finally:
            log = self.d.new_log()
            for marker in SANITIZER_MARKERS:
                if marker in log:
                    diverge("sanitizer", f"the daemon's log reports {marker}:\n{log[-8000:]}")
