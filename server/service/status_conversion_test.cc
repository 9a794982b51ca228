#include "server/service/status_conversion.h"

#include <gtest/gtest.h>

namespace cubed {
namespace {

TEST(StatusConversionTest, OkIsOk) { EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok()); }

TEST(StatusConversionTest, KeepsCodeAndMessage) {
  const struct {
    absl::Status in;
    grpc::StatusCode code;
  } rows[] = {
      {absl::InvalidArgumentError("bad shape"), grpc::StatusCode::INVALID_ARGUMENT},
      {absl::NotFoundError("no handle"), grpc::StatusCode::NOT_FOUND},
      {absl::FailedPreconditionError("no profile"), grpc::StatusCode::FAILED_PRECONDITION},
      {absl::ResourceExhaustedError("limit"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::PermissionDeniedError("unchecked"), grpc::StatusCode::PERMISSION_DENIED},
      {absl::UnimplementedError("cuda"), grpc::StatusCode::UNIMPLEMENTED},
      {absl::UnavailableError("lost"), grpc::StatusCode::UNAVAILABLE},
      {absl::InternalError("bug"), grpc::StatusCode::INTERNAL},
      {absl::UnauthenticatedError("token"), grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const auto& row : rows) {
    grpc::Status out = ToGrpcStatus(row.in);
    EXPECT_EQ(out.error_code(), row.code) << row.in;
    EXPECT_EQ(out.error_message(), std::string(row.in.message()));
  }
}

}  // namespace
}  // namespace cubed
