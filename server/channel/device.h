#pragma once

// Device: one device's ComputeServer as its sessions see it: the backend plus its SessionTable
// (session_table.h: ids, leases, owners, quotas). Every request names a session and handle ids;
// Device resolves them into slices and byte ranges of the backend, keeps refcounts and poisons,
// and guarantees that a failed request leaves memory and handle tables exactly as they were.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/channel/checkpoint.h"
#include "server/channel/commands.h"
#include "server/channel/session.h"
#include "server/channel/session_table.h"
#include "server/channel/trace_recorder.h"
#include "server/compute/compute_server.h"

namespace cubed {

struct DeviceOptions {
  absl::Duration default_lease = absl::Seconds(60);
  absl::Duration max_lease = absl::Hours(24 * 7);
  bool allow_unchecked = false;
  uint64_t max_read_bytes = uint64_t{512} << 20;  // Total bytes one Read may return.
  uint32_t max_regions = 64;  // Shared-memory regions one session may hold at once.
  // Bytes of shared-memory regions one session may hold at once (--max_region_bytes): on CUDA
  // they are page-locked host memory, so a client must not be able to pin more than this.
  uint64_t max_region_bytes = uint64_t{16} << 30;
};

// Note [Checkpoint and restore]: a daemon that drains with a checkpoint (cubectl drain
// --checkpoint, or SIGTERM with --checkpoint_dir) freezes each Device on its loop, after every
// task posted before: from then on every call naming a session, and every open, fails
// UNAVAILABLE, so nothing runs that the checkpoint would miss. CaptureTables then gives the
// handle tables (ids, sizes, refcounts) and poisoned ids, which size the checkpoint against its
// limit before anything is written, and Capture the same with every live handle's whole
// allocation, read after all queued device work, in stream order (Note [Checkpoint I/O]). A
// daemon started with --restore recreates each session with RestoreSession before it serves:
// same session id, handle ids, sizes, refcounts, bytes and poisons; a fresh lease from `now`;
// accounted like any allocation of that size; the last seq the session's stream ran; and its
// recorded graphs, a recording in progress and the memory only graphs keep (Note [Checkpointed
// graphs], graph_checkpoint.h). What a checkpoint does not keep: shared-memory regions (the
// client's memfds: commands naming one fail NOT_FOUND after a restore; register it again), an
// open profile, a graph's backend state (CUDA recaptures at the next replay). An imported handle
// (Note [Imported memory], compute_server.h) keeps its bytes but comes back as daemon memory, no
// longer shared with the producer. A failed checkpoint thaws the Device and the daemon serves
// on. docs/reliability.md describes the promise.
//
// Note [Checkpoint I/O]: a checkpoint's bytes cross host memory once each way. Capture hands the
// allocations to the daemon's writer through ComputeServer::ReadToHost, in batches of HostChunks
// that are the allocations' own memory (CPU) or a pinned staging chunk the device copied into
// (CUDA); the writer write()s each batch to the data file (in pieces: Note [Small writes],
// server/daemon/checkpoint_file.cc) while a second thread computes the SHA-256 digests from the
// same memory (server/daemon/checkpoint_file.h). RestoreSession has
// ComputeServer::CreateFromHost reserve the allocations and hand them out the same way for a
// CheckpointSource to preadv() the file into, again hashed beside the read, and keeps the session
// only when the source's Finish says every byte matched. Before, capture and restore went through
// Read and Create with a string per handle: two extra copies of every byte and as many bytes of
// fresh pages to fault in, which cost more than the file I/O itself (docs/benchmarks.md, ninth
// session). Both run on the loop thread, which waits for the device and the disk meanwhile: the
// device is frozen (capture) or not serving yet (restore).
struct SessionGrant {
  SessionId session;
  absl::Duration lease;
};

// Note [Copies between devices]: CopyToDevice (compute.proto) copies a binding of one of a
// caller's sessions into another of its sessions, on any device of the daemon, from one
// connection. The source's loop checks the source after every task posted to it before. On the
// same device it runs the whole copy, one ComputeServer::CopyWithin in stream order (CUDA:
// cuMemcpyDtoDAsync on the device's one stream; CPU: memcpy). On another device the target's
// loop then allocates the target (or checks the given range), and the bytes move in pieces of
// kCopyPieceBytes: the source's backend reads a piece into host memory (ComputeServer::Read,
// after all earlier work on the source's stream; CUDA completes it on its completion thread),
// the completion posts the piece's upload (ComputeServer::Write, in the target's stream order)
// to the target's loop, which posts the next piece's read; after the last piece the target's
// loop answers. No loop thread ever waits for the other device: each step is a task of its own
// loop and the hand-over is a Post; and no step moves more than a piece, so neither loop waits
// for its own staging (CUDA's pinned chunks are that size: cuda_staging.h) nor does the copy
// hold more host memory than a piece. So a client that waits for the answer before it sends
// more work (the SDKs do) finds every later command on the source after the bytes were taken
// and every later command on the target after they landed (other sessions' tasks may run
// between the pieces; they cannot touch either handle). A failure at any step answers the call
// and releases a handle the copy made, so a failed copy leaves no allocation (over a given
// handle, pieces written before the failure stay written). The CUDA peer path
// (cuMemcpyPeerAsync between two devices' streams, ordered with events) is not built yet: two
// devices always stage through host memory (docs/api.md, "Several devices"). What it must add:
// the copy runs on one device's stream while the other's memory is in flight, and both pools
// reuse a freed slice in their own stream's order only (cuda_storage.h), so a session closed or
// a handle released mid-copy could hand a slice still being read or written to another
// session. Both slices need a hold (as a recorded graph keeps its slices) from the first half
// until the other device's stream waits for the copy's event.
inline constexpr uint64_t kCopyPieceBytes = uint64_t{16} << 20;

struct CopyTarget {
  SessionId session;
  HandleId handle;      // Zero: a new handle of the copy's size.
  uint64_t offset = 0;  // Bytes into `handle` where the copy lands.
};

// Owned by the device's server-loop thread (device_loop.h); not thread-safe. Callbacks passed
// in complete on the loop thread or a backend completion thread.
class Device {
 public:
  Device(uint32_t index, std::unique_ptr<ComputeServer> server, DeviceOptions options);
  // Releases every session's handles.
  ~Device();

