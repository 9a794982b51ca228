"""client.trace(): the daemon's record of the session's commands (Note [Command traces] in
server/channel/trace_recorder.cc), checked against the commands that ran, and its Chrome
trace-event JSON checked against the format's documented fields."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cubed_client


def test_the_trace_holds_the_blocks_commands_in_order(client, tmp_path):
    a = client.create(np.arange(64, dtype=np.float32))  # Before the block: not traced.
    with client.trace() as t:
        b = client.create(np.ones(64, np.float32))
        c = a + b
        d = c.sum()
        d.read()
    names = [e.name for e in t.events]
    # The kernels in the order they ran, between the block's create and its read.
    kernels = [e.name for e in t.events if e.category == "kernel"]
    assert kernels == ["add", "sum"], names
    assert names.index("create") < names.index("add") < names.index("sum") < names.index("read")
    creates = [e for e in t.events if e.name == "create"]
    assert len(creates) == 1 and creates[0].bytes == 256 and creates[0].category == "memory"
    reads = [e for e in t.events if e.name == "read"]
    assert reads and reads[-1].bytes == 4 and reads[-1].category == "transfer"
    assert t.dropped == 0 and t.duration_ns is not None and t.duration_ns >= 0
    starts = [e.start_ns for e in t.events]
    assert starts == sorted(starts) and all(e.duration_ns >= 0 for e in t.events)
    # Session-stream commands carry their wait from arrival to the loop; unary calls none.
    if client.transport == "stream":
        assert all(e.queued_ns > 0 for e in t.events), [(e.name, e.queued_ns) for e in t.events]
    else:
        assert all(e.queued_ns == 0 for e in t.events)
    np.testing.assert_allclose(d.read(), 64 * 63 / 2 + 64)

    path = tmp_path / "trace.json"
    t.save(path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    # The loop's events (kernels' runs on the device, where measured, are a thread of their own).
    complete = [e for e in events if e["ph"] == "X" and e["cat"] != "device"]
    meta = [e for e in events if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "thread_name"}
    assert [e["name"] for e in complete] == names
    for e in complete:  # The trace-event format's fields of a complete event.
        assert isinstance(e["name"], str) and isinstance(e["cat"], str)
        assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["args"], dict)
    assert complete[0]["ts"] == 0.0
    assert [e["ts"] for e in complete] == sorted(e["ts"] for e in complete)
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["dropped"] == 0


def test_a_trace_keeps_at_most_max_events_and_counts_the_rest(client):
    x = client.create(np.ones(8, np.float32))
    with client.trace(max_events=3) as t:
        for _ in range(10):
            x = x + 1
        client.sync()
    assert len(t.events) == 3 and t.dropped >= 7
    np.testing.assert_array_equal(x.read(), np.full(8, 11, np.float32))


def test_trace_arguments_and_nesting(client):
    with pytest.raises(ValueError, match="max_events"):
        with client.trace(max_events=0):
            pass
    with client.profile():
        with pytest.raises(cubed_client.FailedPreconditionError, match="already open"):
            with client.trace():
                pass
    with client.trace() as t:  # After both: a new trace works.
        client.create(np.ones(2, np.float32))
    assert [e.name for e in t.events if e.category == "memory"][:1] == ["create"]


def test_kernels_carry_their_device_time_where_the_backend_measures_it(client):
    x = client.create(np.ones((512, 512), np.float32))
    with client.trace() as t:
        y = x @ x
        z = (y + 1).sum()
        z.read()
    kernels = [e for e in t.events if e.category == "kernel"]
    assert [e.name for e in kernels] == ["matmul", "add", "sum"]
    if client.info().backend != "cuda":  # The loop time is the run: nothing on a device clock.
        assert all(e.device_start_ns is None for e in t.events)
        return
    for e in kernels:
        assert e.device_start_ns is not None and e.device_duration_ns >= 0
    starts = [e.device_start_ns for e in kernels]
    assert starts == sorted(starts)  # One stream: in launch order.
    # The runs fit in the profile's device time (events and the profile share the stream).
    assert sum(e.device_duration_ns for e in kernels) <= t.duration_ns * 1.05 + 10_000
    assert kernels[0].device_duration_ns > 0  # A 512^3 matmul takes measurable time.
    doc = t.chrome()
    device = [e for e in doc["traceEvents"] if e.get("cat") == "device"]
    assert [e["name"] for e in device] == ["matmul", "add", "sum"]
    assert len({e["tid"] for e in device}) == 1
    assert device[0]["tid"] != [e for e in doc["traceEvents"] if e.get("cat") == "kernel"][0]["tid"]
