// Measurement 2: Create + Read through the daemon (the SDK's transport; the bytes travel inside
// one message each way) vs an in-process round trip.
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {
namespace {

// Two host memcpys (there and back) between warm buffers, 2 x bytes / time per repeat.
std::vector<double> MemcpyRoundTrip(uint64_t bytes, int repeats) {
  std::vector<uint8_t> src(bytes, 7), mid(bytes, 1), back(bytes, 2);
  std::vector<double> samples;
  for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up.
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(mid.data(), src.data(), bytes);
    std::memcpy(back.data(), mid.data(), bytes);
    if (r >= 0) samples.push_back(2.0 * bytes / SecondsSince(t0) / 1e9);
  }
  return samples;
}

}  // namespace

absl::StatusOr<std::vector<Row>> MeasureTransfer(Client& client, CudaBaseline* cuda,
                                                 const BenchOptions& options) {
  const uint64_t bytes = options.transfer_bytes;
  std::vector<uint8_t> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + 17);

  std::vector<double> figure, create_gbs, read_gbs;
  for (int r = -1; r < options.repeats; ++r) {  // r = -1: warm-up and check.
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(Handle h, client.Create(data));
    const double create_s = SecondsSince(t0);
    const auto t1 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::vector<std::string> got, client.Read({h}).get());
    const double read_s = SecondsSince(t1);
    if (r < 0) {
      if (got.size() != 1 || got[0].size() != bytes ||
          std::memcmp(got[0].data(), data.data(), bytes) != 0) {
        return absl::InternalError("Read returned different bytes than Create stored");
      }
    } else {
      figure.push_back(2.0 * bytes / (create_s + read_s) / 1e9);
      create_gbs.push_back(bytes / create_s / 1e9);
      read_gbs.push_back(bytes / read_s / 1e9);
    }
    h = Handle();
    RETURN_IF_ERROR(client.FlushReleases());
  }
  Row row;
  row.id = "T1";
  row.name = client.transport() == Transport::kStream
                 ? "Create + Read via SDK (stream, inline bytes), 2 x bytes / wall"
                 : "Create + Read via SDK (unary), 2 x bytes / wall";
  row.unit = "GB/s";
  row.figure = Summarize(figure);
  row.goal = "report (P3/P4 need streams/shm)";
  row.note = absl::StrFormat(
      "%d MiB; create %.3g GB/s, read %.3g GB/s (medians); one gRPC message each way (no chunking "
      "yet), expected far below 1",
      bytes >> 20, Summarize(create_gbs).p50, Summarize(read_gbs).p50);
  if (cuda != nullptr) {
    ASSIGN_OR_RETURN(std::vector<double> copy,
                     cuda->PinnedRoundTripSeconds(bytes, options.repeats));
    for (double& s : copy) s = 2.0 * bytes / s / 1e9;
    row.baseline_name = "pinned HtoD + DtoH, 2 x bytes / time";
    row.baseline = Summarize(copy);
  } else {
    row.baseline_name = "host memcpy there and back";
    row.baseline = Summarize(MemcpyRoundTrip(bytes, options.repeats));
  }
  return std::vector<Row>{row};
}

}  // namespace cubed::bench