  uint32_t index() const { return index_; }
  const DeviceDescription& Description() const { return server_->Description(); }

  // Sessions. `lease_ms` as on the wire: 0 means the default; above max_lease is
  // INVALID_ARGUMENT naming the value. `owner` (null: none) owns the session (Note [Session
  // ownership]); RESOURCE_EXHAUSTED when it holds quotas.max_sessions sessions already.
  absl::StatusOr<SessionGrant> OpenSession(uint64_t lease_ms, absl::Time now,
                                           PrincipalPtr owner = nullptr);
  // Returns the number of handles released. NOT_FOUND for an unknown session.
  absl::StatusOr<uint64_t> CloseSession(SessionId session);
  // Closes every session whose lease has passed; returns how many.
  size_t ExpireSessions(absl::Time now);
  // `on_closed` (null: nobody) is told, once, when CloseSession or the lease closes `session`;
  // not when the Device is destroyed. NOT_FOUND for an unknown session. Does not renew the lease.
  absl::Status WatchSession(SessionId session, Session::ClosedCallback on_closed);
  // The earliest lease expiry, or InfiniteFuture when no session is open.
  absl::Time NextExpiry() const { return sessions_.NextExpiry(); }
  size_t session_count() const { return sessions_.size(); }
  // Calls `visit` with every open session (for per-session gauges), in no particular order.
  void ForEachSession(absl::FunctionRef<void(const Session&)> visit) const {
    sessions_.ForEach(visit);
  }
  // Whether `session` is open (does not renew its lease).
  bool HasSession(SessionId session) const { return sessions_.Get(session) != nullptr; }
  // Note [Session ownership]: whether `session` is open and was opened by `principal` (both may
  // be null). The edge answers a session of another principal exactly like an unknown one
  // (NOT_FOUND), so that a guessed id says nothing about other principals' sessions.
  bool IsOwnedBy(SessionId session, const Principal* principal) const;

