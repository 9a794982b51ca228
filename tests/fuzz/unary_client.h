#pragma once

// UnaryClient: runs cubed.v1.Compute requests against the fixture's device as the gRPC edge does
// (the checks and conversions of compute_service.cc, then the Device call; the glue that needs a
// gRPC server is mirrored) and checks the invariants of each: an acceptable status
// (harness.h CheckStatus), no exception, a failed request leaves memory unchanged, a completion
// runs exactly once, a successful read returns what its bindings address. It remembers the
// sessions and handles the input's requests created, so that the input can name them. As at the
// edge, each request's wire ids become SessionId / HandleId once, where it meets the Device.
// Single-threaded.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "common/ids.h"
#include "cubed/v1/compute.pb.h"
#include "server/auth/principal.h"
#include "server/auth/rpc.h"
#include "tests/fuzz/harness.h"

namespace cubed::fuzz {

// A handle (or stream client id) some request of the input created, live or not any more.
struct KnownHandle {
  SessionId session;
  HandleId id;
  uint64_t size = 0;            // Bytes allocated (0 when unknown, e.g. a poisoned id).
  std::vector<uint64_t> shape;  // Tensors only.
};

class UnaryClient {
 public:
  UnaryClient() : f_(SharedFixture()) {}

  // Opens the input's first session; false when that fails (never with the fixture's options).
  bool Start();
  // Closes every session the input opened and checks the device's baseline.
  void Finish();

  // One RPC each. `quota_owner`: the session is opened for Fixture::quota_owner.
  void OpenSession(const v1::OpenSessionRequest& r, bool quota_owner);
  void CloseSession(const v1::CloseSessionRequest& r);
  void Create(const v1::CreateRequest& r);
  void CreateTensor(const v1::CreateTensorRequest& r);
  void Empty(const v1::EmptyRequest& r);
  void EmptyTensor(const v1::EmptyTensorRequest& r);
  void Read(const v1::ReadRequest& r);
  void ReadTensor(const v1::ReadTensorRequest& r);
  void GetResource(const v1::GetResourceRequest& r);
  void Execute(const v1::ExecuteRequest& r);
  // `method` is Flush, Sync, StartProfile or EndProfile (requests of one field: the session).
  // `trace_events`: StartProfile's (0 for the others).
  void SessionCall(Method method, uint64_t session, uint32_t trace_events = 0);
  // `method` is MemoryUsage, MemoryCleanup or GetInfo (requests of one field: the device).
  void DeviceCall(Method method, uint32_t device);
  void Release(const v1::ReleaseRequest& r);
  // CopyToDevice between two sessions of the fixture's one device (Device::CopyBetweenSessions).
  void CopyToDevice(const v1::CopyToDeviceRequest& r);
  // ImportMemory (Note [Imported memory]): every refusal must leave memory as it was.
  void ImportMemory(const v1::ImportMemoryRequest& r);

  // Sessions and handles created elsewhere (the session stream), so that requests can name them.
  void AddSession(SessionId session, PrincipalPtr owner);
  void AddHandle(KnownHandle handle);

  // What a successful plain read of `bindings` in `session` returns per binding: the view of a
  // handle this input created (its bytes less both offsets); nullopt for other handles.
  std::vector<std::optional<uint64_t>> ViewSizes(SessionId session,
                                                 absl::Span<const BindingRef> bindings) const;
  std::vector<std::optional<uint64_t>> ViewSizes(SessionId session,
                                                 absl::Span<const TensorRef> tensors) const;
  std::optional<uint64_t> ViewSize(SessionId session, const BindingRef& binding) const;

  const std::vector<SessionId>& sessions() const { return sessions_; }
  const std::vector<KnownHandle>& handles() const { return handles_; }
  Device& device() { return *f_.device; }
  const Fixture& fixture() const { return f_; }

 private:
  // Runs `work` (returning the RPC's status) under the per-request checks.
  template <typename Work>
  void Call(const char* rpc, Work work);
  // The principal a session was opened for (null: none, or not opened by this input).
  const Principal* OwnerOf(SessionId session) const;
  void Created(SessionId session, const absl::StatusOr<NewHandle>& h,
               const std::vector<uint64_t>& shape = {});

  Fixture& f_;
  std::vector<SessionId> sessions_;
  std::vector<PrincipalPtr> owners_;  // Parallel to sessions_.
  std::vector<KnownHandle> handles_;
};

}  // namespace cubed::fuzz
