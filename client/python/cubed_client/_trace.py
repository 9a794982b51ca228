"""Trace: the commands a session ran on the daemon during ``with client.trace() as t:``, and their
Chrome trace-event JSON (the format Perfetto's UI and chrome://tracing open). See Note [Command
traces] in server/channel/trace_recorder.cc for what the daemon records."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union


@dataclass(frozen=True)
class TraceEvent:
    """One command as the daemon's device loop ran it (host times of the loop).

    Attributes:
        name: the kernel (``"add"``, a CUDA entry point) or ``"create"``, ``"empty"``,
            ``"read"``, ``"release"``, ``"flush"``, ``"sync"``.
        category: ``"kernel"``, ``"memory"``, ``"transfer"`` or ``"sync"``.
        start_ns: when the loop started it, Unix epoch nanoseconds (the daemon's clock).
        duration_ns: how long the loop spent on it (a kernel's launch, a read's queueing).
        bytes: bytes created or read; 0 where none move.
        device_start_ns, device_duration_ns: a kernel's run on the device (CUDA events; Unix
            epoch nanoseconds placed by the trace's start), None where not measured (the CPU
            backend, whose loop time is the run).
        queued_ns: a session-stream command's wait from the daemon receiving it to the loop
            starting it; 0 for unary calls.
    """

    name: str
    category: str
    start_ns: int
    duration_ns: int
    bytes: int
    device_start_ns: Optional[int] = None
    device_duration_ns: Optional[int] = None
    queued_ns: int = 0


@dataclass
class Trace:
    """Filled in when the ``with client.trace()`` block ends.

    Attributes:
        events: the session's commands, in the order the daemon ran them.
        dropped: commands past ``max_events``, not recorded.
        duration_ns: device time of the block's work (the profile's), nanoseconds.
        session: the session traced; device: the daemon's device index.
    """

    session: int = 0
    device: int = 0
    events: List[TraceEvent] = field(default_factory=list)
    dropped: int = 0
    duration_ns: Optional[int] = None

    def _fill(self, response: Any) -> None:
        t = response.trace
        self.device = t.device
        self.dropped = t.dropped
        self.duration_ns = response.duration_ns
        self.events = [TraceEvent(e.name, e.category, e.start_unix_ns, e.duration_ns, e.bytes,
                                  e.device_start_unix_ns or None,
                                  e.device_duration_ns if e.device_start_unix_ns else None,
                                  e.queued_ns)
                       for e in t.events]

    def chrome(self) -> Dict[str, Any]:
        """The Chrome trace-event format (JSON object form): one complete event (``"ph": "X"``)
        per command, ``ts`` and ``dur`` in microseconds from the first event, the device as the
        process and the session's loop as one thread, the kernels' runs on the device (where
        measured) as a second one (named by metadata events); the absolute start and what was
        dropped in ``otherData``."""
        origin = self.events[0].start_ns if self.events else 0
        pid, tid = self.device, self.session & 0x7FFFFFFF  # Viewers want small integers.
        out: List[Dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": tid,
             "args": {"name": f"cubed device {self.device}"}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
             "args": {"name": f"session {self.session} (device loop)"}},
        ]
        device_tid = tid + 1
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": device_tid,
                    "args": {"name": f"session {self.session} (device)"}})
        for e in self.events:
            args: Dict[str, Any] = {}
            if e.bytes:
                args["bytes"] = e.bytes
            if e.queued_ns:
                args["queued_us"] = e.queued_ns / 1000.0
            out.append({"name": e.name, "cat": e.category, "ph": "X",
                        "ts": (e.start_ns - origin) / 1000.0, "dur": e.duration_ns / 1000.0,
                        "pid": pid, "tid": tid, "args": args})
            if e.device_start_ns is not None and e.device_duration_ns is not None:
                out.append({"name": e.name, "cat": "device", "ph": "X",
                            "ts": (e.device_start_ns - origin) / 1000.0,
                            "dur": e.device_duration_ns / 1000.0, "pid": pid,
                            "tid": device_tid, "args": {}})
        return {"traceEvents": out, "displayTimeUnit": "ms",
                "otherData": {"session": str(self.session), "device": self.device,
                              "start_unix_ns": str(origin), "dropped": self.dropped,
                              "device_time_ns": self.duration_ns}}

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes chrome() as JSON to ``path`` (open it in https://ui.perfetto.dev or
        chrome://tracing)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome(), f)

    def __repr__(self) -> str:
        return (f"Trace(session={self.session}, events={len(self.events)}, "
                f"dropped={self.dropped}, duration_ns={self.duration_ns})")
