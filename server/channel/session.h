#pragma once

// Session: the unit of ownership and isolation (ARCHITECTURE.md §3). A session's handle table
// maps opaque ids to refcounted slices; ids are unique within the session and not sequential.
// Ids the daemon picks never have the top bit set; ids with it set are the client's to choose
// (kFirstClientId, the session stream). An id may be poisoned (Note [Poisoned handles]).

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/ids.h"
#include "server/auth/principal.h"
#include "server/channel/graph.h"
#include "server/channel/shared_region.h"
#include "server/channel/trace_recorder.h"
#include "server/compute/compute_server.h"

namespace cubed {

struct HandleEntry {
  SliceId slice = 0;
  uint64_t size = 0;      // Bytes of the allocation as the client sees it.
  uint32_t refcount = 1;  // References held by the client (Release drops them).
};

// The smallest id a client may choose for a new allocation (the top bit set).
inline constexpr uint64_t kFirstClientId = uint64_t{1} << 63;

// Note [Poisoned handles]: a session-stream command that fails marks the handles it would have
// written as poisoned, with its error. A poisoned id may also be a live handle (an execute's
// output) or only a poison entry (a create that failed). Every later use of a poisoned id fails
// with that error, unchanged; releasing the id removes the poison (and the handle, if live).
// Errors stored here carry kPoisonPayload, so that a command failing on one does not prefix it
// again.
inline constexpr char kPoisonPayload[] = "type.cubed.dev/poisoned";

// Owned by the device's server-loop thread.
class Session {
 public:
  // Told why the session closed (NOT_FOUND: lease passed, or CloseSession named it), on the loop
  // thread, after its handles were released (Device::WatchSession).
  using ClosedCallback = absl::AnyInvocable<void(const absl::Status&)>;

  // `memory_owner` tags the memory the session allocates (Note [Owner-tagged memory] in
  // storage/memory_manager.cc): unique on the device, never reused. `owner` is the principal
  // that opened the session (null: none, as in unit tests).
  Session(SessionId id, absl::Duration lease, absl::Time now, uint64_t id_key,
          MemoryOwner memory_owner, PrincipalPtr owner = nullptr);

  SessionId id() const { return id_; }
  const PrincipalPtr& owner() const { return owner_; }
  MemoryOwner memory_owner() const { return memory_owner_; }
  // Bytes of the handles in the table (their sizes as the client sees them), for quotas.
  uint64_t bytes() const { return bytes_; }
  void AddBytes(uint64_t n) { bytes_ += n; }
  void SubtractBytes(uint64_t n) { bytes_ -= n; }
  absl::Duration lease() const { return lease_; }
  absl::Time expiry() const { return last_used_ + lease_; }
  // When the session opened (or was restored), on the loop's clock.
  absl::Time opened() const { return opened_; }
  // Kernels launched for the session so far (executes the backend accepted, and the steps of
  // graph replays), for per-session rates (GetStats, `cubectl top --sessions`).
  uint64_t kernels() const { return kernels_; }
  void CountKernels(uint64_t n) { kernels_ += n; }
  void Touch(absl::Time now) { last_used_ = now; }

  // Adds a handle over `slice` with one reference and returns its new id (never 0, top bit
  // clear, not in use).
  HandleId AddHandle(SliceId slice, uint64_t size);
  // Adds a handle under a client-chosen `id`; the caller checked it with InUse.
  void AddHandleWithId(HandleId id, SliceId slice, uint64_t size);
  // Whether `id` is a live handle or a poisoned id.
  bool InUse(HandleId id) const { return handles_.contains(id) || poisoned_.contains(id); }
  // The entry of a handle; nullptr when this session has no such handle.
  HandleEntry* Find(HandleId handle);
  // Removes a handle from the table, and its poison (its slice is the caller's to free).
  void Erase(HandleId handle) {
    handles_.erase(handle);
    poisoned_.erase(handle);
  }

  // Poisons `id` with `error` (Note [Poisoned handles]); `error` must carry kPoisonPayload.
  void Poison(HandleId id, absl::Status error) { poisoned_.insert_or_assign(id, std::move(error)); }
  // The error `id` is poisoned with; nullptr when it is not poisoned.
  const absl::Status* PoisonOf(HandleId id) const {
    if (poisoned_.empty()) return nullptr;  // The common case: no hash a binding.
    auto it = poisoned_.find(id);
    return it == poisoned_.end() ? nullptr : &it->second;
  }
  // Every poisoned id and its error.
  const absl::flat_hash_map<HandleId, absl::Status>& poisons() const { return poisoned_; }
  // Removes the poison of `id` (not the handle).
  void ClearPoison(HandleId id) { poisoned_.erase(id); }

  const absl::flat_hash_map<HandleId, HandleEntry>& handles() const { return handles_; }

