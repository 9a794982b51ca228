// What the daemon logs at the default level (docs/operations.md, Logs): a line per session
// opened and closed, a line per failed call naming method, session and request id, and nothing
// per successful call.

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace cubed {
namespace {

using ::cubed::testing::DaemonProcess;

int CountLines(const std::string& log, absl::string_view needle) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) n += absl::StrContains(line, needle);
  return n;
}

TEST(Logs, SessionsAndFailuresOneLineEachSuccessesSilent) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stub = v1::Compute::NewStub(
      grpc::CreateChannel((*daemon)->unix_address(), grpc::InsecureChannelCredentials()));
  auto call = [&](auto method, const auto& req, auto* resp, const char* request_id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (request_id != nullptr) ctx.AddMetadata("x-request-id", request_id);
    grpc::Status s = ((*stub).*method)(&ctx, req, resp);
    auto it = ctx.GetServerTrailingMetadata().find("x-request-id");
    std::string echoed = it == ctx.GetServerTrailingMetadata().end()
                             ? ""
                             : std::string(it->second.data(), it->second.size());
    return std::make_pair(s, echoed);
  };

  v1::OpenSessionResponse opened;
  ASSERT_TRUE(
      call(&v1::Compute::Stub::OpenSession, v1::OpenSessionRequest(), &opened, nullptr).first.ok());
  const std::string sid = std::to_string(opened.session());
  v1::SyncRequest sync;
  sync.set_session(opened.session());
  v1::SyncResponse sync_resp;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(call(&v1::Compute::Stub::Sync, sync, &sync_resp, nullptr).first.ok());
  }
  v1::SyncRequest bad_sync;  // Unknown session.
  bad_sync.set_session(opened.session() + 1);
  auto [sync_status, echoed] = call(&v1::Compute::Stub::Sync, bad_sync, &sync_resp, "req-42");
  EXPECT_EQ(sync_status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(echoed, "req-42");
  v1::CreateRequest create;  // Unknown session, no request id: the daemon assigns one.
  create.set_session(opened.session() + 1);
  create.set_data("x");
  v1::CreateResponse create_resp;
  auto [create_status, assigned] = call(&v1::Compute::Stub::Create, create, &create_resp, nullptr);
  EXPECT_EQ(create_status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StartsWith(assigned, "d-")) << assigned;
  v1::CloseSessionRequest close;
  close.set_session(opened.session());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(call(&v1::Compute::Stub::CloseSession, close, &closed, nullptr).first.ok());

  absl::StatusOr<int> code = (*daemon)->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  const std::string log = (*daemon)->Log();
  EXPECT_EQ(CountLines(log, "session " + sid + " opened"), 1) << log;
  EXPECT_EQ(CountLines(log, "session " + sid + " closed"), 1) << log;
  EXPECT_EQ(CountLines(log, "request failed: method=/cubed.v1.Compute/Sync session=" +
                                std::to_string(opened.session() + 1) +
                                " request_id=req-42 code=NOT_FOUND"),
            1)
      << log;
  EXPECT_EQ(CountLines(log, "request failed: method=/cubed.v1.Compute/Create session=" +
                                std::to_string(opened.session() + 1) + " request_id=" + assigned +
                                " code=NOT_FOUND"),
            1)
      << log;
  // Two failures, two lines; the 20 successful Sync calls say nothing.
  EXPECT_EQ(CountLines(log, "request failed"), 2) << log;
  EXPECT_EQ(CountLines(log, "Sync"), 1) << log;
}

}  // namespace
}  // namespace cubed
