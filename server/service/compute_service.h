#pragma once

// ComputeService: the gRPC edge of cubed.v1.Compute (callback API). Each reactor converts and
// validates its request (request_conversion.h), posts the work to the device's loop, and
// finishes when the loop (or a backend completion) is done. Reactors never block on device work.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "server/channel/device_loop.h"
#include "server/metrics/metrics.h"
#include "server/service/authenticator.h"
#include "server/service/request_conversion.h"

namespace cubed {

class StatsCollector;

// What a drain with a checkpoint wrote (DrainResponse).
struct DrainSummary {
  uint64_t sessions = 0;
  uint64_t handles = 0;
  uint64_t bytes = 0;  // Of the checkpoint's files.
  std::string directory;
};
// Drains the daemon (Daemon::Drain), called on a gRPC thread; must not block: it answers through
// `done` (once, from any thread).
using DrainHandler = std::function<void(
    bool checkpoint, absl::AnyInvocable<void(absl::StatusOr<DrainSummary>)> done)>;

// Thread-safe: gRPC calls it from its own threads. The loops must outlive the service.
class ComputeService final : public v1::Compute::CallbackService {
 public:
  // Records every call in `metrics` (null: a registry of its own). GetStats answers from `stats`
  // (null: UNIMPLEMENTED). Both must outlive the service.
  ComputeService(std::vector<DeviceLoop*> loops, RequestLimits limits, Metrics* metrics = nullptr,
                 const StatsCollector* stats = nullptr);

  // From now on every new call is answered UNAVAILABLE at once; calls already posted finish.
  // Called first in shutdown, so that no call races the gRPC server's own cancellation.
  void StartDraining() { draining_.store(true, std::memory_order_release); }
  // Serves again after a drain that failed (its checkpoint could not be written).
  void StopDraining() { draining_.store(false, std::memory_order_release); }
  // The Drain RPC calls `handler` (Note [Checkpoint and restore], server/channel/device.h);
  // without one it is UNIMPLEMENTED. Call before serving.
  void SetDrainHandler(DrainHandler handler) { drain_ = std::move(handler); }
  // Every later call is authorized by `auth` (authenticator.h), which must outlive the service;
  // sessions belong to the principal that opened them. Without one (unit tests) every call is
  // allowed and sessions have no owner. Call before serving.
  void SetAuthenticator(const Authenticator* auth) { auth_ = auth; }

  using Reactor = grpc::ServerUnaryReactor;
  using Context = grpc::CallbackServerContext;

  Reactor* OpenSession(Context* ctx, const v1::OpenSessionRequest* req,
                       v1::OpenSessionResponse* resp) override;
  Reactor* CloseSession(Context* ctx, const v1::CloseSessionRequest* req,
                        v1::CloseSessionResponse* resp) override;
  Reactor* Create(Context* ctx, const v1::CreateRequest* req, v1::CreateResponse* resp) override;
  Reactor* CreateTensor(Context* ctx, const v1::CreateTensorRequest* req,
                        v1::CreateTensorResponse* resp) override;
  Reactor* Empty(Context* ctx, const v1::EmptyRequest* req, v1::EmptyResponse* resp) override;
  Reactor* EmptyTensor(Context* ctx, const v1::EmptyTensorRequest* req,
                       v1::EmptyTensorResponse* resp) override;
  Reactor* Read(Context* ctx, const v1::ReadRequest* req, v1::ReadResponse* resp) override;
  Reactor* ReadTensor(Context* ctx, const v1::ReadTensorRequest* req,
                      v1::ReadTensorResponse* resp) override;
  Reactor* GetResource(Context* ctx, const v1::GetResourceRequest* req,
                       v1::GetResourceResponse* resp) override;
  Reactor* Execute(Context* ctx, const v1::ExecuteRequest* req, v1::ExecuteResponse* resp) override;
  Reactor* Flush(Context* ctx, const v1::FlushRequest* req, v1::FlushResponse* resp) override;
  Reactor* Sync(Context* ctx, const v1::SyncRequest* req, v1::SyncResponse* resp) override;
  Reactor* MemoryUsage(Context* ctx, const v1::MemoryUsageRequest* req,
                       v1::MemoryUsageResponse* resp) override;
  Reactor* MemoryCleanup(Context* ctx, const v1::MemoryCleanupRequest* req,
                         v1::MemoryCleanupResponse* resp) override;
  Reactor* StartProfile(Context* ctx, const v1::StartProfileRequest* req,
                        v1::StartProfileResponse* resp) override;
  Reactor* EndProfile(Context* ctx, const v1::EndProfileRequest* req,
                      v1::EndProfileResponse* resp) override;
  Reactor* GetInfo(Context* ctx, const v1::GetInfoRequest* req, v1::GetInfoResponse* resp) override;
  Reactor* Release(Context* ctx, const v1::ReleaseRequest* req, v1::ReleaseResponse* resp) override;
  Reactor* GetStats(Context* ctx, const v1::GetStatsRequest* req,
                    v1::GetStatsResponse* resp) override;
  Reactor* Drain(Context* ctx, const v1::DrainRequest* req, v1::DrainResponse* resp) override;
  // Note [Copies between devices] (server/channel/device.h): the source's loop first, then, on
  // another device, the target's.
  Reactor* CopyToDevice(Context* ctx, const v1::CopyToDeviceRequest* req,
                        v1::CopyToDeviceResponse* resp) override;
  // Note [Imported memory] (server/compute/compute_server.h): INVALID_ARGUMENT without a source.
  Reactor* ImportMemory(Context* ctx, const v1::ImportMemoryRequest* req,
                        v1::ImportMemoryResponse* resp) override;

