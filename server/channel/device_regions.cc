// The shared-memory regions of local sessions (Note [Shared-memory regions], shared_region.h):
// registration, creates from a region and reads into one. Part of Device (device.h).

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "server/channel/device.h"
#include "spdlog/spdlog.h"

namespace cubed {

RegionTraffic Device::region_traffic() const {
  RegionTraffic t = region_traffic_;
  t.live = sessions_.region_count();
  return t;
}

absl::StatusOr<RegionId> Device::RegisterRegion(SessionId session,
                                                std::unique_ptr<SharedRegion> region,
                                                absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  if (s->regions().size() >= options_.max_regions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("region: the session holds ", s->regions().size(),
                     " shared-memory regions, the most one may hold (release one first)"));
  }
  uint64_t held = 0;
  for (const auto& [other, r] : s->regions()) held += r->size();  // Each <= the limit: no wrap.
  if (region->size() > options_.max_region_bytes - std::min(held, options_.max_region_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "region: the session holds ", held, " bytes of shared-memory regions; ", region->size(),
        " more would pass --max_region_bytes (", options_.max_region_bytes, ")"));
  }
  RETURN_IF_ERROR(server_->RegisterHostMemory(region->bytes()));
  const RegionId id = s->AddRegion(std::move(region));
  ++region_traffic_.registered;
  spdlog::debug("session {}: region {} registered", session.value(), id.value());
  return id;
}

absl::Status Device::ReleaseRegion(SessionId session, RegionId region, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  const std::shared_ptr<SharedRegion>* r = s->FindRegion(region);
  if (r == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("region ", region.value(), " is not a region of this session"));
  }
  server_->UnregisterHostMemory((*r)->bytes());
  s->EraseRegion(region);
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::shared_ptr<SharedRegion>, absl::Span<uint8_t>>> Device::RegionBytes(
    const Session& session, const RegionRange& range, absl::string_view field) const {
  const std::shared_ptr<SharedRegion>* r = session.FindRegion(range.region);
  if (r == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(field, ".region: ", range.region.value(), " is not a region of this session"));
  }
  ASSIGN_OR_RETURN(absl::Span<uint8_t> bytes, (*r)->Slice(range.offset, range.size, field));
  return std::make_pair(*r, bytes);
}

absl::StatusOr<NewHandle> Device::CreateFromRegion(SessionId session, HandleId id,
                                                   const RegionRange& source, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("create");
  trace.set_bytes(source.size);
  RETURN_IF_ERROR(CheckClientId(*s, id));
  ASSIGN_OR_RETURN(auto bytes, RegionBytes(*s, source, "region"));
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, source.size));
  ASSIGN_OR_RETURN(NewHandle h,
                   AddHandleWithId(*s, id, server_->Create(bytes.second, s->memory_owner())));
  region_traffic_.bytes_created += source.size;
  return h;
}

absl::StatusOr<NewHandle> Device::CreateTensorFromRegion(SessionId session, HandleId id,
                                                         const RegionRange& source,
                                                         absl::Span<const uint64_t> shape,
                                                         uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("create");
  trace.set_bytes(source.size);
  RETURN_IF_ERROR(CheckClientId(*s, id));
  ASSIGN_OR_RETURN(auto bytes, RegionBytes(*s, source, "region"));
  ASSIGN_OR_RETURN(const uint64_t dense, TensorBytes(shape, elem_size, "region"));
  if (dense != source.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("region.size: ", source.size, " bytes for a tensor of ", dense));
  }
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, source.size));
  ASSIGN_OR_RETURN(
      NewHandle h,
      AddHandleWithId(*s, id,
                      server_->CreateTensor(bytes.second, shape, elem_size, s->memory_owner())));
  region_traffic_.bytes_created += source.size;
  return h;
}

void Device::ReadTensorIntoRegion(SessionId session, const std::vector<TensorRef>& tensors,
                                  const RegionRange& into, absl::Time now,
                                  RegionReadCallback done) {
  struct Plan {
    std::vector<ResolvedTensor> tensors;
    std::vector<absl::Span<uint8_t>> out;  // Where each tensor lands, inside the region.
    std::shared_ptr<SharedRegion> region;
    uint64_t total = 0;
  };
  auto plan = [&]() -> absl::StatusOr<Plan> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    ASSIGN_OR_RETURN(auto destination, RegionBytes(*s, into, "into"));
    Plan p;
    p.region = std::move(destination.first);
    std::vector<uint64_t> sizes;
    ASSIGN_OR_RETURN(p.tensors, ResolveTensors(*s, tensors, &sizes, &p.total));
    if (p.total > into.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("into.size: ", into.size, " bytes, but the bindings hold ", p.total));
    }
    uint64_t offset = 0;
    for (uint64_t bytes : sizes) {
      p.out.push_back(destination.second.subspan(offset, bytes));
      offset += bytes;  // <= total <= into.size: no overflow.
    }
    return p;
  };
  absl::StatusOr<Plan> p = plan();
  if (!p.ok()) {
    done(p.status());
    return;
  }
  region_traffic_.bytes_read += p->total;
  ScopedTraceEvent trace(TraceOf(session), "transfer");
  trace.set_name("read");
  trace.set_bytes(p->total);
  server_->ReadTensorInto(std::move(p->tensors), std::move(p->out),
                          [done = std::move(done), region = std::move(p->region),
                           total = p->total](absl::Status s) mutable {
                            if (s.ok()) {
                              done(total);
                            } else {
                              done(std::move(s));
                            }
                          });
}

}  // namespace cubed
