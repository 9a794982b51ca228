"""Recorded graphs through the SDK (client.record and Graph; session.proto, "Graphs") against the
real daemon, on each stream carrier (the command ring and gRPC; unary calls refuse graphs):
replays compute what the ops compute when run directly, with new bindings too and thousands of
times in order; what a graph captured outlives its release; bad bindings are refused before
anything is sent; the daemon's failures surface as the SDK's exceptions; graphs free their memory
when released, collected, or when their client closes."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cubed_client
from cubed_client import BuiltinKernel, _wire


@pytest.fixture
def c(client):
    """The suite's client over the ring and the gRPC stream (unary: test_unary_refuses_graphs)."""
    if client.transport == "unary":
        pytest.skip("graphs need the session stream (test_unary_refuses_graphs covers unary)")
    return client


def usage(client):
    """(allocations, bytes in use) of the device once the client's collected tensors and graphs
    were released and its commands ran."""
    gc.collect()
    client.sync()
    u = client.memory_usage()
    return (u.number_allocs, u.bytes_in_use)


def write(client, src, dst):
    """dst[...] = src by the copy kernel: a launch that writes an existing tensor."""
    client.execute(BuiltinKernel("copy", src.dtype), None, [src, dst])


def sent(client):
    """How many commands the client's stream numbered, or held for the next write."""
    return client._transport._next_seq + len(client._transport._held)


def test_unary_refuses_graphs(daemon):
    with cubed_client.connect(daemon.address, transport="unary") as unary:
        x = unary.create(np.ones(3, np.float32))
        with pytest.raises(cubed_client.UnimplementedError, match="session stream"):
            unary.record(x)
        with pytest.raises(NotImplementedError):
            unary.record()


def test_recorded_launches_run_at_replay_only(c):
    src = c.create(np.arange(6, dtype=np.int32))
    dst = c.create(np.zeros(6, np.int32))
    with c.record(src, dst) as g:
        write(c, src, dst)
        assert g.steps is None
    assert g.steps == 1
    np.testing.assert_array_equal(dst.read(), np.zeros(6))  # Recorded, not run.
    g.replay(src, dst)
    np.testing.assert_array_equal(dst.read(), np.arange(6))


def test_replay_equals_the_ops_run_directly(c):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    x, y = c.create(a), c.create(b)

    def ops(x, y):
        h = c.relu(x * 2 + y)  # A captured scalar, broadcasting.
        return h, (h @ x.T).sum(axis=1)  # A transposed view, a reduction.

    direct_h, direct_s = ops(x, y)
    with c.record(x, y) as g:
        h, s = ops(x, y)
    assert g.steps == 5  # mul, add, relu, matmul, sum: the scalar's create ran at once.
    g.replay(x, y)
    want_h = np.maximum(a * 2 + b, 0)
    np.testing.assert_array_equal(h.read(), direct_h.read())
    np.testing.assert_array_equal(s.read(), direct_s.read())
    np.testing.assert_allclose(h.read(), want_h, rtol=1e-6)
    np.testing.assert_allclose(s.read(), (want_h @ a.T).sum(axis=1), rtol=1e-4, atol=1e-4)

    # New bindings of the same layout; then the first ones again.
    a2 = rng.standard_normal((8, 16)).astype(np.float32)
    b2 = rng.standard_normal(16).astype(np.float32)
    x2, y2 = c.create(a2), c.create(b2)
    g.replay(x2, y2)
    np.testing.assert_allclose(h.read(), np.maximum(a2 * 2 + b2, 0), rtol=1e-6)
    np.testing.assert_allclose(s.read(), (np.maximum(a2 * 2 + b2, 0) @ a2.T).sum(axis=1),
                               rtol=1e-4, atol=1e-4)
    g.replay(x2, y)  # Mixed: parameters are bound one by one.
    np.testing.assert_allclose(h.read(), np.maximum(a2 * 2 + b, 0), rtol=1e-6)
    g.replay(x, y)
    np.testing.assert_array_equal(h.read(), direct_h.read())
    c.sync()


def test_a_graph_without_parameters(c):
    with c.record() as g:
        out = c.full((4, 3), 7.5, np.float32)
    assert g.steps == 1
    g.replay()
    np.testing.assert_array_equal(out.read(), np.full((4, 3), 7.5, np.float32))
    with pytest.raises(ValueError, match="1 tensors given, the graph has 0 parameters"):
        g.replay(out)


def test_thousands_of_replays_in_order(c):
    # Each replay writes its second binding as its first plus one; swapping the bindings every
    # time counts the replays, so a lost, repeated or reordered one shows in the total.
    one = c.create(np.ones(64, np.int32))
    a, b = c.create(np.zeros(64, np.int32)), c.create(np.zeros(64, np.int32))
    with c.record(a, b) as g:
        c.execute(BuiltinKernel("add", np.int32), None, [a, one, b])
    del one  # Captured: the graph keeps it.
    n = 3000
    for i in range(n):
        if i % 2 == 0:
            g.replay(a, b)
        else:
            g.replay(b, a)
        if i == 1000:
            np.testing.assert_array_equal(b.read(), np.full(64, 1001))
    c.sync()
    np.testing.assert_array_equal(a.read(), np.full(64, n))
    np.testing.assert_array_equal(b.read(), np.full(64, n - 1))


