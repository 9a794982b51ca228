#include "server/service/compute_service.h"

#include <atomic>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/metrics/stats_collector.h"
#include "server/service/status_conversion.h"
#include "server/service/wire_conversion.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

using Reactor = ComputeService::Reactor;

// The reactor of every call of this service: records the call in the metrics registry (Note
// [Metrics hot path], metrics.h) at arrival, when the loop starts it and when it finishes.
class MeteredReactor final : public Reactor {
 public:
  MeteredReactor(grpc::CallbackServerContext* ctx, MethodMetrics* metrics,
                 const google::protobuf::MessageLite& request,
                 const google::protobuf::MessageLite* response)
      : ctx_(ctx), metrics_(metrics), response_(response), arrival_(absl::Now()) {
    metrics_->bytes_received.fetch_add(request.ByteSizeLong(), std::memory_order_relaxed);
  }
  // The device loop starts the call: ends its queue time.
  void Started() {
    start_ = absl::Now();
    metrics_->queue.Observe(start_ - arrival_);
  }
  // Finishes the call; later calls are ignored (Note [Loop task exceptions], device_loop.h: a
  // task that threw after finishing must not finish twice).
  void Done(const absl::Status& status) {
    if (done_.exchange(true, std::memory_order_acq_rel)) return;
    if (start_ != absl::InfinitePast()) metrics_->execution.Observe(absl::Now() - start_);
    metrics_->codes.Count(status.code());
    if (status.ok() && response_ != nullptr) {
      metrics_->bytes_sent.fetch_add(response_->ByteSizeLong(), std::memory_order_relaxed);
    }
    Finish(ToGrpcStatus(status));
  }
  // The reactor lives until gRPC is done with it (OnDone) and no loop task holds it: a task that
  // throws may still finish the call (Note [Loop task exceptions]).
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  void OnDone() override { Unref(); }
  grpc::CallbackServerContext* context() const { return ctx_; }
  // The RPC's name ("Create"), for authorization.
  absl::string_view rpc() const { return rpc_; }
  void set_rpc(absl::string_view rpc) { rpc_ = rpc; }

 private:
  grpc::CallbackServerContext* const ctx_;
  MethodMetrics* const metrics_;
  const google::protobuf::MessageLite* const response_;
  const absl::Time arrival_;
  absl::Time start_ = absl::InfinitePast();
  absl::string_view rpc_;
  std::atomic<bool> done_{false};
  std::atomic<int> refs_{1};  // gRPC's, until OnDone; plus one per loop task holding the call.
};

// Finishes a call, logging failures at debug level (clients see the message themselves).
void Finish(Reactor* reactor, const absl::Status& status) {
  if (!status.ok()) spdlog::debug("request failed: {}", status.ToString());
  static_cast<MeteredReactor*>(reactor)->Done(status);  // Every reactor here is one.
}

Reactor* FinishNow(Reactor* reactor, const absl::Status& status) {
  Finish(reactor, status);
  return reactor;
}

// Finishes a call that made a handle, its id and size (and a tensor's strides) in `resp` first.
template <class Response>
void FinishWithHandle(Reactor* reactor, Response* resp, const absl::StatusOr<NewHandle>& h) {
  if (h.ok()) {
    resp->set_handle(h->handle.value());
    resp->set_size(h->size);
    if constexpr (std::is_same_v<Response, v1::CreateTensorResponse> ||
                  std::is_same_v<Response, v1::EmptyTensorResponse>) {
      for (uint64_t s : h->strides) resp->add_strides(s);
    }
  }
  Finish(reactor, h.status());
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

absl::Status SessionNotOpen(SessionId session) {
  return absl::NotFoundError(
      absl::StrCat("session ", session.value(), " is not open (closed, expired, or never opened)"));
}

}  // namespace

ComputeService::ComputeService(std::vector<DeviceLoop*> loops, RequestLimits limits,
                               Metrics* metrics, const StatsCollector* stats)
    : loops_(std::move(loops)),
      limits_(limits),
      own_metrics_(metrics == nullptr ? std::make_unique<Metrics>() : nullptr),
      metrics_(metrics == nullptr ? own_metrics_.get() : metrics),
      stats_(stats) {}

Reactor* ComputeService::StartCall(Context* ctx, Method method,
                                   const google::protobuf::MessageLite& request,
                                   const google::protobuf::MessageLite* response) {
  auto* reactor = new MeteredReactor(ctx, &metrics_->method(method), request, response);
  reactor->set_rpc(MethodName(method));
  return reactor;
}

