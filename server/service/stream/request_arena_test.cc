#include "server/service/stream/request_arena.h"

#include <string>

#include "cubed/v1/session.pb.h"
#include "gtest/gtest.h"

namespace cubed {
namespace {

// A request of `n` executes, serialized (what a merged ring read parses).
std::string ExecutesRequest(int n) {
  v1::SessionRequest r;
  for (int i = 0; i < n; ++i) {
    v1::Command::Execute* e = r.add_commands()->mutable_execute();
    e->mutable_kernel()->mutable_builtin()->set_name("fill");
    e->mutable_count()->mutable_static_count()->set_x(1);
    e->mutable_bindings()->add_buffers()->set_handle(static_cast<uint64_t>(i) + 1);
    e->mutable_bindings()->add_metadata(1);
  }
  return r.SerializeAsString();
}

TEST(RequestArenaTest, ASteadyStreamOfRequestsReusesTheFirstBlock) {
  RequestArena arena;
  EXPECT_EQ(arena.first_block_bytes(), 0u);
  const std::string bytes = ExecutesRequest(256);
  auto* request = arena.Create<v1::SessionRequest>();
  ASSERT_TRUE(request->ParseFromString(bytes));
  EXPECT_EQ(request->commands_size(), 256);
  arena.Reset();  // Outgrown: the first block grows to what the request took.
  const size_t block = arena.first_block_bytes();
  EXPECT_GT(block, 0u);
  EXPECT_LE(block, RequestArena::kMaxFirstBlockBytes);
  for (int i = 0; i < 5; ++i) {
    request = arena.Create<v1::SessionRequest>();
    EXPECT_EQ(request->commands_size(), 0) << "a fresh request after Reset";
    ASSERT_TRUE(request->ParseFromString(bytes));
    EXPECT_EQ(request->commands_size(), 256);
    arena.Reset();
    EXPECT_EQ(arena.first_block_bytes(), block) << "the same request fits the block: no growth";
  }
}

TEST(RequestArenaTest, TheFirstBlockStopsGrowingAtItsLimit) {
  RequestArena arena;
  const std::string bytes = ExecutesRequest(4096);  // Far more than kMaxFirstBlockBytes parsed.
  for (int i = 0; i < 3; ++i) {
    auto* request = arena.Create<v1::SessionRequest>();
    ASSERT_TRUE(request->ParseFromString(bytes));
    EXPECT_EQ(request->commands_size(), 4096);
    arena.Reset();
    EXPECT_EQ(arena.first_block_bytes(), RequestArena::kMaxFirstBlockBytes);
  }
  auto* request = arena.Create<v1::SessionRequest>();
  ASSERT_TRUE(request->ParseFromString(ExecutesRequest(3)));
  EXPECT_EQ(request->commands(2).execute().bindings().buffers(0).handle(), 3u);
}

}  // namespace
}  // namespace cubed
