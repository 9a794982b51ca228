#include "tests/fuzz/harness.h"

#include <cstdlib>

#include "absl/time/time.h"
#include "common/checked_math.h"
#include "google/protobuf/stubs/logging.h"
#include "server/compute/cpu/cpu_server.h"
#include "spdlog/spdlog.h"

namespace cubed::fuzz {

Fixture& SharedFixture() {
  static Fixture* fixture = [] {
    spdlog::set_level(spdlog::level::off);
    // Parse failures (e.g. invalid UTF-8 in a string field) are logged by protobuf; the daemon
    // answers them with gRPC's own error, and here they only flood the fuzzer's output.
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    auto* f = new Fixture;
    CpuServerOptions cpu;
    cpu.memory_limit = 1 << 20;  // Small: keeps kernels and reads fast under ASan.
    f->options.default_lease = absl::Seconds(600);
    f->options.max_read_bytes = 256 << 10;  // Small: reads of stride 0 stay fast.
    f->device = std::make_unique<Device>(0, std::make_unique<CpuServer>(cpu), f->options);
    auto owner = std::make_shared<Principal>();
    owner->name = "fuzz-quota";
    owner->all_rpcs = true;
    owner->quotas.max_bytes = 48 << 10;
    owner->quotas.max_handles = 32;
    owner->quotas.max_sessions = 4;
    owner->quotas.max_session_bytes = 32 << 10;
    owner->quotas.max_session_handles = 16;
    f->quota_owner = std::move(owner);
    return f;
  }();
  return *fixture;
}

void Breach(const char* what) {
  std::fprintf(stderr, "fuzz_requests: invariant broken: %s\n", what);
  __builtin_trap();
}

bool Verbose() {
  static const bool verbose = std::getenv("CUBED_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

void CheckStatus(const absl::Status& status) {
  if (Verbose()) std::fprintf(stderr, "  -> %s\n", status.ToString().c_str());
  if (status.ok()) return;
  if (status.message().empty()) Breach("an error status without a message");
  const absl::StatusCode code = status.code();
  if (code == absl::StatusCode::kInternal || code == absl::StatusCode::kUnknown ||
      code == absl::StatusCode::kDataLoss) {
    std::fprintf(stderr, "fuzz_requests: %s\n", status.ToString().c_str());
    Breach("an INTERNAL/UNKNOWN/DATA_LOSS status from client input");
  }
}

void CheckBaseline(Device& device) {
  Check(device.session_count() == 0, "a session is still open after the input closed them");
  const MemoryUsage usage = device.Usage();
  Check(usage.number_allocs == 0, "allocations left after every session closed");
  Check(usage.bytes_in_use == 0, "bytes in use after every session closed");
}

bool SameAllocations(const MemoryUsage& a, const MemoryUsage& b) {
  return a.number_allocs == b.number_allocs && a.bytes_in_use == b.bytes_in_use;
}

std::optional<uint64_t> DenseBytes(absl::Span<const uint64_t> shape, uint32_t elem_size) {
  std::optional<uint64_t> count = CheckedProduct(shape);
  return count ? CheckedMul(*count, elem_size) : std::nullopt;
}

void CheckReadSizes(absl::Span<const uint64_t> sizes,
                    absl::Span<const std::optional<uint64_t>> expected, uint64_t max_read_bytes) {
  Check(sizes.size() == expected.size(), "a read returned a different number of entries");
  uint64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (expected[i].has_value()) {
      Check(sizes[i] == *expected[i], "a read entry has the wrong number of bytes");
    }
    total += sizes[i];  // Each entry was in memory: no overflow.
  }
  Check(total <= max_read_bytes, "a read returned more than max_read_bytes");
}

std::vector<std::optional<uint64_t>> DenseSizes(absl::Span<const TensorRef> tensors) {
  std::vector<std::optional<uint64_t>> sizes;
  for (const TensorRef& t : tensors) {
    sizes.push_back(DenseBytes(t.shape, t.elem_size));
    Check(sizes.back().has_value(), "a read of a tensor whose size overflows succeeded");
  }
  return sizes;
}

uint64_t CheckingSink::Reserve() {
  slots_.emplace_back();
  return slots_.size() - 1;
}

void CheckingSink::Fill(uint64_t slot, StreamReply reply) {
  Check(slot < slots_.size(), "Fill of a slot never reserved");
  Check(!slots_[slot].has_value(), "a reply slot filled twice");
  if (Verbose()) {
    std::fprintf(stderr, "reply %llu %s\n", static_cast<unsigned long long>(reply.seq),
                 reply.status.ToString().c_str());
  }
  CheckStatus(reply.status);
  slots_[slot] = std::move(reply);
}

void CheckingSink::CheckAllFilled() const {
  for (const auto& slot : slots_) Check(slot.has_value(), "a reserved reply slot never filled");
}

const StreamReply* CheckingSink::reply(uint64_t slot) const {
  return slot < slots_.size() && slots_[slot].has_value() ? &*slots_[slot] : nullptr;
}

}  // namespace cubed::fuzz
