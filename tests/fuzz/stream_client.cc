#include "tests/fuzz/stream_client.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/channel/bulk_read_plan.h"
#include "server/service/stream/bulk_transfers.h"
#include "server/service/stream/stream_command_conversion.h"
#include "tests/fuzz/magnitude.h"

namespace cubed::fuzz {
namespace {

using Kind = StreamCommand::Kind;

// Bounds on what one transfer moves, so that an input stays fast: a transfer that would take
// more is cancelled by the simulated client (the daemon itself moves any amount).
constexpr uint64_t kMaxChunks = 64;
constexpr uint64_t kMaxDownloadBytes = uint64_t{256} << 10;

bool IsNewAllocation(Kind kind) {
  return kind == Kind::kCreate || kind == Kind::kEmpty || kind == Kind::kCreateTensor ||
         kind == Kind::kEmptyTensor;
}

// Upload chunk bytes: a pattern, so that reads see something other than zeros.
absl::Span<const uint8_t> ChunkBytes(uint64_t size) {
  static const std::string* pattern = [] {
    auto* s = new std::string(kMaxBulkChunk, '\0');
    for (size_t i = 0; i < s->size(); ++i) (*s)[i] = static_cast<char>(i * 7 + 1);
    return s;
  }();
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(pattern->data()),
                             std::min<uint64_t>(size, pattern->size()));
}

absl::Status Cancelled(absl::string_view what) {
  return absl::CancelledError(absl::StrCat("the client cancelled the ", what));
}

}  // namespace

bool StreamClient::Open(const v1::SessionRequest::Open& open, bool quota_owner) {
  Close();
  if (open.device() != 0) return false;  // NOT_FOUND before anything runs.
  runner_ = std::make_unique<StreamRunner>();
  sink_ = std::make_shared<CheckingSink>();
  owner_ = quota_owner ? unary_.fixture().quota_owner : nullptr;
  absl::StatusOr<StreamOpened> opened = NoThrow(
      "StreamRunner::Open", [&] { return runner_->Open(device(), open.lease_ms(), owner_); });
  CheckStatus(opened.status());
  if (!opened.ok()) {
    runner_.reset();
    return false;
  }
  unary_.AddSession(opened->session, owner_);
  return true;
}

void StreamClient::Close() {
  if (runner_ == nullptr) return;
  sink_->CheckAllFilled();
  NoThrow("StreamRunner::Close", [&] { runner_->Close(device()); });
  runner_.reset();
}

void StreamClient::Run(v1::Command& wire, const Transfer& transfer) {
  if (runner_ == nullptr) return;
  StreamCommand command;
  ToStreamCommand(wire, unary_.fixture().limits, command);
  // As StreamState::ApplyPrincipal (the quota principal may call every RPC).
  if (owner_ != nullptr && command.invalid.ok() && command.kind == Kind::kExecute) {
    command.invalid =
        owner_->CheckExecute(!command.execute.kernel.is_builtin, command.execute.unchecked);
  }
  if (Verbose()) std::fprintf(stderr, "command %s\n", std::string(KindName(command.kind)).c_str());
  Observe(command);
  if (IsBulkCreate(command) || IsBulkRead(command)) {
    RunBulk(command, transfer);
  } else {
    RunPlain(command);
  }
}

void StreamClient::Observe(const StreamCommand& command) {
  switch (command.kind) {
    case Kind::kCreateTensor:
    case Kind::kEmptyTensor:
      fuzz::Observe(Quantity::kAllocation, ExactProduct(command.shape, command.elem_size));
      break;
    case Kind::kCreate:
    case Kind::kEmpty:
      fuzz::Observe(Quantity::kAllocation, command.bulk || command.kind == Kind::kEmpty
                                               ? command.size
                                               : command.data.size());
      break;
    case Kind::kExecute:
      ObserveBindings(command.execute.buffers);
      break;
    case Kind::kRead:
      ObserveBindings(command.read);
      break;
    case Kind::kReadTensor:
      ObserveTensors(Quantity::kStreamReadTotal, command.read_tensor,
                     unary_.ViewSizes(session(), command.read_tensor));
      break;
    default:
      break;
  }
}

void StreamClient::RunPlain(StreamCommand& command) {
  const MemoryUsage before = device().Usage();
  const uint64_t failures = runner_->failures();
  const uint64_t slot = sink_->reserved();
  uint64_t size = command.kind == Kind::kCreate ? command.data.size() : command.size;
  if (command.kind == Kind::kCreateTensor || command.kind == Kind::kEmptyTensor) {
    size = DenseBytes(command.shape, command.elem_size).value_or(0);
  }
  NoThrow("a stream command", [&] { runner_->Run(device(), command, sink_, absl::Now()); });
  const bool failed = runner_->failures() != failures;
  if (failed && command.kind != Kind::kRelease) {  // Release frees what it can, one by one.
    Check(SameAllocations(device().Usage(), before), "a failed stream command changed memory");
  }
  if (IsNewAllocation(command.kind)) Created(command, failed ? 0 : size);
  if (!failed && (command.kind == Kind::kRead || command.kind == Kind::kReadTensor)) {
    CheckReadReply(command, slot);
  }
}

