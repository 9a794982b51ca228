#include "tests/integration/integration_test.h"

#include "absl/strings/str_cat.h"

namespace cubed::integration {

std::unique_ptr<testing::DaemonProcess> DaemonTest::daemon_;
std::string DaemonTest::start_error_;

void DaemonTest::StartDaemon(std::vector<std::string> flags, bool tcp) {
  daemon_.reset();
  testing::DaemonProcess::Options options;
  options.flags = std::move(flags);
  options.tcp = tcp;
  auto d = testing::DaemonProcess::Start(options);
  if (!d.ok()) {
    start_error_ = absl::StrCat("daemon did not start: ", d.status().ToString());
    return;
  }
  daemon_ = std::move(*d);
}

std::unique_ptr<Client> DaemonTest::Connect(ClientOptions options) {
  if (daemon_ == nullptr) {
    ADD_FAILURE() << start_error_;
    return nullptr;
  }
  if (options.address.empty()) options.address = daemon_->unix_address();
  // Generous for a loaded CI machine, unless the test asks for its own.
  if (options.timeout == ClientOptions{}.timeout) options.timeout = absl::Seconds(30);
  auto client = Client::Connect(options);
  if (!client.ok()) {
    ADD_FAILURE() << "Connect: " << client.status() << "\ndaemon log:\n" << daemon_->Log();
    return nullptr;
  }
  return std::move(*client);
}

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

std::string ReadTensorOrDie(Client& client, const Tensor& t) {
  auto r = client.ReadTensor({t}).get();
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->size() != 1) return "";
  return std::move((*r)[0]);
}

std::string ReadOrDie(Client& client, const Binding& b) {
  auto r = client.Read({b}).get();
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->size() != 1) return "";
  return std::move((*r)[0]);
}

uint64_t NumElements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

}  // namespace cubed::integration
