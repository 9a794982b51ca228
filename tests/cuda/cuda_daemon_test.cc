// The real `cubed` binary with the CUDA backend, as a subprocess: start-up without a device, and
// device loss (which must happen in another process: a lost context is lost for the process).

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "cubed/v1/compute.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/compute/cuda/cuda_test_util.h"
#include "tests/testing/daemon_process.h"

namespace cubed {
namespace {

using ::cubed::testing::DaemonProcess;
using ::testing::AnyOf;
using ::testing::HasSubstr;

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
}

TEST(CudaDaemonTest, CudaBackendWithoutAUsableDeviceExitsSayingWhy) {
  const bool present = testing_cuda::CudaDevicePresent();
  DaemonProcess::Options options;
  options.flags = {"--backend=cuda"};
  if (present) options.flags.push_back("--device=99");  // Past the last device.
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_FALSE(daemon.ok()) << "cubed --backend=cuda served without a usable device";
  const std::string message(daemon.status().message());
  EXPECT_THAT(message, HasSubstr("exited before it served"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("(status 0)")));
  EXPECT_THAT(message, HasSubstr("FAILED_PRECONDITION: --backend=cuda: "));
  if (present) {
    EXPECT_THAT(message, HasSubstr("--device=99: this machine has"));
  } else {
    EXPECT_THAT(message, AnyOf(HasSubstr("cannot load the CUDA driver library libcuda.so.1"),
                               HasSubstr("no CUDA device"), HasSubstr("stub library"),
                               HasSubstr("no cuda backend")));
  }
}

TEST(CudaDaemonTest, AutoPicksCudaWhenPresentElseTheCpu) {
  DaemonProcess::Options options;
  options.flags = {"--backend=auto"};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stub = v1::Compute::NewStub(
      grpc::CreateChannel((*daemon)->unix_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::GetInfoRequest request;
  v1::GetInfoResponse response;
  ASSERT_TRUE(stub->GetInfo(&ctx, request, &response).ok());
  EXPECT_EQ(response.info().backend(), testing_cuda::CudaDevicePresent()
                                           ? v1::DeviceInfo::BACKEND_CUDA
                                           : v1::DeviceInfo::BACKEND_CPU)
      << (*daemon)->Log();
}

TEST(CudaDaemonTest, DeviceLostFailsCallsTurnsHealthNotServingAndExitsNonZero) {
  CUBED_SKIP_WITHOUT_CUDA();
  DaemonProcess::Options options;
  options.flags = {"--backend=cuda", "--allow_unchecked"};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto channel = grpc::CreateChannel((*daemon)->unix_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Compute::NewStub(channel);

  uint64_t session = 0, handle = 0;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::OpenSessionRequest request;
    v1::OpenSessionResponse response;
    ASSERT_TRUE(stub->OpenSession(&ctx, request, &response).ok());
    session = response.session();
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::EmptyRequest request;
    request.set_session(session);
    request.set_size(4);
    v1::EmptyResponse response;
    ASSERT_TRUE(stub->Empty(&ctx, request, &response).ok());
    handle = response.handle();
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::ExecuteRequest request;
    request.set_session(session);
    request.set_mode(v1::EXECUTION_MODE_UNCHECKED);
    v1::CudaSourceKernel* k = request.mutable_kernel()->mutable_cuda_source();
    k->set_source(R"(
extern "C" __global__ void oob(volatile float* p, const unsigned int* metadata) {
  p[1ull << 40] = 1.0f;  // 4 TiB past a 4-byte buffer.
})");
    k->set_entry_point("oob");
    k->mutable_cube_dim()->set_x(1);
    k->mutable_cube_dim()->set_y(1);
    k->mutable_cube_dim()->set_z(1);
    v1::CubeCount::Static* count = request.mutable_count()->mutable_static_count();
    count->set_x(1);
    count->set_y(1);
    count->set_z(1);
    request.mutable_bindings()->add_buffers()->set_handle(handle);
    v1::ExecuteResponse response;
    grpc::Status s = stub->Execute(&ctx, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << (*daemon)->Log();
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::SyncRequest request;
    request.set_session(session);
    v1::SyncResponse response;
    grpc::Status s = stub->Sync(&ctx, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("device lost: "));
  }
  {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status s = health->Check(&ctx, request, &response);
    if (s.ok()) {
      EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    } else {  // Already gone: that is the exit we wait for below.
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    }
  }
  absl::StatusOr<int> exit_code = (*daemon)->Stop(0, absl::Seconds(20));  // Signal 0: just wait.
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << (*daemon)->Log();
  EXPECT_NE(*exit_code, 0);
  EXPECT_THAT((*daemon)->Log(), HasSubstr("device lost"));
}

}  // namespace
}  // namespace cubed