  // Every method below first finds the session (NOT_FOUND) and renews its lease. Methods that
  // allocate are RESOURCE_EXHAUSTED, naming the quota, when the new handle would take the
  // session or its owner past a byte or handle quota (principal.h); nothing is left allocated.
  absl::StatusOr<NewHandle> Create(SessionId session, absl::Span<const uint8_t> data,
                                   absl::Time now);
  absl::StatusOr<NewHandle> CreateTensor(SessionId session, absl::Span<const uint8_t> data,
                                         absl::Span<const uint64_t> shape, uint32_t elem_size,
                                         absl::Time now);
  absl::StatusOr<NewHandle> Empty(SessionId session, uint64_t size, absl::Time now);
  absl::StatusOr<NewHandle> EmptyTensor(SessionId session, absl::Span<const uint64_t> shape,
                                        uint32_t elem_size, absl::Time now);
  // `out` must outlive `done`. Errors found before any work is queued are passed to `done` too.
  void Read(SessionId session, const std::vector<BindingRef>& bindings,
            std::vector<std::string>* out, absl::Time now, DoneCallback done);
  void ReadTensor(SessionId session, const std::vector<TensorRef>& tensors,
                  std::vector<std::string>* out, absl::Time now, DoneCallback done);
  absl::StatusOr<ResourceDescription> GetResource(SessionId session, const BindingRef& binding,
                                                  absl::Time now);
  // Runs `command`. Its kernel (strings and vectors) is lent to the backend and moved back, so that
  // it is freed by the command's owner: off the loop for stream commands (Note [Spent commands]).
  absl::Status Execute(SessionId session, ExecuteCommand& command, absl::Time now);
  // A run of Executes follows, and nothing else on this device until EndLaunchBatch: the backend
  // may hold their launches back and send them together (ComputeServer::BeginLaunchBatch; CUDA:
  // Note [Launch batches], server/compute/cuda/cuda_launch_batch.h). Loop thread; not nested.
  void BeginLaunchBatch() { server_->BeginLaunchBatch(); }
  void EndLaunchBatch() { server_->EndLaunchBatch(); }

  // Recorded graphs (Note [Recorded graphs], graph.h). BeginGraph starts the session's recording
  // of graph `graph` with `parameters` (live handles); it starts failed with `invalid` when that
  // is not OK, or with the first problem it finds (a bad or used id, kMaxGraphs, a parameter
  // unknown, poisoned, repeated or past kMaxGraphParameters, a recording already in progress:
  // that one fails then). Unknown session: nothing starts. Recording() tells whether one runs.
  void BeginGraph(SessionId session, GraphId graph, absl::Span<const HandleId> parameters,
                  const absl::Status& invalid, absl::Time now);
  bool Recording(SessionId session) const;
  // Checks `command` as Execute would and records it in the recording (taking its kernel);
  // `outputs` are the handles it writes. The error is Execute's, and it fails the recording;
  // after a failure it records nothing and returns OK. FAILED_PRECONDITION when not recording.
  absl::Status RecordExecute(SessionId session, ExecuteCommand& command,
                             absl::Span<const HandleId> outputs, absl::Time now);
  // Fails the recording in progress, if any and not failed yet, with `status` as its next
  // step's error (an execute that failed before it could be recorded).
  void FailRecording(SessionId session, const absl::Status& status);
  // Ends the recording: the graph's step count, or the recording's failure (nothing kept).
  // FAILED_PRECONDITION when none records.
  absl::StatusOr<uint64_t> EndGraph(SessionId session, absl::Time now);
  // Runs graph `graph` with parameter i bound to bindings[i]. `written` (cleared) gets the
  // bindings the graph writes, to poison when it fails. NOT_FOUND (graph, handle),
  // INVALID_ARGUMENT (binding count or size), FAILED_PRECONDITION (recording), a poison, or the
  // backend's error for a step.
  absl::Status ReplayGraph(SessionId session, GraphId graph, absl::Span<const HandleId> bindings,
                           absl::Time now, HandleList* written);
  // Frees a graph, and the slices it alone kept. NOT_FOUND for an unknown graph.
  absl::Status ReleaseGraph(SessionId session, GraphId graph, absl::Time now);

