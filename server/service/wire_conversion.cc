#include "server/service/wire_conversion.h"

#include <string>

namespace cubed {
namespace {

void ToWire(const HistogramSnapshot& h, v1::LatencyHistogram* out) {
  for (uint64_t b : h.buckets) out->add_buckets(b);
  out->set_count(h.count);
  out->set_sum_us(h.sum_us);
}

void ToWire(const std::vector<CodeCount>& codes,
            google::protobuf::RepeatedPtrField<v1::CodeCount>* out) {
  for (const CodeCount& c : codes) {
    v1::CodeCount* w = out->Add();
    w->set_code(c.code);
    w->set_count(c.count);
  }
}

}  // namespace

void ToWire(const MemoryUsage& usage, v1::MemoryUsage* out) {
  out->set_number_allocs(usage.number_allocs);
  out->set_bytes_in_use(usage.bytes_in_use);
  out->set_bytes_padding(usage.bytes_padding);
  out->set_bytes_reserved(usage.bytes_reserved);
}

void ToWire(const DeviceDescription& d, v1::DeviceInfo* out) {
  out->set_device(d.index);
  out->set_backend(d.backend == DeviceDescription::Backend::kCuda ? v1::DeviceInfo::BACKEND_CUDA
                                                                  : v1::DeviceInfo::BACKEND_CPU);
  out->set_name(d.name);
  out->set_memory_total(d.memory_total);
  out->set_memory_limit(d.memory_limit);
  out->set_alignment(d.alignment);
  out->set_max_allocation(d.max_allocation);
  out->mutable_max_cube_count()->set_x(d.max_cube_count[0]);
  out->mutable_max_cube_count()->set_y(d.max_cube_count[1]);
  out->mutable_max_cube_count()->set_z(d.max_cube_count[2]);
  out->mutable_max_cube_dim()->set_x(d.max_cube_dim[0]);
  out->mutable_max_cube_dim()->set_y(d.max_cube_dim[1]);
  out->mutable_max_cube_dim()->set_z(d.max_cube_dim[2]);
  out->set_max_units_per_cube(d.max_units_per_cube);
  out->set_compute_units(d.compute_units);
  out->set_compute_capability(d.compute_capability);
  out->set_uuid(d.uuid);
  for (ElemType t : d.elem_types) out->add_elem_types(static_cast<v1::ElemType>(t));
  for (const std::string& m : d.matmul_types) out->add_matmul_types(m);
  for (const std::string& k : d.builtin_kernels) out->add_builtin_kernels(k);
  for (const std::string& f : d.features) out->add_features(f);
}

void ToWire(const StatsSnapshot& stats, v1::GetStatsResponse* out) {
  out->Clear();
  for (uint64_t bound : stats.latency_bounds_us) out->add_latency_bounds_us(bound);
  for (const MethodSnapshot& m : stats.methods) {
    v1::MethodStats* w = out->add_methods();
    w->set_method(m.method);
    ToWire(m.codes, w->mutable_codes());
    ToWire(m.queue, w->mutable_queue());
    ToWire(m.execution, w->mutable_execution());
    w->set_bytes_received(m.bytes_received);
    w->set_bytes_sent(m.bytes_sent);
  }
  for (const StreamCommandSnapshot& k : stats.stream_commands) {
    v1::StreamCommandStats* w = out->add_stream_commands();
    w->set_kind(k.kind);
    ToWire(k.codes, w->mutable_codes());
    ToWire(k.queue, w->mutable_queue());
    ToWire(k.execution, w->mutable_execution());
  }
  for (const DeviceGauges& d : stats.devices) {
    v1::DeviceStats* w = out->add_devices();
    w->set_device(d.device);
    ToWire(d.memory, w->mutable_memory());
    w->set_memory_limit(d.memory_limit);
    w->set_sessions(d.sessions);
    w->set_handles(d.handles);
    w->set_queued_tasks(d.queued_tasks);
    w->set_lost(!d.up);
    w->set_regions(d.regions.live);
    w->set_regions_registered(d.regions.registered);
    w->set_region_bytes_created(d.regions.bytes_created);
    w->set_region_bytes_read(d.regions.bytes_read);
    w->set_imported_bytes(d.imported.bytes);
    w->set_imported_buffers(d.imported.buffers);
    v1::KernelCacheStats* k = w->mutable_kernel_cache();
    k->set_hits(d.kernel_cache.hits);
    k->set_misses(d.kernel_cache.misses);
    k->set_disk_hits(d.kernel_cache.disk_hits);
    k->set_compile_time_us(d.kernel_cache.compile_time_us);
    w->set_launch_batches(d.launch_batches.replays);
    w->set_batched_launches(d.launch_batches.launches);
    for (const SessionGauges& s : d.session_list) {
      v1::SessionStats* ws = w->add_session_stats();
      ws->set_serial(s.serial);
      ws->set_principal(s.principal);
      ws->set_handles(s.handles);
      ws->set_bytes(s.bytes);
      ws->set_kernels(s.kernels);
      ws->set_graphs(s.graphs);
      ws->set_regions(s.regions);
      ws->set_age_us(s.age_us);
      ws->set_imported_bytes(s.imported_bytes);
    }
  }
  out->set_uptime_us(stats.uptime_us);
  out->set_open_streams(stats.open_streams);
  out->set_open_rings(stats.open_rings);
  out->set_rings_opened(stats.rings_opened);
}

void ToWire(StreamReply&& reply, v1::Reply* out) {
  out->set_seq(reply.seq);
  out->set_code(static_cast<int32_t>(reply.status.code()));
  if (!reply.status.ok()) out->set_message(std::string(reply.status.message()));
  out->set_failed_commands(reply.failed_commands);
  switch (reply.result) {
    case StreamReply::Result::kNone:
      break;
    case StreamReply::Result::kRead: {
      v1::ReadResponse* read = out->mutable_read();
      for (std::string& bytes : reply.read) read->add_data(std::move(bytes));
      break;
    }
    case StreamReply::Result::kDuration:
      out->set_duration_ns(reply.duration_ns);
      break;
    case StreamReply::Result::kMemoryUsage:
      ToWire(reply.memory_usage, out->mutable_memory_usage());
      break;
    case StreamReply::Result::kTensor:
      for (uint64_t s : reply.strides) out->mutable_tensor()->add_strides(s);
      out->mutable_tensor()->set_size(reply.tensor_size);
      break;
    case StreamReply::Result::kRegionBytes:
      out->set_region_bytes(reply.region_bytes);
      break;
    case StreamReply::Result::kGraphSteps:
      out->set_graph_steps(reply.graph_steps);
      break;
  }
}

void ToWire(const StreamOpened& opened, v1::SessionResponse::Opened* out) {
  out->set_session(opened.session.value());
  out->set_lease_ms(opened.lease_ms);
  out->set_first_client_id(opened.first_client_id);
  out->set_resumed_seq(opened.resumed_seq);
}

void ToWire(const TraceRecorder& trace, uint32_t device, v1::Trace* out) {
  out->set_device(device);
  out->set_dropped(trace.dropped());
  out->mutable_events()->Reserve(static_cast<int>(trace.events().size()));
  for (const TraceEvent& e : trace.events()) {
    v1::TraceEvent* w = out->add_events();
    w->set_name(e.name);
    w->set_category(e.category);
    w->set_start_unix_ns(e.start_unix_ns);
    w->set_duration_ns(e.duration_ns);
    w->set_bytes(e.bytes);
    w->set_device_start_unix_ns(e.device_start_unix_ns);
    w->set_device_duration_ns(e.device_duration_ns);
    w->set_queued_ns(e.queued_ns);
  }
}

}  // namespace cubed
