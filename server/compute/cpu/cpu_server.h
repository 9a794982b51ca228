#pragma once

// CpuServer: the ComputeServer of the host CPU. Memory is host memory from HostStorage under a
// MemoryManager; builtin kernels run on all cores (kernels/cpu/cpu_kernels.h) and complete before
// Execute returns, so reads, syncs and profile ends complete at once, in order.

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "server/compute/compute_server.h"
#include "storage/compute_storage.h"

namespace cubed {
namespace kernels {
struct NotPrepared;
template <typename Prepared>
class ValidatedCallsWith;
using ValidatedCalls = ValidatedCallsWith<NotPrepared>;
}  // namespace kernels

struct CpuServerOptions {
  uint32_t index = 0;
  uint64_t memory_limit = 0;     // Bytes; 0 = half of physical memory / devices_sharing.
  uint32_t devices_sharing = 1;  // CPU devices of the daemon that share the host (--cpu_devices).
  uint64_t max_allocation = 0;   // Bytes; 0 = the memory limit.
  // TEST ONLY (Note [Lost devices], server/daemon/daemon.cc): once this file exists, the next
  // Execute loses the device, as a sticky CUDA error would: it and every later Execute fail
  // UNAVAILABLE "device lost: ...", Lost() says so, and the lost callback runs once. Empty:
  // never.
  std::string test_lost_file;
};

// Profiles measure busy time: the time the device spent running commands (copies and kernels)
// between StartProfile and EndProfile, not the idle time between client calls.
// Owned by the device's server-loop thread.
class CpuServer final : public ComputeServer {
 public:
  explicit CpuServer(CpuServerOptions options);
  ~CpuServer() override;

  const DeviceDescription& Description() const override { return description_; }
  // A dirty reservation (Note [Owner-tagged memory]) is zeroed with memset before returning.
  absl::StatusOr<Allocation> Empty(uint64_t size, MemoryOwner owner) override;
  absl::StatusOr<Allocation> EmptyTensor(absl::Span<const uint64_t> shape, uint32_t elem_size,
                                         MemoryOwner owner) override;
  absl::StatusOr<Allocation> Create(absl::Span<const uint8_t> data, MemoryOwner owner) override;
  absl::StatusOr<Allocation> CreateTensor(absl::Span<const uint8_t> data,
                                          absl::Span<const uint64_t> shape, uint32_t elem_size,
                                          MemoryOwner owner) override;
  void Free(SliceId slice) override;
  // Dense layouts only (the only ones this backend allocates); a memcpy per piece, done before
  // returning.
  using ComputeServer::Write;
  void Write(const ResolvedTensor& target, uint64_t dense_offset,
             absl::Span<const absl::Span<const uint8_t>> pieces, DoneCallback done) override;
  void Read(std::vector<ResolvedBinding> bindings, std::vector<std::string>* out,
            DoneCallback done) override;
  void ReadTensor(std::vector<ResolvedTensor> tensors, std::vector<std::string>* out,
                  DoneCallback done) override;
  void ReadTensorInto(std::vector<ResolvedTensor> tensors, std::vector<absl::Span<uint8_t>> out,
                      DoneCallback done) override;
  // Hands out the allocations' own memory, in batches of up to 16 MiB (Note [Checkpoint I/O]).
  absl::Status ReadToHost(absl::Span<const ResolvedBinding> bindings,
                          HostChunkCallback sink) override;
  // `fill` writes straight into the new allocations, which are zeroed only where it does not
  // write (a dirty slice's padding).
  absl::StatusOr<std::vector<Allocation>> CreateFromHost(absl::Span<const uint64_t> sizes,
                                                         MemoryOwner owner,
                                                         HostChunkCallback fill) override;
  absl::StatusOr<ResourceDescription> GetResource(const ResolvedBinding& binding) override;
  // Note [Imported memory]: kHost sources only (a region's range, used in place); UNIMPLEMENTED
  // for CUDA memory.
  absl::StatusOr<Allocation> Import(const ImportSource& source) override;
  ImportedMemory Imports() const override;
  absl::Status Execute(const Launch& launch) override;
  absl::Status Flush() override { return absl::OkStatus(); }
  void Sync(DoneCallback done) override { done(absl::OkStatus()); }
  MemoryUsage Usage() const override { return memory_->Usage(); }
  void Cleanup() override { memory_->Cleanup(); }
  absl::StatusOr<ProfileToken> StartProfile() override;
  void EndProfile(ProfileToken token, DurationCallback done) override;
  absl::Status Lost() const override { return lost_; }
  // A memcpy, done before returning.
  absl::Status CopyWithin(const ResolvedBinding& from, const ResolvedBinding& to) override;
  // Called once, on the loop thread, when the device is lost (CpuServerOptions::test_lost_file);
  // must not block. Set before the server is used.
  void SetLostCallback(absl::AnyInvocable<void(const absl::Status&)> callback) {
    on_lost_ = std::move(callback);
  }

 private:
  // Host address of a binding's first byte.
  absl::StatusOr<uint8_t*> Address(const ResolvedBinding& binding) const;
  // Reserves `size` bytes for `owner`; when dirty, zeroes the slice's extent past its first
  // `covered` bytes (which the caller writes at once).
  absl::StatusOr<SliceId> Reserve(uint64_t size, MemoryOwner owner, uint64_t covered);
  // A dense tensor's allocation, reserved as Reserve does.
  absl::StatusOr<Allocation> ReserveTensor(absl::Span<const uint64_t> shape, uint32_t elem_size,
                                           MemoryOwner owner, uint64_t covered);

  DeviceDescription description_;
  std::unique_ptr<ComputeStorage> storage_;
  std::unique_ptr<MemoryManager> memory_;
  // Runs `work` and, while a profile is open, adds its duration to busy_.
  template <typename F>
  auto Timed(F&& work) -> decltype(work());

  // Imported ranges by slice id (Note [Imported memory]), each kept mapped by its keep_alive.
  struct Imported {
    absl::Span<uint8_t> bytes;
    std::shared_ptr<const void> keep_alive;
  };
  absl::flat_hash_map<SliceId, Imported> imports_;
  uint64_t next_import_ = 1;

  absl::Duration busy_;  // Time spent running commands while a profile was open.
  absl::flat_hash_map<ProfileToken, absl::Duration> profiles_;  // Token -> busy_ at start.
  ProfileToken next_profile_ = 1;
  std::string test_lost_file_;  // CpuServerOptions::test_lost_file.
  absl::AnyInvocable<void(const absl::Status&)> on_lost_;
  absl::Status lost_;  // Not OK once lost.
  // Builtin calls validated lately (Note [Validated calls]); Execute's, on the device loop.
  std::unique_ptr<kernels::ValidatedCalls> validated_calls_;
};

}  // namespace cubed
