// Memory another local process allocated, given to a session as a handle without a copy (Note
// [Imported memory], server/compute/compute_server.h). Part of Device (device.h).

#include <utility>

#include "common/status_macros.h"
#include "server/channel/device.h"
#include "spdlog/spdlog.h"

namespace cubed {

absl::StatusOr<NewHandle> Device::ImportMemory(SessionId session, const ImportCommand& command,
                                               absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("import");
  ImportSource source;
  if (command.from_region) {
    ASSIGN_OR_RETURN(auto range, RegionBytes(*s, command.region, "region"));
    source.kind = ImportSource::Kind::kHost;
    source.host_bytes = range.second;
    source.keep_alive = std::move(range.first);
    source.size = command.region.size;
  } else {
    source.kind = ImportSource::Kind::kCudaIpc;
    source.ipc_handle = command.ipc_handle;
    source.offset = command.offset;
    source.size = command.size;
    source.device_uuid = command.device_uuid;
  }
  trace.set_bytes(source.size);
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, source.size));
  ASSIGN_OR_RETURN(NewHandle h, AddHandle(*s, server_->Import(source)));
  spdlog::debug("session {}: imported {} bytes ({}) as handle {}", session.value(), h.size,
                command.from_region ? "region" : "cuda ipc", h.handle.value());
  return h;
}

}  // namespace cubed
