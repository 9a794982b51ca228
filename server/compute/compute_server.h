#pragma once

// ComputeServer: one device's implementation of CubeCL's ComputeServer trait, in plain C++
// types. Backends (cpu_server.h, later CUDA) implement it; Device (device.h) drives it.
// Every method runs on the device's server-loop thread: implementations need no locks.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/elem_type.h"
#include "common/memory_usage.h"
#include "kernels/builtin.h"
#include "storage/memory_manager.h"

namespace cubed {

// A binding resolved against a session's handle table: a byte range of one live slice.
struct ResolvedBinding {
  SliceId slice = 0;
  uint64_t offset = 0;  // Bytes from the slice's start (offset_start).
  uint64_t size = 0;    // Bytes of the view.
};

// A tensor view for ReadTensor: shape and strides in elements.
struct ResolvedTensor {
  ResolvedBinding binding;
  std::vector<uint64_t> shape;
  std::vector<uint64_t> strides;
  uint32_t elem_size = 0;
};

// A freshly reserved allocation.
struct Allocation {
  SliceId slice = 0;
  uint64_t size = 0;              // Bytes reserved for the caller (padding of a tensor included).
  std::vector<uint64_t> strides;  // Tensors only: stride of each dimension, elements.
};

// Client-shipped CUDA code (cuda_source or ptx).
struct CudaKernel {
  bool is_ptx = false;
  std::string code;
  std::string entry_point;
  uint32_t cube_dim[3] = {1, 1, 1};
  uint32_t shared_memory_bytes = 0;
  std::vector<std::string> options;
};

// What Execute runs: a builtin (`builtin`) or client CUDA code (`cuda`). `builtin.metadata` and
// `builtin.scalars` carry the launch's metadata and scalars for both kinds.
struct KernelCall {
  bool is_builtin = true;
  kernels::BuiltinCall builtin;
  CudaKernel cuda;
};

// CubeCount: static (x, y, z) or read from a binding at launch.
struct LaunchCount {
  bool dynamic = false;
  uint32_t x = 1, y = 1, z = 1;
  ResolvedBinding binding;  // When dynamic; >= 12 bytes (checked by Device).
};

struct Launch {
  // The kernel, read through Kernel(): `borrowed` when set (a stream command's own, lent for one
  // Execute: moving a KernelCall in and out, with its inline metadata and scalars, was ~11% of
  // the CPU backend's loop per tiny command), else `kernel` (a launch that owns its kernel: a
  // recorded graph's steps).
  KernelCall kernel;
  const KernelCall* borrowed = nullptr;
  const KernelCall& Kernel() const { return borrowed != nullptr ? *borrowed : kernel; }
  LaunchCount count;
  absl::InlinedVector<ResolvedBinding, 4> buffers;  // Inline: no allocation per launch.
  bool unchecked = false;
};

// Limits and features of a device (wire form: cubed.v1.DeviceInfo).
struct DeviceDescription {
  enum class Backend { kCpu, kCuda };
  Backend backend = Backend::kCpu;
  uint32_t index = 0;
  std::string name;
  uint64_t memory_total = 0;
  uint64_t memory_limit = 0;
  uint32_t alignment = 0;
  uint64_t max_allocation = 0;
  uint32_t max_cube_count[3] = {0, 0, 0};
  uint32_t max_cube_dim[3] = {0, 0, 0};
  uint32_t max_units_per_cube = 0;
  uint32_t compute_units = 0;
  std::string compute_capability;
  // CUDA: the device's UUID as nvidia-smi prints it ("GPU-" and 32 hex digits in 8-4-4-4-12
  // groups), so that a local client finds the same GPU among its own devices; empty on the CPU.
  std::string uuid;
  std::vector<ElemType> elem_types;
  // Builtin matmul's input/accumulator types, "bf16*bf16+f32" etc. (cubed.v1.DeviceInfo).
  std::vector<std::string> matmul_types;
  std::vector<std::string> builtin_kernels;
  std::vector<std::string> features;
};

// Storage behind a binding (trait: get_resource).
struct ResourceDescription {
  uint64_t storage_id = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t device_pointer = 0;
  std::string ipc_handle;
};

// Note [Imported memory]: a handle may stand for memory the daemon did not allocate: another
// local process's CUDA allocation, opened through its CUDA IPC handle (cuIpcOpenMemHandle with
// lazy peer access, on the device's loop thread, in the device's context), or on the CPU backend
// a range of a shared-memory region the client mapped (Note [Shared-memory regions]). The
// backend gives each import a slice id of its own, with kImportedSlice set (the pools never hand
// out such ids), and every path that turns a slice into an address (kernels, copies, reads,
// writes, GetResource, a checkpoint's capture) resolves it like any other. Such memory is not
// the pool's: MemoryUsage and the memory limit never count it, Cleanup never touches it, and
// Free of its slice drops the mapping instead of returning anything to a pool: on CUDA once the
// work queued before it completed (the loop waits for the stream), with one cuIpcCloseMemHandle
// per import (the driver counts the opens of one allocation in a context, returns the same
// address to each, and unmaps with the last close). The producer's memory itself belongs to the
// producer: the client SDK keeps the producer's object alive as long as the handle lives
// (docs/api.md, "Importing memory"), and the daemon frees the slice when the handle's last
// reference goes or the session closes. Ordering between the producer's stream and the
// daemon's is the user's, as for exported memory. Owner tags (Note [Owner-tagged memory]) do not
// apply: nothing is zeroed, since the bytes are the importer's own. Like a region, imported
// memory may change under the daemon at any moment (the producer writes it): it is kernel data
// only, and what the daemon interprets from any buffer (a dynamic cube count) it reads once and
// checks. Two imports of one range alias each other, as two views of one handle do. A
// checkpoint keeps an imported handle's bytes; a restore recreates it as ordinary pool memory.
inline constexpr SliceId kImportedSlice = SliceId{1} << 63;
inline constexpr bool IsImportedSlice(SliceId slice) { return (slice & kImportedSlice) != 0; }

// What ComputeServer::Import maps (Note [Imported memory]); the Device checked nothing but the
// presence of one kind.
struct ImportSource {
  enum class Kind { kCudaIpc, kHost };
  Kind kind = Kind::kCudaIpc;
  // kCudaIpc: the 64 bytes of cuIpcGetMemHandle of the producer's allocation, the range's byte
  // offset in that allocation and its size, and the GPU the producer names (DeviceInfo.uuid).
  std::string ipc_handle;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string device_uuid;
  // kHost: the bytes (a checked range of a region), and what keeps them mapped while the slice
  // lives (the region).
  absl::Span<uint8_t> host_bytes;
  std::shared_ptr<const void> keep_alive;
};

// The imports a backend maps now (Note [Imported memory]): reported beside MemoryUsage (metrics,
// GetStats, the MemoryUsage RPC), never in it.
struct ImportedMemory {
  uint64_t buffers = 0;  // Imported slices alive (one per import).
  uint64_t bytes = 0;    // Sum of their sizes.
};

// Identifies an open profile (trait: start_profile / end_profile); many may be open at once.
using ProfileToken = uint64_t;

// Statistics of a backend's kernel compilation cache (GetStats, metrics): zero where the backend
// compiles nothing (CPU).
struct KernelCacheStats {
  uint64_t hits = 0;             // Found compiled in memory.
  uint64_t misses = 0;           // Compiled (or, for PTX, first seen).
  uint64_t disk_hits = 0;        // Read from the on-disk cache.
  uint64_t compile_time_us = 0;  // Spent compiling, microseconds.
};

// Launches a backend sent together (Note [Launch batches],
// server/compute/cuda/cuda_launch_batch.h): the replays of held-back runs and the launches in them,
// since the backend started; zero where it batches nothing (CPU).
struct LaunchBatchStats {
  uint64_t replays = 0;
  uint64_t launches = 0;
};

// A piece of one allocation's bytes in host memory, for a checkpoint's capture or restore
// (Note [Checkpoint I/O], server/channel/device.h): bytes [offset, offset + bytes.size()) of the
// call's allocation `index`; `last` when the piece ends that allocation.
struct HostChunk {
  size_t index = 0;
  uint64_t offset = 0;
  absl::Span<uint8_t> bytes;
  bool last = false;
};
// Gets batches of chunks, in allocation order, each valid only during the call; an error stops
// the transfer and is returned by it.
using HostChunkCallback = absl::FunctionRef<absl::Status(absl::Span<const HostChunk>)>;

// Completion callbacks run on the loop thread or on a backend completion thread; they must not
// block.
using DoneCallback = absl::AnyInvocable<void(absl::Status)>;
using DurationCallback = absl::AnyInvocable<void(absl::StatusOr<absl::Duration>)>;

// What a backend keeps for one recorded graph between its replays (Note [Recorded graphs],
// server/channel/graph.h): on CUDA a captured CUDA graph. Destroyed on the loop thread when the
// graph is released; work already queued from it still completes.
class GraphExecutable {
 public:
  virtual ~GraphExecutable() = default;
};

class ComputeServer {
 public:
  virtual ~ComputeServer() = default;

