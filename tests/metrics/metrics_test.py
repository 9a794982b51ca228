#!/usr/bin/python3
"""The daemon's metrics, end to end: the Prometheus endpoint, GetStats and `cubectl stats`.

  metrics_test.py --cubed=PATH --cubectl=PATH --proto_dir=DIR

Starts the real `cubed --backend=cpu`: once without --metrics_listen (no metrics line in the
ready file, no TCP port bound), once with --metrics_listen=127.0.0.1:0. Against the second it
makes known calls (OpenSession, Create x2, Empty, Execute, Read, a Read of an unknown handle, a
session stream with create + sync), scrapes GET /metrics over HTTP, parses it with
prometheus_client's parser and checks that every counter moved by exactly what was done, that
the memory gauges equal MemoryUsage, that GetStats reports the same numbers as the scrape and
that `cubectl stats` prints them. Exits 0 when every check passed, 1 on the first failure.
"""

import argparse
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request


class Failure(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}\n{detail}".rstrip())
    print(f"ok: {what}")


def load_stubs(proto_dir, out_dir):
    from grpc_tools import protoc
    import grpc_tools
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    protos = [os.path.join(root, f) for root, _, files in os.walk(os.path.join(proto_dir, "cubed"))
              for f in files if f.endswith(".proto")]
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", *protos])
    if rc != 0:
        raise Failure(f"protoc failed ({rc}) on {protos}")
    sys.path.insert(0, out_dir)


