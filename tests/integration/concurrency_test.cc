// Many clients at once: each sees only its own data, and many futures may be in flight.

#include <atomic>
#include <thread>

#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using ConcurrencyTest = DaemonTest;

TEST_F(ConcurrencyTest, EightClientsOnEightThreadsDoNotCrossTalk) {
  constexpr int kClients = 8;
  constexpr int kRounds = 20;
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      ClientOptions options;
      options.address = daemon().unix_address();
      options.timeout = absl::Seconds(30);
      auto client = Client::Connect(options);
      if (!client.ok()) {
        errors[c] = client.status().ToString();
        return;
      }
      std::mt19937_64 rng(100 + c);
      for (int round = 0; round < kRounds; ++round) {
        // Each client fills with its own value, adds its own random data and checks both.
        const uint64_t n = 1 + rng() % 5000;
        std::vector<int64_t> data(n);
        for (auto& v : data) v = static_cast<int64_t>(rng() % 1000000);
        auto x = (*client)->CreateTensor(ToBytes(data), {n}, 8);
        auto y = (*client)->EmptyTensor({n}, 8);
        auto z = (*client)->EmptyTensor({n}, 8);
        if (!x.ok() || !y.ok() || !z.ok()) {
          errors[c] = "create failed";
          return;
        }
        absl::Status s = (*client)->Execute(Builtin("fill", ElemType::kI64), {}, {*y},
                                            {ScalarOf(ElemType::kI64, c * 1000 + round)});
        if (s.ok()) s = (*client)->Execute(Builtin("add", ElemType::kI64), {*x, *y}, {*z});
        if (!s.ok()) {
          errors[c] = s.ToString();
          return;
        }
        auto out = (*client)->ReadTensor({*x, *z}).get();
        if (!out.ok()) {
          errors[c] = out.status().ToString();
          return;
        }
        auto back = FromBytes<int64_t>((*out)[0]);
        auto sum = FromBytes<int64_t>((*out)[1]);
        for (uint64_t i = 0; i < n; ++i) {
          if (back[i] != data[i] || sum[i] != data[i] + c * 1000 + round) {
            errors[c] = absl::StrCat("round ", round, " element ", i, ": got ", back[i], " / ",
                                     sum[i], ", want ", data[i], " / ", data[i] + c * 1000 + round);
            return;
          }
        }
      }
      absl::Status sync = (*client)->Sync().get();
      if (!sync.ok()) errors[c] = sync.ToString();
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(errors[c], "") << "client " << c;
}

TEST_F(ConcurrencyTest, OneClientSharedByThreadsWithManyFuturesInFlight) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr int kThreads = 4;
  constexpr int kReads = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint32_t> data(1000, static_cast<uint32_t>(t));
      auto h = client->Create(ToBytes(data));
      if (!h.ok()) {
        ++failures;
        return;
      }
      std::vector<std::future<absl::StatusOr<std::vector<std::string>>>> futures;
      for (int i = 0; i < kReads; ++i) futures.push_back(client->Read({*h}));
      std::vector<std::future<absl::Status>> syncs;
      for (int i = 0; i < 10; ++i) syncs.push_back(client->Sync());
      for (auto& f : futures) {
        auto r = f.get();
        if (!r.ok() || FromBytes<uint32_t>((*r)[0]) != data) ++failures;
      }
      for (auto& f : syncs) {
        if (!f.get().ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace cubed::integration
