#pragma once

// Shared pieces of the integration tests: a daemon per test suite, clients connected to it, and
// helpers to move typed data in and out of byte strings.

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace cubed::integration {

// Starts one CPU daemon for all tests of a suite (with `Flags()`), stops it after them.
// Each test connects its own clients; a test that fails to start the daemon fails loudly with
// the daemon's log.
class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartDaemon({}); }
  static void TearDownTestSuite() { daemon_.reset(); }
  void SetUp() override { ASSERT_NE(daemon_, nullptr) << start_error_; }

  // Starts the suite's daemon with extra flags; call from a suite's own SetUpTestSuite.
  static void StartDaemon(std::vector<std::string> flags, bool tcp = false);
  // Connects a new client to the suite's daemon (Unix socket) or fails the test.
  static std::unique_ptr<Client> Connect(ClientOptions options = {});

  static testing::DaemonProcess& daemon() { return *daemon_; }

  static std::unique_ptr<testing::DaemonProcess> daemon_;
  static std::string start_error_;
};

// The outcome of a command whose errors may arrive late: `s` when it failed, else what the next
// Sync reports (on the session stream a failed execute or create is reported there).
inline absl::Status Settled(Client& client, absl::Status s) {
  if (!s.ok()) return s;
  return client.Sync().get();
}

// Bytes of a vector of trivially copyable values.
template <typename T>
std::vector<uint8_t> ToBytes(const std::vector<T>& values) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Values of a byte string; fails the test (and returns what fits) when the size is not a
// multiple of sizeof(T).
template <typename T>
std::vector<T> FromBytes(const std::string& bytes) {
  static_assert(std::is_trivially_copyable_v<T>);
  EXPECT_EQ(bytes.size() % sizeof(T), 0u) << "byte count not a multiple of the element size";
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

inline absl::Span<const uint8_t> AsSpan(const std::string& s) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// `n` random bytes from `rng`.
std::string RandomBytes(std::mt19937_64& rng, size_t n);

// Reads one tensor (densely packed) or fails the test.
std::string ReadTensorOrDie(Client& client, const Tensor& t);
// Reads one binding or fails the test.
std::string ReadOrDie(Client& client, const Binding& b);

// Product of a shape.
uint64_t NumElements(const std::vector<uint64_t>& shape);

}  // namespace cubed::integration
