#include "server/metrics/metrics_text.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cubed {
namespace {

void Family(std::string& out, absl::string_view name, absl::string_view type,
            absl::string_view help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

// `labels` is empty or `key="value",...` (values here come from fixed sets: no escaping needed).
void Sample(std::string& out, absl::string_view name, absl::string_view labels, uint64_t value) {
  if (labels.empty()) {
    absl::StrAppend(&out, name, " ", value, "\n");
  } else {
    absl::StrAppend(&out, name, "{", labels, "} ", value, "\n");
  }
}

void Histogram(std::string& out, absl::string_view name, absl::string_view labels,
               const StatsSnapshot& stats, const HistogramSnapshot& h) {
  const std::string prefix = labels.empty() ? "" : absl::StrCat(labels, ",");
  for (size_t i = 0; i < stats.latency_bounds_us.size(); ++i) {
    const uint64_t count = i < h.buckets.size() ? h.buckets[i] : 0;
    Sample(out, absl::StrCat(name, "_bucket"),
           absl::StrCat(prefix, "le=\"", stats.latency_bounds_us[i], "\""), count);
  }
  Sample(out, absl::StrCat(name, "_bucket"), absl::StrCat(prefix, "le=\"+Inf\""), h.count);
  Sample(out, absl::StrCat(name, "_sum"), labels, h.sum_us);
  Sample(out, absl::StrCat(name, "_count"), labels, h.count);
}

std::string Label(absl::string_view key, absl::string_view value) {
  return absl::StrCat(key, "=\"", value, "\"");
}

std::string DeviceLabel(const DeviceGauges& d) { return Label("device", absl::StrCat(d.device)); }

// One gauge or counter family with a sample per device.
template <typename Get>
void PerDevice(std::string& out, const StatsSnapshot& stats, absl::string_view name,
               absl::string_view type, absl::string_view help, Get get) {
  Family(out, name, type, help);
  for (const DeviceGauges& d : stats.devices) Sample(out, name, DeviceLabel(d), get(d));
}

}  // namespace

std::string PrometheusText(const StatsSnapshot& stats) {
  std::string out;
  Family(out, "cubed_uptime_microseconds", "gauge", "Time since the daemon started, microseconds.");
  Sample(out, "cubed_uptime_microseconds", "", stats.uptime_us);

  Family(out, "cubed_requests_total", "counter", "Finished RPCs by method and gRPC status code.");
  for (const MethodSnapshot& m : stats.methods) {
    for (const CodeCount& c : m.codes) {
      Sample(out, "cubed_requests_total",
             absl::StrCat(Label("method", m.method), ",", Label("code", c.code)), c.count);
    }
  }
  Family(out, "cubed_request_queue_microseconds", "histogram",
         "RPC time from arrival to the device loop starting it, microseconds.");
  for (const MethodSnapshot& m : stats.methods) {
    Histogram(out, "cubed_request_queue_microseconds", Label("method", m.method), stats, m.queue);
  }
  Family(out, "cubed_request_execution_microseconds", "histogram",
         "RPC time from the device loop starting it to its completion, microseconds.");
  for (const MethodSnapshot& m : stats.methods) {
    Histogram(out, "cubed_request_execution_microseconds", Label("method", m.method), stats,
              m.execution);
  }
  Family(out, "cubed_received_bytes_total", "counter",
         "Serialized request messages received, bytes, by method.");
  for (const MethodSnapshot& m : stats.methods) {
    Sample(out, "cubed_received_bytes_total", Label("method", m.method), m.bytes_received);
  }
  Family(out, "cubed_sent_bytes_total", "counter",
         "Serialized response messages sent, bytes, by method.");
  for (const MethodSnapshot& m : stats.methods) {
    Sample(out, "cubed_sent_bytes_total", Label("method", m.method), m.bytes_sent);
  }

  Family(out, "cubed_stream_commands_total", "counter",
         "Session-stream commands run, by kind and gRPC status code.");
  for (const StreamCommandSnapshot& k : stats.stream_commands) {
    for (const CodeCount& c : k.codes) {
      Sample(out, "cubed_stream_commands_total",
             absl::StrCat(Label("kind", k.kind), ",", Label("code", c.code)), c.count);
    }
  }
  Family(out, "cubed_stream_command_queue_microseconds", "histogram",
         "Stream command time from its request's arrival to the loop starting it, microseconds.");
  for (const StreamCommandSnapshot& k : stats.stream_commands) {
    Histogram(out, "cubed_stream_command_queue_microseconds", Label("kind", k.kind), stats,
              k.queue);
  }
  Family(out, "cubed_stream_command_execution_microseconds", "histogram",
         "Stream command time from the loop starting it to its completion, microseconds.");
  for (const StreamCommandSnapshot& k : stats.stream_commands) {
    Histogram(out, "cubed_stream_command_execution_microseconds", Label("kind", k.kind), stats,
              k.execution);
  }
  Family(out, "cubed_open_streams", "gauge", "Session streams open now.");
  Sample(out, "cubed_open_streams", "", stats.open_streams);
  Family(out, "cubed_open_rings", "gauge",
         "Session streams carried by shared-memory command rings now (of cubed_open_streams).");
  Sample(out, "cubed_open_rings", "", stats.open_rings);
  Family(out, "cubed_rings_opened_total", "counter", "Command rings opened.");
  Sample(out, "cubed_rings_opened_total", "", stats.rings_opened);

  using D = const DeviceGauges&;
  PerDevice(out, stats, "cubed_memory_allocations", "gauge", "Live allocations (slices).",
            [](D d) { return d.memory.number_allocs; });
  PerDevice(out, stats, "cubed_device_up", "gauge",
            "1 while the device serves, 0 once it is lost (its health name device/N is "
            "NOT_SERVING then).",
            [](D d) { return d.up ? 1 : 0; });
  PerDevice(out, stats, "cubed_memory_in_use_bytes", "gauge",
            "Sum of the requested sizes of live allocations, bytes.",
            [](D d) { return d.memory.bytes_in_use; });
  PerDevice(out, stats, "cubed_memory_padding_bytes", "gauge",
            "Alignment padding attached to live allocations, bytes.",
            [](D d) { return d.memory.bytes_padding; });
  PerDevice(out, stats, "cubed_memory_reserved_bytes", "gauge",
            "Memory the pools hold from the device's storage, bytes.",
            [](D d) { return d.memory.bytes_reserved; });
  PerDevice(out, stats, "cubed_memory_limit_bytes", "gauge",
            "Most memory the pools may reserve, bytes.", [](D d) { return d.memory_limit; });
  PerDevice(out, stats, "cubed_imported_bytes", "gauge",
            "Other processes' memory that handles map now (ImportMemory), bytes; not the "
            "pools', never in cubed_memory_* nor under the limit.",
            [](D d) { return d.imported.bytes; });
  PerDevice(out, stats, "cubed_imported_buffers", "gauge",
            "Imports alive now (ImportMemory): one per imported handle.",
            [](D d) { return d.imported.buffers; });
  PerDevice(out, stats, "cubed_sessions", "gauge", "Open sessions.",
            [](D d) { return d.sessions; });
  PerDevice(out, stats, "cubed_handles", "gauge", "Live handles across open sessions.",
            [](D d) { return d.handles; });
  PerDevice(out, stats, "cubed_regions", "gauge",
            "Shared-memory regions registered by open sessions.",
            [](D d) { return d.regions.live; });
  PerDevice(out, stats, "cubed_regions_registered_total", "counter",
            "Shared-memory regions registered since start.",
            [](D d) { return d.regions.registered; });
  PerDevice(out, stats, "cubed_region_created_bytes_total", "counter",
            "Bytes creates took from shared-memory regions.",
            [](D d) { return d.regions.bytes_created; });
  PerDevice(out, stats, "cubed_region_read_bytes_total", "counter",
            "Bytes reads wrote into shared-memory regions.",
            [](D d) { return d.regions.bytes_read; });
  PerDevice(out, stats, "cubed_loop_queued_tasks", "gauge",
            "Tasks waiting for the device loop when the metrics were read.",
            [](D d) { return d.queued_tasks; });
  PerDevice(out, stats, "cubed_kernel_cache_hits_total", "counter",
            "Kernels found compiled in memory (CUDA; 0 on CPU).",
            [](D d) { return d.kernel_cache.hits; });
  PerDevice(out, stats, "cubed_kernel_cache_misses_total", "counter",
            "Kernels compiled with NVRTC (CUDA; 0 on CPU).",
            [](D d) { return d.kernel_cache.misses; });
  PerDevice(out, stats, "cubed_kernel_cache_disk_hits_total", "counter",
            "Kernels read from --kernel_cache_dir instead of compiled (CUDA; 0 on CPU).",
            [](D d) { return d.kernel_cache.disk_hits; });
  PerDevice(out, stats, "cubed_kernel_compile_microseconds_total", "counter",
            "Time spent compiling kernels with NVRTC, microseconds (CUDA; 0 on CPU).",
            [](D d) { return d.kernel_cache.compile_time_us; });
  PerDevice(out, stats, "cubed_launch_batches_total", "counter",
            "Graph replays that sent a stream's held-back launches (CUDA; 0 on CPU).",
            [](D d) { return d.launch_batches.replays; });
  PerDevice(out, stats, "cubed_batched_launches_total", "counter",
            "Launches sent in those replays (CUDA; 0 on CPU).",
            [](D d) { return d.launch_batches.launches; });
  return out;
}

}  // namespace cubed