  virtual const DeviceDescription& Description() const = 0;

  // Allocations are for `owner` (the session's tag). Note [Owner-tagged memory]
  // (storage/memory_manager.cc): when the memory held anything but zeros or `owner`'s own bytes,
  // every byte of its extent that the call does not write is zeroed, in stream order, before
  // anything can read it; otherwise it is left as it is.
  //
  // trait: empty / empty_tensor. RESOURCE_EXHAUSTED over the memory limit.
  virtual absl::StatusOr<Allocation> Empty(uint64_t size, MemoryOwner owner) = 0;
  virtual absl::StatusOr<Allocation> EmptyTensor(absl::Span<const uint64_t> shape,
                                                 uint32_t elem_size, MemoryOwner owner) = 0;
  // trait: create / create_tensor. `data` is dense row-major. The copy is queued in stream order.
  virtual absl::StatusOr<Allocation> Create(absl::Span<const uint8_t> data, MemoryOwner owner) = 0;
  virtual absl::StatusOr<Allocation> CreateTensor(absl::Span<const uint8_t> data,
                                                  absl::Span<const uint64_t> shape,
                                                  uint32_t elem_size, MemoryOwner owner) = 0;

  // Returns a slice to the pools. Work already queued that uses it completes first.
  virtual void Free(SliceId slice) = 0;

