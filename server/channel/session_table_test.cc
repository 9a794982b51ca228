// SessionTable: ids, leases, ownership and the quotas an owner's sessions count against.

#include "server/channel/session_table.h"

#include <memory>

#include "gtest/gtest.h"

namespace cubed {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

PrincipalPtr Owner(const char* name, Quotas quotas = {}) {
  auto p = std::make_shared<Principal>();
  p->name = name;
  p->all_rpcs = true;
  p->quotas = quotas;
  return p;
}

TEST(SessionTableTest, IdsCarryTheDeviceAndSessionsGetTheirOwnMemoryOwner) {
  SessionTable table(3, absl::Seconds(60), absl::Hours(1));
  absl::StatusOr<Session*> a = table.Open(0, kT0, nullptr);
  absl::StatusOr<Session*> b = table.Open(0, kT0, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->id().value() & 0xff, 3u);
  EXPECT_NE((*a)->id(), (*b)->id());
  EXPECT_NE((*a)->id().value() >> 8, 0u);
  EXPECT_NE((*a)->memory_owner(), (*b)->memory_owner());
  EXPECT_GE((*a)->memory_owner(), kFirstSessionOwner);
  EXPECT_EQ((*a)->lease(), absl::Seconds(60));
  EXPECT_EQ(table.size(), 2u);
}

TEST(SessionTableTest, LeasesOutsideTheirBoundsNameTheValueSent) {
  SessionTable table(0, absl::Seconds(60), absl::Hours(1));
  absl::StatusOr<Session*> s = table.Open(~uint64_t{0}, kT0, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("18446744073709551615"), absl::string_view::npos);
  EXPECT_EQ(table.size(), 0u);
  absl::StatusOr<Session*> longest = table.Open(3600 * 1000, kT0, nullptr);
  ASSERT_TRUE(longest.ok());
  EXPECT_EQ((*longest)->lease(), absl::Hours(1));
}

TEST(SessionTableTest, FindRenewsTheLeaseAndExpiredListsWhatPassed) {
  SessionTable table(0, absl::Seconds(10), absl::Hours(1));
  const SessionId a = (*table.Open(0, kT0, nullptr))->id();
  const SessionId b = (*table.Open(0, kT0, nullptr))->id();
  EXPECT_EQ(table.NextExpiry(), kT0 + absl::Seconds(10));
  ASSERT_TRUE(table.Find(a, kT0 + absl::Seconds(8)).ok());  // a's lease now runs to t0 + 18 s.
  EXPECT_EQ(table.Expired(kT0 + absl::Seconds(12)), std::vector<SessionId>{b});
  EXPECT_EQ(table.Find(SessionId(12345), kT0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.Get(SessionId(12345)), nullptr);
  std::unique_ptr<Session> removed = table.Remove(b);
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->id(), b);
  EXPECT_EQ(table.Remove(b), nullptr);
  EXPECT_EQ(table.NextExpiry(), kT0 + absl::Seconds(18));
}

TEST(SessionTableTest, OwnershipIsByPrincipal) {
  SessionTable table(0, absl::Seconds(60), absl::Hours(1));
  const PrincipalPtr alice = Owner("alice"), bob = Owner("bob");
  const SessionId a = (*table.Open(0, kT0, alice))->id();
  EXPECT_TRUE(table.IsOwnedBy(a, alice.get()));
  EXPECT_FALSE(table.IsOwnedBy(a, bob.get()));
  EXPECT_FALSE(table.IsOwnedBy(a, nullptr));
  EXPECT_FALSE(table.IsOwnedBy(SessionId(a.value() + 256), alice.get()));
}

TEST(SessionTableTest, QuotasCountEveryOpenSessionOfTheOwnerUntilRemoved) {
  Quotas q;
  q.max_sessions = 2;
  q.max_bytes = 100;
  q.max_session_handles = 2;
  SessionTable table(0, absl::Seconds(60), absl::Hours(1));
  const PrincipalPtr alice = Owner("alice", q);
  Session* a = *table.Open(0, kT0, alice);
  Session* b = *table.Open(0, kT0, alice);
  absl::StatusOr<Session*> third = table.Open(0, kT0, alice);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("max_sessions"), absl::string_view::npos);

  EXPECT_TRUE(table.CheckQuota(*a, 60).ok());
  table.Account(*a, 60, +1);
  a->AddHandle(SliceId{1}, 60);
  // 60 held over the owner's sessions: 41 more would pass max_bytes, also from session b.
  EXPECT_EQ(table.CheckQuota(*b, 41).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(table.CheckQuota(*b, 40).ok());
  table.Account(*a, 10, +1);
  a->AddHandle(SliceId{2}, 10);
  EXPECT_NE(table.CheckQuota(*a, 1).message().find("max_session_handles"), absl::string_view::npos);

  // Removing a session takes its handles and bytes out of the owner's counts.
  const SessionId a_id = a->id();
  table.Remove(a_id);
  EXPECT_TRUE(table.CheckQuota(*b, 100).ok());
  EXPECT_TRUE(table.Open(0, kT0, alice).ok());  // A second session again.
}

}  // namespace
}  // namespace cubed
