#include "server/service/request_conversion.h"

#include <gtest/gtest.h>

namespace cubed {
namespace {

void ExpectInvalid(const absl::Status& s, absl::string_view names) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
}

TEST(CheckTensorShapeTest, AcceptsOrdinaryShapes) {
  EXPECT_EQ(*CheckTensorShape({2, 3}, 4, "t"), 24u);
  EXPECT_EQ(*CheckTensorShape({1}, 8, "t"), 8u);
}

TEST(CheckTensorShapeTest, RejectsBadShapes) {
  ExpectInvalid(CheckTensorShape({}, 4, "t").status(), "t.shape");
  ExpectInvalid(CheckTensorShape({1, 1, 1, 1, 1, 1, 1, 1, 1}, 4, "t").status(), "1 .. 8");
  ExpectInvalid(CheckTensorShape({2, 0}, 4, "t").status(), "shape[1] is 0");
  ExpectInvalid(CheckTensorShape({2}, 0, "t").status(), "elem_size");
  ExpectInvalid(CheckTensorShape({2}, 17, "t").status(), "elem_size");
  ExpectInvalid(CheckTensorShape({uint64_t{1} << 32, uint64_t{1} << 32, 16}, 4, "t").status(),
                "overflows");
}

TEST(CheckCreateTensorTest, DataLengthMustMatchShape) {
  v1::CreateTensorRequest req;
  req.add_shape(2);
  req.add_shape(3);
  req.set_elem_size(4);
  req.set_data(std::string(23, 'x'));
  ExpectInvalid(CheckCreateTensor(req), "23 bytes given");
  req.set_data(std::string(24, 'x'));
  EXPECT_TRUE(CheckCreateTensor(req).ok());
}

v1::ExecuteRequest AddRequest() {
  v1::ExecuteRequest req;
  req.mutable_kernel()->mutable_builtin()->set_name("add");
  req.mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_F32);
  req.mutable_count()->mutable_static_count()->set_x(1);
  req.mutable_count()->mutable_static_count()->set_y(1);
  req.mutable_count()->mutable_static_count()->set_z(1);
  return req;
}

TEST(ToExecuteCommandTest, ConvertsBuiltinWithScalars) {
  v1::ExecuteRequest req = AddRequest();
  v1::ScalarGroup* g = req.mutable_bindings()->add_scalars();
  g->set_elem(v1::ELEM_TYPE_I32);
  g->add_ints(-7);
  g->add_ints(9);
  absl::StatusOr<ExecuteCommand> c = ToExecuteCommand(req, RequestLimits{});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->kernel.builtin.scalars.size(), 1u);
  const kernels::ScalarBytes& bytes = c->kernel.builtin.scalars[0].bytes;
  ASSERT_EQ(bytes.size(), 8u);
  int32_t first;
  std::memcpy(&first, bytes.data(), 4);
  EXPECT_EQ(first, -7);
  EXPECT_EQ(c->kernel.builtin.out_dtype, ElemType::kF32);
}

