#pragma once

// What every mode of cubed_fuzz_requests shares: the one CPU device the inputs run against, the
// invariants whose breach is a finding, and a reply sink that checks the session stream's reply
// slots. Single-threaded, like the device's loop (the CPU backend completes synchronously).

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/auth/principal.h"
#include "server/channel/device.h"
#include "server/channel/stream_reply.h"
#include "server/service/request_conversion.h"

namespace cubed::fuzz {

// The device and limits every input runs against. `quota_owner` is a principal with small quotas
// that inputs may open sessions for (so that quota arithmetic runs).
struct Fixture {
  RequestLimits limits;
  DeviceOptions options;
  std::unique_ptr<Device> device;  // A CPU device with a 1 MiB memory limit.
  PrincipalPtr quota_owner;
};
// The process's one fixture, created at the first call (which also silences the daemon's and
// protobuf's logging) and never destroyed.
Fixture& SharedFixture();

// An invariant broke: a bug in the daemon, not in the input. Aborts with __builtin_trap, which
// libFuzzer reports as a crash.
[[noreturn]] void Breach(const char* what);
inline void Check(bool ok, const char* what) {
  if (!ok) Breach(what);
}

// CUBED_FUZZ_VERBOSE=1 prints every request and status (for reading what a reproducer does).
bool Verbose();

// A status the daemon may answer a client with: OK, or an error with a message whose code is not
// INTERNAL, UNKNOWN or DATA_LOSS (those mean a daemon bug, docs/error-model.md).
void CheckStatus(const absl::Status& status);

// After an input: no session is open and nothing is allocated.
void CheckBaseline(Device& device);

// Runs `call`; a C++ exception escaping it (a device call must answer with a status, never throw:
// on the daemon's loop thread it would terminate the process) is a breach naming `what`.
template <typename Call>
auto NoThrow(const char* what, Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_requests: %s threw %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "fuzz_requests: %s threw a non-std exception\n", what);
  }
  Breach("a C++ exception escaped a device call");
}

// Whether two usages hold the same allocations (count and bytes in use).
bool SameAllocations(const MemoryUsage& a, const MemoryUsage& b);

// Runs a completion-style device call (`call(done)`) and returns what `done` got; a finding
// unless `done` ran exactly once, before the call returned (the CPU backend completes at once).
template <typename Call>
absl::Status Completed(Call call) {
  int calls = 0;
  absl::Status result;
  call([&](absl::Status s) {
    ++calls;
    result = std::move(s);
  });
  Check(calls == 1, "a completion callback did not run exactly once");
  return result;
}

// Bytes of a dense tensor, product(shape) * elem_size; nullopt when it overflows 64 bits.
std::optional<uint64_t> DenseBytes(absl::Span<const uint64_t> shape, uint32_t elem_size);

// Checks the entry sizes of a successful read: one per binding, `expected[i]` bytes each when
// known (nullopt: any), and at most max_read_bytes in all.
void CheckReadSizes(absl::Span<const uint64_t> sizes,
                    absl::Span<const std::optional<uint64_t>> expected, uint64_t max_read_bytes);
// What a successful read_tensor returns per binding: its dense bytes. A tensor whose dense size
// overflows is a breach (its read must have been refused).
std::vector<std::optional<uint64_t>> DenseSizes(absl::Span<const TensorRef> tensors);
template <typename Strings>
std::vector<uint64_t> SizesOf(const Strings& entries) {
  std::vector<uint64_t> sizes;
  for (const std::string& e : entries) sizes.push_back(e.size());
  return sizes;
}

// Collects the session stream's replies; checks that each reserved slot is filled exactly once
// and that every error reply carries a status CheckStatus accepts.
class CheckingSink final : public ReplySink {
 public:
  uint64_t Reserve() override;
  void Fill(uint64_t slot, StreamReply reply) override;
  void CheckAllFilled() const;
  // The slots reserved so far, and the reply in one (null while unfilled).
  uint64_t reserved() const { return slots_.size(); }
  const StreamReply* reply(uint64_t slot) const;

 private:
  std::vector<std::optional<StreamReply>> slots_;
};

}  // namespace cubed::fuzz