 private:
  // Posts `work` (void(Device&, Reactor*)) to the loop of `device`; finishes the call with
  // NOT_FOUND for an unknown device and UNAVAILABLE when the daemon is shutting down. `work`
  // must finish the reactor exactly once.
  // `work` may also take (Device&, Reactor*, const PrincipalPtr&): the caller's principal.
  template <typename Work>
  Reactor* OnDevice(Reactor* call, uint32_t device, absl::string_view what, Work work);
  // The principal of `call` allowed to call its RPC; null principal without an authenticator.
  absl::StatusOr<PrincipalPtr> Authorize(Reactor* call) const;
  // Same, for a request naming a session: routes by the session id.
  template <typename Work>
  Reactor* OnSession(Reactor* call, SessionId session, Work work);
  // The reactor of a new call of `method`: counts it in the metrics (arrival, bytes received)
  // and, when finished, its code, latency and the size of `response` (may be null).
  Reactor* StartCall(Context* ctx, Method method, const google::protobuf::MessageLite& request,
                     const google::protobuf::MessageLite* response);
  // Posts a later step of a call a loop already started (a copy's second half) to the loop of
  // `device` (< loops_.size()); `step` must finish the call. Finishes it UNAVAILABLE when the
  // loop no longer takes tasks. Thread-safe (a backend's completion thread calls it).
  void PostStep(Reactor* call, uint32_t device, absl::AnyInvocable<void(Device&)> step);
  // A copy between two devices, piece by piece (Note [Copies between devices]): its steps, each
  // on the loop of the device it names, each posting the next; every failure finishes the call
  // on the target's loop, releasing the handle the copy made.
  struct PieceCopy {
    Reactor* call = nullptr;
    PrincipalPtr principal;
    v1::CopyToDeviceResponse* response = nullptr;
    SessionId source;
    BindingRef binding;
    uint32_t source_device = 0;
    CopyTarget target;
    uint32_t target_device = 0;
    uint64_t size = 0;  // Bytes of the binding.
    uint64_t done = 0;  // Bytes written so far.
    HandleId handle;    // The target handle (new or given).
    bool fresh = false;
    std::vector<std::string> staged;  // The piece in flight.
  };
  void OpenTarget(Device& t, const std::shared_ptr<PieceCopy>& copy);
  void ReadPiece(Device& s, const std::shared_ptr<PieceCopy>& copy);
  void WritePiece(Device& t, const std::shared_ptr<PieceCopy>& copy);
  void FailPieceCopy(Device& t, const std::shared_ptr<PieceCopy>& copy, const absl::Status& status);

  std::vector<DeviceLoop*> loops_;
  RequestLimits limits_;
  std::unique_ptr<Metrics> own_metrics_;
  Metrics* metrics_;
  const StatsCollector* stats_;
  std::atomic<bool> draining_{false};
  const Authenticator* auth_ = nullptr;
  DrainHandler drain_;
};

}  // namespace cubed