def test_captured_tensors_outlive_their_release(c):
    base = usage(c)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    w_values = np.linspace(-1, 1, 4, dtype=np.float32)
    x, w = c.create(a), c.create(w_values)
    with c.record(x) as g:
        t = x * w          # An intermediate.
        z = t + 0.5        # A scalar created inside the block.
    w.close()              # At once.
    del t                  # By the garbage collector.
    held = usage(c)
    g.replay(x)
    np.testing.assert_array_equal(z.read(), a * w_values + 0.5)
    with pytest.raises(cubed_client.NotFoundError):
        w.read()  # The id is gone; only the graph holds the memory.
    g.close()
    g.close()  # Idempotent.
    assert usage(c)[0] == held[0] - 3  # w, t and the scalar 0.5 (z still has its id).
    del x, z
    assert usage(c) == base  # The graph's release let go of what it alone kept.


def test_a_collected_graph_frees_its_memory(c):
    base = usage(c)
    x = c.create(np.ones((32, 32), np.float32))
    with c.record(x) as g:
        c.exp(c.exp(x) + c.create(np.ones((32, 32), np.float32)))  # Four tensors captured.
    g.replay(x)
    del x  # A parameter: the graph does not keep it.
    assert usage(c)[0] == base[0] + 4
    del g
    assert usage(c) == base


def test_bad_bindings_are_refused_before_sending(daemon, c):
    x = c.create(np.zeros((4, 6), np.float32))
    with c.record(x) as g:
        y = x + 1
    f64 = c.create(np.zeros((4, 6), np.float64))
    transposed = c.create(np.zeros((6, 4), np.float32))
    shifted = c.create(np.zeros((5, 6), np.float32))
    with cubed_client.connect(daemon.address) as other:
        theirs = other.create(np.zeros((4, 6), np.float32))
        c.sync()
        before = sent(c)
        cases = [
            ((f64,), ValueError, r"argument 0 has dtype float64, not float32"),
            ((transposed,), ValueError, r"argument 0 has shape \(6, 4\), not \(4, 6\)"),
            ((transposed.T,), ValueError, r"argument 0 has strides \(1, 4\), not \(6, 1\)"),
            ((shifted[1:],), ValueError, r"argument 0 has offset 6, not 0; an allocation of "
                                         r"120 bytes, not 96"),
            ((shifted[:4],), ValueError, r"argument 0 has an allocation of 120 bytes, not 96"),
            ((), ValueError, "0 tensors given, the graph has 1 parameters"),
            ((x, x), ValueError, "2 tensors given"),
            ((np.zeros((4, 6), np.float32),), TypeError, "argument 0: expected a Tensor"),
            ((theirs,), ValueError, "argument 0: the tensor belongs to another client"),
        ]
        for bindings, error, words in cases:
            with pytest.raises(error, match=words):
                g.replay(*bindings)
            assert sent(c) == before, words
    c.sync()  # Nothing failed on the daemon.
    g.replay(x)
    np.testing.assert_array_equal(y.read(), np.ones((4, 6)))


def test_record_refuses_shared_allocations_and_nesting(c):
    x = c.create(np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match=r"parameters\[0\] and parameters\[1\] are on one"):
        c.record(x, x.T)
    with c.record(x) as outer:
        with pytest.raises(cubed_client.FailedPreconditionError, match="do not nest"):
            with c.record(x):
                pass
        with pytest.raises(cubed_client.FailedPreconditionError, match="not been recorded"):
            outer.replay(x)
        with pytest.raises(cubed_client.FailedPreconditionError, match="is recording"):
            outer.close()
        y = x + 1
    with pytest.raises(cubed_client.FailedPreconditionError, match="recorded already"):
        with outer:
            pass
    with c.record() as inner:
        with pytest.raises(cubed_client.FailedPreconditionError, match="while graph"):
            outer.replay(x)
    outer.replay(x)
    np.testing.assert_array_equal(y.read(), np.ones((2, 2)))
    c.sync()
    assert inner.steps == 0


def test_unknown_and_released_graphs_fail_on_the_daemon(c):
    x = c.create(np.ones(4, np.float32))
    with c.record(x) as g:
        y = x * 3
    g.replay(x)
    c.sync()
    g.close()
    with pytest.raises(cubed_client.FailedPreconditionError, match="is released"):
        g.replay(x)  # The SDK knows; the daemon's answer follows, sent by hand.
    transport = c._transport
    transport.replay_graph(_wire.replay_graph(_wire.replay_graph_head(g.id), [_wire.varint(x.id)]))
    with pytest.raises(cubed_client.NotFoundError) as info:
        c.sync()
    assert info.value.failed_commands == 1
    transport.replay_graph(_wire.replay_graph(_wire.replay_graph_head(987654321), []))
    transport.release_graph(987654322)
    with pytest.raises(cubed_client.NotFoundError) as info:
        c.sync()
    assert info.value.failed_commands == 2
    np.testing.assert_array_equal(y.read(), np.full(4, 3))  # The one replay that ran.
    c.sync()


