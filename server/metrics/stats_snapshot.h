#pragma once

// StatsSnapshot: the daemon's statistics in plain C++ types: the Metrics registry's counters and
// histograms plus each device's gauges. StatsCollector builds it; the Prometheus text
// (metrics_text.h) and the GetStats RPC (its wire form, cubed.v1.GetStatsResponse, converted at
// the service edge) both report it.

#include <cstdint>
#include <string>
#include <vector>

#include "common/memory_usage.h"
#include "server/channel/shared_region.h"   // RegionTraffic.
#include "server/compute/compute_server.h"  // KernelCacheStats.

namespace cubed {

// A latency histogram: cumulative counts per bucket bound (StatsSnapshot::latency_bounds_us),
// then the total count (the +Inf bucket) and the sum, microseconds.
struct HistogramSnapshot {
  std::vector<uint64_t> buckets;
  uint64_t count = 0;
  uint64_t sum_us = 0;
};

// Finished calls (or commands) with one status code; code is its name ("NOT_FOUND").
struct CodeCount {
  std::string code;
  uint64_t count = 0;
};

struct MethodSnapshot {
  std::string method;            // As in the proto ("Create").
  std::vector<CodeCount> codes;  // Codes seen, in code order.
  HistogramSnapshot queue;       // Arrival to the loop starting the call.
  HistogramSnapshot execution;   // Loop start to completion.
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
};

struct StreamCommandSnapshot {
  std::string kind;  // "create_tensor"
  std::vector<CodeCount> codes;
  HistogramSnapshot queue;
  HistogramSnapshot execution;
};

// One session's gauges, read on its device's loop. `serial` names it in stats instead of its id
// (an id lets unary calls use the session where no principal owns it; a serial does not): the
// session's memory owner tag, unique on its device and never reused.
struct SessionGauges {
  uint64_t serial = 0;
  std::string principal;  // Who opened it; empty for none (sessions of unit tests).
  uint64_t handles = 0;
  uint64_t bytes = 0;    // The handles' sizes as clients see them.
  uint64_t kernels = 0;  // Launched since it opened (Session::kernels).
  uint64_t graphs = 0;
  uint64_t regions = 0;
  uint64_t age_us = 0;          // Since it opened.
  uint64_t imported_bytes = 0;  // Of `bytes`, its imported handles' (Note [Imported memory]).
};

// One device's gauges, read on its loop.
struct DeviceGauges {
  uint32_t device = 0;
  bool up = true;  // False once lost (Note [Lost devices], server/daemon/daemon.cc).
  MemoryUsage memory;
  ImportedMemory imported;  // Never in `memory` (Note [Imported memory]).
  uint64_t memory_limit = 0;
  uint64_t sessions = 0;
  uint64_t handles = 0;
  uint64_t queued_tasks = 0;
  KernelCacheStats kernel_cache;
  LaunchBatchStats launch_batches;
  RegionTraffic regions;
  std::vector<SessionGauges> session_list;  // Every open session, by serial.
};

struct StatsSnapshot {
  std::vector<uint64_t> latency_bounds_us;
  std::vector<MethodSnapshot> methods;  // Every method, in Method order.
  std::vector<StreamCommandSnapshot> stream_commands;
  std::vector<DeviceGauges> devices;
  uint64_t uptime_us = 0;
  uint64_t open_streams = 0;  // Every carrier (gRPC and command rings).
  uint64_t open_rings = 0;    // Of them, carried by command rings now.
  uint64_t rings_opened = 0;  // Command rings opened since the daemon started.
};

// The session streams of the daemon now (StatsCollector's source of them).
struct StreamCounts {
  uint64_t open_streams = 0;
  uint64_t open_rings = 0;
  uint64_t rings_opened = 0;
};

}  // namespace cubed