absl::StatusOr<PrincipalPtr> ComputeService::Authorize(Reactor* call) const {
  if (auth_ == nullptr) return PrincipalPtr();
  const auto* metered = static_cast<MeteredReactor*>(call);
  return auth_->Authorize(*metered->context(), metered->rpc());
}

template <typename Work>
Reactor* ComputeService::OnDevice(Reactor* call, uint32_t device, absl::string_view what,
                                  Work work) {
  if (draining_.load(std::memory_order_acquire)) {
    return FinishNow(call, absl::UnavailableError("the daemon is shutting down"));
  }
  absl::StatusOr<PrincipalPtr> principal = Authorize(call);
  if (!principal.ok()) return FinishNow(call, principal.status());
  if (device >= loops_.size()) {
    return FinishNow(call, absl::NotFoundError(absl::StrCat(what, ": device ", device,
                                                            " does not exist (this daemon has ",
                                                            loops_.size(), ")")));
  }
  // Quota max_inflight_commands: a slot from here until the loop starts the call.
  const PrincipalPtr p = *std::move(principal);
  if (p != nullptr) {
    if (absl::Status s = p->AcquireInflight(); !s.ok()) return FinishNow(call, s);
  }
  auto* reactor = static_cast<MeteredReactor*>(call);
  reactor->Ref();  // The task's; dropped when it ran or threw.
  const bool posted = loops_[device]->Post(
      [reactor, p, work = std::move(work)](Device& d) mutable {
        if (p != nullptr) p->ReleaseInflight();
        reactor->Started();
        if constexpr (std::is_invocable_v<Work&, Device&, Reactor*, const PrincipalPtr&>) {
          work(d, reactor, p);
        } else {
          work(d, reactor);
        }
        reactor->Unref();
      },
      [reactor](absl::Status error) {  // Note [Loop task exceptions].
        Finish(reactor, error);
        reactor->Unref();
      });
  if (!posted) {
    if (p != nullptr) p->ReleaseInflight();
    Finish(reactor, absl::UnavailableError("the daemon is shutting down"));
    reactor->Unref();
  }
  return reactor;
}

template <typename Work>
Reactor* ComputeService::OnSession(Reactor* call, SessionId session, Work work) {
  const uint32_t device = DeviceOfSession(session);
  if (device >= loops_.size()) {
    if (absl::Status s = Authorize(call).status(); !s.ok()) return FinishNow(call, s);
    return FinishNow(call, SessionNotOpen(session));
  }
  // Note [Session ownership] (device.h): another principal's session is answered as unknown.
  return OnDevice(
      call, device, "session",
      [session, work = std::move(work)](Device& d, Reactor* r, const PrincipalPtr& p) mutable {
        if (!d.IsOwnedBy(session, p.get())) {
          Finish(r, SessionNotOpen(session));
          return;
        }
        if constexpr (std::is_invocable_v<Work&, Device&, Reactor*, const PrincipalPtr&>) {
          work(d, r, p);
        } else {
          work(d, r);
        }
      });
}

Reactor* ComputeService::OpenSession(Context* ctx, const v1::OpenSessionRequest* req,
                                     v1::OpenSessionResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kOpenSession, *req, resp);
  return OnDevice(
      call, req->device(), "device", [req, resp](Device& d, Reactor* r, const PrincipalPtr& p) {
        absl::StatusOr<SessionGrant> grant = d.OpenSession(req->lease_ms(), absl::Now(), p);
        if (grant.ok()) {
          resp->set_session(grant->session.value());
          resp->set_lease_ms(absl::ToInt64Milliseconds(grant->lease));
        }
        Finish(r, grant.status());
      });
}

Reactor* ComputeService::CloseSession(Context* ctx, const v1::CloseSessionRequest* req,
                                      v1::CloseSessionResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kCloseSession, *req, resp);
  return OnSession(call, SessionId(req->session()), [req, resp](Device& d, Reactor* r) {
    absl::StatusOr<uint64_t> released = d.CloseSession(SessionId(req->session()));
    if (released.ok()) resp->set_handles_released(*released);
    Finish(r, released.status());
  });
}

Reactor* ComputeService::Create(Context* ctx, const v1::CreateRequest* req,
                                v1::CreateResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kCreate, *req, resp);
  if (req->data().empty()) {
    return FinishNow(call, absl::InvalidArgumentError("data: empty; create needs at least 1 byte"));
  }
  return OnSession(call, SessionId(req->session()), [req, resp](Device& d, Reactor* r) {
    absl::StatusOr<NewHandle> h =
        d.Create(SessionId(req->session()), Bytes(req->data()), absl::Now());
    FinishWithHandle(r, resp, h);
  });
}