// index_dtype defaults to i64 and passes through otherwise; the kernel's validation decides
// which types it takes.
TEST(ToExecuteCommandTest, ConvertsGatherIndexDtype) {
  v1::ExecuteRequest req = AddRequest();
  req.mutable_kernel()->mutable_builtin()->set_name("gather");
  req.mutable_kernel()->mutable_builtin()->set_axis(1);
  absl::StatusOr<ExecuteCommand> c = ToExecuteCommand(req, RequestLimits{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kernel.builtin.index_dtype, ElemType::kI64);
  EXPECT_EQ(c->kernel.builtin.axis, 1u);
  req.mutable_kernel()->mutable_builtin()->set_index_dtype(v1::ELEM_TYPE_I32);
  c = ToExecuteCommand(req, RequestLimits{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kernel.builtin.index_dtype, ElemType::kI32);
  req.mutable_kernel()->mutable_builtin()->set_index_dtype(static_cast<v1::ElemType>(99));
  ExpectInvalid(ToExecuteCommand(req, RequestLimits{}).status(), "kernel.builtin.index_dtype");
}

TEST(ToExecuteCommandTest, RejectsMalformedRequests) {
  RequestLimits limits;
  {
    v1::ExecuteRequest req = AddRequest();
    req.clear_kernel();
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "kernel: no kernel set");
  }
  {
    v1::ExecuteRequest req = AddRequest();
    req.clear_count();
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "count");
  }
  {
    v1::ExecuteRequest req = AddRequest();
    req.mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_UNSPECIFIED);
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "kernel.builtin.dtype");
  }
  {
    v1::ExecuteRequest req = AddRequest();
    req.set_mode(static_cast<v1::ExecutionMode>(42));
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "mode");
  }
  {
    v1::ExecuteRequest req = AddRequest();
    v1::ScalarGroup* g = req.mutable_bindings()->add_scalars();
    g->set_elem(v1::ELEM_TYPE_I32);
    g->add_ints(int64_t{1} << 40);
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "does not fit in i32");
  }
  {
    v1::ExecuteRequest req = AddRequest();
    v1::ScalarGroup* g = req.mutable_bindings()->add_scalars();
    g->set_elem(v1::ELEM_TYPE_F32);
    g->add_ints(3);
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "floats");
  }
  {
    v1::ExecuteRequest req = AddRequest();
    for (int i = 0; i < 2; ++i) {
      v1::ScalarGroup* g = req.mutable_bindings()->add_scalars();
      g->set_elem(v1::ELEM_TYPE_F64);
      g->add_floats(1.0);
    }
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "second group");
  }
  {
    // The types added after the first five (wire values up to 12) are checked the same way.
    v1::ExecuteRequest req = AddRequest();
    for (v1::ElemType elem : {v1::ELEM_TYPE_BOOL, v1::ELEM_TYPE_U16, v1::ELEM_TYPE_BOOL}) {
      v1::ScalarGroup* g = req.mutable_bindings()->add_scalars();
      g->set_elem(elem);
      g->add_uints(1);
    }
    ExpectInvalid(ToExecuteCommand(req, limits).status(),
                  "bindings.scalars[2]: a second group of bool");
  }
  {
    v1::ExecuteRequest req = AddRequest();
    for (uint32_t i = 0; i <= limits.max_buffers; ++i) req.mutable_bindings()->add_buffers();
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "bindings.buffers");
  }
  {
    v1::ExecuteRequest req;
    req.mutable_kernel()->mutable_cuda_source()->set_source("__global__ void k() {}");
    req.mutable_count()->mutable_static_count()->set_x(1);
    ExpectInvalid(ToExecuteCommand(req, limits).status(), "entry_point");
  }
}

TEST(ToTensorRefsTest, StridesMustMatchRank) {
  v1::ReadTensorRequest req;
  v1::BindingWithMeta* b = req.add_bindings();
  b->add_shape(2);
  b->add_shape(2);
  b->add_strides(2);
  b->set_elem_size(4);
  ExpectInvalid(ToTensorRefs(req, RequestLimits{}).status(), "strides");
  ExpectInvalid(ToTensorRefs(v1::ReadTensorRequest(), RequestLimits{}).status(), "bindings");
}

}  // namespace
}  // namespace cubed

namespace cubed {
namespace {

TEST(ToImportCommandTest, TakesEitherSourceAndRefusesNone) {
  v1::ImportMemoryRequest r;
  absl::StatusOr<ImportCommand> none = ToImportCommand(r);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("neither cuda_ipc nor region"), std::string::npos);

  r.mutable_region()->set_region(7);
  r.mutable_region()->set_offset(64);
  r.mutable_region()->set_size(128);
  absl::StatusOr<ImportCommand> region = ToImportCommand(r);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_TRUE(region->from_region);
  EXPECT_EQ(region->region.region, RegionId(7));
  EXPECT_EQ(region->region.offset, 64u);
  EXPECT_EQ(region->region.size, 128u);

  r.mutable_cuda_ipc()->set_ipc_handle(std::string(64, '\x01'));  // Replaces the region.
  r.mutable_cuda_ipc()->set_offset(256);
  r.mutable_cuda_ipc()->set_size(4096);
  r.mutable_cuda_ipc()->set_device_uuid("GPU-1");
  absl::StatusOr<ImportCommand> ipc = ToImportCommand(r);
  ASSERT_TRUE(ipc.ok()) << ipc.status();
  EXPECT_FALSE(ipc->from_region);
  EXPECT_EQ(ipc->ipc_handle, std::string(64, '\x01'));
  EXPECT_EQ(ipc->offset, 256u);
  EXPECT_EQ(ipc->size, 4096u);
  EXPECT_EQ(ipc->device_uuid, "GPU-1");
}

}  // namespace
}  // namespace cubed
