// Measurement 2: Create + Read through the daemon (the SDK's transport; the bytes travel inside
// one message each way) vs an in-process round trip.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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

// P4 (issue 12): the same bytes created from and read back into a registered shared-memory region
// (Client::CreateFromRegion + Sync, ReadIntoRegion): no gRPC message carries them.
absl::StatusOr<Row> MeasureRegionTransfer(Client& client, const std::vector<uint8_t>& data,
                                          int repeats) {
  const uint64_t bytes = data.size();
  ASSIGN_OR_RETURN(SharedMemory memory, SharedMemory::Create(2 * bytes));
  auto shared = std::make_shared<SharedMemory>(std::move(memory));
  std::memcpy(shared->bytes().data(), data.data(), bytes);
  std::memset(shared->bytes().data() + bytes, 0, bytes);
  ASSIGN_OR_RETURN(Region region, client.RegisterRegion(shared));
  std::vector<double> figure, create_gbs, read_gbs;
  for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up and check.
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(Handle h, client.CreateFromRegion(region, 0, bytes));
    RETURN_IF_ERROR(client.Sync().get());
    const double create_s = SecondsSince(t0);
    const auto t1 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(const uint64_t written,
                     client.ReadIntoRegion({h}, region, bytes, bytes).get());
    const double read_s = SecondsSince(t1);
    if (written != bytes ||
        (r < 0 && std::memcmp(shared->bytes().data() + bytes, data.data(), bytes) != 0)) {
      return absl::InternalError("the region read returned different bytes than it created");
    }
    if (r >= 0) {
      figure.push_back(2.0 * bytes / (create_s + read_s) / 1e9);
      create_gbs.push_back(bytes / create_s / 1e9);
      read_gbs.push_back(bytes / read_s / 1e9);
    }
    h = Handle();
    RETURN_IF_ERROR(client.FlushReleases());
  }
  RETURN_IF_ERROR(client.ReleaseRegion(region));
  RETURN_IF_ERROR(client.Sync().get());
  Row row;
  row.id = "P4";
  row.name = "Create + Read via a shared-memory region, 2 x bytes / wall";
  row.unit = "GB/s";
  row.figure = Summarize(figure);
  row.note = absl::StrFormat("%d MiB; create (+ sync) %.3g GB/s, read %.3g GB/s (medians)",
                             bytes >> 20, Summarize(create_gbs).p50, Summarize(read_gbs).p50);
  return row;
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
  // What a user gets from Create / Read by default: on a local stream the SDK stages the bytes in
  // a shared-memory region (ClientOptions::region_threshold), elsewhere they ride the stream.
  row.name = client.transport() != Transport::kStream
                 ? "Create + Read via SDK (unary), 2 x bytes / wall"
             : client.options().region_threshold != 0
                 ? "Create + Read via SDK defaults (staged in a region), 2 x bytes / wall"
                 : "Create + Read via SDK (stream), 2 x bytes / wall";
  row.unit = "GB/s";
  row.figure = Summarize(figure);
  row.goal = "report (P3/P4 need streams/shm)";
  row.note = absl::StrFormat(
      "%d MiB; create %.3g GB/s, read %.3g GB/s (medians); the SDK's own path for ordinary "
      "Create / Read (a copy into and out of its staging region on a local stream)",
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
  std::vector<Row> rows = {row};
  if (client.transport() != Transport::kStream) return rows;  // Regions need the stream.
  ASSIGN_OR_RETURN(Row region, MeasureRegionTransfer(client, data, options.repeats));
  region.baseline_name = row.baseline_name;
  region.baseline = row.baseline;
  region.goal = ">= 0.8x";
  region.goal_met = region.Ratio() >= 0.8;
  region.verdict = region.goal_met ? "met" : "missed";
  rows.push_back(region);
  return rows;
}

}  // namespace cubed::bench