  // Shared-memory regions (Note [Shared-memory regions], shared_region.h). AddRegion returns the
  // new region's id (never 0, not in use). Work still using a region holds a reference of its
  // own, so erasing one never unmaps memory a queued copy uses.
  RegionId AddRegion(std::shared_ptr<SharedRegion> region);
  // The region, or nullptr when this session has none of that id.
  const std::shared_ptr<SharedRegion>* FindRegion(RegionId id) const;
  void EraseRegion(RegionId id) { regions_.erase(id); }
  const absl::flat_hash_map<RegionId, std::shared_ptr<SharedRegion>>& regions() const {
    return regions_;
  }

  // Recorded graphs (Note [Recorded graphs], graph.h). The recording in progress (null: none),
  // and the graphs recorded.
  std::unique_ptr<GraphRecording>& recording() { return recording_; }
  const GraphRecording* recording() const { return recording_.get(); }
  bool is_recording() const { return recording_ != nullptr; }
  const absl::flat_hash_map<GraphId, std::unique_ptr<RecordedGraph>>& graphs() const {
    return graphs_;
  }
  RecordedGraph* FindGraph(GraphId id);
  void AddGraph(std::unique_ptr<RecordedGraph> graph);
  // Removes and returns a graph (null when the session has none of that id).
  std::unique_ptr<RecordedGraph> TakeGraph(GraphId id);
  size_t graph_count() const { return graphs_.size(); }
  // Destroys every graph (closing the session); their holds stay, for Orphans().
  void DropGraphs() { graphs_.clear(); }
  // Host bytes the recording and the recorded graphs take (RecordedGraph::bytes()).
  uint64_t graph_bytes() const { return graph_bytes_; }
  void AddGraphBytes(uint64_t n) { graph_bytes_ += n; }
  void SubtractGraphBytes(uint64_t n) { graph_bytes_ -= n; }

  // Slices that graphs hold (Note [Recorded graphs]). HoldSlice adds a graph's hold. A handle
  // whose last reference goes while its slice is held is erased but its slice kept, and still
  // accounted to the session, as an orphan (Orphan, with the handle's size). DropSliceHold drops
  // one hold and returns the orphan's size when that was the last hold of an orphan: the caller
  // then frees the slice and accounts it off.
  void HoldSlice(SliceId slice) { ++slice_holds_[slice].graphs; }
  bool IsHeld(SliceId slice) const { return slice_holds_.contains(slice); }
  void Orphan(SliceId slice, uint64_t size) { slice_holds_[slice].orphan_size = size; }
  std::optional<uint64_t> DropSliceHold(SliceId slice);
  // Every orphan's slice and size (for closing the session).
  std::vector<std::pair<SliceId, uint64_t>> Orphans() const;

  // The open profile, if any (one per session).
  std::optional<ProfileToken>& profile() { return profile_; }
  // The open profile's trace (Note [Command traces]); null when the profile records none.
  TraceRecorder* trace() { return trace_.get(); }
  void set_trace(std::unique_ptr<TraceRecorder> trace) { trace_ = std::move(trace); }
  std::unique_ptr<TraceRecorder> take_trace() { return std::move(trace_); }

  // Note [Checkpoint and restore] (device.h): whether a session stream may still resume this
  // session (it was restored from a checkpoint and no stream resumed it yet).
  bool resumable() const { return resumable_; }
  // The last seq the session's stream ran (0: none): a cell the stream's runner writes with each
  // command, so that a checkpoint can tell a resumed stream where it stopped.
  const std::shared_ptr<uint64_t>& stream_seq() const { return stream_seq_; }
  void set_resumable(bool resumable) { resumable_ = resumable; }

  // Who is told when the session closes (null: nobody).
  void set_on_closed(ClosedCallback on_closed) { on_closed_ = std::move(on_closed); }
  ClosedCallback take_on_closed() { return std::exchange(on_closed_, nullptr); }

 private:
  SessionId id_;
  MemoryOwner memory_owner_;
  PrincipalPtr owner_;
  uint64_t bytes_ = 0;
  absl::Duration lease_;
  absl::Time opened_;
  absl::Time last_used_;
  uint64_t kernels_ = 0;
  uint64_t id_key_;  // Per-session key that scrambles handle ids.
  uint64_t next_serial_ = 1;
  absl::flat_hash_map<HandleId, HandleEntry> handles_;
  absl::flat_hash_map<HandleId, absl::Status> poisoned_;
  absl::flat_hash_map<RegionId, std::shared_ptr<SharedRegion>> regions_;
  std::unique_ptr<GraphRecording> recording_;
  absl::flat_hash_map<GraphId, std::unique_ptr<RecordedGraph>> graphs_;
  uint64_t graph_bytes_ = 0;
  struct SliceHold {
    uint32_t graphs = 0;
    std::optional<uint64_t> orphan_size;  // Set once the slice has no handle.
  };
  absl::flat_hash_map<SliceId, SliceHold> slice_holds_;
  std::optional<ProfileToken> profile_;
  std::unique_ptr<TraceRecorder> trace_;
  ClosedCallback on_closed_;
  bool resumable_ = false;
  std::shared_ptr<uint64_t> stream_seq_ = std::make_shared<uint64_t>(0);
};

}  // namespace cubed
