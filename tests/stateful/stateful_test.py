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
import random
import shutil
import sys
import tempfile
import time
import traceback

try:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
except ImportError:
    print("stateful_test: python3-hypothesis is not installed (deploy/setup.sh installs it)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine_base  # noqa: E402
import rules_graphs_regions  # noqa: E402
import rules_stream  # noqa: E402
import rules_unary  # noqa: E402
from daemon import SANITIZER_MARKERS, load_ring, load_stubs  # noqa: E402
from machine_base import MachineBase, Run  # noqa: E402
from rules_graphs_regions import GraphRegionRules  # noqa: E402
from rules_stream import StreamRules  # noqa: E402
from rules_unary import UnaryRules  # noqa: E402


def share(**names):
    """Sets what main() builds (the stubs, the ring client, RUN) as a global of every module
    whose methods read it."""
    for module in (machine_base, rules_unary, rules_stream, rules_graphs_regions):
        for name, value in names.items():
            if hasattr(module, name):
                setattr(module, name, value)


class CubedMachine(UnaryRules, StreamRules, GraphRegionRules, MachineBase, RuleBasedStateMachine):
    """The machine: Hypothesis collects the rules, the initialize rule and the invariant of every
    mixin (inspect.getmembers, sorted by name, so the mixins' order draws nothing different)."""


def main():
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
    share(pb=pb, types_pb=types_pb, session_pb=session_pb, RING=RING, RUN=RUN)
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