  absl::Status Flush(SessionId session, absl::Time now);
  // The arrival of the session-stream command the loop runs now: its trace event, if its session
  // records one, gets the queue wait (TraceEvent::queued_ns). InfinitePast once it ran (the
  // stream sets it around each command; unary calls leave it so).
  void NoteArrival(absl::Time arrival) { arrival_ = arrival; }
  void Sync(SessionId session, absl::Time now, DoneCallback done);
  // A profile with `trace_events` > 0 also records up to that many of the session's commands
  // (Note [Command traces] in trace_recorder.cc; INVALID_ARGUMENT above kMaxTraceEvents).
  absl::Status StartProfile(SessionId session, absl::Time now, uint32_t trace_events = 0);
  // Ends the profile; `done` gets its device time. When `trace` is given it receives the
  // profile's trace (null when it recorded none), on the loop thread, before this returns.
  void EndProfile(SessionId session, absl::Time now, DurationCallback done,
                  std::unique_ptr<TraceRecorder>* trace = nullptr);
  static constexpr uint32_t kMaxTraceEvents = 1000000;
  // All handles are checked before any reference is dropped. A poisoned id that is not a live
  // handle counts as one reference (Note [Poisoned handles], session.h).
  absl::Status Release(SessionId session, absl::Span<const HandleId> handles, absl::Time now);

  // Client-chosen ids (the session stream). CheckClientId: INVALID_ARGUMENT when `id` lacks the
  // top bit (>= kFirstClientId), FAILED_PRECONDITION when it is in use (live or poisoned).
  absl::Status CheckClientId(SessionId session, HandleId id, absl::Time now);
  // As Create/CreateTensor/Empty/EmptyTensor, but the new handle gets `id` (checked as above).
  absl::StatusOr<NewHandle> CreateWithId(SessionId session, HandleId id,
                                         absl::Span<const uint8_t> data, absl::Time now);
  absl::StatusOr<NewHandle> CreateTensorWithId(SessionId session, HandleId id,
                                               absl::Span<const uint8_t> data,
                                               absl::Span<const uint64_t> shape, uint32_t elem_size,
                                               absl::Time now);
  absl::StatusOr<NewHandle> EmptyWithId(SessionId session, HandleId id, uint64_t size,
                                        absl::Time now);
  absl::StatusOr<NewHandle> EmptyTensorWithId(SessionId session, HandleId id,
                                              absl::Span<const uint64_t> shape, uint32_t elem_size,
                                              absl::Time now);
  // Note [Poisoned handles]. PoisonId enters `id` (a valid client id whose allocation failed);
  // PoisonHandles marks those of `handles` that are live handles of the session. `error` gets
  // kPoisonPayload. An unknown session is ignored.
  void PoisonId(SessionId session, HandleId id, absl::Status error);
  void PoisonHandles(SessionId session, absl::Span<const HandleId> handles, absl::Status error);