  // Bulk upload (Note [Bulk transfers], server/service/stream/bulk_transfers.h): writes the bytes
  // of `pieces`, one after the other (gathered: a chunk as gRPC received it), as the dense
  // row-major bytes [dense_offset, dense_offset + their total) of `target`, a whole allocation
  // laid out as this backend's Empty (shape {size}, strides {1}, elem_size 1) or EmptyTensor laid
  // it out. Queued in stream order: every later command sees the bytes. The bytes must stay alive
  // until `done` runs (once they are no longer needed, possibly before Write returns); the list
  // itself only during the call. INTERNAL for a layout the backend never produces; the range is
  // checked by the caller.
  virtual void Write(const ResolvedTensor& target, uint64_t dense_offset,
                     absl::Span<const absl::Span<const uint8_t>> pieces, DoneCallback done) = 0;
  // The same with the bytes in one piece.
  void Write(const ResolvedTensor& target, uint64_t dense_offset, absl::Span<const uint8_t> bytes,
             DoneCallback done) {
    const absl::Span<const uint8_t> one[] = {bytes};
    Write(target, dense_offset, absl::MakeConstSpan(one), std::move(done));
  }

  // trait: read. Fills (*out)[i] with the bytes of bindings[i] after all earlier work; `out`
  // must stay alive until `done` runs. `done` may run before Read returns.
  virtual void Read(std::vector<ResolvedBinding> bindings, std::vector<std::string>* out,
                    DoneCallback done) = 0;
  // trait: read_tensor. Packs each tensor densely in row-major order.
  virtual void ReadTensor(std::vector<ResolvedTensor> tensors, std::vector<std::string>* out,
                          DoneCallback done) = 0;

