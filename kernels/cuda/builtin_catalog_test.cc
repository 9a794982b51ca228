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
    auto k = FindCudaBuiltin(s.name, s.num_buffers, s.dtype, s.out_dtype);
    ASSERT_TRUE(k.ok()) << k.status();
    const auto& exprs = CudaBuiltinPrograms()[k->program].expressions;
    EXPECT_NE(std::find(exprs.begin(), exprs.end(), k->expression), exprs.end()) << k->expression;
  }
  EXPECT_LE(expressions, CudaBuiltinSignatures().size());
}

}  // namespace
}  // namespace cubed::kernels