void StreamClient::RunBulk(StreamCommand& command, const Transfer& transfer) {
  const MemoryUsage before = device().Usage();
  absl::Status started =
      NoThrow("StartBulk", [&] { return runner_->StartBulk(device(), command, *sink_); });
  absl::Status finished = started;
  if (started.ok()) {
    const absl::Status moved = NoThrow("a bulk transfer", [&] {
      return IsBulkCreate(command) ? Upload(command, transfer) : Download(command, transfer);
    });
    finished = NoThrow("FinishBulk",
                       [&] { return runner_->FinishBulk(device(), command, moved, *sink_); });
  }
  CheckStatus(finished);
  if (!finished.ok()) {
    Check(SameAllocations(device().Usage(), before), "a failed bulk command changed memory");
  }
  if (IsBulkCreate(command)) Created(command, finished.ok() ? command.allocated : 0);
}

absl::Status StreamClient::Upload(const StreamCommand& command, const Transfer& transfer) {
  const uint64_t total = command.size;
  auto write = [&](uint64_t offset, uint64_t bytes) {
    return Completed([&](DoneCallback done) {
      fuzz::Observe(Quantity::kUploadEnd, Exact{offset} + bytes);
      const absl::Span<const uint8_t> piece[] = {ChunkBytes(bytes)};  // Copied by the call.
      device().WritePiece(session(), command.id, command.shape, command.strides, command.elem_size,
                          offset, piece, absl::Now(), std::move(done));
    });
  };
  if (transfer.explicit_chunks) {
    uint64_t n = 0;
    for (const auto& [offset, bytes] : transfer.chunks) {
      if (n++ == transfer.cancel_after) return Cancelled("upload");
      if (bytes == 0 || bytes > kMaxBulkChunk) {  // Refused before any write (StepUpload).
        return absl::InvalidArgumentError("data: a chunk of a bad size");
      }
      if (absl::Status s = write(offset, bytes); !s.ok()) return s;
    }
    return absl::OkStatus();  // Whatever was written: the client says it is done.
  }
  uint64_t chunk = transfer.chunk_bytes == 0 ? kMaxBulkChunk : transfer.chunk_bytes;
  chunk = std::max(std::min(chunk, kMaxBulkChunk), total / kMaxChunks + 1);
  uint64_t n = 0;
  for (uint64_t offset = 0; offset < total; offset += chunk) {
    if (n++ == transfer.cancel_after) return Cancelled("upload");
    if (absl::Status s = write(offset, std::min(chunk, total - offset)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status StreamClient::Download(const StreamCommand& command, const Transfer& transfer) {
  // 0 (4 MiB in the daemon) asks for the download budget here, so that pieces stay small.
  const uint64_t chunk = transfer.chunk_bytes == 0 ? kMaxDownloadBytes : transfer.chunk_bytes;
  if (chunk > kMaxBulkChunk) return absl::InvalidArgumentError("chunk_bytes: above 4 MiB");
  absl::StatusOr<std::unique_ptr<BulkReadPlan>> made =
      BulkReadPlan::Make(command.read_tensor, chunk);
  if (!made.ok()) return made.status();
  BulkReadPlan& plan = **made;
  const std::vector<std::optional<uint64_t>> dense = DenseSizes(command.read_tensor);
  Check(plan.sizes().size() == dense.size(), "a bulk read plan has the wrong number of sizes");
  for (size_t i = 0; i < dense.size(); ++i) {
    Check(plan.sizes()[i] == *dense[i], "a bulk read plan's size is not the tensor's bytes");
  }
  std::vector<uint64_t> read(dense.size(), 0);
  uint64_t pieces = 0, bytes = 0;
  while (!plan.done()) {
    if (pieces == transfer.cancel_after || pieces == kMaxChunks || bytes >= kMaxDownloadBytes) {
      return Cancelled("download");
    }
    const BulkPiece piece = plan.Next();
    Check(piece.binding < read.size(), "a bulk read piece of no binding");
    Check(piece.offset == read[piece.binding], "bulk read pieces out of order");
    Check(piece.bytes >= 1 && piece.bytes <= std::max<uint64_t>(chunk, 16),
          "a bulk read piece larger than its chunk (and than one element)");
    std::string out;
    absl::Status s = Completed([&](DoneCallback done) {
      device().ReadPiece(session(), piece.ref, &out, absl::Now(), std::move(done));
    });
    if (!s.ok()) return s;
    Check(out.size() == piece.bytes, "a bulk read piece read the wrong number of bytes");
    read[piece.binding] += piece.bytes;
    bytes += piece.bytes;
    ++pieces;
  }
  for (size_t i = 0; i < read.size(); ++i) {
    Check(read[i] == plan.sizes()[i], "a bulk read's pieces do not add up to its size");
  }
  return absl::OkStatus();
}

void StreamClient::Created(const StreamCommand& command, uint64_t size) {
  KnownHandle h{session(), command.id, size, {}};
  if (command.kind == Kind::kCreateTensor || command.kind == Kind::kEmptyTensor) {
    h.shape = command.shape;
  }
  unary_.AddHandle(std::move(h));
}

void StreamClient::CheckReadReply(const StreamCommand& command, uint64_t slot) const {
  const StreamReply* reply = sink_->reply(slot);
  Check(reply != nullptr, "a read's reply slot is not filled after the read ran");
  if (!reply->status.ok()) return;
  Check(reply->result == StreamReply::Result::kRead, "a successful read answered without data");
  const std::vector<std::optional<uint64_t>> expected =
      command.kind == Kind::kRead ? unary_.ViewSizes(session(), command.read)
                                  : DenseSizes(command.read_tensor);
  CheckReadSizes(SizesOf(reply->read), expected, unary_.fixture().options.max_read_bytes);
}

}  // namespace cubed::fuzz