Reactor* ComputeService::CreateTensor(Context* ctx, const v1::CreateTensorRequest* req,
                                      v1::CreateTensorResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kCreateTensor, *req, resp);
  if (absl::Status s = CheckCreateTensor(*req); !s.ok()) return FinishNow(call, s);
  return OnSession(call, SessionId(req->session()), [req, resp](Device& d, Reactor* r) {
    const std::vector<uint64_t> shape(req->shape().begin(), req->shape().end());
    absl::StatusOr<NewHandle> h = d.CreateTensor(SessionId(req->session()), Bytes(req->data()),
                                                 shape, req->elem_size(), absl::Now());
    FinishWithHandle(r, resp, h);
  });
}

Reactor* ComputeService::Empty(Context* ctx, const v1::EmptyRequest* req, v1::EmptyResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kEmpty, *req, resp);
  if (req->size() == 0) {
    return FinishNow(call, absl::InvalidArgumentError("size: 0; empty needs at least 1 byte"));
  }
  return OnSession(call, SessionId(req->session()), [req, resp](Device& d, Reactor* r) {
    absl::StatusOr<NewHandle> h = d.Empty(SessionId(req->session()), req->size(), absl::Now());
    FinishWithHandle(r, resp, h);
  });
}

Reactor* ComputeService::EmptyTensor(Context* ctx, const v1::EmptyTensorRequest* req,
                                     v1::EmptyTensorResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kEmptyTensor, *req, resp);
  std::vector<uint64_t> shape(req->shape().begin(), req->shape().end());
  if (absl::Status s = CheckTensorShape(shape, req->elem_size(), "empty_tensor").status();
      !s.ok()) {
    return FinishNow(call, s);
  }
  return OnSession(call, SessionId(req->session()),
                   [req, resp, shape = std::move(shape)](Device& d, Reactor* r) {
                     absl::StatusOr<NewHandle> h = d.EmptyTensor(SessionId(req->session()), shape,
                                                                 req->elem_size(), absl::Now());
                     FinishWithHandle(r, resp, h);
                   });
}

Reactor* ComputeService::Read(Context* ctx, const v1::ReadRequest* req, v1::ReadResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kRead, *req, resp);
  absl::StatusOr<std::vector<BindingRef>> bindings = ToReadBindings(*req, limits_);
  if (!bindings.ok()) return FinishNow(call, bindings.status());
  // The bytes land in `out`, owned by the task until the read completes, then move into the
  // response without another copy.
  return OnSession(call, SessionId(req->session()),
                   [req, resp, bindings = *std::move(bindings)](Device& d, Reactor* r) {
                     auto out = std::make_shared<std::vector<std::string>>();
                     d.Read(SessionId(req->session()), bindings, out.get(), absl::Now(),
                            [resp, r, out](absl::Status s) {
                              if (s.ok()) {
                                for (std::string& bytes : *out) resp->add_data(std::move(bytes));
                              }
                              Finish(r, s);
                            });
                   });
}

Reactor* ComputeService::ReadTensor(Context* ctx, const v1::ReadTensorRequest* req,
                                    v1::ReadTensorResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kReadTensor, *req, resp);
  absl::StatusOr<std::vector<TensorRef>> tensors = ToTensorRefs(*req, limits_);
  if (!tensors.ok()) return FinishNow(call, tensors.status());
  return OnSession(call, SessionId(req->session()),
                   [req, resp, tensors = *std::move(tensors)](Device& d, Reactor* r) {
                     auto out = std::make_shared<std::vector<std::string>>();
                     d.ReadTensor(SessionId(req->session()), tensors, out.get(), absl::Now(),
                                  [resp, r, out](absl::Status s) {
                                    if (s.ok()) {
                                      for (std::string& bytes : *out)
                                        resp->add_data(std::move(bytes));
                                    }
                                    Finish(r, s);
                                  });
                   });
}

void ComputeService::PostStep(Reactor* call, uint32_t device,
                              absl::AnyInvocable<void(Device&)> step) {
  auto* reactor = static_cast<MeteredReactor*>(call);
  reactor->Ref();  // The step's; dropped when it ran or threw.
  const bool posted = loops_[device]->Post(
      [reactor, step = std::move(step)](Device& d) mutable {
        step(d);
        reactor->Unref();
      },
      [reactor](absl::Status error) {  // Note [Loop task exceptions].
        Finish(reactor, error);
        reactor->Unref();
      });
  if (!posted) {
    Finish(reactor, absl::UnavailableError("the daemon is shutting down"));
    reactor->Unref();
  }
}

