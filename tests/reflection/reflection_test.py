#!/usr/bin/python3
"""Talks to the real cubed daemon the way a user without an SDK would: through server reflection.

  reflection_test.py --cubed=PATH --proto=compute.proto --client=grpcurl|python

Starts `cubed --backend=cpu` on a temporary Unix socket, then, with grpcurl (client=grpcurl) or a
small Python reflection client (client=python, grpcio + the reflection proto from grpc-proto):
lists the services, describes cubed.v1.Compute and grpc.health.v1.Health, calls MemoryUsage,
OpenSession, Create (bytes as base64 in JSON), Read, Release, CloseSession and Health/Check with
JSON requests, and checks the JSON answers and the error of a call naming an unknown session.
Exits 0 when every check passed, 1 on the first failure, 77 (ctest SKIP_RETURN_CODE) when the
chosen client is not installed.
"""

import argparse
import base64
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

SKIP = 77
SERVICES = ["cubed.v1.Compute", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"]
GRPC_PROTO_DIR = "/usr/share/grpc-proto"


class Failure(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}\n{detail}".rstrip())
    print(f"ok: {what}")


class Daemon:
    """The cubed binary on a temporary Unix socket; stopped with SIGTERM on close."""

    def __init__(self, binary, extra_flags=()):
        self.dir = tempfile.mkdtemp(prefix="cubed-reflection-")
        self.socket = os.path.join(self.dir, "cubed.sock")
        ready = os.path.join(self.dir, "ready")
        self.log_path = os.path.join(self.dir, "log")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, f"--listen={self.socket}", f"--ready_file={ready}", "--backend=cpu",
             *extra_flags], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log()
                shutil.rmtree(self.dir, ignore_errors=True)
                raise Failure(f"cubed exited ({self.proc.returncode}) before serving:\n{log}")
            if os.path.exists(ready) and open(ready).read().endswith("\n"):
                return
            time.sleep(0.02)
        log = self.log()
        self.close()
        raise Failure(f"cubed did not become ready within 30 s:\n{log}")

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
        code = self.proc.returncode
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


