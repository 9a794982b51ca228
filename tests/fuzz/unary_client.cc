#include "tests/fuzz/unary_client.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/request_conversion.h"
#include "tests/fuzz/magnitude.h"

namespace cubed::fuzz {
namespace {

// An input names at most this many handles (the rest are created but not remembered).
constexpr size_t kMaxKnownHandles = 1024;

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// As ComputeService::OnSession: a session whose id routes to no device is unknown.
absl::Status NoSession(SessionId session) {
  return absl::NotFoundError(absl::StrCat("session ", session.value(), " is not open"));
}
bool OnDevice(SessionId session) { return DeviceOfSession(session) == 0; }

}  // namespace

template <typename Work>
void UnaryClient::Call(const char* rpc, Work work) {
  if (Verbose()) std::fprintf(stderr, "rpc %s\n", rpc);
  const MemoryUsage before = device().Usage();
  const absl::Status status = NoThrow(rpc, work);
  CheckStatus(status);
  if (!status.ok()) {
    Check(SameAllocations(device().Usage(), before), "a failed request changed memory usage");
  }
}

bool UnaryClient::Start() {
  absl::StatusOr<SessionGrant> grant = device().OpenSession(0, absl::Now());
  CheckStatus(grant.status());
  if (!grant.ok()) return false;
  AddSession(grant->session, nullptr);
  return true;
}

void UnaryClient::Finish() {
  for (SessionId s : sessions_) (void)device().CloseSession(s);  // NOT_FOUND if closed already.
  CheckBaseline(device());
}

void UnaryClient::AddSession(SessionId session, PrincipalPtr owner) {
  sessions_.push_back(session);
  owners_.push_back(std::move(owner));
}

void UnaryClient::AddHandle(KnownHandle handle) {
  if (handles_.size() < kMaxKnownHandles) handles_.push_back(std::move(handle));
}

const Principal* UnaryClient::OwnerOf(SessionId session) const {
  for (size_t i = 0; i < sessions_.size(); ++i) {
    if (sessions_[i] == session) return owners_[i].get();
  }
  return nullptr;
}

std::vector<std::optional<uint64_t>> UnaryClient::ViewSizes(
    SessionId session, absl::Span<const BindingRef> bindings) const {
  std::vector<std::optional<uint64_t>> sizes(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) sizes[i] = ViewSize(session, bindings[i]);
  return sizes;
}

std::vector<std::optional<uint64_t>> UnaryClient::ViewSizes(
    SessionId session, absl::Span<const TensorRef> tensors) const {
  std::vector<std::optional<uint64_t>> sizes(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) sizes[i] = ViewSize(session, tensors[i].binding);
  return sizes;
}

std::optional<uint64_t> UnaryClient::ViewSize(SessionId session, const BindingRef& b) const {
  std::optional<uint64_t> size;
  for (const KnownHandle& h : handles_) {  // The latest allocation under that id counts.
    if (h.session != session || h.id != b.handle) continue;
    size = std::nullopt;  // Unknown (a failed create).
    if (h.size != 0 && b.offset_start <= h.size && b.offset_end <= h.size - b.offset_start) {
      size = h.size - b.offset_start - b.offset_end;
    }
  }
  return size;
}

void UnaryClient::Created(SessionId session, const absl::StatusOr<NewHandle>& h,
                          const std::vector<uint64_t>& shape) {
  if (!h.ok()) return;
  if (!shape.empty()) Check(h->strides.size() == shape.size(), "a tensor's strides != its rank");
  AddHandle(KnownHandle{session, h->handle, h->size, shape});
}

void UnaryClient::CopyToDevice(const v1::CopyToDeviceRequest& r) {
  const SessionId session(r.session());
  const CopyTarget target{SessionId(r.target_session()), HandleId(r.target_handle()),
                          r.target_offset()};
  Call("CopyToDevice", [&]() -> absl::Status {
    const BindingRef binding = ToBindingRef(r.source());
    ObserveBindings({binding});
    if (!OnDevice(session)) return NoSession(session);
    if (!OnDevice(target.session)) return NoSession(target.session);
    absl::StatusOr<NewHandle> h =
        device().CopyBetweenSessions(session, binding, target, absl::Now());
    if (r.target_handle() == 0) Created(target.session, h);
    return h.status();
  });
}

void UnaryClient::ImportMemory(const v1::ImportMemoryRequest& r) {
  const SessionId session(r.session());
  Call("ImportMemory", [&]() -> absl::Status {
    absl::StatusOr<ImportCommand> command = ToImportCommand(r);
    if (!command.ok()) return command.status();
    if (!OnDevice(session)) return NoSession(session);
    absl::StatusOr<NewHandle> h = device().ImportMemory(session, *command, absl::Now());
    Created(session, h);
    return h.status();
  });
}

void UnaryClient::OpenSession(const v1::OpenSessionRequest& r, bool quota_owner) {
  if (r.device() != 0) return;  // NOT_FOUND at the edge.
  Call("OpenSession", [&] {
    PrincipalPtr owner = quota_owner ? f_.quota_owner : nullptr;
    absl::StatusOr<SessionGrant> g = device().OpenSession(r.lease_ms(), absl::Now(), owner);
    if (g.ok()) AddSession(g->session, std::move(owner));
    return g.status();
  });
}

void UnaryClient::CloseSession(const v1::CloseSessionRequest& r) {
  const SessionId session(r.session());
  Call("CloseSession", [&] {
    return OnDevice(session) ? device().CloseSession(session).status() : NoSession(session);
  });
}

void UnaryClient::Create(const v1::CreateRequest& r) {
  const SessionId session(r.session());
  Call("Create", [&]() -> absl::Status {
    if (r.data().empty()) return absl::InvalidArgumentError("data: empty");
    if (!OnDevice(session)) return NoSession(session);
    absl::StatusOr<NewHandle> h = device().Create(session, Bytes(r.data()), absl::Now());
    Created(session, h);
    return h.status();
  });
}

void UnaryClient::CreateTensor(const v1::CreateTensorRequest& r) {
  const SessionId session(r.session());
  Call("CreateTensor", [&]() -> absl::Status {
    const std::vector<uint64_t> shape(r.shape().begin(), r.shape().end());
    Observe(Quantity::kAllocation, ExactProduct(shape, r.elem_size()));
    if (absl::Status s = CheckCreateTensor(r); !s.ok()) return s;
    if (!OnDevice(session)) return NoSession(session);
    absl::StatusOr<NewHandle> h =
        device().CreateTensor(session, Bytes(r.data()), shape, r.elem_size(), absl::Now());
    Created(session, h, shape);
    return h.status();
  });
}

void UnaryClient::Empty(const v1::EmptyRequest& r) {
  const SessionId session(r.session());
  Call("Empty", [&]() -> absl::Status {
    Observe(Quantity::kAllocation, r.size());
    if (r.size() == 0) return absl::InvalidArgumentError("size: 0");
    if (!OnDevice(session)) return NoSession(session);
    absl::StatusOr<NewHandle> h = device().Empty(session, r.size(), absl::Now());
    Created(session, h);
    return h.status();
  });
}

void UnaryClient::EmptyTensor(const v1::EmptyTensorRequest& r) {
  const SessionId session(r.session());
  Call("EmptyTensor", [&]() -> absl::Status {
    const std::vector<uint64_t> shape(r.shape().begin(), r.shape().end());
    Observe(Quantity::kAllocation, ExactProduct(shape, r.elem_size()));
    if (absl::Status s = CheckTensorShape(shape, r.elem_size(), "empty_tensor").status(); !s.ok()) {
      return s;
    }
    if (!OnDevice(session)) return NoSession(session);
    absl::StatusOr<NewHandle> h = device().EmptyTensor(session, shape, r.elem_size(), absl::Now());
    Created(session, h, shape);
    return h.status();
  });
}

void UnaryClient::Read(const v1::ReadRequest& r) {
  const SessionId session(r.session());
  Call("Read", [&]() -> absl::Status {
    absl::StatusOr<std::vector<BindingRef>> bindings = ToReadBindings(r, f_.limits);
    if (!bindings.ok()) return bindings.status();
    ObserveBindings(*bindings);
    if (!OnDevice(session)) return NoSession(session);
    std::vector<std::string> out;
    absl::Status status = Completed([&](DoneCallback done) {
      device().Read(session, *bindings, &out, absl::Now(), std::move(done));
    });
    if (status.ok()) {
      CheckReadSizes(SizesOf(out), ViewSizes(session, *bindings), f_.options.max_read_bytes);
    }
    return status;
  });
}

void UnaryClient::ReadTensor(const v1::ReadTensorRequest& r) {
  const SessionId session(r.session());
  Call("ReadTensor", [&]() -> absl::Status {
    absl::StatusOr<std::vector<TensorRef>> tensors = ToTensorRefs(r, f_.limits);
    if (!tensors.ok()) return tensors.status();
    ObserveTensors(Quantity::kReadTotal, *tensors, ViewSizes(session, *tensors));
    if (!OnDevice(session)) return NoSession(session);
    std::vector<std::string> out;
    absl::Status status = Completed([&](DoneCallback done) {
      device().ReadTensor(session, *tensors, &out, absl::Now(), std::move(done));
    });
    if (status.ok()) {
      CheckReadSizes(SizesOf(out), DenseSizes(*tensors), f_.options.max_read_bytes);
    }
    return status;
  });
}

void UnaryClient::GetResource(const v1::GetResourceRequest& r) {
  const SessionId session(r.session());
  Call("GetResource", [&]() -> absl::Status {
    const BindingRef binding = ToBindingRef(r.binding());
    ObserveBindings({binding});
    if (!OnDevice(session)) return NoSession(session);
    return device().GetResource(session, binding, absl::Now()).status();
  });
}

void UnaryClient::Execute(const v1::ExecuteRequest& r) {
  const SessionId session(r.session());
  Call("Execute", [&]() -> absl::Status {
    absl::StatusOr<ExecuteCommand> command = ToExecuteCommand(r, f_.limits);
    if (!command.ok()) return command.status();
    ObserveBindings(command->buffers);
    if (!OnDevice(session)) return NoSession(session);
    if (const Principal* owner = OwnerOf(session); owner != nullptr) {
      absl::Status allowed = owner->CheckExecute(!command->kernel.is_builtin, command->unchecked);
      if (!allowed.ok()) return allowed;
    }
    return device().Execute(session, *command, absl::Now());
  });
}

void UnaryClient::SessionCall(Method method, uint64_t session, uint32_t trace_events) {
  const SessionId s(session);
  Call("Flush/Sync/StartProfile/EndProfile", [&]() -> absl::Status {
    const absl::Time now = absl::Now();
    if (!OnDevice(s)) return NoSession(s);
    switch (method) {
      case Method::kFlush:
        return device().Flush(s, now);
      case Method::kSync:
        return Completed([&](DoneCallback done) { device().Sync(s, now, std::move(done)); });
      case Method::kStartProfile:
        return device().StartProfile(s, now, trace_events);
      default:
        return Completed([&](DoneCallback done) {
          std::unique_ptr<TraceRecorder> trace;  // Taken as the service does, then dropped.
          device().EndProfile(
              s, now,
              [done = std::move(done)](absl::StatusOr<absl::Duration> d) mutable {
                done(d.status());
              },
              &trace);
        });
    }
  });
}

void UnaryClient::DeviceCall(Method method, uint32_t d) {
  if (d != 0) return;  // NOT_FOUND at the edge.
  Call("MemoryUsage/MemoryCleanup/GetInfo", [&] {
    if (method == Method::kMemoryCleanup) device().Cleanup();
    (void)device().Usage();
    (void)device().Description();
    return absl::OkStatus();
  });
}

void UnaryClient::Release(const v1::ReleaseRequest& r) {
  const SessionId session(r.session());
  Call("Release", [&]() -> absl::Status {
    if (absl::Status s = CheckRelease(r, f_.limits); !s.ok()) return s;
    if (!OnDevice(session)) return NoSession(session);
    const std::vector<HandleId> handles(r.handles().begin(), r.handles().end());
    return device().Release(session, handles, absl::Now());
  });
}

}  // namespace cubed::fuzz