  // Bulk transfers (Note [Bulk transfers], server/service/stream/bulk_transfers.h); the caller cuts
  // a transfer into pieces. CheckBulkRead checks the bindings of a bulk read as Read (`raw`) or
  // ReadTensor do, without max_read_bytes; for a raw read it sets each entry's shape to {view
  // bytes}, strides to {1} and elem_size to 1, so that both kinds are tensors from then on.
  absl::Status CheckBulkRead(SessionId session, std::vector<TensorRef>& tensors, bool raw,
                             absl::Time now);
  // Reads one piece (a sub-tensor; binding.offset_start moved to its first element) densely into
  // *out, which must outlive `done`. The handle is resolved again: a session closed or a handle
  // poisoned meanwhile fails the piece.
  void ReadPiece(SessionId session, const TensorRef& piece, std::string* out, absl::Time now,
                 DoneCallback done);
  // Writes the bytes of `pieces`, one after the other, as dense bytes [dense_offset, +their
  // size) of the whole allocation `handle`, laid out with `shape`, `strides` and `elem_size` as
  // allocated (ComputeServer::Write, gathered). The bytes must outlive `done`; the list itself
  // only this call.
  void WritePiece(SessionId session, HandleId handle, absl::Span<const uint64_t> shape,
                  absl::Span<const uint64_t> strides, uint32_t elem_size, uint64_t dense_offset,
                  absl::Span<const absl::Span<const uint8_t>> pieces, absl::Time now,
                  DoneCallback done);

  // Shared-memory regions (Note [Shared-memory regions], shared_region.h). RegisterRegion gives
  // `region` to the session, registered with the backend (ComputeServer::RegisterHostMemory),
  // and returns its id; RESOURCE_EXHAUSTED when the session would hold more than max_regions
  // regions or max_region_bytes bytes of them, or the backend's error. ReleaseRegion unregisters it
  // (work queued before that uses it completes first); NOT_FOUND naming the id when the session has
  // no such region. Closing the session releases its regions.
  absl::StatusOr<RegionId> RegisterRegion(SessionId session, std::unique_ptr<SharedRegion> region,
                                          absl::Time now);
  absl::Status ReleaseRegion(SessionId session, RegionId region, absl::Time now);
  // Create / CreateTensor with the bytes of a range of one of the session's regions. NOT_FOUND
  // for an unknown region, INVALID_ARGUMENT for a range outside it, else as CreateWithId and
  // CreateTensorWithId.
  absl::StatusOr<NewHandle> CreateFromRegion(SessionId session, HandleId id,
                                             const RegionRange& source, absl::Time now);
  absl::StatusOr<NewHandle> CreateTensorFromRegion(SessionId session, HandleId id,
                                                   const RegionRange& source,
                                                   absl::Span<const uint64_t> shape,
                                                   uint32_t elem_size, absl::Time now);
  // ReadTensor into a range of one of the session's regions: each tensor packed densely, one
  // after the other from into.offset. Not bounded by max_read_bytes (the client's own memory
  // receives the bytes), but INVALID_ARGUMENT when their total exceeds into.size. `done` gets
  // the bytes written, or the error; the region stays mapped until it ran.
  using RegionReadCallback = absl::AnyInvocable<void(absl::StatusOr<uint64_t>)>;
  void ReadTensorIntoRegion(SessionId session, const std::vector<TensorRef>& tensors,
                            const RegionRange& into, absl::Time now, RegionReadCallback done);

  // Note [Imported memory] (compute_server.h): a new handle over memory another process
  // allocated, used in place: a range of one of the session's regions (the handle keeps it
  // mapped after a ReleaseRegion) or a CUDA IPC allocation's range. Counted in the session's
  // quotas like any handle, but not in MemoryUsage. NOT_FOUND (region), INVALID_ARGUMENT (a
  // range outside the region), the quotas' RESOURCE_EXHAUSTED, or the backend's Import error
  // (UNIMPLEMENTED for a kind it cannot import); nothing stays mapped on error.
  absl::StatusOr<NewHandle> ImportMemory(SessionId session, const ImportCommand& command,
                                         absl::Time now);

