#include "kernels/cuda/builtin_catalog.h"

#include <set>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "kernels/cuda/builtin_args.h"

namespace cubed::kernels {
namespace {

// The CUDA catalog supports exactly the (kernel, buffer count, dtype) triples the CPU library
// accepts: ValidateBuiltin checks name, buffer count and dtype before the metadata.
TEST(BuiltinCatalogTest, MatchesTheCpuLibrary) {
  for (const std::string& name : BuiltinKernelNames()) {
    for (size_t buffers = 1; buffers <= kMaxBuiltinBuffers; ++buffers) {
      for (ElemType t : kAllElemTypes) {
        BuiltinCall call;
        call.name = name;
        call.dtype = t;
        call.out_dtype = t;
        const absl::Status cpu = ValidateBuiltin(call, std::vector<uint64_t>(buffers, 0));
        const bool cpu_supports = !absl::StrContains(cpu.message(), "does not support dtype") &&
                                  !(absl::StrContains(cpu.message(), "' takes ") &&
                                    absl::StrContains(cpu.message(), " buffers ("));
        const bool cuda_supports = FindCudaBuiltin(name, buffers, t, t).ok();
        EXPECT_EQ(cpu_supports, cuda_supports)
            << name << " with " << buffers << " buffers, " << ElemTypeName(t) << ": " << cpu;
      }
    }
  }
  EXPECT_EQ(FindCudaBuiltin("nope", 2, ElemType::kF32, ElemType::kF32).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(BuiltinCatalogTest, ProgramsGroupUniqueExpressions) {
  std::set<std::string> names;
  size_t expressions = 0;
  for (const CudaBuiltinProgram& p : CudaBuiltinPrograms()) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_FALSE(p.expressions.empty()) << p.name;
    expressions += p.expressions.size();
  }
  // Every signature maps to an expression of its program.
  for (const CudaBuiltinSignature& s : CudaBuiltinSignatures()) {
    auto k = FindCudaBuiltin(s.name, s.num_buffers, s.dtype, s.out_dtype, s.index_dtype);
    ASSERT_TRUE(k.ok()) << k.status();
    const auto& exprs = CudaBuiltinPrograms()[k->program].expressions;
    EXPECT_NE(std::find(exprs.begin(), exprs.end(), k->expression), exprs.end()) << k->expression;
  }
  EXPECT_LE(expressions, CudaBuiltinSignatures().size());
}

// Gather compiles one kernel per element size and index type, and refuses other index types as
// validation does.
TEST(BuiltinCatalogTest, GatherTakesI32AndI64Indices) {
  std::set<std::string> expressions;
  for (ElemType t : kAllElemTypes) {
    for (ElemType index : {ElemType::kI32, ElemType::kI64}) {
      auto k = FindCudaBuiltin("gather", 3, t, t, index);
      ASSERT_TRUE(k.ok()) << k.status();
      expressions.insert(k->expression);
    }
  }
  EXPECT_EQ(expressions.size(), 8u);
  EXPECT_TRUE(expressions.count("cubed::GatherKernel<unsigned short, int>"));
  auto bad = FindCudaBuiltin("gather", 3, ElemType::kF32, ElemType::kF32, ElemType::kU32);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "index_dtype u32")) << bad.status();
}

}  // namespace
}  // namespace cubed::kernels
