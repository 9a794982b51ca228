// Copies between sessions, on one device or across two (Note [Copies between devices],
// device.h). Part of Device (device.h).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/channel/device.h"

namespace cubed {
namespace {

// Whether two byte ranges of one slice share a byte.
bool Overlap(const ResolvedBinding& a, const ResolvedBinding& b) {
  return a.slice == b.slice && a.offset < b.offset + b.size && b.offset < a.offset + a.size;
}

}  // namespace

absl::StatusOr<Device::CopyDestination> Device::PrepareCopyTarget(const CopyTarget& target,
                                                                  uint64_t size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(target.session, now));
  CopyDestination d;
  if (target.handle.value() == 0) {
    if (target.offset != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("target_offset ", target.offset, " without a target_handle"));
    }
    ASSIGN_OR_RETURN(d.handle, Empty(target.session, size, now));
    d.fresh = true;
    // Empty's own handle, just added: resolves.
    ASSIGN_OR_RETURN(d.binding, Resolve(*s, BindingRef{d.handle.handle, 0, 0}, "target"));
    return d;
  }
  ASSIGN_OR_RETURN(const ResolvedBinding whole,
                   Resolve(*s, BindingRef{target.handle, 0, 0}, "target_handle"));
  if (target.offset > whole.size || size > whole.size - target.offset) {
    return absl::InvalidArgumentError(absl::StrCat("target: bytes [", target.offset, ", +", size,
                                                   ") exceed the ", whole.size, " bytes of handle ",
                                                   target.handle.value()));
  }
  d.handle.handle = target.handle;
  d.handle.size = size;
  d.binding = ResolvedBinding{whole.slice, whole.offset + target.offset, size};
  return d;
}

void Device::DropCopyTarget(const CopyTarget& target, const CopyDestination& d, absl::Time now) {
  if (d.fresh) (void)Release(target.session, {d.handle.handle}, now);
}

absl::StatusOr<NewHandle> Device::CopyBetweenSessions(SessionId source, const BindingRef& binding,
                                                      const CopyTarget& target, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(source, now));
  ASSIGN_OR_RETURN(const ResolvedBinding from, Resolve(*s, binding, "source"));
  if (from.size == 0) return absl::InvalidArgumentError("source: the binding is empty (0 bytes)");
  ASSIGN_OR_RETURN(CopyDestination d, PrepareCopyTarget(target, from.size, now));
  absl::Status s2 = Overlap(from, d.binding)
                        ? absl::InvalidArgumentError(absl::StrCat(
                              "target: bytes [", target.offset, ", +", from.size, ") of handle ",
                              target.handle.value(), " overlap the source"))
                        : server_->CopyWithin(from, d.binding);
  if (!s2.ok()) {
    DropCopyTarget(target, d, now);
    return s2;
  }
  return d.handle;
}

absl::StatusOr<uint64_t> Device::CopySourceSize(SessionId source, const BindingRef& binding,
                                                absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(source, now));
  ASSIGN_OR_RETURN(const ResolvedBinding from, Resolve(*s, binding, "source"));
  if (from.size == 0) return absl::InvalidArgumentError("source: the binding is empty (0 bytes)");
  return from.size;
}

absl::StatusOr<Device::OpenedCopyTarget> Device::OpenCopyTarget(const CopyTarget& target,
                                                                uint64_t size, absl::Time now) {
  ASSIGN_OR_RETURN(CopyDestination d, PrepareCopyTarget(target, size, now));
  return OpenedCopyTarget{d.handle.handle, d.fresh};
}

void Device::CopyOut(SessionId source, const BindingRef& binding, uint64_t offset, uint64_t size,
                     absl::Time now, std::vector<std::string>* out, DoneCallback done) {
  absl::StatusOr<ResolvedBinding> from = [&]() -> absl::StatusOr<ResolvedBinding> {
    ASSIGN_OR_RETURN(Session * s, FindSession(source, now));
    ASSIGN_OR_RETURN(const ResolvedBinding whole, Resolve(*s, binding, "source"));
    // The binding was checked when the copy began; the handle may have gone since.
    if (size == 0 || offset > whole.size || size > whole.size - offset) {
      return absl::FailedPreconditionError(absl::StrCat("source: bytes [", offset, ", +", size,
                                                        ") are no longer in the binding (",
                                                        whole.size, " bytes)"));
    }
    return ResolvedBinding{whole.slice, whole.offset + offset, size};
  }();
  if (!from.ok()) {
    done(from.status());
    return;
  }
  server_->Read({*from}, out, std::move(done));
}

void Device::CopyIn(const CopyTarget& target, absl::Span<const uint8_t> bytes, absl::Time now,
                    CopyInCallback done) {
  absl::StatusOr<CopyDestination> d = PrepareCopyTarget(target, bytes.size(), now);
  if (!d.ok()) {
    done(d.status());
    return;
  }
  // The whole allocation as Empty lays it out: one row of bytes (ComputeServer::Write).
  const uint64_t whole = d->binding.offset + d->binding.size;
  ResolvedTensor t{ResolvedBinding{d->binding.slice, 0, whole}, {whole}, {1}, 1};
  server_->Write(t, d->binding.offset, bytes,
                 [this, target, d = *d, now, done = std::move(done)](absl::Status s) mutable {
                   if (!s.ok()) {
                     // Note [Copies between devices]: Write's `done` runs on the loop (CPU) or
                     // before Write returns (CUDA), so the handle table is the loop's to change
                     // here.
                     DropCopyTarget(target, d, now);
                     done(s);
                     return;
                   }
                   done(d.handle);
                 });
}

}  // namespace cubed
