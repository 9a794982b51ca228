"""The stateful fuzzer's unary rules (a mixin of stateful_test.CubedMachine): sessions
(open, close, lease expiry), Create/CreateTensor/Empty/EmptyTensor, Read/ReadTensor,
GetResource, Release, Execute, Flush/Sync, profiles and MemoryUsage/MemoryCleanup, with the
draws and checks they use.
"""

import time

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import model as M
import model_launch as L
from machine_base import (DTYPES, KERNEL_NAMES, LEASE_MS, MAX_SESSIONS, diverge, elem_sizes,
                          mostly, payloads, shapes, sizes, u32)

# Set by stateful_test.main (stateful_test.share) before any sequence runs.
pb = None  # cubed.v1 compute_pb2.
types_pb = None
session_pb = None


class UnaryRules:
    """Rules over unary RPCs and the draws stream commands share; uses MachineBase's state and
    helpers and StreamRules' stream_event and wait_for_sessions."""

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
        return L.Launch(kind, name=name, dtype=dtype, axis=axis,
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
            L.check_launch_request(launch)
            if s is None:
                raise M.Fail(M.NF)
            try:
                return M.OK, L.predict_execute(self.m, s, launch), None
            except M.Ambiguous as a:
                try:
                    return M.OK, L.predict_execute(self.m, s, launch, dynamic_ok=True), a.code
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
