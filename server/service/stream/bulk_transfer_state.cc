#include "server/service/stream/bulk_transfer_state.h"

namespace cubed {

std::string DownloadHeader(const v1::DownloadChunk& chunk, uint64_t data_bytes) {
  std::string header = chunk.SerializeAsString();
  if (data_bytes == 0) return header;
  header.push_back(static_cast<char>((4 << 3) | 2));  // Field 4 (data), length-delimited.
  for (uint64_t v = data_bytes;; v >>= 7) {
    if (v < 0x80) {
      header.push_back(static_cast<char>(v));
      break;
    }
    header.push_back(static_cast<char>((v & 0x7F) | 0x80));
  }
  return header;
}

}  // namespace cubed
