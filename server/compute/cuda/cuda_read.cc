// Reads from the device: staged downloads answered on the completion thread, and small reads on
// an idle device answered by the loop itself (Note [Inline small reads]). Part of CudaServer
// (cuda_server.h).

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "common/checked_math.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "server/compute/cuda/cuda_server.h"

namespace cubed {

// The state of one Read or ReadTensor, shared by its completion callbacks (which all run on the
// completion thread, in order: no lock).
struct CudaServer::PendingRead {
  absl::Status status;  // The first error of a queued copy.
  DoneCallback done;
};

absl::Status CudaServer::Download(CUdeviceptr base, absl::Span<const CopyPiece> pieces,
                                  uint8_t* dst, const std::shared_ptr<PendingRead>& op) {
  uint64_t total = 0;
  for (const CopyPiece& piece : pieces) total = std::max(total, piece.dense_offset + piece.bytes());
  if (IsRegistered(dst, total)) {  // Note [Registered host memory].
    for (const CopyPiece& piece : pieces) {
      RETURN_IF_ERROR(Copy2D(base + piece.strided_offset, piece.pitch, dst + piece.dense_offset,
                             piece.width, piece.height, /*to_device=*/false));
    }
    // The read completes when the copies did (FinishRead orders itself after this), not when
    // they were queued.
    completion_->After(stream_, [op](absl::Status s) {
      if (!s.ok() && op->status.ok()) op->status = std::move(s);
    });
    return absl::OkStatus();
  }
  PinnedStagingPool* pool = staging_.get();
  for (const CopyPiece& piece : pieces) {
    ASSIGN_OR_RETURN(PinnedStagingPool::Buffer buffer, pool->Acquire(piece.bytes()));
    absl::Status status = Copy2D(base + piece.strided_offset, piece.pitch, buffer.data, piece.width,
                                 piece.height, /*to_device=*/false);
    if (!status.ok()) {
      pool->Release(buffer);
      return status;
    }
    completion_->After(stream_, [pool, buffer, op, to = dst + piece.dense_offset,
                                 bytes = piece.bytes()](absl::Status s) {
      if (s.ok()) {
        std::memcpy(to, buffer.data, bytes);
      } else if (op->status.ok()) {
        op->status = std::move(s);
      }
      pool->Release(buffer);
    });
  }
  return absl::OkStatus();
}

void CudaServer::FinishRead(std::shared_ptr<PendingRead> op, absl::Status loop_status,
                            bool queued_any) {
  auto finish = [op](absl::Status s) {
    if (!s.ok() && op->status.ok()) op->status = std::move(s);
    std::move(op->done)(op->status);
  };
  if (!loop_status.ok()) {
    completion_->Then(Check(std::move(loop_status)), std::move(finish));
  } else if (queued_any) {
    completion_->Then(absl::OkStatus(), std::move(finish));
  } else {
    completion_->After(stream_, std::move(finish));
  }
}

absl::Status CudaServer::ForEachReadTarget(
    const std::vector<ResolvedBinding>& bindings, std::vector<std::string>* out,
    absl::FunctionRef<absl::Status(CUdeviceptr, uint8_t*, uint64_t)> copy) {
  out->assign(bindings.size(), std::string());
  for (size_t i = 0; i < bindings.size(); ++i) {
    ASSIGN_OR_RETURN(const CUdeviceptr ptr, DevicePointer(bindings[i]));
    (*out)[i].resize(bindings[i].size);
    RETURN_IF_ERROR(copy(ptr, reinterpret_cast<uint8_t*>((*out)[i].data()), bindings[i].size));
  }
  return absl::OkStatus();
}

// Note [Inline small reads]
// A read is queued like every other command: its copies go into pinned staging behind the work
// before it, an event is recorded, and the completion thread waits for the event, copies the bytes
// out and answers. For a read of a few bytes on an idle device (a client reading a scalar, as
// PyTorch's .item() does) that hand-off costs more than the copy: the event, the staging
// buffer, the completion thread's wake-up or poll, a second thread touching the reply. So when
// the read is at most kInlineReadBytes, the completion queue has nothing left to run (no earlier
// answer can be overtaken) and the stream has no work queued (cuStreamQuery; so the loop waits
// for the copy alone, a few microseconds, never for other work), the loop copies the bytes
// itself and answers at once. Otherwise, and on drivers without cuStreamQuery, the usual path.
// The query costs 1.6 us on an idle stream (GPU run 84, in-process), a fifth of the copy's own
// time, and a client reading scalars in a row asks it each time of a stream it just saw idle:
// so after an inline read's sync the server remembers the stream idle (stream_seen_idle_) until
// the next call that may queue work on it, which are the calls that send the held-back launches
// first (Note [Launch batches]: every entry point that reaches the stream) and Execute. A stale
// flag could cost only time (the copy is queued on the stream behind whatever is there), never
// order or bytes.
constexpr uint64_t kInlineReadBytes = uint64_t{16} << 10;

bool CudaServer::ReadInline(const std::vector<ResolvedBinding>& bindings,
                            std::vector<std::string>* out, DoneCallback& done, bool seen_idle) {
  if (Cu().StreamQuery == nullptr || !completion_->Idle()) return false;
  uint64_t total = 0;
  for (const ResolvedBinding& b : bindings) {
    const std::optional<uint64_t> sum = CheckedAdd(total, b.size);
    if (!sum || *sum > kInlineReadBytes) return false;
    total = *sum;
  }
  if (!context_->MakeCurrent().ok()) return false;
  if (!seen_idle && Cu().StreamQuery(stream_) != CUDA_SUCCESS) return false;
  // Through the server's own pinned buffer of kInlineReadBytes, then into the answer's strings:
  // the driver stages a copy into pageable memory itself, 2.25 us more for 4 bytes (GPU run 84,
  // in-process: 9.53 against 7.28 us; through the daemon, the Python SDK's 4-byte read 30.7 ->
  // 28.3 us in run 85). Its own buffer, not the staging pool's: no pool round trip on the loop
  // (the pool, runs 80-81, gained nothing). Where it cannot be had, straight into the strings.
  if (inline_read_buffer_ == nullptr &&
      Cu().MemHostAlloc(reinterpret_cast<void**>(&inline_read_buffer_), kInlineReadBytes, 0) !=
          CUDA_SUCCESS) {
    inline_read_buffer_ = nullptr;
  }
  uint8_t* const pinned = inline_read_buffer_;
  uint64_t at = 0;
  absl::InlinedVector<std::pair<uint8_t*, uint64_t>, 4> targets;
  absl::Status status = ForEachReadTarget(
      bindings, out, [&](CUdeviceptr from, uint8_t* to, uint64_t bytes) -> absl::Status {
        if (bytes == 0) return absl::OkStatus();
        if (pinned == nullptr) return CU_STATUS(Cu().MemcpyDtoHAsync(to, from, bytes, stream_));
        targets.emplace_back(to, bytes);
        const uint64_t place = at;
        at += bytes;  // At most kInlineReadBytes in all: checked above.
        return CU_STATUS(Cu().MemcpyDtoHAsync(pinned + place, from, bytes, stream_));
      });
  // Waited for even after an error: a queued copy must land before the buffer is used again.
  absl::Status synced = CU_STATUS(Cu().StreamSynchronize(stream_));
  if (status.ok()) status = std::move(synced);
  stream_seen_idle_ = status.ok();
  if (status.ok()) {
    const uint8_t* from = pinned;
    for (const auto& [to, bytes] : targets) {
      std::memcpy(to, from, bytes);
      from += bytes;
    }
  }
  std::move(done)(Check(std::move(status)));
  return true;
}

void CudaServer::Read(std::vector<ResolvedBinding> bindings, std::vector<std::string>* out,
                      DoneCallback done) {
  const bool seen_idle = stream_seen_idle_;  // Before the guard below forgets it.
  LaunchHeldBackOrLog();
  if (absl::Status lost = LostStatus(); !lost.ok()) {
    done(lost);
    return;
  }
  if (ReadInline(bindings, out, done, seen_idle)) return;
  auto op = std::make_shared<PendingRead>();
  op->done = std::move(done);
  absl::Status status = context_->MakeCurrent();
  bool queued = false;
  if (status.ok()) {
    status = ForEachReadTarget(bindings, out, [&](CUdeviceptr from, uint8_t* to, uint64_t bytes) {
      const std::vector<CopyPiece> pieces =
          PlanContiguousCopy(bytes, PinnedStagingPool::kChunkBytes);
      queued = queued || !pieces.empty();
      return Download(from, pieces, to, op);
    });
  }
  FinishRead(std::move(op), std::move(status), queued);
}

void CudaServer::ReadTensor(std::vector<ResolvedTensor> tensors, std::vector<std::string>* out,
                            DoneCallback done) {
  out->assign(tensors.size(), std::string());
  std::vector<uint8_t*> dst(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    absl::StatusOr<uint64_t> bytes = TensorBytes(tensors[i].shape, tensors[i].elem_size, "tensor");
    if (!bytes.ok()) {
      done(bytes.status());
      return;
    }
    (*out)[i].resize(*bytes);
    dst[i] = reinterpret_cast<uint8_t*>((*out)[i].data());
  }
  ReadTensorsTo(tensors, dst, std::move(done));
}

void CudaServer::ReadTensorInto(std::vector<ResolvedTensor> tensors,
                                std::vector<absl::Span<uint8_t>> out, DoneCallback done) {
  std::vector<uint8_t*> dst(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    absl::StatusOr<uint64_t> bytes = TensorBytes(tensors[i].shape, tensors[i].elem_size, "tensor");
    if (!bytes.ok() || *bytes != out[i].size()) {
      done(bytes.ok() ? absl::InternalError("read into: the room differs from the tensor's bytes")
                      : bytes.status());
      return;
    }
    dst[i] = out[i].data();
  }
  ReadTensorsTo(tensors, dst, std::move(done));
}

void CudaServer::ReadTensorsTo(const std::vector<ResolvedTensor>& tensors,
                               const std::vector<uint8_t*>& dsts, DoneCallback done) {
  LaunchHeldBackOrLog();
  if (absl::Status lost = LostStatus(); !lost.ok()) {
    done(lost);
    return;
  }
  auto op = std::make_shared<PendingRead>();
  op->done = std::move(done);
  absl::Status status = context_->MakeCurrent();
  bool queued = false;
  CopyPlanLimits limits;
  limits.max_pitch = max_pitch_;
  for (size_t i = 0; i < tensors.size() && status.ok(); ++i) {
    const ResolvedTensor& t = tensors[i];
    absl::StatusOr<CUdeviceptr> ptr = DevicePointer(t.binding);
    if (!ptr.ok()) {
      status = ptr.status();
      break;
    }
    uint8_t* dst = dsts[i];
    std::optional<std::vector<CopyPiece>> plan =
        PlanTensorCopy(t.shape, t.strides, t.elem_size, limits);
    if (plan) {
      status = Download(*ptr, *plan, dst, op);
      queued = queued || !plan->empty();
      continue;
    }
    // Note [Tensor copies]: read the whole span, pack it on the completion thread.
    const uint64_t span = TensorSpanBytes(t.shape, t.strides, t.elem_size);
    auto scratch = std::make_shared<std::string>(span, '\0');
    status = Download(*ptr, PlanContiguousCopy(span, PinnedStagingPool::kChunkBytes),
                      reinterpret_cast<uint8_t*>(scratch->data()), op);
    if (!status.ok()) break;
    completion_->Then(absl::OkStatus(), [op, scratch, t, dst](absl::Status) {
      if (op->status.ok()) {
        PackTensorOnHost(reinterpret_cast<const uint8_t*>(scratch->data()), t.shape, t.strides,
                         t.elem_size, dst);
      }
    });
    queued = true;
  }
  FinishRead(std::move(op), std::move(status), queued);
}

}  // namespace cubed