  // Note [Checkpoint and restore]. Freeze: every later call naming a session, and every open,
  // fails UNAVAILABLE until Thaw. CaptureTables: every session's handle table, poisons, orphans
  // and graphs (Note [Checkpointed graphs], graph_checkpoint.h); INTERNAL for a graph binding a
  // slice nothing names. Capture: the same, and the bytes of every handle and then every orphan
  // of each session, handed to `sink` (HostChunk::index counts them over all sessions in the
  // order returned) after all earlier work; blocks the loop thread until the sink has them all;
  // the first error, the sink's or the backend's. RestoreSession: opens `session` under its id
  // with its handles and orphans (bytes from `source`), poisons and graphs, all or nothing
  // (INVALID_ARGUMENT or FAILED_PRECONDITION for a bad id, size or lease; DATA_LOSS for a graph
  // that does not fit them; RESOURCE_EXHAUSTED over the memory limit; the source's error;
  // nothing is left behind on error); a stream may resume it (Session::resumable).
  void Freeze() { frozen_ = true; }
  void Thaw() { frozen_ = false; }
  absl::StatusOr<std::vector<CheckpointedSession>> CaptureTables() const;
  absl::StatusOr<std::vector<CheckpointedSession>> Capture(HostChunkCallback sink);
  // For a stream resuming `session`: renews its lease, clears Session::resumable and returns the
  // lease. NOT_FOUND (as FindSession), FAILED_PRECONDITION when it is not resumable.
  absl::StatusOr<absl::Duration> TakeResumable(SessionId session, absl::Time now);
  // The session's Session::stream_seq cell; null when it is not open.
  std::shared_ptr<uint64_t> StreamSeqOf(SessionId session) const;
  absl::Status RestoreSession(CheckpointedSession session, CheckpointSource& source,
                              absl::Time now);

  // UNAVAILABLE "device lost: ..." once the backend lost the device (Note [Lost devices],
  // server/daemon/daemon.cc), else OK; every call naming a session fails with it then.
  absl::Status Lost() const { return server_->Lost(); }
  // Copies between sessions (Note [Copies between devices]); the target is a session of the
  // caller, checked by the edge. CopyBetweenSessions: both sessions on this device, one task:
  // `binding` of `source` into `target` (ComputeServer::CopyWithin, in stream order); the target
  // handle (new, or target.handle) and the bytes copied. Between two devices, in pieces:
  // CopySourceSize, on the source's device: the binding's bytes (at least 1). OpenCopyTarget, on
  // the target's: a new handle of `size` bytes (target.handle zero; `fresh`: the caller releases
  // it if the copy fails) or target.handle, checked to hold `size` bytes from target.offset.
  // CopyOut, on the source's: bytes [offset, offset + size) of the binding into (*out)[0] after
  // all earlier work (`out` outlives `done`). CopyIn, on the target's: `bytes` into `target` in
  // stream order, then `done` with the target handle (`bytes` outlive `done`). Errors:
  // FindSession's and Resolve's (NOT_FOUND, INVALID_ARGUMENT), a target range outside its handle
  // or overlapping the source (INVALID_ARGUMENT), quotas and the memory limit
  // (RESOURCE_EXHAUSTED), the backend's; what a failed call allocated it frees again.
  absl::StatusOr<NewHandle> CopyBetweenSessions(SessionId source, const BindingRef& binding,
                                                const CopyTarget& target, absl::Time now);
  absl::StatusOr<uint64_t> CopySourceSize(SessionId source, const BindingRef& binding,
                                          absl::Time now);
  struct OpenedCopyTarget {
    HandleId handle;
    bool fresh = false;
  };
  absl::StatusOr<OpenedCopyTarget> OpenCopyTarget(const CopyTarget& target, uint64_t size,
                                                  absl::Time now);
  void CopyOut(SessionId source, const BindingRef& binding, uint64_t offset, uint64_t size,
               absl::Time now, std::vector<std::string>* out, DoneCallback done);
  using CopyInCallback = absl::AnyInvocable<void(absl::StatusOr<NewHandle>)>;
  void CopyIn(const CopyTarget& target, absl::Span<const uint8_t> bytes, absl::Time now,
              CopyInCallback done);

