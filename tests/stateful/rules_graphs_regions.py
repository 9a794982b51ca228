"""The stateful fuzzer's recorded graphs and shared-memory regions (a mixin of
stateful_test.CubedMachine): graph batches and the begin/end/replay/release_graph commands and
recorded executes; region batches, RegisterRegion over the region socket, creates from region
slices and reads into them, checked byte for byte against the model.
"""

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import model as M
import model_launch as L
from daemon import register_region
from machine_base import diverge, mostly, u64

# Set by stateful_test.main (stateful_test.share) before any sequence runs.
types_pb = None
session_pb = None
RUN = None  # machine_base.Run.


class GraphRegionRules:
    """Rules and stream commands for recorded graphs and regions; uses MachineBase's state and
    helpers, UnaryRules' launch draws, and StreamRules' batches, seq checks and replies."""

    # ---- recorded graphs (docs/api.md, "Recorded graphs"; Note [Recorded graphs]) ----

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
        status = self.seq_status(s, seq, L.launch_request_failure(launch))
        if status is None and rec.failure is not None:
            pass
        elif status is None:
            try:
                views, tensors = L.predict_record(self.m, s, launch)
                if launch.dynamic is not None:  # Replays would read its bytes: count statically.
                    launch.dynamic, launch.count = None, (1, 1, 1)
            except M.Fail as f:
                status = f
            else:
                L.record_step(self.m, s, rec.graph, launch, views, tensors)
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
            self.poison_outputs(s, self.fail(s, seq, "execute", status), L.graph_outputs(launch))
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
                s.recording = M.Recording(L.new_graph(s, gid, params), None)
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
            written, status = L.predict_replay(self.m, s, gid, bindings)
            if status is not None and not status.poison:
                status = M.Fail(status.code, prefix=f"command {seq} ({kind}) failed: " +
                                (status.prefix or ""))
                status.poison = True
            RUN.count("Session.replay_graph", "OK" if status is None else status.code)
        if status is not None:
            self.poison_outputs(s, self.fail(s, seq, kind, status), written)
        return command, None, None

    # ---- shared-memory regions (docs/api.md, "Shared-memory regions") ----

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
