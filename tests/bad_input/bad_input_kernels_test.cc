// Bad input about Execute (rows of docs/error-model.md): each test first runs a valid `add`, then
// breaks one thing: an unknown kernel, the wrong number of bindings, an unsupported or unspecified
// dtype, a reduction whose layout claims more data than its buffer holds, a zero, oversized or
// too-small dynamic cube count, the unchecked execution mode; also a profile ended before it was
// started, and CUDA source or PTX sent to the CPU backend. Each leaves MemoryUsage as it was.

#include <chrono>
#include <cstdint>
#include <string>

#include "common/kernel_metadata.h"
#include "tests/bad_input/bad_input_fixture.h"
#include "tests/testing/daemon_process.h"

namespace cubed::bad_input {
namespace {

TEST_F(BadInputTest, UnknownKernel) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_kernel()->mutable_builtin()->set_name("no_such_kernel");
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::NOT_FOUND, {"no_such_kernel"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, WrongBindingCountForAdd) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_bindings()->mutable_buffers()->RemoveLast();
  const cubed::TensorLayout layout = cubed::TensorLayout::Contiguous({4});
  auto metadata = cubed::EncodeKernelMetadata({4, 4}, {layout, layout});
  ASSERT_TRUE(metadata.ok());
  req.mutable_bindings()->clear_metadata();
  for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"add", "3"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, UnsupportedDtype) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_bindings()->mutable_buffers()->RemoveLast();  // exp: one input, one output
  const cubed::TensorLayout layout = cubed::TensorLayout::Contiguous({4});
  auto metadata = cubed::EncodeKernelMetadata({4, 4}, {layout, layout});
  ASSERT_TRUE(metadata.ok());
  req.mutable_bindings()->clear_metadata();
  for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
  req.mutable_kernel()->mutable_builtin()->set_name("exp");
  req.mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_I32);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"exp", "i32"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ElemTypeUnspecified) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_UNSPECIFIED);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"dtype"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, BroadcastReductionOverItsData) {
  // docs/security.md, "Fuzzing": `sum` over [100000000] elements that stride 0 makes of one f32.
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_bindings()->mutable_buffers()->RemoveLast();  // sum: in (a 16-byte handle), out
  req.mutable_kernel()->mutable_builtin()->set_name("sum");
  cubed::TensorLayout in = cubed::TensorLayout::Contiguous({100000000});
  in.strides[0] = 0;
  auto metadata = cubed::EncodeKernelMetadata({4, 4}, {in, cubed::TensorLayout::Contiguous({1})});
  ASSERT_TRUE(metadata.ok());
  req.mutable_bindings()->clear_metadata();
  for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
  SnapshotUsage();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT,
                    {"sum", "buffer 0 (in)", "strides [0]", "claims 100000000", "holds 4"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));  // Not run.
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ZeroCubeCount) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_count()->mutable_static_count()->set_x(0);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"count"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, OversizedCubeCount) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_count()->mutable_static_count()->set_x(uint32_t{1} << 31);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"count", "2147483648"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, DynamicCubeCountBindingTooSmall) {
  ExpectValidAddRuns();
  const uint64_t small = Create(session_, std::string(8, '\1'));  // 8 < 12 bytes
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_count()->mutable_dynamic()->set_handle(small);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"12"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, UncheckedModeNotAllowed) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.set_mode(v1::EXECUTION_MODE_UNCHECKED);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::PERMISSION_DENIED, {"unchecked"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, EndProfileWithoutStart) {
  SnapshotUsage();
  v1::EndProfileRequest req;
  req.set_session(session_);
  v1::EndProfileResponse resp;
  EXPECT_TRUE(Fails(stub_->EndProfile(Context().get(), req, &resp), grpc::FAILED_PRECONDITION,
                    {"profile"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, CudaSourceOnCpu) {
  if (cubed::testing::TestBackend() != "cpu")
    GTEST_SKIP() << "a row of the cpu backend: cuda runs client kernels";
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  v1::CudaSourceKernel* k = req.mutable_kernel()->mutable_cuda_source();
  k->set_source("extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }");
  k->set_entry_point("k");
  k->mutable_cube_dim()->set_x(4);
  k->mutable_cube_dim()->set_y(1);
  k->mutable_cube_dim()->set_z(1);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::UNIMPLEMENTED, {"cuda"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, PtxOnCpu) {
  if (cubed::testing::TestBackend() != "cpu")
    GTEST_SKIP() << "a row of the cpu backend: cuda runs client kernels";
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  v1::PtxKernel* k = req.mutable_kernel()->mutable_ptx();
  k->set_ptx(".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k() { ret; }\n");
  k->set_entry_point("k");
  k->mutable_cube_dim()->set_x(1);
  k->mutable_cube_dim()->set_y(1);
  k->mutable_cube_dim()->set_z(1);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::UNIMPLEMENTED, {"ptx"}));
  ExpectUsageUnchanged();
}

}  // namespace
}  // namespace cubed::bad_input
