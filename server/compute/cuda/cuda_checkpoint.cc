// CudaServer: a checkpoint's capture and restore through pinned staging.
//
// Note [Checkpoint staging]: ReadToHost queues the device-to-host copies of up to one staging
// chunk (PinnedStagingPool::kChunkBytes) of the allocations, waits for the stream (the device is
// frozen: nothing else is queued) and hands that chunk to the sink, which writes it to the file
// before the next copies reuse it (Note [Checkpoint I/O], server/channel/device.h). CreateFromHost
// lets the fill read the file straight into staging chunks and queues each chunk's upload as soon
// as it is full; the pool's bound (several chunks) lets the next fill run while earlier uploads are
// in flight. Either way each byte crosses host memory once (file <-> pinned chunk), against twice
// through Read/Create's strings.

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "server/compute/cuda/cuda_server.h"

namespace cubed {

absl::Status CudaServer::ReadToHost(absl::Span<const ResolvedBinding> bindings,
                                    HostChunkCallback sink) {
  LaunchHeldBackOrLog();
  RETURN_IF_ERROR(LostStatus());
  std::vector<CUdeviceptr> ptrs(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    ASSIGN_OR_RETURN(ptrs[i], DevicePointer(bindings[i]));
  }
  RETURN_IF_ERROR(context_->MakeCurrent());
  PinnedStagingPool* pool = staging_.get();
  ASSIGN_OR_RETURN(const PinnedStagingPool::Buffer buffer,
                   pool->Acquire(PinnedStagingPool::kChunkBytes));
  std::vector<HostChunk> batch;
  uint64_t used = 0;
  // Waits for the queued copies (and all earlier work), then hands them out.
  auto flush = [&]() -> absl::Status {
    RETURN_IF_ERROR(Check(CU_STATUS(Cu().StreamSynchronize(stream_))));
    if (!batch.empty()) RETURN_IF_ERROR(sink(batch));
    batch.clear();
    used = 0;
    return absl::OkStatus();
  };
  absl::Status status = absl::OkStatus();
  for (size_t i = 0; i < bindings.size() && status.ok(); ++i) {
    for (uint64_t offset = 0; offset < bindings[i].size && status.ok();) {
      const uint64_t n = std::min(bindings[i].size - offset, buffer.capacity - used);
      status =
          Check(CU_STATUS(Cu().MemcpyDtoHAsync(buffer.data + used, ptrs[i] + offset, n, stream_)));
      if (!status.ok()) break;
      batch.push_back(HostChunk{i, offset, absl::MakeSpan(buffer.data + used, n),
                                offset + n == bindings[i].size});
      offset += n;
      used += n;
      if (used == buffer.capacity) status = flush();
    }
  }
  if (status.ok()) status = flush();  // Also when there was nothing to copy: earlier work done.
  if (!status.ok()) {
    // A queued copy may still write into the buffer: wait before it goes back to the pool.
    (void)Cu().StreamSynchronize(stream_);
  }
  pool->Release(buffer);
  return status;
}

absl::StatusOr<std::vector<Allocation>> CudaServer::CreateFromHost(absl::Span<const uint64_t> sizes,
                                                                   MemoryOwner owner,
                                                                   HostChunkCallback fill) {
  std::vector<Reserved> reserved;
  reserved.reserve(sizes.size());
  auto fail = [&](absl::Status status) {
    // Stream order: uploads and zeroing already queued complete before the memory is reused.
    for (const Reserved& r : reserved) memory_->FreeUninitialized(r.slice);
    return Check(std::move(status));
  };
  for (uint64_t size : sizes) {
    absl::StatusOr<Reserved> r = Reserve(size, owner);
    if (!r.ok()) return fail(r.status());
    reserved.push_back(*r);
    if (absl::Status s = ZeroOutsideRows(*r, size, size, 1); !s.ok()) return fail(s);
  }
  if (absl::Status s = context_->MakeCurrent(); !s.ok()) return fail(s);
  PinnedStagingPool* pool = staging_.get();
  std::vector<HostChunk> batch;
  PinnedStagingPool::Buffer buffer;
  uint64_t used = 0;
  // Fills the current buffer's chunks and queues their uploads; the buffer returns to the pool
  // once they completed.
  auto flush = [&]() -> absl::Status {
    absl::Status status = batch.empty() ? absl::OkStatus() : fill(batch);
    for (size_t k = 0; k < batch.size() && status.ok(); ++k) {
      const HostChunk& c = batch[k];
      status = CU_STATUS(Cu().MemcpyHtoDAsync(reserved[c.index].ptr + c.offset, c.bytes.data(),
                                              c.bytes.size(), stream_));
    }
    if (buffer.data != nullptr) {
      if (status.ok()) {
        completion_->After(stream_, [pool, b = buffer](absl::Status) { pool->Release(b); });
      } else {
        (void)Cu().StreamSynchronize(stream_);  // Copies queued from it may still be running.
        pool->Release(buffer);
      }
    }
    buffer = {};
    batch.clear();
    used = 0;
    return status;
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (uint64_t offset = 0; offset < sizes[i];) {
      if (buffer.data == nullptr) {
        absl::StatusOr<PinnedStagingPool::Buffer> b = pool->Acquire(PinnedStagingPool::kChunkBytes);
        if (!b.ok()) return fail(b.status());
        buffer = *b;
      }
      const uint64_t n = std::min(sizes[i] - offset, buffer.capacity - used);
      batch.push_back(
          HostChunk{i, offset, absl::MakeSpan(buffer.data + used, n), offset + n == sizes[i]});
      offset += n;
      used += n;
      if (used == buffer.capacity) {
        if (absl::Status s = flush(); !s.ok()) return fail(s);
      }
    }
  }
  if (absl::Status s = flush(); !s.ok()) return fail(s);
  std::vector<Allocation> out;
  out.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i)
    out.push_back(Allocation{reserved[i].slice, sizes[i], {}});
  return out;
}

}  // namespace cubed