  // ReadTensor into host memory the caller keeps mapped until `done` runs (a client's
  // shared-memory region: Note [Shared-memory regions], server/channel/shared_region.h): packs
  // tensors[i] densely, row-major, into out[i], which holds exactly its dense bytes, after all
  // earlier work. The default reads into strings and copies; backends override it to write in
  // place.
  virtual void ReadTensorInto(std::vector<ResolvedTensor> tensors,
                              std::vector<absl::Span<uint8_t>> out, DoneCallback done) {
    auto bytes = std::make_shared<std::vector<std::string>>();
    std::vector<std::string>* target = bytes.get();
    ReadTensor(std::move(tensors), target,
               [bytes = std::move(bytes), out = std::move(out),
                done = std::move(done)](absl::Status s) mutable {
                 for (size_t i = 0; s.ok() && i < out.size(); ++i) {
                   std::copy((*bytes)[i].begin(), (*bytes)[i].end(), out[i].begin());
                 }
                 done(std::move(s));
               });
  }

  // Host memory copies use often (a shared-memory region): a backend may register it for faster
  // transfers (CUDA: page-locked, cuMemHostRegister). `memory` stays mapped until after
  // UnregisterHostMemory, which runs only once work queued before it that uses the memory has
  // completed. Errors: the backend's, naming the call. The default does nothing.
  virtual absl::Status RegisterHostMemory(absl::Span<uint8_t> memory) {
    (void)memory;
    return absl::OkStatus();
  }
  virtual void UnregisterHostMemory(absl::Span<uint8_t> memory) { (void)memory; }

  // Optional (a checkpoint's capture: Note [Checkpoint I/O], server/channel/device.h): after all
  // earlier work, hands every byte of bindings[0], then of bindings[1], ... to `sink` in batches
  // of chunks, and returns after the last batch (the loop thread waits for the device meanwhile).
  // Stops at the first error, the sink's or the backend's, and returns it.
  virtual absl::Status ReadToHost(absl::Span<const ResolvedBinding> bindings,
                                  HostChunkCallback sink) {
    (void)bindings;
    (void)sink;
    return absl::UnimplementedError("this backend cannot hand its memory to a checkpoint");
  }
  // Optional (a checkpoint's restore): reserves sizes[i] bytes for `owner` (laid out as Empty
  // lays them out) and has `fill` write every byte of them, in chunks as ReadToHost hands them
  // out; returns once later work sees the bytes. Errors: Empty's, or the first of `fill`; then
  // nothing stays reserved.
  virtual absl::StatusOr<std::vector<Allocation>> CreateFromHost(absl::Span<const uint64_t> sizes,
                                                                 MemoryOwner owner,
                                                                 HostChunkCallback fill) {
    (void)sizes;
    (void)owner;
    (void)fill;
    return absl::UnimplementedError("this backend cannot restore memory from a checkpoint");
  }

  // trait: get_resource.
  virtual absl::StatusOr<ResourceDescription> GetResource(const ResolvedBinding& binding) = 0;

  // Optional (Note [Imported memory]): a slice over memory another process allocated, which
  // Free later unmaps. INVALID_ARGUMENT naming what is wrong with `source` (handle bytes, a zero
  // size, a range beyond the allocation, another device); UNIMPLEMENTED naming the backend when
  // it cannot import that kind; on error nothing stays mapped.
  virtual absl::StatusOr<Allocation> Import(const ImportSource& source) {
    (void)source;
    return absl::UnimplementedError("this backend cannot import memory");
  }

  // trait: execute. Validates the launch fully before anything runs; on error nothing changed.
  // `launch` is only read during the call.
  virtual absl::Status Execute(const Launch& launch) = 0;