class GrpcurlClient:
    """Runs the grpcurl binary, exactly the commands docs/api.md shows."""

    def __init__(self, binary, socket):
        self.binary = binary
        self.socket = socket

    def _run(self, *args):
        cmd = [self.binary, "-plaintext", "-unix", *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr, " ".join(cmd)

    def list_services(self):
        rc, out, cmd = self._run(self.socket, "list")
        check(rc == 0, f"`{cmd}` succeeds", out)
        return out.split()

    def describe(self, symbol):
        rc, out, cmd = self._run(self.socket, "describe", symbol)
        check(rc == 0, f"`{cmd}` succeeds", out)
        return out

    def call(self, method, data):
        """Returns (True, response as a dict) or (False, grpcurl's error text)."""
        rc, out, _ = self._run("-emit-defaults", "-d", json.dumps(data), self.socket, method)
        if rc != 0:
            return False, out
        return True, json.loads(out)


class PythonReflectionClient:
    """A reflection client in Python: the reflection proto is compiled at start-up with
    grpc_tools (Debian's python3-grpc-tools) from grpc-proto, messages are built from the
    descriptors the server returns, and JSON goes through protobuf's json_format."""

    def __init__(self, socket, workdir):
        import grpc
        from grpc_tools import protoc
        from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
        self.grpc, self.json_format = grpc, json_format
        self.descriptor_pb2, self.message_factory = descriptor_pb2, message_factory
        proto = "grpc/reflection/v1alpha/reflection.proto"
        if protoc.main(["protoc", f"-I{GRPC_PROTO_DIR}", f"--python_out={workdir}", proto]) != 0:
            raise Failure("grpc_tools could not compile the reflection proto")
        # Loaded by path: the name `grpc` is already the grpcio package.
        spec = importlib.util.spec_from_file_location(
            "cubed_test_reflection_pb2", os.path.join(workdir, proto.replace(".proto", "_pb2.py")))
        reflection_pb2 = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(reflection_pb2)
        self.pb = reflection_pb2
        self.channel = grpc.insecure_channel(f"unix:{socket}")
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.reflect = self.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        self.pool = descriptor_pool.DescriptorPool()
        self.loaded = set()

    def _ask(self, **kwargs):
        responses = list(self.reflect(iter([self.pb.ServerReflectionRequest(**kwargs)]), timeout=30))
        if len(responses) != 1:
            raise Failure(f"reflection answered one request with {len(responses)} responses")
        r = responses[0]
        if r.HasField("error_response"):
            raise Failure(f"reflection error: {r.error_response}")
        return r

    def list_services(self):
        r = self._ask(list_services="")
        return [s.name for s in r.list_services_response.service]

    def _load_symbol(self, symbol):
        try:
            self.pool.FindServiceByName(symbol)
            return
        except KeyError:
            pass
        r = self._ask(file_containing_symbol=symbol)
        files = [self.descriptor_pb2.FileDescriptorProto.FromString(b)
                 for b in r.file_descriptor_response.file_descriptor_proto]
        by_name = {f.name: f for f in files}

        def add(f):
            if f.name in self.loaded:
                return
            for dep in f.dependency:
                if dep in by_name:
                    add(by_name[dep])
                elif dep not in self.loaded:
                    add(self._file_by_name(dep))
            self.pool.Add(f)
            self.loaded.add(f.name)

        for f in files:
            add(f)

    def _file_by_name(self, name):
        r = self._ask(file_by_filename=name)
        for b in r.file_descriptor_response.file_descriptor_proto:
            f = self.descriptor_pb2.FileDescriptorProto.FromString(b)
            if f.name == name:
                return f
        raise Failure(f"reflection did not return {name}")

    def describe(self, symbol):
        self._load_symbol(symbol)
        s = self.pool.FindServiceByName(symbol)
        lines = [f"{symbol} is a service:", f"service {s.name} {{"]
        for m in s.methods:
            lines.append(f"  rpc {m.name} ( .{m.input_type.full_name} ) returns "
                         f"( .{m.output_type.full_name} );")
        lines.append("}")
        return "\n".join(lines)

    def _message_class(self, descriptor):
        factory = self.message_factory
        if hasattr(factory, "GetMessageClass"):
            return factory.GetMessageClass(descriptor)
        return factory.MessageFactory(self.pool).GetPrototype(descriptor)

    def call(self, method, data):
        service, name = method.split("/")
        self._load_symbol(service)
        m = self.pool.FindServiceByName(service).methods_by_name[name]
        req_cls = self._message_class(m.input_type)
        resp_cls = self._message_class(m.output_type)
        req = self.json_format.Parse(json.dumps(data), req_cls())
        rpc = self.channel.unary_unary(f"/{method}", request_serializer=req_cls.SerializeToString,
                                       response_deserializer=resp_cls.FromString)
        try:
            resp = rpc(req, timeout=30)
        except self.grpc.RpcError as e:
            # Same words grpcurl prints, so the checks below hold for both clients.
            code = "".join(w.capitalize() for w in e.code().name.split("_"))
            return False, f"ERROR:\n  Code: {code}\n  Message: {e.details()}"
        return True, json.loads(self.json_format.MessageToJson(
            resp, including_default_value_fields=True, preserving_proto_field_name=True))


def rpc_names(proto_path):
    with open(proto_path) as f:
        return re.findall(r"^\s*rpc\s+(\w+)\s*\(", f.read(), re.M)


def expect_ok(client, method, data):
    ok, out = client.call(method, data)
    check(ok, f"{method} {json.dumps(data)} succeeds", str(out))
    print(f"   -> {json.dumps(out)}")
    return out


def usage(client):
    u = expect_ok(client, "cubed.v1.Compute/MemoryUsage", {"device": 0})["usage"]
    check(set(u) == {"number_allocs", "bytes_in_use", "bytes_padding", "bytes_reserved"},
          "MemoryUsage has the four numbers", json.dumps(u))
    return {k: int(v) for k, v in u.items()}


def run_checks(client, proto_path):
    services = client.list_services()
    for s in SERVICES:
        check(s in services, f"list names {s}", "\n".join(services))

    described = client.describe("cubed.v1.Compute")
    for rpc in rpc_names(proto_path):
        check(re.search(rf"\brpc {rpc} \( \.cubed\.v1\.{rpc}Request \) returns "
                        rf"\( \.cubed\.v1\.{rpc}Response \)", described),
              f"describe cubed.v1.Compute shows rpc {rpc}", described)
    health = client.describe("grpc.health.v1.Health")
    for rpc in ("Check", "Watch"):
        check(f"rpc {rpc} (" in health, f"describe grpc.health.v1.Health shows rpc {rpc}", health)

    for service in ("", "cubed.v1.Compute"):
        out = expect_ok(client, "grpc.health.v1.Health/Check", {"service": service})
        check(out.get("status") == "SERVING", f"Health/Check service={service!r} is SERVING",
              json.dumps(out))

    before = usage(client)

    opened = expect_ok(client, "cubed.v1.Compute/OpenSession", {})
    session = opened["session"]
    check(int(session) != 0 and int(opened["lease_ms"]) > 0,
          "OpenSession returns a session id and a lease", json.dumps(opened))

    payload = b"hello from grpcurl"
    created = expect_ok(client, "cubed.v1.Compute/Create",
                        {"session": session, "data": base64.b64encode(payload).decode()})
    handle = created["handle"]
    check(int(created["size"]) == len(payload), "Create reports the size of the data",
          json.dumps(created))

    during = usage(client)
    check(during["number_allocs"] == before["number_allocs"] + 1 and
          during["bytes_in_use"] == before["bytes_in_use"] + len(payload),
          "MemoryUsage counts the new allocation", f"{before} -> {during}")

    read = expect_ok(client, "cubed.v1.Compute/Read",
                     {"session": session, "bindings": [
                         {"handle": handle},
                         {"handle": handle, "offset_start": 6, "offset_end": 8}]})
    data = [base64.b64decode(d) for d in read["data"]]
    check(data == [payload, payload[6:-8]], "Read returns the bytes, whole and sliced", str(data))

    ok, err = client.call("cubed.v1.Compute/Read",
                          {"session": "12345", "bindings": [{"handle": handle}]})
    check(not ok and "Code: NotFound" in err and "session" in err.lower(),
          "Read naming an unknown session fails with NotFound naming the session", str(err))

    expect_ok(client, "cubed.v1.Compute/Release", {"session": session, "handles": [handle]})
    closed = expect_ok(client, "cubed.v1.Compute/CloseSession", {"session": session})
    check(int(closed["handles_released"]) == 0, "CloseSession after Release releases nothing more",
          json.dumps(closed))
    after = usage(client)
    check(after["number_allocs"] == before["number_allocs"] and
          after["bytes_in_use"] == before["bytes_in_use"],
          "after Release and CloseSession the allocation is gone", f"{before} -> {after}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubed", required=True, help="path of the cubed binary")
    ap.add_argument("--proto", required=True, help="path of cubed/v1/compute.proto")
    ap.add_argument("--client", choices=["grpcurl", "python"], required=True)
    args = ap.parse_args()

    if args.client == "grpcurl":
        grpcurl = shutil.which("grpcurl") or (
            "/usr/local/bin/grpcurl" if os.access("/usr/local/bin/grpcurl", os.X_OK) else None)
        if grpcurl is None:
            print("SKIP: grpcurl is not installed (deploy/setup.sh installs it); "
                  "the python variant of this test covers reflection")
            return SKIP
    else:
        missing = []
        for module in ("grpc", "grpc_tools", "google.protobuf"):
            try:
                __import__(module)
            except ImportError:
                missing.append(module)
        if not os.path.exists(f"{GRPC_PROTO_DIR}/grpc/reflection/v1alpha/reflection.proto"):
            missing.append("grpc-proto")
        if missing:
            print(f"SKIP: {', '.join(missing)} missing for {sys.executable} "
                  "(deploy/setup.sh installs python3-grpcio python3-grpc-tools grpc-proto); "
                  "the grpcurl variant of this test covers reflection")
            return SKIP

    try:
        daemon = Daemon(args.cubed)
    except Failure as e:
        print(f"FAILED: {e}")
        return 1
    workdir = tempfile.mkdtemp(prefix="cubed-reflection-py-")
    try:
        if args.client == "grpcurl":
            client = GrpcurlClient(grpcurl, daemon.socket)
        else:
            client = PythonReflectionClient(daemon.socket, workdir)
        run_checks(client, args.proto)
    except Failure as e:
        print(f"FAILED: {e}")
        failed = True
    except Exception:  # a bug here or an answer of the wrong shape: fail with the daemon's log
        print(f"FAILED:\n{traceback.format_exc()}")
        failed = True
    else:
        failed = False
    finally:
        log = daemon.log()
        code = daemon.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if not failed and code != 0:
        print(f"FAILED: cubed exited with {code} after SIGTERM")
        failed = True
    if failed:
        print(f"--- cubed log ---\n{log}")
        return 1
    print("all reflection checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
