#!/usr/bin/python3
"""Stateful fuzzer of the real cubed daemon: sequences of operations over live handles, each
answer checked against a model (model.py) that predicts it.

What it models. A CPU daemon (--memory_limit=256MiB, --max_message_bytes=4MiB) driven over raw
cubed.v1 protobuf requests (no SDK, so nothing filters the edge values): unary OpenSession,
CloseSession (and leases of a few milliseconds), Create, CreateTensor, Empty, EmptyTensor, Execute
(builtin fill, copy, neg, add, sum; unknown names; ptx), Read, ReadTensor, GetResource, Release,
Flush, Sync, StartProfile, EndProfile, MemoryUsage, MemoryCleanup; and session streams (open;
batches of create, create_tensor, empty, empty_tensor, execute, release, read, read_tensor, flush,
memory_usage, memory_cleanup, start_profile, end_profile, each batch ending in a sync; half-close,
cancel, a second open, 4097 commands in one request, CloseSession of the stream's session); and
recorded graphs (begin_graph, executes recorded over live, released and poisoned handles,
end_graph, replay_graph with bindings of the right or wrong size, poisoned or released,
release_graph before or after the handles a graph holds: model.py's Graph keeps their memory as
orphans, accounted exactly until the last graph holding them goes). Each stream travels over
gRPC or, half the time, the command ring (the Python SDK's client, client/python/cubed_client/
_ring.py): the same requests, replies and errors. Shared-memory regions: memfds registered over
the region socket (sealed or not, no descriptor, past 64 a session, for closed sessions),
creates from region slices and reads into them (raw and tensor; every byte written checked
against the model after the batch), release_region. Every
numeric field draws arithmetic edge values (0, 1, 2^31, 2^32 - 1, 2^63, 2^64 - 1, the memory and
message limits, huge shapes, offsets past the end, overflowing products) besides plausible ones, and
handles come from the session, other sessions, released or poisoned ids. The model predicts each
status code (docs/api.md, docs/error-model.md, session.proto), the exact message of every poisoned
id after its first use, the bytes of every read whose contents it knows, tensor strides and sizes,
the handles a close releases, that GetResource places no two live handles' bytes together, and after
every step GetStats' memory usage (number_allocs and bytes_in_use exactly, padding and reserved
bytes within the bounds model.py explains) and its session and handle counts. At the end of each
sequence every session is closed and the daemon must hold nothing (a leak otherwise), and its log
must hold no sanitizer report. A divergence, a crash, a hang (no answer in 60 s), a sanitizer report
or a leak fails the run; Hypothesis shrinks the sequence and prints it as Python steps.

Run by hand (30 minutes against the plain build; the sanitizer build's daemon works the same):

  /usr/bin/python3 tests/stateful/stateful_test.py --cubed=build/server/cubed \
      --proto_dir=proto --seconds=1800

ctest runs it as `stateful.fuzz` for CUBED_STATEFUL_SECONDS (CMake variable; 60 s in the
sanitizer configuration, 20 s otherwise); the environment variable CUBED_STATEFUL_SECONDS
overrides --seconds; --seed (or CUBED_STATEFUL_SEED) makes the sequences drawn repeatable. The
first finding is printed when it happens ("first finding after N s"), before Hypothesis shrinks it,
which may take minutes. Exits 0 when no finding, 1 on a finding (the shrunk steps are printed
above), 77 when Hypothesis is missing.
"""

import argparse
import os
import queue
import random
import shutil
import sys
import tempfile
import time
import traceback

try:
    from hypothesis import HealthCheck, settings, strategies as st
    from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                     rule, run_state_machine_as_test)
except ImportError:
    print("stateful_test: python3-hypothesis is not installed (deploy/setup.sh installs it)")
    sys.exit(77)
import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
from daemon import (SANITIZER_MARKERS, Daemon, RingStreamClient, StreamClient,  # noqa: E402
                    load_ring, load_stubs, register_region)

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