  // Optional: runs `launches` in order, each as Execute runs it: the steps of a recorded graph's
  // replay (Note [Recorded graphs], server/channel/graph.h). Between replays of one graph only
  // the slices of its `parameters` change (bound where the launches bind them); every other
  // slice the launches bind is the same, and live, for as long as the graph lives. `executable`
  // is the graph's, for the backend to keep what makes the next replay cheaper (null at the
  // first). A failure names its step ("step 3: ..."); the steps before it were queued. The
  // default executes each launch.
  virtual absl::Status ExecuteGraph(absl::Span<const Launch> launches,
                                    absl::Span<const SliceId> parameters,
                                    std::unique_ptr<GraphExecutable>& executable) {
    (void)parameters;
    (void)executable;
    for (size_t i = 0; i < launches.size(); ++i) {
      if (absl::Status s = Execute(launches[i]); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("step ", i, ": ", s.message()));
      }
    }
    return absl::OkStatus();
  }

  // Optional: a run of Execute calls follows, with nothing else on this server until
  // EndLaunchBatch, so that the backend may hold their launches back and send them together
  // (CUDA: Note [Launch batches], server/compute/cuda/cuda_launch_batch.h). Each Execute still
  // validates and answers as alone; by EndLaunchBatch's return every launch of the run is queued
  // on the device. An error found only then (the device's) is the backend's to report as it
  // reports errors of queued work. Loop thread; not nested. The default holds nothing back.
  virtual void BeginLaunchBatch() {}
  virtual void EndLaunchBatch() {}

  // trait: flush.
  virtual absl::Status Flush() = 0;
  // trait: sync. `done` runs once every earlier command has finished.
  virtual void Sync(DoneCallback done) = 0;

  // trait: memory_usage / memory_cleanup.
  virtual MemoryUsage Usage() const = 0;
  virtual void Cleanup() = 0;

  // trait: start_profile / end_profile: device time of the work between the two.
  virtual absl::StatusOr<ProfileToken> StartProfile() = 0;
  virtual void EndProfile(ProfileToken token, DurationCallback done) = 0;

  // Optional: device timestamps for traces (Note [Command traces] in
  // server/channel/trace_recorder.cc). DeviceMark records a point on the device's timeline after
  // the work queued so far and returns its id; 0 where the backend has no device clock apart
  // from the loop's (the CPU: a command's loop time is its run). TimeMarks hands `done` the
  // nanoseconds from the first of `marks` to each, once all of them completed (on whatever
  // thread the backend completes work on), and frees them; ids it does not know are errors.
  using MarksCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<int64_t>>)>;
  virtual uint64_t DeviceMark() { return 0; }
  virtual void TimeMarks(std::vector<uint64_t> /*marks*/, MarksCallback done) {
    done(absl::UnimplementedError("this backend records no device marks"));
  }

  // Optional: copies from.size bytes of `from` over `to` (same size, not overlapping; both of
  // this device) in stream order: after every earlier command, before every later one (Note
  // [Copies between devices], server/channel/device.h). The default is UNIMPLEMENTED.
  virtual absl::Status CopyWithin(const ResolvedBinding& from, const ResolvedBinding& to) {
    (void)from;
    (void)to;
    return absl::UnimplementedError("this backend cannot copy between its own allocations");
  }

  // Optional: kernel cache statistics; zeros by default.
  virtual KernelCacheStats KernelCache() const { return {}; }
  // Optional: launch batch statistics; zeros by default (a backend that batches nothing).
  virtual LaunchBatchStats LaunchBatches() const { return {}; }

  // Optional (Note [Imported memory]): the imports mapped now, O(imports); zeros by default (a
  // backend without Import).
  virtual ImportedMemory Imports() const { return {}; }

  // Optional: UNAVAILABLE "device lost: ..." once the device became unusable (Note [Device
  // lost], server/compute/cuda/cuda_server.h; Note [Lost devices], server/daemon/daemon.cc),
  // else OK. The default never loses its device.
  virtual absl::Status Lost() const { return absl::OkStatus(); }
};

}  // namespace cubed