  MemoryUsage Usage() const { return server_->Usage(); }
  // Note [Imported memory]: the imports the backend maps now, which Usage never counts.
  ImportedMemory Imports() const { return server_->Imports(); }
  KernelCacheStats KernelCache() const { return server_->KernelCache(); }
  LaunchBatchStats LaunchBatches() const { return server_->LaunchBatches(); }
  // Live handles across every open session (for metrics; O(sessions)).
  uint64_t handle_count() const { return sessions_.handle_count(); }
  // Region counters; `live` counts over every open session (for metrics; O(sessions)).
  RegionTraffic region_traffic() const;
  void Cleanup() { server_->Cleanup(); }

 private:
  absl::StatusOr<Session*> FindSession(SessionId session, absl::Time now);
  // Execute's checks: permission, cube count, every binding resolved (kernel not yet set).
  absl::StatusOr<Launch> PrepareLaunch(Session& s, const ExecuteCommand& command) const;
  // BeginGraph's checks; the graph to record.
  absl::StatusOr<std::unique_ptr<RecordedGraph>> NewGraph(Session& s, GraphId graph,
                                                          absl::Span<const HandleId> parameters);
  // Drops `graph`'s holds; frees the orphans it alone kept.
  void DropHolds(Session& s, const RecordedGraph& graph);
  // The trace of `session`'s open profile; null when none records (or no such session).
  TraceRecorder* TraceOf(SessionId session) const;
  // Checks a binding against the session's handle table and the allocation's size.
  absl::StatusOr<ResolvedBinding> Resolve(Session& session, const BindingRef& ref,
                                          absl::string_view what) const;
  absl::StatusOr<NewHandle> AddHandle(Session& session, absl::StatusOr<Allocation> allocation);
  absl::StatusOr<NewHandle> AddHandleWithId(Session& session, HandleId id,
                                            absl::StatusOr<Allocation> allocation);
  absl::Status CheckClientId(const Session& session, HandleId id) const;
  // Checks read_tensor bindings against the session (handle, layout span, dense size) and
  // resolves them; `sizes` (may be null) gets each one's dense bytes, `total` their checked sum.
  absl::StatusOr<std::vector<ResolvedTensor>> ResolveTensors(Session& session,
                                                             const std::vector<TensorRef>& tensors,
                                                             std::vector<uint64_t>* sizes,
                                                             uint64_t* total) const;
  // RESOURCE_EXHAUSTED when one read would return more than max_read_bytes.
  absl::Status CheckReadBytes(uint64_t total) const;
  // The range of a region of `session`, and the region (to keep it mapped while work uses it).
  absl::StatusOr<std::pair<std::shared_ptr<SharedRegion>, absl::Span<uint8_t>>> RegionBytes(
      const Session& session, const RegionRange& range, absl::string_view field) const;
  // Where a copy lands (Note [Copies between devices]): the target handle as answered, its bytes
  // as resolved, and whether the handle is the copy's own (freed again when the copy fails).
  struct CopyDestination {
    NewHandle handle;
    ResolvedBinding binding;
    bool fresh = false;
  };
  // A new handle of `size` bytes (target.handle zero) or target.handle's range; errors as CopyIn.
  absl::StatusOr<CopyDestination> PrepareCopyTarget(const CopyTarget& target, uint64_t size,
                                                    absl::Time now);
  // Releases a fresh destination after a failed copy.
  void DropCopyTarget(const CopyTarget& target, const CopyDestination& d, absl::Time now);
  // Gives back what a session that left the table held: its open profile, its slices, its
  // regions.
  void Free(Session& session);

  uint32_t index_;
  std::unique_ptr<ComputeServer> server_;
  DeviceOptions options_;
  SessionTable sessions_;
  absl::Time arrival_ = absl::InfinitePast();  // NoteArrival's.
  RegionTraffic region_traffic_;               // All but `live`.
  bool frozen_ = false;                        // Note [Checkpoint and restore].
};

// UNAVAILABLE: the Device is frozen (Note [Checkpoint and restore]).
absl::Status DrainingError();

// The device index a session id routes to (ids carry it in their low byte).
inline uint32_t DeviceOfSession(SessionId session) {
  return static_cast<uint32_t>(session.value() & 0xff);
}

}  // namespace cubed
