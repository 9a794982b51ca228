#pragma once

// The wire forms (cubed.v1 protobuf) of the daemon's plain types: one function per type, used by
// every RPC and stream reply that carries it. Pure; any thread.

#include "common/memory_usage.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/session.pb.h"
#include "server/channel/stream_reply.h"
#include "server/channel/trace_recorder.h"
#include "server/compute/compute_server.h"
#include "server/metrics/stats_snapshot.h"

namespace cubed {

void ToWire(const MemoryUsage& usage, v1::MemoryUsage* out);
void ToWire(const DeviceDescription& description, v1::DeviceInfo* out);
// The events of a traced profile on device `device` (Note [Command traces]).
void ToWire(const TraceRecorder& trace, uint32_t device, v1::Trace* out);
// Overwrites every field of `out`.
void ToWire(const StatsSnapshot& stats, v1::GetStatsResponse* out);
// Moves the read bytes of `reply` into `out` (no copy).
void ToWire(StreamReply&& reply, v1::Reply* out);
void ToWire(const StreamOpened& opened, v1::SessionResponse::Opened* out);

}  // namespace cubed
