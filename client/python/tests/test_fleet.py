"""Two real daemons behind one name (deploy/k8s/README.md, "Sessions and connections").

The name is a gRPC target with both daemons' TCP addresses, ``ipv4:127.0.0.1:P1,127.0.0.1:P2``:
what gRPC's own client-side load balancing, or DNS for a headless Kubernetes Service, hands a
client. A session lives on the daemon it was opened on. A channel that balances calls
(round_robin) sends a session's calls to both daemons, and half of them answer NOT_FOUND; a cubed
client holds one connection for its whole session (one channel per client, gRPC's default
pick_first policy), so every call of its session, unary or on the stream, reaches the daemon that
opened it, and each daemon's GetStats counts only the sessions opened there.
"""

from __future__ import annotations

import json
import time
from typing import Iterator, List, Tuple

import grpc
import numpy as np
import pytest

import cubed_client
from cubed_client._proto import compute_pb2, compute_pb2_grpc
from conftest import Daemon

TIMEOUT = 30


@pytest.fixture(scope="module")
def pair(request: pytest.FixtureRequest) -> Iterator[Tuple[Daemon, Daemon]]:
    binary = request.config.getoption("--cubed")
    if not binary:
        pytest.fail("no daemon binary: set CUBED_BINARY or pass --cubed=PATH")
    # Plain TCP on loopback, no auth config: every caller is principal insecure-tcp.
    daemons: List[Daemon] = []
    try:
        for _ in range(2):
            daemons.append(Daemon(binary, "--tcp=127.0.0.1:0", "--insecure_tcp"))
            assert daemons[-1].tcp_address, f"no tcp= line:\n{daemons[-1].log()}"
        yield daemons[0], daemons[1]
    finally:
        for d in daemons:
            log = d.log()
            code = d.close()
            assert code == 0, f"cubed exited with {code} after SIGTERM:\n{log}"


def one_name(pair: Tuple[Daemon, Daemon]) -> str:
    return "ipv4:" + ",".join(d.tcp_address for d in pair)  # type: ignore[misc]


def sessions_on(d: Daemon) -> int:
    """Open sessions of the daemon, from its own GetStats (over its own address)."""
    with grpc.insecure_channel(d.tcp_address) as channel:
        stats = compute_pb2_grpc.ComputeStub(channel).GetStats(compute_pb2.GetStatsRequest(),
                                                               timeout=TIMEOUT)
    return sum(device.sessions for device in stats.devices)


def holds(d: Daemon, session: int) -> bool:
    """Whether `session` is open on daemon `d`: Sync answers OK there and NOT_FOUND elsewhere."""
    with grpc.insecure_channel(d.tcp_address) as channel:
        try:
            compute_pb2_grpc.ComputeStub(channel).Sync(compute_pb2.SyncRequest(session=session),
                                                       timeout=TIMEOUT)
            return True
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e
            return False


def test_round_robin_spreads_a_sessions_calls(pair: Tuple[Daemon, Daemon]) -> None:
    """What the SDKs must not do: a channel balancing calls sends the session's calls to the
    daemon that never heard of it."""
    config = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
    before = [sessions_on(d) for d in pair]
    with grpc.insecure_channel(one_name(pair), options=[("grpc.service_config", config)]) as ch:
        stub = compute_pb2_grpc.ComputeStub(ch)
        session = stub.OpenSession(compute_pb2.OpenSessionRequest(), timeout=TIMEOUT).session
        codes = []
        deadline = time.monotonic() + TIMEOUT
        # round_robin sends calls to the first subchannel that is ready until the other is too.
        while len(set(codes)) < 2 and time.monotonic() < deadline:
            try:
                stub.Sync(compute_pb2.SyncRequest(session=session), timeout=TIMEOUT)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
            time.sleep(0.01)
        assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND}, codes
    where = [holds(d, session) for d in pair]
    assert where.count(True) == 1, where
    with grpc.insecure_channel(pair[where.index(True)].tcp_address) as channel:
        compute_pb2_grpc.ComputeStub(channel).CloseSession(
            compute_pb2.CloseSessionRequest(session=session), timeout=TIMEOUT)
    assert [sessions_on(d) for d in pair] == before


@pytest.mark.parametrize("transport", ["unary", "stream"])
def test_session_stays_on_its_daemon(pair: Tuple[Daemon, Daemon], transport: str) -> None:
    """Clients reach the daemons through the one name; every call of each session (creates,
    kernels, reads, a large create and read, memory usage, sync, and the unary StartProfile and
    EndProfile of a trace, which the stream transport makes too) finds its session and handles,
    and each daemon counts only the sessions opened there."""
    before = [sessions_on(d) for d in pair]
    clients = [cubed_client.connect(one_name(pair), transport=transport, timeout=TIMEOUT)
               for _ in range(4)]
    try:
        for i, c in enumerate(clients):
            assert c.transport == transport
            a = c.create(np.arange(6, dtype=np.float32).reshape(2, 3) + i)
            b = c.create(np.full((2, 3), 10, dtype=np.float32))
            # Over the stream too, a trace is two unary calls naming the session.
            with c.trace() as t:
                for _ in range(8):
                    a = a + b
            assert len(t.events) >= 8  # The adds, among the block's other commands.
            big = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: the chunked bulk streams.
            assert np.array_equal(c.read(c.create(big)), big)
            np.testing.assert_array_equal(c.read(a), np.arange(6).reshape(2, 3) + i + 80)
            c.memory_usage()
            c.sync()
        where = [[holds(d, c.session) for d in pair] for c in clients]
        assert all(w.count(True) == 1 for w in where), where
        after = [sessions_on(d) for d in pair]
        opened = [sum(w[k] for w in where) for k in range(2)]
        assert [x - y for x, y in zip(after, before)] == opened, (before, after, where)
    finally:
        for c in clients:
            c.close()
    assert [sessions_on(d) for d in pair] == before


def test_clients_spread_over_the_daemons(pair: Tuple[Daemon, Daemon]) -> None:
    """New sessions through the one name land on both daemons: each client shuffles the
    addresses before it connects (Note [One connection per session] in _address.py)."""
    config = json.dumps({"loadBalancingConfig": [{"pick_first": {"shuffleAddressList": True}}]})
    landed = set()
    for _ in range(16):
        with grpc.insecure_channel(one_name(pair), options=[("grpc.service_config", config)]) as ch:
            s = compute_pb2_grpc.ComputeStub(ch).OpenSession(compute_pb2.OpenSessionRequest(),
                                                             timeout=TIMEOUT).session
        landed.add([holds(d, s) for d in pair].index(True))
    if len(landed) < 2:
        pytest.skip(f"grpcio {grpc.__version__} ignores pick_first's shuffleAddressList (gRFC A62)")
    clients = [cubed_client.connect(one_name(pair), transport="unary", timeout=TIMEOUT)
               for _ in range(16)]
    try:
        where = [[holds(d, c.session) for d in pair].index(True) for c in clients]
        # All 16 on one daemon by chance: 2 in 65536.
        assert set(where) == {0, 1}, where
    finally:
        for c in clients:
            c.close()