def test_a_released_binding_fails_the_replay(c):
    x = c.create(np.ones(4, np.float32))
    with c.record(x) as g:
        y = x * 3
    gone = c.create(np.ones(4, np.float32))
    gone.close()
    g.replay(gone)
    with pytest.raises(cubed_client.NotFoundError):
        c.sync()
    g.replay(x)  # The graph still works.
    np.testing.assert_array_equal(y.read(), np.full(4, 3))


def test_a_failing_step_fails_the_recording(c):
    base = usage(c)
    x = c.create(np.ones(4, np.float32))
    out = c.empty(4, np.float32)
    with pytest.raises(cubed_client.NotFoundError, match="step 0 .*no_such_kernel"):
        with c.record(x) as g:
            c.execute(BuiltinKernel("no_such_kernel", np.float32), None, [x, x, out])
    assert g.closed and g.steps is None
    with pytest.raises(cubed_client.FailedPreconditionError, match="is released"):
        g.replay(x)
    g.close()  # Nothing to release: no release_graph is sent (the next sync would fail).
    # The failed launch also fails as any launch does: it poisons its output and counts for sync.
    with pytest.raises(cubed_client.NotFoundError, match="no_such_kernel") as info:
        c.sync()
    assert info.value.failed_commands == 1
    with pytest.raises(cubed_client.NotFoundError, match="no_such_kernel"):
        out.read()

    bad = c.empty_bytes(0)  # Fails on the daemon: `bad` is poisoned.
    with pytest.raises(cubed_client.InvalidArgumentError, match=r"step 0 .*\(empty\) failed"):
        with c.record(x):
            c.execute(BuiltinKernel("copy", np.uint8), None, [bad, c.empty_bytes(4)])
    with pytest.raises(cubed_client.InvalidArgumentError, match=r"\(empty\) failed") as info:
        c.sync()
    assert info.value.failed_commands == 2  # The empty and the launch reading it.
    c.sync()
    with c.record(x) as again:  # The client records again after a failure.
        y = x + x
    again.replay(x)
    np.testing.assert_array_equal(y.read(), np.full(4, 2))
    del x, out, bad, y, again
    assert usage(c) == base


def test_a_bad_parameter_fails_the_recording(c):
    gone = c.create(np.ones(4, np.float32))
    gone.close()
    with pytest.raises(cubed_client.NotFoundError, match=r"begin_graph.parameters\[0\]"):
        with c.record(gone) as g:
            pass
    assert g.closed
    c.sync()  # begin_graph's failure is end_graph's answer only.


def test_an_exception_in_the_block_releases_the_graph(c):
    base = usage(c)
    x = c.create(np.ones(4, np.float32))
    with pytest.raises(ZeroDivisionError):
        with c.record(x) as g:
            y = x + 1
            1 / 0
    assert g.closed and g.steps == 1
    c.sync()  # Its release found the graph.
    del x, y
    assert usage(c) == base
    with c.record() as after:  # Not left recording.
        pass
    assert after.steps == 0


def test_graphs_end_with_their_client(daemon, c):
    with cubed_client.connect(daemon.address, transport="unary") as observer:
        gc.collect()
        before = observer.memory_usage()
        other = cubed_client.connect(daemon.address, transport="stream", carrier=c.carrier)
        x = other.create(np.ones((64, 64), np.float32))
        spare = other.create(np.ones((64, 64), np.float32))
        graphs = []
        for _ in range(3):
            with other.record(x) as g:
                other.tanh(x * other.create(np.full((64, 64), 2, np.float32)))
            graphs.append(g)
            g.replay(x)
        del x
        gc.collect()
        other.sync()
        assert observer.memory_usage().number_allocs > before.number_allocs
        other.close()
        assert all(g.closed for g in graphs)
        after = observer.memory_usage()
        assert (after.number_allocs, after.bytes_in_use) == (before.number_allocs,
                                                             before.bytes_in_use)
        with pytest.raises(cubed_client.FailedPreconditionError, match="client is closed"):
            graphs[0].replay(spare)
        del graphs, g, spare
        gc.collect()  # Collecting a closed client's graphs sends nothing.
        after = observer.memory_usage()
        assert (after.number_allocs, after.bytes_in_use) == (before.number_allocs,
                                                             before.bytes_in_use)


def test_replays_are_ordered_with_other_commands(c):
    x = c.create(np.zeros(5, np.float32))
    with c.record(x) as g:
        y = x * 3
    write(c, c.create(np.arange(5, dtype=np.float32)), x)  # Before the replay: it sees it.
    g.replay(x)
    write(c, c.create(np.ones(5, np.float32)), x)  # After: the replay's result stays.
    np.testing.assert_array_equal(y.read(), np.arange(5) * 3)  # A read sees the replay's result.
    g.replay(x)
    np.testing.assert_array_equal(y.read(), np.full(5, 3))
    np.testing.assert_array_equal(x.read(), np.ones(5))
