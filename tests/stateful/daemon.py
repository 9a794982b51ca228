"""The real cubed daemon and raw gRPC clients of it, for the stateful fuzzer (stateful_test.py).

No SDK: requests are built from the generated cubed.v1 stubs so that every edge value reaches the
daemon as sent. The stubs are generated into a temporary directory with grpc_tools.protoc from
proto/ (Debian's python3-grpc-tools), as tests/metrics does.
"""

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc

# Words in the daemon's stderr that mean a sanitizer (ASan, UBSan, LSan) reported something.
SANITIZER_MARKERS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer",
                     "runtime error:", "ThreadSanitizer")


def load_stubs(proto_dir, out_dir):
    """Generates the cubed.v1 Python stubs into out_dir and makes them importable."""
    from grpc_tools import protoc
    import grpc_tools
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    protos = [os.path.join(root, f) for root, _, files in os.walk(os.path.join(proto_dir, "cubed"))
              for f in files if f.endswith(".proto")]
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", *protos])
    if rc != 0:
        raise RuntimeError(f"protoc failed ({rc}) on {protos}")
    sys.path.insert(0, out_dir)


class Daemon:
    """`cubed --backend=cpu` on a temporary Unix socket; its stdout and stderr go to one log file.

    stop() sends SIGTERM (SIGKILL after 30 s) and returns the exit status."""

    def __init__(self, binary, flags):
        self.binary = binary
        self.flags = list(flags)
        self.dir = tempfile.mkdtemp(prefix="cubed-stateful-")
        self.socket = os.path.join(self.dir, "cubed.sock")
        self.log_path = os.path.join(self.dir, "log")
        self.log_offset = 0  # new_log() returns what was written after this offset.
        ready = os.path.join(self.dir, "ready")
        env = dict(os.environ)
        # A sanitizer report must end the daemon (and show in its log), never let it go on.
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [binary, f"--listen={self.socket}", f"--ready_file={ready}", "--backend=cpu",
                 *self.flags], stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cubed exited ({self.proc.returncode}):\n{self.log()}")
            if os.path.exists(ready) and open(ready).read().endswith("\n"):
                break
            time.sleep(0.02)
        else:
            self.stop()
            raise RuntimeError(f"cubed did not become ready within 120 s:\n{self.log()}")
        self.channel = grpc.insecure_channel(
            f"unix:{self.socket}",
            options=[("grpc.max_receive_message_length", -1),
                     ("grpc.max_send_message_length", -1)])
        from cubed.v1 import compute_pb2_grpc, session_pb2_grpc
        self.compute = compute_pb2_grpc.ComputeStub(self.channel)
        self.stream = session_pb2_grpc.SessionStreamStub(self.channel)

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def new_log(self):
        """What the daemon wrote since the previous call."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_offset)
            data = f.read()
        self.log_offset += len(data)
        return data.decode(errors="replace")

    def stop(self):
        if getattr(self, "channel", None) is not None:
            self.channel.close()
            self.channel = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class StreamClient:
    """One cubed.v1.SessionStream/Session call driven step by step: send() queues a request,
    event() waits for the next thing the daemon did: ("response", SessionResponse) or
    ("end", code_name, details) once the call ended."""

    def __init__(self, stub, first_request):
        self._requests = queue.Queue()
        self._events = queue.Queue()
        self._requests.put(first_request)
        self.ended = None  # (code_name, details) once the "end" event was taken.
        self.call = stub.Session(self._iterate())
        threading.Thread(target=self._read, daemon=True).start()

    def _iterate(self):
        while True:
            r = self._requests.get()
            if r is None:
                return
            yield r

    def _read(self):
        try:
            for response in self.call:
                self._events.put(("response", response))
            self._events.put(("end", "OK", ""))
        except grpc.RpcError as e:
            self._events.put(("end", e.code().name, e.details() or ""))
        finally:
            self._requests.put(None)  # Lets gRPC's request thread leave the iterator.

    def send(self, request):
        self._requests.put(request)

    def half_close(self):
        self._requests.put(None)

    def cancel(self):
        self.call.cancel()

    def event(self, timeout):
        """The next event; raises queue.Empty after `timeout` seconds without one."""
        ev = self._events.get(timeout=timeout)
        if ev[0] == "end":
            self.ended = ev[1:]
        return ev


def load_ring():
    """The Python SDK's command ring client (client/python/cubed_client/_ring.py), loaded as is
    but bound to the stubs load_stubs() generated (the SDK's own are generated at its build, not
    committed): a package `cubed_ring` whose _proto holds those stubs. None when the file is
    missing."""
    import importlib.util
    import types
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client",
                        "python", "cubed_client")
    if not os.path.exists(os.path.join(root, "_ring.py")):
        return None
    from cubed.v1 import ring_pb2, session_pb2
    package = types.ModuleType("cubed_ring")
    package.__path__ = []
    sys.modules["cubed_ring"] = package
    proto = types.ModuleType("cubed_ring._proto")
    proto.ring_pb2, proto.session_pb2 = ring_pb2, session_pb2
    sys.modules["cubed_ring._proto"] = proto
    for name in ("_errors", "_ring"):
        spec = importlib.util.spec_from_file_location(f"cubed_ring.{name}",
                                                      os.path.join(root, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"cubed_ring.{name}"] = module
        spec.loader.exec_module(module)
    return sys.modules["cubed_ring._ring"]


class RingStreamClient:
    """The same as StreamClient, but the session stream travels through the command ring
    (docs/api.md, "The command ring"): the socket's path plus `.ring`. A cancel ends the ring at
    once (the daemon ends the stream, as for a cancelled gRPC call) and is reported here as the
    gRPC client reports its own cancel: ("end", "CANCELLED", "")."""

    def __init__(self, ring_module, socket_path, first_request):
        self._events = queue.Queue()
        self.ended = None
        self._cancelled = False
        self._ring = ring_module.Ring(socket_path + ".ring")
        self._call = ring_module.RingCall(self._ring, first_request)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            self._call.serve(lambda response: self._events.put(("response", response)))
            self._events.put(("end", "OK", ""))
        except Exception as e:  # CubedError: the stream's end status (RingEnd).
            code = getattr(e, "code", None)
            if not self._cancelled:
                self._events.put(("end", code.name if code is not None else repr(e),
                                  getattr(e, "message", str(e))))
        finally:
            self._call.close()

    def send(self, request):
        self._call.write(request)

    def half_close(self):
        self._call.done_writing()

    def cancel(self):
        self._cancelled = True
        self._events.put(("end", "CANCELLED", ""))
        self._call.cancel()

    def event(self, timeout):
        ev = self._events.get(timeout=timeout)
        if ev[0] == "end":
            self.ended = ev[1:]
        return ev


def register_region(socket_path, session, payload, how="ok"):
    """Registers a memfd holding `payload` for `session` over the region socket (region.proto):
    (code name, region id, size the daemon reports or its message, this side's mmap). `how`:
    "ok" (and "many"), "unsealed" (no F_SEAL_SHRINK), "write_sealed" (F_SEAL_WRITE too),
    "no_fd" (the request alone)."""
    import fcntl
    import mmap
    import socket
    from cubed.v1 import region_pb2
    from model import CODE_NAME
    fd = os.memfd_create("cubed-stateful", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, len(payload))
        mapped = mmap.mmap(fd, len(payload), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        mapped[:] = payload
        if how != "unsealed":
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        if how == "write_sealed":
            mapped.close()  # F_SEAL_WRITE needs no writable shared mapping.
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
            mapped = None
        request = region_pb2.RegisterRegionRequest(session=session).SerializeToString()
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(60)
            s.connect(socket_path)
            if how == "no_fd":
                s.send(request)
            else:
                socket.send_fds(s, [request], [fd])
            answer = s.recv(4096)
    finally:
        os.close(fd)
    r = region_pb2.RegisterRegionResponse.FromString(answer)
    if r.code != 0:
        return CODE_NAME.get(r.code, str(r.code)), 0, r.message, None
    return "OK", r.region, r.size, mapped
