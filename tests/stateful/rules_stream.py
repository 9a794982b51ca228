"""The stateful fuzzer's session stream rules (a mixin of stateful_test.CubedMachine): stream
open, batches of commands (drawn, predicted and sent in one or two messages), seq checks, the
closing sync's failure count, stream allocations (from the payload or a region), stream end
(half-close, cancel, reopen, flood) and CloseSession of a stream's session.
"""

import queue
import time

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import model as M
import model_launch as L
from machine_base import (LEASE_MS, MAX_SESSIONS, RPC_TIMEOUT, diverge, elem_sizes, mostly,
                          payloads, shapes, sizes, u32)

# Set by stateful_test.main (stateful_test.share) before any sequence runs.
pb = None  # cubed.v1 compute_pb2.
types_pb = None
session_pb = None
RUN = None  # machine_base.Run.


class StreamRules:
    """Rules over session streams; uses MachineBase's state and helpers, UnaryRules' draws and
    launch predictions, and GraphRegionRules' graph and region commands."""

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
            status = self.seq_status(s, seq, L.launch_request_failure(launch))
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
