#pragma once

// The wire forms (cubed.v1 protobuf) of the daemon's plain types: one function per type, used by
// every RPC and stream reply that carries it. Pure; any thread.

#include "common/memory_usage.h"
#include "cubed/v1/compute.pb.h"
#include "server/compute_server.h"
#include "server/stats_snapshot.h"

namespace cubed {

void ToWire(const MemoryUsage& usage, v1::MemoryUsage* out);
void ToWire(const DeviceDescription& description, v1::DeviceInfo* out);
// Overwrites every field of `out`.
void ToWire(const StatsSnapshot& stats, v1::GetStatsResponse* out);

}  // namespace cubed