Reactor* ComputeService::CopyToDevice(Context* ctx, const v1::CopyToDeviceRequest* req,
                                      v1::CopyToDeviceResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kCopyToDevice, *req, resp);
  const CopyTarget target{SessionId(req->target_session()), HandleId(req->target_handle()),
                          req->target_offset()};
  if (req->target_handle() == 0 && req->target_offset() != 0) {
    return FinishNow(call, absl::InvalidArgumentError(absl::StrCat(
                               "target_offset ", req->target_offset(),
                               " without a target_handle (a new handle starts at 0)")));
  }
  const uint32_t target_device = DeviceOfSession(target.session);
  return OnSession(
      call, SessionId(req->session()),
      [this, req, resp, target, target_device](Device& d, Reactor* r, const PrincipalPtr& p) {
        const SessionId source(req->session());
        const BindingRef binding = ToBindingRef(req->source());
        // Note [Session ownership]: a target session of another principal is an unknown one.
        if (target_device >= loops_.size()) {
          Finish(r, SessionNotOpen(target.session));
          return;
        }
        if (target_device == d.index()) {
          if (!d.IsOwnedBy(target.session, p.get())) {
            Finish(r, SessionNotOpen(target.session));
            return;
          }
          FinishWithHandle(r, resp, d.CopyBetweenSessions(source, binding, target, absl::Now()));
          return;
        }
        // Note [Copies between devices]: the target's loop opens the target, then the pieces
        // go back and forth; neither loop waits for the other.
        absl::StatusOr<uint64_t> size = d.CopySourceSize(source, binding, absl::Now());
        if (!size.ok()) {
          Finish(r, size.status());
          return;
        }
        auto copy = std::make_shared<PieceCopy>();
        copy->call = r;
        copy->principal = p;
        copy->response = resp;
        copy->source = source;
        copy->binding = binding;
        copy->source_device = d.index();
        copy->target = target;
        copy->target_device = target_device;
        copy->size = *size;
        PostStep(r, target_device, [this, copy](Device& t) { OpenTarget(t, copy); });
      });
}

void ComputeService::OpenTarget(Device& t, const std::shared_ptr<PieceCopy>& copy) {
  if (!t.IsOwnedBy(copy->target.session, copy->principal.get())) {
    Finish(copy->call, SessionNotOpen(copy->target.session));
    return;
  }
  absl::StatusOr<Device::OpenedCopyTarget> opened =
      t.OpenCopyTarget(copy->target, copy->size, absl::Now());
  if (!opened.ok()) {
    Finish(copy->call, opened.status());
    return;
  }
  copy->handle = opened->handle;
  copy->fresh = opened->fresh;
  PostStep(copy->call, copy->source_device, [this, copy](Device& s) { ReadPiece(s, copy); });
}

void ComputeService::ReadPiece(Device& s, const std::shared_ptr<PieceCopy>& copy) {
  const uint64_t piece = std::min(kCopyPieceBytes, copy->size - copy->done);
  copy->staged.clear();
  s.CopyOut(copy->source, copy->binding, copy->done, piece, absl::Now(), &copy->staged,
            [this, copy](absl::Status status) {
              // On the source's loop or its backend's completion thread.
              PostStep(copy->call, copy->target_device, [this, copy, status](Device& t) {
                if (!status.ok()) {
                  FailPieceCopy(t, copy, status);
                  return;
                }
                WritePiece(t, copy);
              });
            });
}

void ComputeService::WritePiece(Device& t, const std::shared_ptr<PieceCopy>& copy) {
  // Over the copy's own handle (or the given one), at this piece's place.
  const CopyTarget at{copy->target.session, copy->handle,
                      (copy->fresh ? 0 : copy->target.offset) + copy->done};
  t.CopyIn(at, Bytes(copy->staged[0]), absl::Now(), [this, &t, copy](absl::StatusOr<NewHandle> h) {
    if (!h.ok()) {
      FailPieceCopy(t, copy, h.status());
      return;
    }
    copy->done += copy->staged[0].size();
    if (copy->done < copy->size) {
      PostStep(copy->call, copy->source_device, [this, copy](Device& s) { ReadPiece(s, copy); });
      return;
    }
    FinishWithHandle(copy->call, copy->response, NewHandle{copy->handle, copy->size, {}});
  });
}