class CubedMachine(RuleBasedStateMachine):
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

    # ---- unary sessions ----

    @precondition(lambda self: len(self.m.sessions) < MAX_SESSIONS)
    @rule(data=st.data())
    def open_session(self, data):
        device = data.draw(mostly(st.just(0), u32), label="device")
        lease = data.draw(mostly(st.just(0), st.sampled_from(
            [M.MAX_LEASE_MS, M.MAX_LEASE_MS + 1, 2**32 - 1, 2**63, 2**64 - 1, LEASE_MS])),
            label="lease_ms")
        expected = M.Fail(M.NF) if device != 0 else (
            M.Fail(M.IA) if lease > M.MAX_LEASE_MS else M.OK)
        code, r, details = self.call("OpenSession", pb.OpenSessionRequest(device=device,
                                                                          lease_ms=lease))
        self.check_code("OpenSession", expected, code, details)
        if code == M.OK:
            if r.lease_ms != (lease or LEASE_MS):
                diverge("OpenSession", f"lease_ms {r.lease_ms}, asked {lease}")
            if r.session in self.m.sessions or r.session & 0xff != 0:
                diverge("OpenSession", f"session id {r.session} in use or not of device 0")
            self.m.sessions[r.session] = M.Session(r.session, stream=False)

    @rule(data=st.data())
    def close_session(self, data):
        sid = self.pick_session(data, streams=False)
        expected = M.OK if sid in self.m.sessions else M.Fail(M.NF)
        code, r, details = self.call("CloseSession", pb.CloseSessionRequest(session=sid))
        self.check_code("CloseSession", expected, code, details)
        if code == M.OK:
            released = self.m.close(sid)
            if r.handles_released != released:
                diverge("CloseSession", f"handles_released {r.handles_released}, the model "
                                        f"has {released}")

    @precondition(lambda self: len(self.m.sessions) < MAX_SESSIONS)
    @rule(data=st.data(), stream=st.booleans(), ring=st.booleans())
    def lease_expiry(self, data, stream, ring):
        """A session with a lease of a few milliseconds, given 100 bytes, then left alone: once
        the lease passed it is gone with its memory; a unary call naming it is NOT_FOUND and its
        stream ends NOT_FOUND (docs/api.md, "Sessions across invocations")."""
        lease = data.draw(st.sampled_from([1, 2, 10, 30]), label="lease_ms")
        if stream:
            client = self.new_stream(ring, session_pb.SessionRequest(
                open=session_pb.SessionRequest.Open(lease_ms=lease)))
            ev = self.stream_event(client, "stream open (short lease)")
            if ev[0] != "response" or ev[1].opened.lease_ms != lease:
                diverge("stream open (short lease)", f"expected `opened` with lease {lease}: {ev}")
            sid = ev[1].opened.session
            client.send(session_pb.SessionRequest(commands=[session_pb.Command(
                seq=1, create=session_pb.Command.Create(id=M.FIRST_CLIENT_ID, data=b"x" * 100))]))
        else:
            code, r, details = self.call("OpenSession", pb.OpenSessionRequest(lease_ms=lease))
            self.check_code("OpenSession", M.OK, code, details)
            sid = r.session
            code, _, details = self.call("Create", pb.CreateRequest(session=sid,
                                                                    data=b"x" * 100))
            # NOT_FOUND: it expired already; RESOURCE_EXHAUSTED: the other sessions hold it all.
            if code not in (M.OK, M.NF, M.RE):
                diverge("Create (short lease)", f"{code} {details!r}")
        # The create may have taken a page, which stays reserved after the session is gone;
        # near the limit it may have returned free pages first (Note [Pool layout]).
        try:
            near_limit = self.m.check_alloc(100) == "maybe"
        except M.Fail:
            near_limit = True
        self.m.maybe_alloc = self.m.maybe_alloc or near_limit
        self.m.pending_pages += self.m.new_page(100)
        self.m.new_pages.append(self.m.new_page(100))
        time.sleep(lease / 1000 + 0.05)
        self.wait_for_sessions(len(self.m.sessions), "lease expiry")
        self.m.closed_sessions.append(sid)
        if stream:
            ev = self.stream_event(client, "stream (short lease)")
            if ev[0] != "end" or ev[1] != M.NF:
                diverge("stream (short lease)", f"expected the stream to end NOT_FOUND: {ev}")
        else:
            code, _, details = self.call("Sync", pb.SyncRequest(session=sid))
            self.check_code("Sync after the lease", M.Fail(M.NF), code, details)

    # ---- allocations ----

    def allocated(self, what, s, r, size, content, mode, tensor=None):
        if r.handle == 0 or r.handle >= M.FIRST_CLIENT_ID or r.handle in s.handles:
            diverge(what, f"handle {r.handle} is 0, a client id, or in use")
        if r.size != size:
            diverge(what, f"size {r.size}, the model has {size}")
        if tensor is not None and list(r.strides) != tensor[1]:
            diverge(what, f"strides {list(r.strides)}, dense would be {tensor[1]}")
        self.m.add_handle(s, r.handle, size, content, mode, tensor)

    def allocation(self, what, request, sid, size, content_of, tensor=None, request_check=None):
        try:
            if request_check is not None:
                request_check()
            s = self.m.session(sid)
            mode = self.m.check_alloc(size)
            expected = M.OK
        except M.Fail as f:
            expected, mode, s = f, None, None
        code, r, details = self.call(what, request)
        if mode == "maybe" and code == M.RE:
            return
        self.check_code(what, expected, code, details)
        if code == M.OK:
            self.allocated(what, s, r, size, content_of(s), mode, tensor)

    @rule(data=st.data())
    def create(self, data):
        sid = self.pick_session(data)
        payload = data.draw(payloads, label="data")

        def check():
            if not payload:
                raise M.Fail(M.IA)
        self.allocation("Create", pb.CreateRequest(session=sid, data=payload), sid, len(payload),
                        lambda s: bytearray(payload), request_check=check)

    @rule(data=st.data())
    def create_tensor(self, data):
        sid = self.pick_session(data)
        shape = data.draw(shapes, label="shape")
        es = data.draw(elem_sizes, label="elem_size")
        dense = M.prod(shape) * es
        wrong = st.sampled_from([0, 1, dense + 1, max(dense - 1, 0)])
        n = data.draw(mostly(st.just(dense), wrong) if dense <= 4096 else st.integers(0, 64),
                      label="data_len")
        payload = bytes(i % 251 for i in range(n))
        size = dense

        def check():
            M.check_tensor_shape(shape, es)
            if n != dense:
                raise M.Fail(M.IA)
        strides = [M.prod(shape[i + 1:]) for i in range(len(shape))]
        self.allocation("CreateTensor", pb.CreateTensorRequest(
            session=sid, data=payload, shape=shape, elem_size=es), sid, size,
            lambda s: bytearray(payload), (shape, strides, es), request_check=check)

    @rule(data=st.data())
    def empty(self, data):
        sid = self.pick_session(data)
        size = data.draw(sizes, label="size")

        def check():
            if size == 0:
                raise M.Fail(M.IA)
        self.allocation("Empty", pb.EmptyRequest(session=sid, size=size), sid, size,
                        lambda s: self.m.empty_content(s, size), request_check=check)

    @rule(data=st.data())
    def empty_tensor(self, data):
        sid = self.pick_session(data)
        shape = data.draw(shapes, label="shape")
        es = data.draw(elem_sizes, label="elem_size")
        size = M.prod(shape) * es
        strides = [M.prod(shape[i + 1:]) for i in range(len(shape))]
        self.allocation("EmptyTensor", pb.EmptyTensorRequest(session=sid, shape=shape,
                                                             elem_size=es), sid, size,
                        lambda s: self.m.empty_content(s, size), (shape, strides, es),
                        request_check=lambda: M.check_tensor_shape(shape, es))

    # ---- reads ----

    def draw_read_bindings(self, data, s):
        n = data.draw(mostly(st.integers(1, 3), st.sampled_from([0, 1024, 1025]), 92),
                      label="bindings")
        if n > 3:
            b = self.pick_binding(data, s)
            return [b] * n
        return [self.pick_binding(data, s) for _ in range(n)]

    @rule(data=st.data())
    def read(self, data):
        sid = self.pick_session(data)
        s = self.m.sessions.get(sid)
        bindings = self.draw_read_bindings(data, s)
        try:
            M.check_read_request(bindings)
            expected = M.predict_read(self.m, self.m.session(sid), bindings)
        except M.Fail as f:
            expected = f
        code, r, details = self.call("Read", pb.ReadRequest(session=sid, bindings=[
            types_pb.Binding(handle=h, offset_start=a, offset_end=b) for h, a, b in bindings]))
        self.check_code("Read", M.OK if isinstance(expected, list) else expected, code, details)
        if code == M.OK:
            self.check_read("Read", expected, list(r.data))

    def check_read(self, what, expected, got):
        if len(got) != len(expected):
            diverge(what, f"{len(got)} results for {len(expected)} bindings")
        for i, (want, have) in enumerate(zip(expected, got)):
            if want is not None and want != have:
                diverge(what, f"binding {i}: {len(have)} bytes {have[:32]!r}..., the model has "
                              f"{len(want)} bytes {want[:32]!r}...")

    def draw_tensor_bindings(self, data, s):
        n = data.draw(mostly(st.integers(1, 2), st.sampled_from([0, 3, 4, 4, 5, 1025]), 90),
                      label="bindings")
        if n >= 2 and data.draw(st.booleans(), label="repeat"):
            # One binding n times; often 2^62 bytes each (one element, stride 0), whose sum
            # passes 2^64 at the fourth (error-model row 29; it once wrapped to 0 and ended the
            # daemon).
            hid, a, b = self.pick_binding(data, s)
            if data.draw(st.booleans(), label="sum_overflow"):
                e = data.draw(st.integers(0, 3), label="log2_elem_size")
                meta = ([2**(62 - e)], [0], 2**e)
            else:
                meta = self.tensor_meta(data, s, hid)
            return [(hid, a, b, *meta)] * n
        out = []
        for _ in range(min(n, 4)):
            hid, a, b = self.pick_binding(data, s)
            out.append((hid, a, b, *self.tensor_meta(data, s, hid)))
        return out * (n // len(out)) + out[:n % len(out)] if out else []

    @rule(data=st.data())
    def read_tensor(self, data):
        sid = self.pick_session(data)
        s = self.m.sessions.get(sid)
        bindings = self.draw_tensor_bindings(data, s)
        try:
            M.check_read_tensor_request(bindings)
            expected = M.predict_read_tensor(self.m, self.m.session(sid), bindings)
        except M.Fail as f:
            expected = f
        request = pb.ReadTensorRequest(session=sid, bindings=[
            types_pb.BindingWithMeta(binding=types_pb.Binding(handle=h, offset_start=a,
                                                              offset_end=b),
                                     shape=shape, strides=strides, elem_size=es)
            for h, a, b, shape, strides, es in bindings])
        code, r, details = self.call("ReadTensor", request)
        self.check_code("ReadTensor", M.OK if isinstance(expected, list) else expected, code,
                        details)
        if code == M.OK:
            self.check_tensor_read("ReadTensor", expected, list(r.data))

    def check_tensor_read(self, what, expected, got):
        self.check_read(what, [data for _, data in expected], got)
        for i, ((size, _), have) in enumerate(zip(expected, got)):
            if len(have) != size:
                diverge(what, f"binding {i}: {len(have)} bytes, expected {size}")

    @rule(data=st.data())
    def get_resource(self, data):
        """The storage behind a binding: its size, and (Note [Pool layout]) a place that no
        other live handle's bytes share and that stays put while the handle lives."""
        sid = self.pick_session(data)
        s = self.m.sessions.get(sid)
        hid, a, b = self.pick_binding(data, s)
        try:
            h, start, length = self.m.resolve(self.m.session(sid), hid, a, b)
            expected = M.OK
        except M.Fail as f:
            expected = f
        code, r, details = self.call("GetResource", pb.GetResourceRequest(
            session=sid, binding=types_pb.Binding(handle=hid, offset_start=a, offset_end=b)))
        self.check_code("GetResource", expected, code, details)
        if code != M.OK:
            return
        where = (r.storage_id, r.offset - start)
        if r.size != length or r.device_pointer or r.ipc_handle or where[1] % self.m.alignment:
            diverge("GetResource", f"{r} for a view of {length} bytes at {start} (CPU: no "
                                   f"pointer or IPC handle; slices aligned)")
        if h.where is not None and h.where != where:
            diverge("GetResource", f"handle {hid} moved from {h.where} to {where}")
        h.where = where
        for other_s in self.m.sessions.values():
            for other_id, o in other_s.handles.items():
                if o is h or o.where is None or o.where[0] != where[0]:
                    continue
                if o.where[1] < where[1] + h.size and where[1] < o.where[1] + o.size:
                    diverge("GetResource", f"handle {hid} ({h.size} bytes at {where}) overlaps "
                                           f"handle {other_id} ({o.size} bytes at {o.where})")

    # ---- release ----

    def draw_release_ids(self, data, s):
        n = data.draw(mostly(st.integers(1, 3), st.sampled_from([0, 65537]), 95), label="ids")
        if n > 3:
            return [self.pick_handle(data, s)] * n
        return [self.pick_handle(data, s) for _ in range(n)]

    @rule(data=st.data())
    def release(self, data):
        sid = self.pick_session(data)
        s = self.m.sessions.get(sid)
        ids = self.draw_release_ids(data, s)
        try:
            if not 1 <= len(ids) <= M.MAX_RELEASE:
                raise M.Fail(M.IA)
            drops = M.predict_release(self.m.session(sid), ids)
            expected = M.OK
        except M.Fail as f:
            expected = f
        code, _, details = self.call("Release", pb.ReleaseRequest(session=sid, handles=ids))
        self.check_code("Release", expected, code, details)
        if code == M.OK:
            M.apply_release(self.m, s, drops)

    # ---- execute ----

    def draw_launch(self, data, s, tame=False):
        """An execute; `tame`: its rare (mostly invalid) variants rarer still (a graph's steps,
        so that most recordings succeed)."""
        def pct(p):
            return 99 if tame else p
        kind = data.draw(mostly(st.just("builtin"), st.sampled_from(["ptx", "none"]), pct(95)),
                         label="kernel")
        name = data.draw(mostly(st.sampled_from(KERNEL_NAMES),
                                st.sampled_from(M.UNKNOWN_KERNELS + ("", "k" * 65)), pct(92)),
                         label="name")
        dtype = data.draw(st.sampled_from([3, 4, 5, 1]) if tame else DTYPES, label="dtype")
        n_expected = M.KERNELS[name][0] if name in M.KERNELS else 2
        n = data.draw(mostly(st.just(n_expected), st.sampled_from([0, 1, 2, 3, 65]), pct(90)),
                      label="buffers")
        buffers = [self.pick_binding(data, s, own_percent=95, clean=tame)
                   for _ in range(min(n, 4))]
        if n > 4:
            buffers = (buffers * n)[:n]
        es = M.ELEM[dtype][1] if dtype in M.ELEM else 4
        # A layout that fits the buffers (so that most launches are valid), then perhaps broken.
        views = []
        for hid, a, b in buffers:
            h = s.handles.get(hid) if s is not None else None
            views.append(max(h.size - a - b, 0) if h is not None and a + b <= h.size else 0)
        elems = min(views) // es if views else 0
        rank = data.draw(st.integers(0, 3), label="rank")
        shape = []
        left = max(elems, 1)
        for _ in range(rank):
            d = data.draw(st.integers(1, max(1, min(left, 8))), label="dim")
            shape.append(d)
            left = max(left // d, 1)
        axis = data.draw(st.one_of(st.integers(0, max(rank - 1, 0)), u32), label="axis")
        layouts = []
        for i in range(len(buffers)):
            t = list(shape)
            last = i == len(buffers) - 1
            if name == "sum" and last and axis < len(t):
                t[axis] = 1
            if name == "add" and not last:
                t = [1 if data.draw(st.booleans(), label="broadcast") else d for d in t]
            strides = [M.prod(t[j + 1:]) for j in range(len(t))]
            layouts.append((t, strides))
        n_buf = len(buffers)
        words = [v // es for v in views] + [M.prod(t) for t, _ in layouts]
        words += [len(t) for t, _ in layouts]
        at = 5 * n_buf
        shape_at, stride_at = [], []
        for t, _ in layouts:
            shape_at.append(at)
            at += len(t)
        for t, _ in layouts:
            stride_at.append(at)
            at += len(t)
        words += shape_at + stride_at
        words += [d for t, _ in layouts for d in t] + [x for _, ss in layouts for x in ss]
        words = [min(w, M.U32_MAX) for w in words]
        mutation = data.draw(mostly(st.just(9), st.integers(0, 2), pct(85)),
                             label="metadata_mutation")
        if mutation == 0 and words:
            i = data.draw(st.integers(0, len(words) - 1), label="word")
            words[i] = data.draw(st.sampled_from([0, 1, 2, 2**31, M.U32_MAX]), label="value")
        elif mutation == 1:
            words = words[:data.draw(st.integers(0, len(words)), label="truncate")]
        elif mutation == 2:
            words = [0] * 65537
        scalars = []
        if name == "fill" or data.draw(st.integers(0, 19), label="scalars") == 0:
            elem = data.draw(mostly(st.just(dtype), DTYPES), label="scalar_elem")
            kind_of = M.ELEM.get(elem, ("", 0, None, "int"))[3]
            value = data.draw(mostly(st.integers(-5, 5), st.sampled_from(
                [2**31 - 1, 2**31, 2**32 - 1, 2**32, -2**31, -2**31 - 1, 2**63 - 1, -2**63]), 70),
                label="value")
            floats, ints, uints = [], [], []
            if kind_of == "float":
                floats = [data.draw(st.floats(allow_nan=False, width=64), label="float")]
            elif kind_of == "int":
                ints = [value]
            else:
                uints = [abs(value)]
            scalars.append((elem, floats, ints, uints))
            if data.draw(st.integers(0, 19), label="second_group") == 0:
                scalars.append(scalars[0])
        count, dynamic = (1, 1, 1), None
        c = data.draw(mostly(st.just(9), st.integers(0, 2), pct(85)), label="count_kind")
        if c == 0:
            count = tuple(data.draw(u32, label=axis) for axis in "xyz")
        elif c == 1:
            count, dynamic = None, self.pick_binding(data, s)
        elif c == 2:
            count = None
        mode = data.draw(mostly(st.sampled_from([0, 1]), st.sampled_from([2, 3, 2**31 - 1]),
                                pct(95)), label="mode")
        cube = data.draw(st.sampled_from([(1, 1, 1), (1024, 1, 1), (0, 1, 1), (1024, 2, 1)]),
                         label="cube_dim")
        return M.Launch(kind, name=name, dtype=dtype, axis=axis,
                        allow_tf32=data.draw(st.integers(0, 49), label="tf32") == 0,
                        count=count, dynamic=dynamic, buffers=buffers, metadata=words,
                        scalars=scalars, mode=mode, cube_dim=cube,
                        code=data.draw(st.sampled_from(["x", ""]), label="code"))

    def launch_parts(self, launch):
        """(kernel, count, bindings, mode) protos of a launch."""
        if launch.kind == "builtin":
            kernel = types_pb.Kernel(builtin=types_pb.BuiltinKernel(
                name=launch.name, dtype=launch.dtype, axis=launch.axis,
                allow_tf32=launch.allow_tf32))
        elif launch.kind == "ptx":
            x, y, z = launch.cube_dim
            kernel = types_pb.Kernel(ptx=types_pb.PtxKernel(
                ptx=launch.code, entry_point=launch.entry,
                cube_dim=types_pb.CubeDim(x=x, y=y, z=z)))
        else:
            kernel = types_pb.Kernel()
        if launch.dynamic is not None:
            h, a, b = launch.dynamic
            count = types_pb.CubeCount(dynamic=types_pb.Binding(handle=h, offset_start=a,
                                                                offset_end=b))
        elif launch.count is not None:
            x, y, z = launch.count
            count = types_pb.CubeCount(static_count=types_pb.CubeCount.Static(x=x, y=y, z=z))
        else:
            count = types_pb.CubeCount()
        bindings = types_pb.Bindings(
            buffers=[types_pb.Binding(handle=h, offset_start=a, offset_end=b)
                     for h, a, b in launch.buffers],
            metadata=launch.metadata,
            scalars=[types_pb.ScalarGroup(elem=e, floats=f, ints=i, uints=u)
                     for e, f, i, u in launch.scalars])
        return kernel, count, bindings, launch.mode

    def predict_launch(self, s, launch):
        """(expected, apply, ambiguous code or None) for a launch in session s (None: unknown)."""
        try:
            M.check_launch_request(launch)
            if s is None:
                raise M.Fail(M.NF)
            try:
                return M.OK, M.predict_execute(self.m, s, launch), None
            except M.Ambiguous as a:
                try:
                    return M.OK, M.predict_execute(self.m, s, launch, dynamic_ok=True), a.code
                except M.Fail as f:
                    return f, None, a.code
        except M.Fail as f:
            return f, None, None

    @rule(data=st.data())
    def execute(self, data):
        sid = self.pick_session(data)
        s = self.m.sessions.get(sid)
        launch = self.draw_launch(data, s)
        expected, apply, ambiguous = self.predict_launch(s, launch)
        kernel, count, bindings, mode = self.launch_parts(launch)
        code, _, details = self.call("Execute", pb.ExecuteRequest(
            session=sid, kernel=kernel, count=count, bindings=bindings, mode=mode))
        if ambiguous is not None and code == ambiguous:
            return
        self.check_code("Execute", expected, code, details)
        if code == M.OK:
            apply()

    # ---- the rest of the trait ----

    @rule(data=st.data(), method=st.sampled_from(["Flush", "Sync"]))
    def flush_or_sync(self, data, method):
        sid = self.pick_session(data)
        expected = M.OK if sid in self.m.sessions else M.Fail(M.NF)
        request = (pb.FlushRequest if method == "Flush" else pb.SyncRequest)(session=sid)
        code, _, details = self.call(method, request)
        self.check_code(method, expected, code, details)

    @rule(data=st.data())
    def start_profile(self, data):
        sid = self.pick_session(data)
        events = data.draw(st.one_of(st.just(0), st.sampled_from(
            [1, M.MAX_TRACE_EVENTS, M.MAX_TRACE_EVENTS + 1, 2**32 - 1])), label="trace_events")
        s = self.m.sessions.get(sid)
        expected = (M.Fail(M.NF) if s is None else M.Fail(M.FP) if s.profile else
                    M.Fail(M.IA) if events > M.MAX_TRACE_EVENTS else M.OK)
        code, _, details = self.call("StartProfile", pb.StartProfileRequest(
            session=sid, trace_events=events))
        self.check_code("StartProfile", expected, code, details)
        if code == M.OK:
            s.profile = True

    @rule(data=st.data())
    def end_profile(self, data):
        sid = self.pick_session(data)
        s = self.m.sessions.get(sid)
        expected = M.Fail(M.NF) if s is None else M.OK if s.profile else M.Fail(M.FP)
        code, _, details = self.call("EndProfile", pb.EndProfileRequest(session=sid))
        self.check_code("EndProfile", expected, code, details)
        if code == M.OK:
            s.profile = False

    @rule(data=st.data(), cleanup=st.booleans())
    def memory_usage_or_cleanup(self, data, cleanup):
        device = data.draw(mostly(st.just(0), u32), label="device")
        method = "MemoryCleanup" if cleanup else "MemoryUsage"
        request = (pb.MemoryCleanupRequest if cleanup else pb.MemoryUsageRequest)(device=device)
        code, r, details = self.call(method, request)
        self.check_code(method, M.OK if device == 0 else M.Fail(M.NF), code, details)
        if code == M.OK:
            if cleanup:
                self.m.cleanup()
            self.check_usage(method, r.usage, observe=False)

    # ---- session streams ----

    @precondition(lambda self: len(self.m.sessions) < MAX_SESSIONS)
    @rule(data=st.data(), ring=st.booleans())
    def stream_open(self, data, ring):
        device = data.draw(mostly(st.just(0), u32), label="device")
        lease = data.draw(mostly(st.just(0), st.sampled_from([M.MAX_LEASE_MS + 1, 2**64 - 1])),
                          label="lease_ms")
        RUN.steps += 1
        client = self.new_stream(ring, session_pb.SessionRequest(
            open=session_pb.SessionRequest.Open(device=device, lease_ms=lease)))
        ev = self.stream_event(client, "stream open")
        expected = M.NF if device != 0 else M.IA if lease > M.MAX_LEASE_MS else M.OK
        RUN.count("Session.open", ev[1] if ev[0] == "end" else M.OK)
        if expected != M.OK:
            if ev[0] != "end" or ev[1] != expected:
                diverge("stream open", f"the model predicts the stream ends {expected}, got {ev}")
            return
        if ev[0] != "response" or not ev[1].HasField("opened"):
            diverge("stream open", f"expected `opened`, got {ev}")
        opened = ev[1].opened
        if opened.first_client_id != M.FIRST_CLIENT_ID or opened.lease_ms != LEASE_MS:
            diverge("stream open", f"opened {opened}")
        if opened.session in self.m.sessions:
            diverge("stream open", f"session {opened.session} is already open")
        self.m.sessions[opened.session] = M.Session(opened.session, stream=True)
        self.streams[opened.session] = client

    def stream_event(self, client, what):
        try:
            return client.event(RPC_TIMEOUT)
        except queue.Empty:
            diverge(what, f"no answer in {RPC_TIMEOUT} s (daemon alive: {self.d.alive()})")

    @precondition(lambda self: self.streams)
    @rule(data=st.data())
    def stream_batch(self, data):
        self.run_batch(data, [None] * data.draw(st.integers(1, 4), label="commands"))

    @precondition(lambda self: self.streams)
    @rule(data=st.data())
    def graph_batch(self, data):
        """A graph's life in one batch: begin_graph, executes, end_graph, replays (with right,
        wrong, released or poisoned bindings), releases of the handles it holds, a release of
        the graph, memory usage; each kind may still be drawn wrong (seq, ids, nesting)."""
        plan = [data.draw(st.sampled_from(["create", "create_tensor", "empty_tensor"]),
                          label="alloc") for _ in range(data.draw(st.integers(0, 2), label="n"))]
        plan += ["begin_graph"] + ["execute"] * data.draw(st.integers(0, 3), label="steps")
        plan += ["end_graph"]
        for _ in range(data.draw(st.integers(0, 4), label="after")):
            plan.append(data.draw(st.sampled_from(
                ["replay_graph", "replay_graph", "replay_graph", "release", "release_graph",
                 "memory_usage", "read", "execute", "begin_graph", None]), label="then"))
        self.run_batch(data, plan)

    @precondition(lambda self: self.streams and RUN.regions)
    @rule(data=st.data())
    def region_batch(self, data):
        """A region registered for a stream's session, then a batch of creates from it, reads
        into it (raw and tensor, checked byte for byte afterwards) and a release_region."""
        sid = data.draw(st.sampled_from(list(self.streams)), label="stream")
        s = self.m.sessions[sid]
        if not s.regions or data.draw(st.booleans(), label="another_region"):
            self.register_region(data, "ok", sid)
        plan = [data.draw(st.sampled_from(["create", "create_tensor", "read", "read",
                                           "read_tensor", "read_tensor", "release_region",
                                           "execute", None]), label="then")
                for _ in range(data.draw(st.integers(1, 5), label="commands"))]
        self.region_bias = 8
        try:
            self.run_batch(data, plan, sid)
        finally:
            self.region_bias = 3

    def run_batch(self, data, plan, sid=None):
        if sid is None:
            sid = data.draw(st.sampled_from(list(self.streams)), label="stream")
        s = self.m.sessions[sid]
        client = self.streams[sid]
        commands, expected = [], []  # expected: (seq, kind, check) per reply, in order.
        ambiguous = None
        for kind in plan:
            command, reply, amb = self.stream_command(data, s, kind)
            commands.append(command)
            if reply is not None:
                expected.append(reply)
            if amb is not None:
                ambiguous = amb
                break
        sync_seq = self.next_seq(data, s)
        if ambiguous is not None:  # The sync must answer with the failure count.
            sync_seq = s.last_seq + 1
        commands.append(session_pb.Command(seq=sync_seq, sync=session_pb.Command.Sync()))
        sync_reply = self.predict_sync(s, sync_seq, ambiguous)
        RUN.steps += len(commands)
        cut = data.draw(st.integers(0, len(commands)), label="split")  # Two messages, or one.
        for part in (commands[:cut], commands[cut:]):
            if part:
                client.send(session_pb.SessionRequest(commands=part))
        replies = []
        while len(replies) < len(expected) + 1:
            ev = self.stream_event(client, "stream batch")
            if ev[0] == "end":
                diverge("stream batch", f"the stream ended {ev[1:]} with {len(replies)} of "
                                        f"{len(expected) + 1} replies")
            if ev[1].HasField("opened"):
                diverge("stream batch", "a second `opened`")
            replies += list(ev[1].replies)
        if len(replies) != len(expected) + 1:
            diverge("stream batch", f"{len(replies)} replies, expected {len(expected) + 1}")
        for (seq, kind, check), reply in zip(expected, replies):
            RUN.count(f"Session.{kind}", M.CODE_NAME.get(reply.code, reply.code))
            if reply.seq != seq:
                diverge(f"stream {kind}", f"reply for seq {reply.seq}, expected seq {seq}")
            check(reply)
        RUN.count("Session.sync", M.CODE_NAME.get(replies[-1].code, replies[-1].code))
        sync_reply(replies[-1])
        self.check_regions()

    def next_seq(self, data, s):
        last = -1 if s.last_seq is None else s.last_seq
        normal = min(last + 1, M.U64_MAX)
        rare = mostly(st.sampled_from([max(last, 0), max(last - 1, 0), 0,
                                       min(last + 2**32, M.U64_MAX), 2**63]),
                      st.just(M.U64_MAX), 90)  # After 2^64 - 1 no command can run.
        return data.draw(mostly(st.just(normal), rare, 97), label="seq")

    def seq_status(self, s, seq, invalid):
        """CheckSeq: the seq error, else the command's own request error (or None)."""
        if s.last_seq is not None and seq <= s.last_seq:
            return M.Fail(M.IA)
        s.last_seq = seq
        return invalid

    def fail(self, s, seq, kind, status):
        """A failed command that does not answer: what sync will report (and the poison)."""
        if not status.poison:
            status = M.Fail(status.code, prefix=f"command {seq} ({kind}) failed: ")
            status.poison = True
        s.failures.append(status)
        return status

    def stream_command(self, data, s, kind=None):
        """One command (of `kind`, or drawn): (proto, expected reply or None, ambiguous-outcome
        marker or None)."""
        kinds = ["create", "create_tensor", "empty", "empty_tensor", "execute", "execute",
                 "release", "read", "read_tensor", "flush", "memory_usage", "memory_cleanup",
                 "start_profile", "end_profile", "none", "begin_graph", "replay_graph",
                 "replay_graph", "release_graph"] + (["release_region"] if RUN.regions else [])
        if s.recording is not None:  # Mostly executes to record, then end_graph.
            kinds += ["execute"] * 8 + ["end_graph"] * 4
        elif s.graphs:
            kinds += ["replay_graph"] * 3 + ["end_graph"]
        else:
            kinds += ["begin_graph"] * 2 + ["end_graph"]
        if kind is None:
            kind = data.draw(st.sampled_from(kinds), label="command")
        seq = self.next_seq(data, s)
        C = session_pb.Command
        if kind in ("create", "create_tensor", "empty", "empty_tensor"):
            return self.stream_allocation(data, s, seq, kind)
        if kind in ("begin_graph", "end_graph", "replay_graph", "release_graph"):
            return self.graph_command(data, s, seq, kind)
        if kind == "release_region":
            regions = list(s.regions)
            rid = data.draw(st.sampled_from(regions) if regions and data.draw(
                st.integers(0, 9), label="own_region") < 8 else st.sampled_from(
                [0, 1, 64, M.U64_MAX]), label="region")
            command = C(seq=seq, release_region=C.ReleaseRegion(region=rid))
            status = self.seq_status(s, seq, None)
            if status is None:
                if s.regions.pop(rid, None) is None:
                    status = M.Fail(M.NF)
            if status is not None:
                self.fail(s, seq, kind, status)
            return command, None, None
        if kind == "execute" and s.recording is not None:
            return self.record_execute(data, s, seq)
        if kind == "execute":
            launch = self.draw_launch(data, s)
            k, count, bindings, mode = self.launch_parts(launch)
            command = C(seq=seq, execute=C.Execute(kernel=k, count=count, bindings=bindings,
                                                   mode=mode))
            # What the execute would write: a builtin's last buffer, a client kernel's every
            # buffer, nothing without a kernel.
            outputs = (([launch.buffers[-1][0]] if launch.buffers else [])
                       if launch.kind == "builtin" else
                       [] if launch.kind == "none" else [b[0] for b in launch.buffers])
            try:
                M.check_launch_request(launch)
                invalid = None
            except M.Fail as f:
                invalid = f
            status = self.seq_status(s, seq, invalid)
            if status is None:
                expected, apply, amb_code = self.predict_launch(s, launch)
                if amb_code is not None:  # A dynamic count of unknown bytes: count statically.
                    launch.dynamic, launch.count = None, (1, 1, 1)
                    k, count, bindings, mode = self.launch_parts(launch)
                    command = C(seq=seq, execute=C.Execute(kernel=k, count=count,
                                                           bindings=bindings, mode=mode))
                    expected, apply, _ = self.predict_launch(s, launch)
                if expected == M.OK:
                    apply()
                    return command, None, None
                status = expected
            self.poison_outputs(s, self.fail(s, seq, "execute", status), outputs)
            return command, None, None
        if kind == "release":
            ids = self.draw_release_ids(data, s)
            command = C(seq=seq, release=C.Release(ids=ids))
            status = self.seq_status(s, seq, None if 1 <= len(ids) <= M.MAX_RELEASE
                                     else M.Fail(M.IA))
            if status is None:
                first = None
                for hid in ids:
                    if hid in s.handles:
                        self.m.free_handle(s, hid)
                    elif hid in s.poisoned:
                        del s.poisoned[hid]
                    elif first is None:
                        first = M.Fail(M.NF)
                status = first
            if status is not None:
                self.fail(s, seq, "release", status)
            return command, None, None
        if kind in ("read", "read_tensor"):
            if kind == "read":
                bindings = self.draw_read_bindings(data, s)
                command = C(seq=seq, read=C.Read(bindings=[
                    types_pb.Binding(handle=h, offset_start=a, offset_end=b)
                    for h, a, b in bindings]))
            else:
                bindings = self.draw_tensor_bindings(data, s)
                command = C(seq=seq, read_tensor=C.ReadTensor(bindings=[
                    types_pb.BindingWithMeta(
                        binding=types_pb.Binding(handle=h, offset_start=a, offset_end=b),
                        shape=shape, strides=strides, elem_size=es)
                    for h, a, b, shape, strides, es in bindings]))
            try:
                if kind == "read":
                    M.check_read_request(bindings)
                else:
                    M.check_read_tensor_request(bindings)
                invalid = None
            except M.Fail as f:
                invalid = f
            if RUN.regions and data.draw(st.integers(0, 9), label="into_region") < (
                    self.region_bias if s.regions else 1):
                return self.read_into_region(data, s, seq, kind, command, bindings, invalid)
            status = self.seq_status(s, seq, invalid)
            try:
                if status is not None:
                    raise status
                if kind == "read":
                    result = M.predict_read(self.m, s, bindings)
                else:
                    result = M.predict_read_tensor(self.m, s, bindings)
            except M.Fail as f:
                return command, (seq, kind, self.reply_check(kind, f)), None
            checker = self.check_read if kind == "read" else self.check_tensor_read

            def check(reply):
                self.reply_code(kind, reply, M.OK)
                checker(f"stream {kind}", result, list(reply.read.data))
            return command, (seq, kind, check), None
        if kind in ("flush", "memory_cleanup", "start_profile", "none"):
            body = {"flush": {"flush": C.Flush()}, "memory_cleanup": {
                "memory_cleanup": C.MemoryCleanup()}, "start_profile": {
                "start_profile": C.StartProfile()}, "none": {}}[kind]
            command = C(seq=seq, **body)
            status = self.seq_status(s, seq, M.Fail(M.IA) if kind == "none" else None)
            if status is None and kind == "start_profile":
                if s.profile:
                    status = M.Fail(M.FP)
                else:
                    s.profile = True
            if status is None and kind == "memory_cleanup":
                self.m.cleanup()
            if status is not None:
                self.fail(s, seq, kind, status)
            return command, None, None
        if kind == "end_profile":
            command = C(seq=seq, end_profile=C.EndProfile())
            status = self.seq_status(s, seq, None)
            if status is None:
                if s.profile:
                    s.profile = False
                    return command, (seq, kind, lambda r: self.reply_code(kind, r, M.OK)), None
                status = M.Fail(M.FP)
            return command, (seq, kind, self.reply_check(kind, status)), None
        # memory_usage: the usage at this point of the stream.
        command = C(seq=seq, memory_usage=C.MemoryUsage())
        status = self.seq_status(s, seq, None)
        if status is not None:
            return command, (seq, kind, self.reply_check(kind, status)), None
        allocs, in_use, pad_lo, pad_hi = self.m.usage()

        def check_usage(reply):
            self.reply_code(kind, reply, M.OK)
            u = reply.memory_usage
            if (u.number_allocs, u.bytes_in_use) != (allocs, in_use) or not (
                    pad_lo <= u.bytes_padding <= pad_hi):
                diverge("stream memory_usage", f"{u}, the model has {allocs} allocations, "
                                               f"{in_use} bytes, padding [{pad_lo}, {pad_hi}]")
        return command, (seq, kind, check_usage), None

    def reply_code(self, kind, reply, code, detail=""):
        if reply.code != M.CODE_NUMBER[code]:
            diverge(f"stream {kind}", f"the model predicts {code}{detail}, the daemon answered "
                                      f"{M.CODE_NAME.get(reply.code, reply.code)}: "
                                      f"{reply.message!r}")

    def reply_check(self, kind, f):
        def check(reply):
            self.reply_code(kind, reply, f.code)
            if f.prefix is not None and f.prefix.split("(")[0] != f"command {reply.seq} ":
                RUN.count("poisoned id met", "stream")
            problem = f.check_message(reply.message)
            if problem:
                diverge(f"stream {kind}", f"{problem}, got {reply.message!r}")
        return check

    def poison_outputs(self, s, poison, outputs):
        for hid in outputs:
            if hid in s.handles:
                s.handles[hid].poison = poison

    # ---- recorded graphs (docs/api.md, "Recorded graphs"; Note [Recorded graphs]) ----

    def fail_recording(self, s, f):
        """The recording's first failure (end_graph answers it); its holds go."""
        rec = s.recording
        if rec.failure is None:
            rec.failure = f
            self.m.drop_holds(s, rec.graph)
            rec.graph = None

    def record_execute(self, data, s, seq):
        """An execute while a graph records: checked (PrepareLaunch, ValidateBuiltin) and kept;
        nothing runs. Its failure is reported by sync and poisons its outputs as any execute's,
        and fails the recording ("graph G step N (execute): ..."); once the recording failed,
        executes are neither checked nor run nor reported."""
        C = session_pb.Command
        rec = s.recording
        launch = self.draw_launch(data, s, tame=data.draw(st.integers(0, 9), label="tame") > 0)
        try:
            M.check_launch_request(launch)
            invalid = None
        except M.Fail as f:
            invalid = f
        status = self.seq_status(s, seq, invalid)
        if status is None and rec.failure is not None:
            pass
        elif status is None:
            try:
                views, tensors = M.predict_record(self.m, s, launch)
                if launch.dynamic is not None:  # Replays would read its bytes: count statically.
                    launch.dynamic, launch.count = None, (1, 1, 1)
            except M.Fail as f:
                status = f
            else:
                M.record_step(self.m, s, rec.graph, launch, views, tensors)
        RUN.count("graph step", "not checked" if status is None and rec.failure is not None else
                  "recorded" if status is None else status.code)
        if status is not None and rec.failure is None:
            step = len(rec.graph.steps)
            self.fail_recording(s, M.Fail(status.code, prefix=f"graph {rec.graph.id} step {step} "
                                                               "(execute): "))
        k, count, bindings, mode = self.launch_parts(launch)
        command = C(seq=seq, execute=C.Execute(kernel=k, count=count, bindings=bindings,
                                               mode=mode))
        if status is not None:
            self.poison_outputs(s, self.fail(s, seq, "execute", status), M.graph_outputs(launch))
        return command, None, None

    def draw_graph_id(self, data, s, existing=False):
        """Mostly a new id (`existing`: mostly a graph of the session); else an edge value."""
        fresh = s.next_graph_id
        if existing and s.graphs and data.draw(st.integers(0, 9), label="existing") < 8:
            return data.draw(st.sampled_from(list(s.graphs)), label="graph")
        choices = [st.just(fresh)] * 6 + [st.sampled_from([0, 1, 2**63, M.U64_MAX]), u64]
        if s.graphs:
            choices += [st.sampled_from(list(s.graphs))] * 2
        gid = data.draw(st.one_of(*choices), label="graph")
        if gid == fresh:
            s.next_graph_id += 1
        return gid

    def graph_command(self, data, s, seq, kind):
        C = session_pb.Command
        if kind == "begin_graph":
            gid = self.draw_graph_id(data, s)
            n = data.draw(mostly(st.integers(0, 3), st.sampled_from([4, 1025]), 95),
                          label="parameters")
            own = [hid for hid, h in s.handles.items() if h.poison is None]
            if own and data.draw(st.integers(0, 9), label="distinct") < 8:
                params = data.draw(st.permutations(own), label="params")[:n]
            else:
                params = [self.pick_handle(data, s, own_percent=90) for _ in range(min(n, 4))]
            if n > 4:
                params = [M.FIRST_CLIENT_ID + 10**6 + i for i in range(n)]
            command = C(seq=seq, begin_graph=C.BeginGraph(graph=gid, parameters=params))
            status = self.seq_status(s, seq, None)
            if s.recording is not None:  # Graphs do not nest: the recording fails.
                rec = s.recording
                if rec.failure is None:
                    self.fail_recording(s, M.Fail(M.FP, prefix="begin_graph: graph "
                                                               f"{rec.graph.id} was still"))
                return command, None, None
            if status is not None:
                s.recording = M.Recording(None, status)
                return command, None, None
            try:
                s.recording = M.Recording(M.new_graph(s, gid, params), None)
            except M.Fail as f:
                s.recording = M.Recording(None, f)
            return command, None, None
        if kind == "end_graph":
            command = C(seq=seq, end_graph=C.EndGraph())
            status = self.seq_status(s, seq, None)
            if status is not None:  # Not run: the recording goes on.
                return command, (seq, kind, self.reply_check(kind, status)), None
            rec, s.recording = s.recording, None
            if rec is None:
                return command, (seq, kind, self.reply_check(kind, M.Fail(M.FP))), None
            if rec.failure is not None:
                RUN.count("graph recording failed", rec.failure.code + (
                    " (step)" if (rec.failure.prefix or "").startswith("graph") else ""))
                return command, (seq, kind, self.reply_check(kind, rec.failure)), None
            g = rec.graph
            s.graphs[g.id] = g
            steps = len(g.steps)
            RUN.count("graph recorded", f"{steps} steps" if steps < 3 else "3+ steps")

            def check(reply):
                self.reply_code(kind, reply, M.OK)
                if reply.graph_steps != steps:
                    diverge("stream end_graph", f"graph_steps {reply.graph_steps}, the model "
                                                f"recorded {steps}")
            return command, (seq, kind, check), None
        if kind == "release_graph":
            gid = self.draw_graph_id(data, s, existing=True)
            command = C(seq=seq, release_graph=C.ReleaseGraph(graph=gid))
            status = self.seq_status(s, seq, None)
            if status is None:
                g = s.graphs.pop(gid, None)
                if g is None:
                    status = M.Fail(M.NF)
                else:
                    self.m.drop_holds(s, g)
            if status is not None:
                self.fail(s, seq, kind, status)
            return command, None, None
        # replay_graph
        gid = self.draw_graph_id(data, s, existing=True)
        g = s.graphs.get(gid)
        n_params = len(g.params) if g is not None else data.draw(st.integers(0, 2), label="n")
        n = data.draw(mostly(st.just(n_params), st.sampled_from(
            [max(n_params - 1, 0), n_params + 1, 1025]), 93), label="bindings")
        bindings = []
        for i in range(min(n, 4)):
            same = ([hid for hid, h in s.handles.items() if h.size == g.sizes[i]]
                    if g is not None and i < len(g.sizes) else [])
            if same and data.draw(st.integers(0, 9), label="right_size") < 8:
                bindings.append(data.draw(st.sampled_from(same), label="binding"))
            else:
                bindings.append(self.pick_handle(data, s))
        if n > 4:
            bindings = (bindings * n)[:n] if bindings else [0] * n
        command = C(seq=seq, replay_graph=C.ReplayGraph(graph=gid, bindings=bindings))
        status = self.seq_status(s, seq, M.Fail(M.IA) if n > M.MAX_BINDINGS else None)
        written = []
        if status is None:
            written, status = M.predict_replay(self.m, s, gid, bindings)
            if status is not None and not status.poison:
                status = M.Fail(status.code, prefix=f"command {seq} ({kind}) failed: " +
                                (status.prefix or ""))
                status.poison = True
            RUN.count("Session.replay_graph", "OK" if status is None else status.code)
        if status is not None:
            self.poison_outputs(s, self.fail(s, seq, kind, status), written)
        return command, None, None

    # ---- shared-memory regions (docs/api.md, "Shared-memory regions") ----

    def draw_region_slice(self, data, s, want=None):
        """(region, offset, size): mostly a range inside a region of the session (of `want`
        bytes when given), else an unknown region, size 0 or a range past the end."""
        regions = list(s.regions)
        if regions and data.draw(st.integers(0, 9), label="own_region") < 9:
            rid = data.draw(st.sampled_from(regions), label="region")
            rsize = s.regions[rid].size
        else:
            rid = data.draw(st.one_of(st.sampled_from([0, 1, 2, 64, 65, M.U64_MAX]), u64),
                            label="region")
            rsize = 64
        fits = want if want is not None and 1 <= want <= rsize else None
        size = data.draw(mostly(st.just(fits) if fits else st.integers(1, rsize), st.sampled_from(
            [0, rsize, rsize + 1, 2**63, M.U64_MAX]), 90), label="region_size")
        room = max(rsize - size, 0) if size <= rsize else 0
        offset = data.draw(mostly(st.integers(0, room), st.sampled_from(
            [room + 1, rsize, rsize + 1, 2**63, M.U64_MAX]), 92), label="region_offset")
        return rid, offset, size

    def read_into_region(self, data, s, seq, kind, command, bindings, invalid):
        """A read or read_tensor with `into`: its reply carries region_bytes; the bytes land in
        the region (checked against the model after the batch, check_regions)."""
        rid, offset, size = self.draw_region_slice(data, s)
        into = types_pb.RegionSlice(region=rid, offset=offset, size=size)
        getattr(command, kind).into.CopyFrom(into)
        if invalid is None and size == 0:
            invalid = M.Fail(M.IA)
        status = self.seq_status(s, seq, invalid)
        what = f"{kind} into a region"
        try:
            if status is not None:
                raise status
            r, total, parts = M.predict_read_into(self.m, s, kind, bindings, (rid, offset, size))
        except M.Fail as f:
            RUN.count(f"Session.{what}", f"expected {f.code}")
            return command, (seq, what, self.reply_check(what, f)), None
        RUN.count(f"Session.{what}", "expected OK")
        if r.content is not None:
            at = offset
            for part in parts:
                if part is None:
                    r.content = None
                    break
                r.content[at:at + len(part)] = part
                at += len(part)
        self.regions_touched.add(s.id)

        def check(reply):
            self.reply_code(what, reply, M.OK)
            if reply.WhichOneof("result") != "region_bytes" or reply.region_bytes != total:
                diverge(f"stream {what}", f"reply {reply}, expected region_bytes {total}")
        return command, (seq, what, check), None

    def check_regions(self):
        """After a batch's replies: every region a read wrote holds what the model has."""
        for sid in self.regions_touched:
            s = self.m.sessions.get(sid)
            if s is None:
                continue
            for rid, r in s.regions.items():
                mapped = self.region_maps.get((sid, rid))
                if r.content is not None and mapped is not None and mapped[:] != bytes(r.content):
                    got = mapped[:]
                    first = next(i for i in range(len(got)) if got[i] != r.content[i])
                    diverge("region", f"region {rid} of session {sid} differs from the model at "
                                      f"byte {first}: {got[first:first + 16]!r}, the model has "
                                      f"{bytes(r.content[first:first + 16])!r}")
        self.regions_touched = set()

    @precondition(lambda self: RUN.regions)
    @rule(data=st.data(), how=st.sampled_from(["ok"] * 8 + ["unsealed", "write_sealed",
                                                           "no_fd", "many"]))
    def register_region(self, data, how, sid=None):
        """Registers a memfd for a session over the region socket (region.proto): NOT_FOUND
        for a session not open, RESOURCE_EXHAUSTED past 64 regions, INVALID_ARGUMENT for a
        descriptor missing, not sealed against shrinking or sealed against writes."""
        if sid is None and self.streams and data.draw(st.booleans(), label="stream_session"):
            sid = data.draw(st.sampled_from(list(self.streams)), label="session")
        if sid is None:
            sid = self.pick_session(data)
        s = self.m.sessions.get(sid)
        if how != "ok" and (s is None or len(s.regions) >= M.MAX_REGIONS):
            how = "ok"  # Which of two faults is reported first is not documented.
        size = data.draw(st.sampled_from([1, 8, 64, 100, 4096, 65536, M.MIB]), label="bytes")
        fill = data.draw(st.integers(0, 255), label="fill")
        RUN.steps += 1
        for _ in range(M.MAX_REGIONS + 1 if how == "many" else 1):
            payload = bytes((fill + i) % 256 for i in range(min(size, 4096))) * (
                -(-size // 4096))
            code, region, got, mapped = register_region(
                self.d.socket + ".regions", sid, payload[:size], how)
            RUN.count("RegisterRegion", code)
            expected = (M.NF if s is None else M.IA if how not in ("ok", "many") else
                        M.RE if len(s.regions) >= M.MAX_REGIONS else M.OK)
            if code != expected:
                diverge("RegisterRegion", f"the model predicts {expected}, the daemon answered "
                                          f"{code}: {got!r}")
            if code != M.OK:
                return
            if region in s.regions or got != size:
                diverge("RegisterRegion", f"region {region} ({got} bytes) is in use or not of "
                                          f"{size} bytes")
            s.regions[region] = M.Region(size, bytearray(payload[:size]))
            self.region_maps[(sid, region)] = mapped

    def stream_allocation(self, data, s, seq, kind):
        C = session_pb.Command
        fresh = s.next_client_id
        in_use = list(s.handles) + list(s.poisoned)
        choices = [st.just(fresh)] * 8 + [st.sampled_from([0, 1, 2**63 - 1, M.U64_MAX])]
        if in_use:
            choices.append(st.sampled_from(in_use))
        hid = data.draw(st.one_of(*choices), label="id")
        if hid == fresh:
            s.next_client_id += 1
        tensor, invalid, late = None, None, None
        # A create from a shared-memory region (docs/api.md, "Shared-memory regions").
        use_region = RUN.regions and kind in ("create", "create_tensor") and data.draw(
            st.integers(0, 9), label="from_region") < (self.region_bias if s.regions else 1)
        if use_region:
            shape, es, dense = None, None, None
            if kind == "create_tensor":
                shape = data.draw(shapes, label="shape")
                es = data.draw(elem_sizes, label="elem_size")
                dense = M.prod(shape) * es
                tensor = (shape, [M.prod(shape[i + 1:]) for i in range(len(shape))], es)
            rid, offset, size = self.draw_region_slice(data, s, dense)
            into = types_pb.RegionSlice(region=rid, offset=offset, size=size)
            if kind == "create":
                command = C(seq=seq, create=C.Create(id=hid, region=into))
            else:
                command = C(seq=seq, create_tensor=C.CreateTensor(
                    id=hid, region=into, shape=shape, elem_size=es))
            try:
                if kind == "create_tensor":
                    M.check_tensor_shape(shape, es)
                if size == 0 or (dense is not None and dense != size):
                    raise M.Fail(M.IA)
            except M.Fail as f:
                invalid = f
            content = None
            try:
                r = M.region_bytes(s, rid, offset, size)
                if r.content is not None:
                    content = bytearray(r.content[offset:offset + size])
            except M.Fail as f:
                late = f
            RUN.count("Session.create from region", "expected " + (
                "invalid" if invalid else late.code if late else "OK"))
        elif kind == "create":
            payload = data.draw(payloads, label="data")
            command = C(seq=seq, create=C.Create(id=hid, data=payload))
            size, content = len(payload), bytearray(payload)
            invalid = None if payload else M.Fail(M.IA)
        elif kind == "empty":
            size = data.draw(sizes, label="size")
            command = C(seq=seq, empty=C.Empty(id=hid, size=size))
            content = self.m.empty_content(s, size)
            invalid = None if size else M.Fail(M.IA)
        else:
            shape = data.draw(shapes, label="shape")
            es = data.draw(elem_sizes, label="elem_size")
            size = M.prod(shape) * es
            tensor = (shape, [M.prod(shape[i + 1:]) for i in range(len(shape))], es)
            if kind == "create_tensor":
                n = data.draw(mostly(st.just(size), st.sampled_from([0, size + 1]))
                              if size <= 4096 else st.integers(0, 64), label="data_len")
                payload = bytes(i % 251 for i in range(n))
                command = C(seq=seq, create_tensor=C.CreateTensor(
                    id=hid, data=payload, shape=shape, elem_size=es))
                content = bytearray(payload)
            else:
                n = size
                command = C(seq=seq, empty_tensor=C.EmptyTensor(id=hid, shape=shape,
                                                                elem_size=es))
                content = self.m.empty_content(s, size) if size < 2**40 else None
            try:
                M.check_tensor_shape(shape, es)
                if n != size:
                    raise M.Fail(M.IA)
            except M.Fail as f:
                invalid = f
        seq_bad = s.last_seq is not None and seq <= s.last_seq
        status = self.seq_status(s, seq, invalid)
        answers = kind in ("create_tensor", "empty_tensor")
        if hid < M.FIRST_CLIENT_ID:
            f = self.fail(s, seq, kind, M.Fail(M.IA))
        elif s.in_use(hid):  # Not entered; a bad seq is the error reported (docs/api.md).
            f = self.fail(s, seq, kind, status if seq_bad else M.Fail(M.FP))
        elif status is not None or late is not None:
            f = self.fail(s, seq, kind, status or late)
            s.poisoned[hid] = f
        else:
            try:
                mode = self.m.check_alloc(size)
            except M.Fail as e:
                f = self.fail(s, seq, kind, e)
                s.poisoned[hid] = f
            else:
                if mode == "maybe":
                    amb = ("alloc", seq, kind, hid, size, content, tensor)
                    reply = None
                    if answers:  # Either answer; the sync's failure count says which.
                        reply = (seq, kind, lambda r: r.code in (0, 8) or self.reply_code(
                            kind, r, M.OK, " or RESOURCE_EXHAUSTED"))
                    return command, reply, amb
                self.m.add_handle(s, hid, size, content, mode, tensor)
                if not answers:
                    return command, None, None

                def check(reply):
                    self.reply_code(kind, reply, M.OK)
                    if list(reply.tensor.strides) != tensor[1] or reply.tensor.size != size:
                        diverge(f"stream {kind}", f"tensor {reply.tensor}, expected strides "
                                                  f"{tensor[1]} size {size}")
                return command, (seq, kind, check), None
        return command, ((seq, kind, self.reply_check(kind, f)) if answers else None), None

    def predict_sync(self, s, seq, ambiguous):
        """The check of the batch's closing sync; resolves an ambiguous last command by the
        sync's failure count."""
        status = self.seq_status(s, seq, None)
        if status is not None:
            return self.reply_check("sync", status)
        before = list(s.failures)

        def check(reply):
            failures = list(before)
            if ambiguous is not None:
                failed = reply.failed_commands == len(failures) + 1
                if not failed and reply.failed_commands != len(failures):
                    diverge("stream sync", f"failed_commands {reply.failed_commands}, the model "
                                           f"has {len(failures)} (+1 if the last one failed)")
                failures += self.resolve(s, ambiguous, failed)
            s.failures = []
            if not failures:
                self.reply_code("sync", reply, M.OK)
                if reply.failed_commands:
                    diverge("stream sync", f"failed_commands {reply.failed_commands}, expected 0")
                return
            first = failures[0]
            self.reply_code("sync", reply, first.code)
            suffix = (f" ({len(failures)} command{'s' if len(failures) > 1 else ''} failed "
                      f"since the previous sync)")
            if reply.failed_commands != len(failures) or not reply.message.endswith(suffix):
                diverge("stream sync", f"failed_commands {reply.failed_commands} {reply.message!r},"
                                       f" the model has {len(failures)} failures")
            problem = first.check_message(reply.message[:-len(suffix)])
            if problem:
                diverge("stream sync", f"{problem}, got {reply.message!r}")
        return check

    def resolve(self, s, ambiguous, failed):
        """Applies the outcome of an allocation near the memory limit, now known from the sync;
        returns its failure (if it failed)."""
        _, seq, kind, hid, size, content, tensor = ambiguous
        if failed:
            f = M.Fail(M.RE, prefix=f"command {seq} ({kind}) failed: ")
            f.poison = True
            s.poisoned[hid] = f
            return [f]
        self.m.add_handle(s, hid, size, content, "maybe", tensor)
        return []

    @precondition(lambda self: self.streams)
    @rule(data=st.data(), how=st.sampled_from(["half_close", "half_close", "cancel", "reopen",
                                               "flood"]))
    def stream_end(self, data, how):
        sid = data.draw(st.sampled_from(list(self.streams)), label="stream")
        client = self.streams.pop(sid)
        RUN.steps += 1
        if how == "half_close":
            client.half_close()
            ev = self.stream_event(client, "stream half-close")
            while ev[0] == "response":
                diverge("stream half-close", f"an unexpected response {ev[1]}")
            if ev[1] != M.OK:
                diverge("stream half-close", f"ended {ev[1:]}, expected OK")
            self.m.close(sid)
            return
        if how == "cancel":
            client.cancel()
        elif how == "reopen":
            client.send(session_pb.SessionRequest(open=session_pb.SessionRequest.Open()))
        else:  # More than 4096 commands in one request: a protocol error.
            client.send(session_pb.SessionRequest(commands=[
                session_pb.Command(seq=i, flush=session_pb.Command.Flush())
                for i in range(4097)]))
        ev = self.stream_event(client, f"stream {how}")
        want = "CANCELLED" if how == "cancel" else M.IA
        if ev[0] != "end" or ev[1] != want:
            diverge(f"stream {how}", f"expected the stream to end {want}, got {ev}")
        self.m.close(sid)
        self.wait_for_sessions(len(self.m.sessions), f"stream {how}")

    def wait_for_sessions(self, n, what):
        """A cancelled stream closes its session soon after the call ends: wait up to 10 s."""
        deadline = time.monotonic() + 10
        while True:
            dev = self.d.compute.GetStats(pb.GetStatsRequest(), timeout=RPC_TIMEOUT).devices[0]
            if dev.sessions == n:
                return
            if time.monotonic() > deadline:
                diverge(what, f"{dev.sessions} sessions open 10 s later, the model has {n}")
            time.sleep(0.01)

    @precondition(lambda self: self.streams)
    @rule(data=st.data())
    def close_stream_session(self, data):
        """CloseSession naming a stream's session ends the stream NOT_FOUND."""
        sid = data.draw(st.sampled_from(list(self.streams)), label="stream")
        code, r, details = self.call("CloseSession", pb.CloseSessionRequest(session=sid))
        self.check_code("CloseSession", M.OK, code, details)
        released = self.m.close(sid)
        if r.handles_released != released:
            diverge("CloseSession", f"handles_released {r.handles_released}, the model has "
                                    f"{released}")
        client = self.streams.pop(sid)
        ev = self.stream_event(client, "stream after CloseSession")
        if ev[0] != "end" or ev[1] != M.NF:
            diverge("stream after CloseSession", f"expected the stream to end NOT_FOUND, got {ev}")

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


def main():
    global RUN, pb, types_pb, session_pb, RING
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cubed", required=True, help="the daemon binary")
    ap.add_argument("--proto_dir", required=True, help="the repository's proto/ directory")
    ap.add_argument("--seconds", type=float, default=20, help="time budget (new sequences start "
                    "until it is spent; CUBED_STATEFUL_SECONDS overrides)")
    ap.add_argument("--steps", type=int, default=40, help="most steps per sequence")
    ap.add_argument("--no_ring", action="store_true", help="session streams over gRPC only")
    ap.add_argument("--no_regions", action="store_true", help="no shared-memory regions")
    ap.add_argument("--seed", type=int, default=None, help="seeds the sequences Hypothesis "
                    "draws (CUBED_STATEFUL_SEED overrides; random when unset); a daemon's "
                    "timing may still make two runs differ")
    args = ap.parse_args()
    seconds = float(os.environ.get("CUBED_STATEFUL_SECONDS", args.seconds))
    seed = os.environ.get("CUBED_STATEFUL_SEED", args.seed)
    if seed is not None:
        # Each round of run_state_machine_as_test takes its seed from this generator
        # (hypothesis.core, 6.x); Hypothesis has no public knob for a run of several rounds.
        import hypothesis.core
        hypothesis.core._hypothesis_global_random = random.Random(int(seed))
        print(f"stateful: seed {int(seed)}")
    stub_dir = tempfile.mkdtemp(prefix="cubed-stateful-stubs-")
    load_stubs(args.proto_dir, stub_dir)
    from cubed.v1 import compute_pb2, session_pb2, types_pb2
    pb, types_pb, session_pb = compute_pb2, types_pb2, session_pb2
    RING = None if args.no_ring else load_ring()
    if RING is None and not args.no_ring:
        print("stateful: client/python/cubed_client/_ring.py is missing: streams over gRPC only")
    RUN = Run(args.cubed, seconds)
    RUN.regions = not args.no_regions
    CubedMachine.TestCase.settings = settings(
        max_examples=20, stateful_step_count=args.steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
        print_blob=False)
    start = RUN.start = time.monotonic()
    status = 0
    rounds = 0
    try:
        while time.monotonic() - start < seconds:
            rounds += 1
            run_state_machine_as_test(CubedMachine, settings=CubedMachine.TestCase.settings)
    except Exception as e:  # A finding: Hypothesis printed the shrunk steps.
        RUN.note_finding(f"{type(e).__name__}: {e}")
        traceback.print_exc()
        status = 1
    finally:
        elapsed = time.monotonic() - start
        exit_code = RUN.daemon.stop() if RUN.daemon is not None else None
        print(f"stateful: {elapsed:.0f} s, {RUN.sequences} sequences, {RUN.steps} steps "
              f"(requests and stream commands), {RUN.restarts} daemon restarts, daemon exit "
              f"{exit_code}")
        if RUN.first_finding is not None:
            print("stateful: first finding after {:.1f} s, in sequence {}: {}".format(
                *RUN.first_finding))
        for key in sorted(RUN.codes):
            print(f"  {key} {RUN.codes[key]}")
        if RUN.daemon is not None:
            log = RUN.daemon.log()
            if any(m in log for m in SANITIZER_MARKERS):
                print(f"stateful: sanitizer report in the daemon's log:\n{log[-8000:]}")
                status = 1
            if status == 0:
                RUN.daemon.remove()
            else:
                print(f"stateful: the daemon's log is {RUN.daemon.log_path}")
    shutil.rmtree(stub_dir, ignore_errors=True)
    print("stateful: PASS" if status == 0 else "stateful: FAIL")
    return status


if __name__ == "__main__":
    sys.exit(main())
