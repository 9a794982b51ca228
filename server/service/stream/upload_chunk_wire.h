#pragma once

// The daemon's end of Note [Bulk wire format] (client/bulk_transfer.cc) for uploads: Upload is a
// raw method, and each UploadChunk is parsed where gRPC received it, so that its `data` is never
// copied into a message; the bytes go from gRPC's receive buffers straight into the allocation
// (or the backend's staging buffer) with one gathered write (ComputeServer::Write).

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace cubed {

// One received UploadChunk (proto/cubed/v1/session.proto). Its data stays in the slices it
// came in; `data` points into them and is valid as long as this object (moves keep it valid).
struct UploadPiece {
  uint64_t session = 0;
  uint64_t seq = 0;
  uint64_t total = 0;  // total_size.
  uint64_t offset = 0;
  uint32_t lane = 0;  // Note [Bulk lanes]; as sent (the daemon checks them).
  uint32_t lanes = 0;
  uint64_t size = 0;                            // Bytes of data.
  std::vector<absl::Span<const uint8_t>> data;  // `size` bytes in order.
  std::vector<grpc::Slice> slices;              // Holds the received bytes.
};

// Parses `buffer` as the protobuf wire format of UploadChunk, as the generated parser would
// (unknown fields skipped, the last of a repeated singular field wins), without copying `data`.
// INVALID_ARGUMENT naming what was wrong when it is not a well-formed UploadChunk. Pure.
absl::Status ParseUploadChunk(const grpc::ByteBuffer& buffer, UploadPiece* piece);

}  // namespace cubed