class Daemon:
    """cubed on a temporary Unix socket; stopped with SIGTERM on close."""

    def __init__(self, binary, extra_flags=()):
        self.dir = tempfile.mkdtemp(prefix="cubed-metrics-")
        self.socket = os.path.join(self.dir, "cubed.sock")
        self.ready_path = os.path.join(self.dir, "ready")
        self.log_path = os.path.join(self.dir, "log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--listen={self.socket}", f"--ready_file={self.ready_path}",
                 "--backend=cpu", "--memory_limit=256MiB", *extra_flags],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failure(f"cubed exited ({self.proc.returncode}):\n{self.log()}")
            if os.path.exists(self.ready_path):
                self.ready = dict(line.split("=", 1) for line in
                                  open(self.ready_path).read().splitlines())
                return
            time.sleep(0.02)
        self.close()
        raise Failure("cubed did not become ready within 30 s")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def listening_tcp_ports(pid):
    """TCP ports the process listens on (from /proc: its socket inodes in LISTEN state)."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def scrape(address, path="/metrics"):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def parse(text):
    """Samples by (name, sorted labels), via prometheus_client's parser; checks HELP/TYPE."""
    from prometheus_client.parser import text_string_to_metric_families
    samples = {}
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
        if not family.documentation:
            raise Failure(f"family {family.name} has no HELP text")
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def delta(before, after, name, **labels):
    return value(after, name, **labels) - value(before, name, **labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubed", required=True)
    ap.add_argument("--cubectl", required=True)
    ap.add_argument("--proto_dir", required=True)
    args = ap.parse_args()

    import grpc
    stub_dir = tempfile.mkdtemp(prefix="cubed-metrics-stubs-")
    daemons = []
    try:
        load_stubs(args.proto_dir, stub_dir)
        from cubed.v1 import compute_pb2, compute_pb2_grpc, session_pb2, session_pb2_grpc, types_pb2
        from cubed.v1 import region_pb2

        # Off by default.
        plain = Daemon(args.cubed)
        daemons.append(plain)
        check("metrics" not in plain.ready, "without --metrics_listen the ready file has no metrics=",
              str(plain.ready))
        check(listening_tcp_ports(plain.proc.pid) == set(),
              "without --metrics_listen (and --tcp) the daemon binds no TCP port",
              str(listening_tcp_ports(plain.proc.pid)))
        plain.close()
        daemons.remove(plain)

        d = Daemon(args.cubed, ["--metrics_listen=127.0.0.1:0"])
        daemons.append(d)
        address = d.ready.get("metrics", "")
        check(address.startswith("127.0.0.1:") and not address.endswith(":0"),
              "the ready file names the metrics address with the picked port", str(d.ready))
        port = int(address.rsplit(":", 1)[1])
        check(port in listening_tcp_ports(d.proc.pid), "the metrics port is bound by the daemon")

        status, ctype, text0 = scrape(address)
        check(status == 200 and ctype.startswith("text/plain; version=0.0.4"),
              "GET /metrics answers 200 text/plain; version=0.0.4", f"{status} {ctype}")
        try:
            scrape(address, "/nothing")
            raise Failure("GET /nothing did not fail")
        except urllib.error.HTTPError as e:
            check(e.code == 404, "GET /nothing answers 404", str(e.code))
        families, before = parse(text0)
        for name in ["cubed_requests", "cubed_request_queue_microseconds",
                     "cubed_request_execution_microseconds", "cubed_received_bytes",
                     "cubed_sent_bytes", "cubed_stream_commands", "cubed_memory_in_use_bytes",
                     "cubed_memory_reserved_bytes", "cubed_sessions", "cubed_handles",
                     "cubed_kernel_cache_hits", "cubed_kernel_cache_misses",
                     "cubed_kernel_compile_microseconds", "cubed_regions",
                     "cubed_regions_registered", "cubed_region_created_bytes",
                     "cubed_region_read_bytes", "cubed_imported_bytes", "cubed_imported_buffers",
                     "cubed_launch_batches", "cubed_batched_launches"]:
            check(name in families, f"family {name} is exposed")

        channel = grpc.insecure_channel(f"unix:{d.socket}")
        compute = compute_pb2_grpc.ComputeStub(channel)
        sent = {"OpenSession": 0, "Create": 0, "Empty": 0, "Execute": 0, "Read": 0}
        received = {"Create": 0, "Read": 0}

        def call(method, request):
            sent[method] += len(request.SerializeToString())
            response = getattr(compute, method)(request, timeout=10)
            if method in received:
                received[method] += len(response.SerializeToString())
            return response

        session = call("OpenSession", compute_pb2.OpenSessionRequest(lease_ms=60000)).session
        a = call("Create", compute_pb2.CreateRequest(
            session=session, data=bytes(range(16)))).handle
        b = call("Create", compute_pb2.CreateRequest(session=session, data=b"\x00" * 16)).handle
        out = call("Empty", compute_pb2.EmptyRequest(session=session, size=16)).handle
        metadata = [4, 4, 4, 4, 4, 4, 1, 1, 1, 15, 16, 17, 18, 19, 20, 4, 4, 4, 1, 1, 1]
        call("Execute", compute_pb2.ExecuteRequest(
            session=session,
            kernel=types_pb2.Kernel(builtin=types_pb2.BuiltinKernel(
                name="add", dtype=types_pb2.ELEM_TYPE_F32)),
            count=types_pb2.CubeCount(static_count=types_pb2.CubeCount.Static(x=1, y=1, z=1)),
            bindings=types_pb2.Bindings(buffers=[types_pb2.Binding(handle=h) for h in (a, b, out)],
                                        metadata=metadata)))
        read = call("Read", compute_pb2.ReadRequest(
            session=session, bindings=[types_pb2.Binding(handle=out)]))
        check(read.data[0] == bytes(range(16)), "the add ran (0 + a = a)")
        bad = compute_pb2.ReadRequest(session=session, bindings=[types_pb2.Binding(handle=12345)])
        sent["Read"] += len(bad.SerializeToString())
        try:
            compute.Read(bad, timeout=10)
            raise Failure("Read of an unknown handle succeeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.NOT_FOUND, "Read of an unknown handle: NOT_FOUND")

        # A session stream: create + sync, then half-close.
        stream = session_pb2_grpc.SessionStreamStub(channel)
        first_id = 1 << 63
        requests = [
            session_pb2.SessionRequest(open=session_pb2.SessionRequest.Open(lease_ms=60000)),
            session_pb2.SessionRequest(commands=[
                session_pb2.Command(seq=1, create=session_pb2.Command.Create(
                    id=first_id, data=b"\x01" * 8)),
                session_pb2.Command(seq=2, sync=session_pb2.Command.Sync())]),
        ]
        stream_bytes = sum(len(r.SerializeToString()) for r in requests)
        replies = list(stream.Session(iter(requests), timeout=10))
        synced = [r for resp in replies for r in resp.replies if r.seq == 2]
        check(len(synced) == 1 and synced[0].code == 0, "the stream's sync answered OK",
              str(replies))

        usage = compute.MemoryUsage(compute_pb2.MemoryUsageRequest(), timeout=10).usage
        deadline = time.monotonic() + 5
        while True:  # The stream's session closes on the loop after the stream's status.
            _, _, text1 = scrape(address)
            _, after = parse(text1)
            if value(after, "cubed_sessions", device="0") == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.02)

        for method, code, n in [("OpenSession", "OK", 1), ("Create", "OK", 2), ("Empty", "OK", 1),
                                ("Execute", "OK", 1), ("Read", "OK", 1), ("Read", "NOT_FOUND", 1),
                                ("MemoryUsage", "OK", 1), ("Session", "OK", 1)]:
            got = delta(before, after, "cubed_requests_total", method=method, code=code)
            check(got == n, f"cubed_requests_total{{method={method},code={code}}} moved by {n}",
                  f"moved by {got}")
        for method, n in [("Create", 2), ("Execute", 1), ("Read", 2)]:
            for h in ("queue", "execution"):
                got = delta(before, after, f"cubed_request_{h}_microseconds_count", method=method)
                check(got == n, f"{h} histogram of {method} counted {n}", f"counted {got}")
                inf = value(after, f"cubed_request_{h}_microseconds_bucket", method=method,
                            le="+Inf")
                check(inf == value(after, f"cubed_request_{h}_microseconds_count", method=method),
                      f"{h} histogram of {method}: +Inf bucket equals the count")
        for method, n in sent.items():
            got = delta(before, after, "cubed_received_bytes_total", method=method)
            check(got == n, f"cubed_received_bytes_total{{method={method}}} moved by {n}",
                  f"moved by {got}")
        for method, n in received.items():
            got = delta(before, after, "cubed_sent_bytes_total", method=method)
            check(got == n, f"cubed_sent_bytes_total{{method={method}}} moved by {n}",
                  f"moved by {got}")
        got = delta(before, after, "cubed_received_bytes_total", method="Session")
        check(got == stream_bytes, f"the stream's received bytes moved by {stream_bytes}",
              f"moved by {got}")
        for kind in ("create", "sync"):
            got = delta(before, after, "cubed_stream_commands_total", kind=kind, code="OK")
            check(got == 1, f"cubed_stream_commands_total{{kind={kind},code=OK}} moved by 1",
                  f"moved by {got}")
            got = delta(before, after, "cubed_stream_command_execution_microseconds_count",
                        kind=kind)
            check(got == 1, f"stream command {kind}: execution histogram counted 1")

        for name, want in [("cubed_memory_allocations", usage.number_allocs),
                           ("cubed_memory_in_use_bytes", usage.bytes_in_use),
                           ("cubed_memory_padding_bytes", usage.bytes_padding),
                           ("cubed_memory_reserved_bytes", usage.bytes_reserved),
                           ("cubed_memory_limit_bytes", 256 << 20),
                           ("cubed_sessions", 1), ("cubed_handles", 3),
                           ("cubed_kernel_cache_misses_total", 0)]:
            got = value(after, name, device="0")
            check(got == want, f"{name}{{device=0}} is {want}", f"is {got}")
        check(usage.number_allocs == 3 and usage.bytes_in_use == 48,
              "MemoryUsage saw the unary session's three allocations", str(usage))

        # GetStats reports what the scrape reports (no other call in between but GetStats).
        stats = compute.GetStats(compute_pb2.GetStatsRequest(), timeout=10)
        _, _, text2 = scrape(address)
        _, scraped = parse(text2)
        for m in stats.methods:
            if m.method == "GetStats":
                continue
            for c in m.codes:
                check(value(scraped, "cubed_requests_total", method=m.method, code=c.code) ==
                      c.count, f"GetStats {m.method} {c.code} = scrape ({c.count})")
            for h, hist in (("queue", m.queue), ("execution", m.execution)):
                name = f"cubed_request_{h}_microseconds"
                same = (value(scraped, f"{name}_count", method=m.method) == hist.count and
                        value(scraped, f"{name}_sum", method=m.method) == hist.sum_us and
                        all(value(scraped, f"{name}_bucket", method=m.method, le=str(bound)) ==
                            hist.buckets[i] for i, bound in enumerate(stats.latency_bounds_us)))
                if not same:
                    raise Failure(f"GetStats {m.method} {h} histogram differs from the scrape")
            if (value(scraped, "cubed_received_bytes_total", method=m.method) != m.bytes_received
                    or value(scraped, "cubed_sent_bytes_total", method=m.method) != m.bytes_sent):
                raise Failure(f"GetStats {m.method} bytes differ from the scrape")
        print("ok: every method's histograms and bytes in GetStats equal the scrape")
        dev = stats.devices[0]
        check(dev.memory == usage and dev.sessions == 1 and dev.handles == 3,
              "GetStats device 0 gauges equal MemoryUsage and the scrape", str(dev))

        # Imported memory (ImportMemory of a range of a region of the unary session): its gauges
        # move, the pools' do not; GetStats, MemoryUsage and the scrape agree; the release ends it.
        fd = os.memfd_create("cubed-metrics", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 8192)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.connect(d.socket + ".regions")
            request = region_pb2.RegisterRegionRequest(session=session).SerializeToString()
            socket.send_fds(s, [request], [fd])
            registered = region_pb2.RegisterRegionResponse.FromString(s.recv(2048))
        os.close(fd)
        check(registered.code == 0, "a region registers with the unary session", str(registered))
        imported = compute.ImportMemory(compute_pb2.ImportMemoryRequest(
            session=session, region=types_pb2.RegionSlice(region=registered.region, offset=192,
                                                          size=5000)), timeout=10)
        _, _, text2 = scrape(address)
        _, with_import = parse(text2)
        for name, want in [("cubed_imported_bytes", 5000), ("cubed_imported_buffers", 1),
                           ("cubed_memory_allocations", usage.number_allocs),
                           ("cubed_memory_in_use_bytes", usage.bytes_in_use),
                           ("cubed_memory_reserved_bytes", usage.bytes_reserved),
                           ("cubed_handles", 4)]:
            got = value(with_import, name, device="0")
            check(got == want, f"with an import {name}{{device=0}} is {want}", f"is {got}")
        dev = compute.GetStats(compute_pb2.GetStatsRequest(), timeout=10).devices[0]
        check(dev.imported_bytes == 5000 and dev.imported_buffers == 1 and dev.memory == usage
              and [s.imported_bytes for s in dev.session_stats] == [5000],
              "GetStats shows the import beside the pools' memory", str(dev))
        mu = compute.MemoryUsage(compute_pb2.MemoryUsageRequest(), timeout=10)
        check(mu.usage == usage and mu.imported_bytes == 5000 and mu.imported_buffers == 1,
              "MemoryUsage answers the import beside the unchanged usage", str(mu))
        compute.Release(compute_pb2.ReleaseRequest(session=session, handles=[imported.handle]),
                        timeout=10)
        _, _, text3 = scrape(address)
        _, released = parse(text3)
        check(value(released, "cubed_imported_bytes", device="0") == 0
              and value(released, "cubed_imported_buffers", device="0") == 0,
              "the release ends the import in the gauges")

        # cubectl stats.
        cli = subprocess.run([args.cubectl, f"--address=unix:{d.socket}", "stats", "--json"],
                             capture_output=True, text=True, timeout=30)
        check(cli.returncode == 0, "cubectl stats --json exits 0", cli.stderr)
        doc = json.loads(cli.stdout)
        create = next(m for m in doc["methods"] if m["method"] == "Create")
        check({c["code"]: int(c["count"]) for c in create["codes"]} == {"OK": 2},
              "cubectl stats --json: Create OK 2", cli.stdout[:400])
        check(int(doc["devices"][0]["memory"]["bytes_in_use"]) == usage.bytes_in_use,
              "cubectl stats --json: bytes_in_use equals MemoryUsage")
        cli = subprocess.run([args.cubectl, f"--address=unix:{d.socket}", "stats"],
                             capture_output=True, text=True, timeout=30)
        lines = cli.stdout.splitlines()
        check(cli.returncode == 0 and any(l.startswith("Create ") and "OK 2" in l for l in lines)
              and any(l.startswith("Read ") and "OK 1, NOT_FOUND 1" in l for l in lines)
              and any(l.startswith("stream create ") and "OK 1" in l for l in lines)
              and any("device 0 sessions" in l and "(3 handles)" in l for l in lines),
              "cubectl stats prints the counts per method, stream kind and device", cli.stdout)
        channel.close()
        print("PASS")
        return 0
    except Failure as e:
        print(f"FAIL: {e}")
        for daemon in daemons:
            print(f"--- daemon log ---\n{daemon.log()}")
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        for daemon in daemons:
            daemon.close()
        shutil.rmtree(stub_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