void ComputeService::FailPieceCopy(Device& t, const std::shared_ptr<PieceCopy>& copy,
                                   const absl::Status& status) {
  if (copy->fresh) (void)t.Release(copy->target.session, {copy->handle}, absl::Now());
  Finish(copy->call, status);
}

Reactor* ComputeService::GetResource(Context* ctx, const v1::GetResourceRequest* req,
                                     v1::GetResourceResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kGetResource, *req, resp);
  return OnSession(call, SessionId(req->session()), [req, resp](Device& d, Reactor* r) {
    absl::StatusOr<ResourceDescription> res =
        d.GetResource(SessionId(req->session()), ToBindingRef(req->binding()), absl::Now());
    if (res.ok()) {
      resp->set_storage_id(res->storage_id);
      resp->set_offset(res->offset);
      resp->set_size(res->size);
      resp->set_device_pointer(res->device_pointer);
      resp->set_ipc_handle(res->ipc_handle);
    }
    Finish(r, res.status());
  });
}

Reactor* ComputeService::ImportMemory(Context* ctx, const v1::ImportMemoryRequest* req,
                                      v1::ImportMemoryResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kImportMemory, *req, resp);
  absl::StatusOr<ImportCommand> command = ToImportCommand(*req);
  if (!command.ok()) return FinishNow(call, command.status());
  return OnSession(call, SessionId(req->session()),
                   [req, resp, command = *std::move(command)](Device& d, Reactor* r) {
                     absl::StatusOr<NewHandle> h =
                         d.ImportMemory(SessionId(req->session()), command, absl::Now());
                     FinishWithHandle(r, resp, h);
                   });
}

Reactor* ComputeService::Execute(Context* ctx, const v1::ExecuteRequest* req,
                                 v1::ExecuteResponse*) {
  Reactor* call = StartCall(ctx, Method::kExecute, *req, nullptr);
  absl::StatusOr<ExecuteCommand> command = ToExecuteCommand(*req, limits_);
  if (!command.ok()) return FinishNow(call, command.status());
  return OnSession(
      call, SessionId(req->session()),
      [req, command = *std::move(command)](Device& d, Reactor* r, const PrincipalPtr& p) mutable {
        if (p != nullptr) {
          if (absl::Status s = p->CheckExecute(!command.kernel.is_builtin, command.unchecked);
              !s.ok()) {
            Finish(r, s);
            return;
          }
        }
        Finish(r, d.Execute(SessionId(req->session()), command, absl::Now()));
      });
}

Reactor* ComputeService::Flush(Context* ctx, const v1::FlushRequest* req, v1::FlushResponse*) {
  Reactor* call = StartCall(ctx, Method::kFlush, *req, nullptr);
  return OnSession(call, SessionId(req->session()), [req](Device& d, Reactor* r) {
    Finish(r, d.Flush(SessionId(req->session()), absl::Now()));
  });
}

Reactor* ComputeService::Sync(Context* ctx, const v1::SyncRequest* req, v1::SyncResponse*) {
  Reactor* call = StartCall(ctx, Method::kSync, *req, nullptr);
  return OnSession(call, SessionId(req->session()), [req](Device& d, Reactor* r) {
    d.Sync(SessionId(req->session()), absl::Now(), [r](absl::Status s) { Finish(r, s); });
  });
}

Reactor* ComputeService::MemoryUsage(Context* ctx, const v1::MemoryUsageRequest* req,
                                     v1::MemoryUsageResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kMemoryUsage, *req, resp);
  return OnDevice(call, req->device(), "device", [resp](Device& d, Reactor* r) {
    ToWire(d.Usage(), resp->mutable_usage());
    const ImportedMemory imported = d.Imports();  // Note [Imported memory]: beside the usage.
    resp->set_imported_bytes(imported.bytes);
    resp->set_imported_buffers(imported.buffers);
    Finish(r, absl::OkStatus());
  });
}

Reactor* ComputeService::MemoryCleanup(Context* ctx, const v1::MemoryCleanupRequest* req,
                                       v1::MemoryCleanupResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kMemoryCleanup, *req, resp);
  return OnDevice(call, req->device(), "device", [resp](Device& d, Reactor* r) {
    d.Cleanup();
    ToWire(d.Usage(), resp->mutable_usage());
    Finish(r, absl::OkStatus());
  });
}

