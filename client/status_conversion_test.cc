#include "client/status_conversion.h"

#include "gtest/gtest.h"

namespace cubed {
namespace {

TEST(FromGrpcStatus, OkStaysOk) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "Create").ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(FromGrpcStatus, KeepsEveryCanonicalCode) {
  const std::pair<grpc::StatusCode, absl::StatusCode> pairs[] = {
      {grpc::StatusCode::CANCELLED, absl::StatusCode::kCancelled},
      {grpc::StatusCode::UNKNOWN, absl::StatusCode::kUnknown},
      {grpc::StatusCode::INVALID_ARGUMENT, absl::StatusCode::kInvalidArgument},
      {grpc::StatusCode::DEADLINE_EXCEEDED, absl::StatusCode::kDeadlineExceeded},
      {grpc::StatusCode::NOT_FOUND, absl::StatusCode::kNotFound},
      {grpc::StatusCode::ALREADY_EXISTS, absl::StatusCode::kAlreadyExists},
      {grpc::StatusCode::PERMISSION_DENIED, absl::StatusCode::kPermissionDenied},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StatusCode::kResourceExhausted},
      {grpc::StatusCode::FAILED_PRECONDITION, absl::StatusCode::kFailedPrecondition},
      {grpc::StatusCode::ABORTED, absl::StatusCode::kAborted},
      {grpc::StatusCode::OUT_OF_RANGE, absl::StatusCode::kOutOfRange},
      {grpc::StatusCode::UNIMPLEMENTED, absl::StatusCode::kUnimplemented},
      {grpc::StatusCode::INTERNAL, absl::StatusCode::kInternal},
      {grpc::StatusCode::UNAVAILABLE, absl::StatusCode::kUnavailable},
      {grpc::StatusCode::DATA_LOSS, absl::StatusCode::kDataLoss},
      {grpc::StatusCode::UNAUTHENTICATED, absl::StatusCode::kUnauthenticated},
  };
  for (const auto& [grpc_code, absl_code] : pairs) {
    absl::Status s = FromGrpcStatus(grpc::Status(grpc_code, "boom"));
    EXPECT_EQ(s.code(), absl_code) << "grpc code " << grpc_code;
    EXPECT_EQ(s.message(), "boom");
  }
}

TEST(FromGrpcStatus, PrefixesTheRpcName) {
  absl::Status s =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "handle 7 not found"), "Read");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "Read: handle 7 not found");
}

TEST(FromGrpcStatus, UnknownCodeBecomesUnknown) {
  // 20 is no gRPC code but lies inside the enum's range of values (42 would be UB to form).
  absl::Status s = FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "odd"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(s.message(), "odd");
}

}  // namespace
}  // namespace cubed