Reactor* ComputeService::StartProfile(Context* ctx, const v1::StartProfileRequest* req,
                                      v1::StartProfileResponse*) {
  Reactor* call = StartCall(ctx, Method::kStartProfile, *req, nullptr);
  return OnSession(call, SessionId(req->session()), [req](Device& d, Reactor* r) {
    Finish(r, d.StartProfile(SessionId(req->session()), absl::Now(), req->trace_events()));
  });
}

Reactor* ComputeService::EndProfile(Context* ctx, const v1::EndProfileRequest* req,
                                    v1::EndProfileResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kEndProfile, *req, resp);
  return OnSession(call, SessionId(req->session()), [req, resp](Device& d, Reactor* r) {
    // EndProfile hands the trace over before it asks for the device time, whose callback may
    // run at once or later on another thread: the callback writes both.
    auto trace = std::make_shared<std::unique_ptr<TraceRecorder>>();
    d.EndProfile(
        SessionId(req->session()), absl::Now(),
        [resp, r, trace, device = d.index()](absl::StatusOr<absl::Duration> elapsed) {
          if (elapsed.ok()) {
            resp->set_duration_ns(absl::ToInt64Nanoseconds(*elapsed));
            if (*trace != nullptr) ToWire(**trace, device, resp->mutable_trace());
          }
          Finish(r, elapsed.status());
        },
        trace.get());
  });
}

Reactor* ComputeService::GetInfo(Context* ctx, const v1::GetInfoRequest* req,
                                 v1::GetInfoResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kGetInfo, *req, resp);
  const uint32_t devices = static_cast<uint32_t>(loops_.size());
  return OnDevice(call, req->device(), "device", [resp, devices](Device& d, Reactor* r) {
    ToWire(d.Description(), resp->mutable_info());
    resp->set_devices(devices);
    resp->set_version(CUBED_VERSION);
    Finish(r, absl::OkStatus());
  });
}

Reactor* ComputeService::Release(Context* ctx, const v1::ReleaseRequest* req,
                                 v1::ReleaseResponse*) {
  Reactor* call = StartCall(ctx, Method::kRelease, *req, nullptr);
  if (absl::Status s = CheckRelease(*req, limits_); !s.ok()) return FinishNow(call, s);
  std::vector<HandleId> handles(req->handles().begin(), req->handles().end());
  return OnSession(call, SessionId(req->session()),
                   [req, handles = std::move(handles)](Device& d, Reactor* r) {
                     Finish(r, d.Release(SessionId(req->session()), handles, absl::Now()));
                   });
}

Reactor* ComputeService::GetStats(Context* ctx, const v1::GetStatsRequest* req,
                                  v1::GetStatsResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kGetStats, *req, resp);
  if (draining_.load(std::memory_order_acquire)) {
    return FinishNow(call, absl::UnavailableError("the daemon is shutting down"));
  }
  if (absl::Status s = Authorize(call).status(); !s.ok()) return FinishNow(call, s);
  if (stats_ == nullptr) {
    return FinishNow(call, absl::UnimplementedError("GetStats: this server keeps no statistics"));
  }
  // Reads every device's gauges on its loop; answers from the last loop to reply.
  static_cast<MeteredReactor*>(call)->Started();
  stats_->Collect([call, resp](absl::StatusOr<StatsSnapshot> stats) {
    if (stats.ok()) ToWire(*stats, resp);
    Finish(call, stats.status());
  });
  return call;
}

Reactor* ComputeService::Drain(Context* ctx, const v1::DrainRequest* req, v1::DrainResponse* resp) {
  Reactor* call = StartCall(ctx, Method::kDrain, *req, resp);
  if (draining_.load(std::memory_order_acquire)) {
    return FinishNow(call, absl::UnavailableError("the daemon is shutting down"));
  }
  if (absl::Status s = Authorize(call).status(); !s.ok()) return FinishNow(call, s);
  if (drain_ == nullptr) {
    return FinishNow(call, absl::UnimplementedError("Drain: this server cannot be drained"));
  }
  static_cast<MeteredReactor*>(call)->Started();
  drain_(req->checkpoint(), [call, resp](absl::StatusOr<DrainSummary> summary) {
    if (summary.ok()) {
      resp->set_sessions(summary->sessions);
      resp->set_handles(summary->handles);
      resp->set_bytes(summary->bytes);
      resp->set_directory(summary->directory);
    }
    Finish(call, summary.status());
  });
  return call;
}

}  // namespace cubed
