// The NVRTC CI test: every builtin kernel, for every dtype (and cast pair), compiles to a CUBIN
// for sm_90 with an entry point in it. Needs NVRTC, not a GPU.

#include <chrono>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/cuda/nvrtc_api.h"
#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "kernels/cuda/builtin_catalog.h"
#include "kernels/cuda/cuda_kernels.h"

namespace cubed::kernels {
namespace {

// The programs are compiled in kShards test cases, so that ctest runs them in parallel (NVRTC
// takes ~100 s for all of them on one core): shard k compiles the programs whose index is k
// modulo kShards, each exactly once.
constexpr size_t kShards = 4;

class NvrtcBuiltinsTest : public ::testing::TestWithParam<size_t> {};

TEST_P(NvrtcBuiltinsTest, EveryBuiltinOfTheShardCompilesToCubinForSm90) {
  const size_t shard = GetParam();
  absl::StatusOr<const NvrtcApi*> api = NvrtcApi::Load();
  if (!api.ok()) GTEST_SKIP() << "NVRTC not available: " << api.status();
  absl::StatusOr<std::unique_ptr<CudaKernelCompiler>> compiler =
      CudaKernelCompiler::Create(CudaCompilerOptions{9, 0, "", 16, {}});
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  EXPECT_EQ((*compiler)->target(), "sm_90");

  const auto start = std::chrono::steady_clock::now();
  std::set<size_t> programs;
  size_t signatures = 0;
  for (const CudaBuiltinSignature& sig : CudaBuiltinSignatures()) {
    absl::StatusOr<CudaBuiltinKernel> found =
        FindCudaBuiltin(sig.name, sig.num_buffers, sig.dtype, sig.out_dtype, sig.index_dtype);
    ASSERT_TRUE(found.ok()) << sig.name << ": " << found.status();
    if (found->program % kShards != shard) continue;
    programs.insert(found->program);
    ++signatures;
    BuiltinCall call;
    call.name = sig.name;
    call.dtype = sig.dtype;
    call.out_dtype = sig.out_dtype;
    call.index_dtype = sig.index_dtype;
    const std::string what =
        absl::StrCat(sig.name, "/", sig.num_buffers, " ", ElemTypeName(sig.dtype), "->",
                     ElemTypeName(sig.out_dtype), " indices ", ElemTypeName(sig.index_dtype));
    absl::StatusOr<const CompiledCudaKernel*> k = (*compiler)->Builtin(call, sig.num_buffers);
    ASSERT_TRUE(k.ok()) << what << ": " << k.status();
    EXPECT_TRUE((*k)->is_cubin) << what;
    ASSERT_GT((*k)->image.size(), 4u) << what;
    EXPECT_EQ((*k)->image.substr(0, 4),
              "\x7f"
              "ELF")
        << what;
    ASSERT_FALSE((*k)->entry_point.empty()) << what;
    // The ELF symbol table names the kernel.
    EXPECT_NE((*k)->image.find((*k)->entry_point + '\0'), std::string::npos)
        << what << ": " << (*k)->entry_point;
    EXPECT_EQ((*k)->cache_key.size(), 64u) << what;
    EXPECT_EQ((*k)->log, "") << what << ": NVRTC warnings";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "shard " << shard << ": compiled " << programs.size() << " programs (" << signatures
            << " signatures) in " << seconds << " s with NVRTC " << (*api)->version_major << "."
            << (*api)->version_minor << "\n";
  // One NVRTC compilation per program.
  EXPECT_EQ((*compiler)->misses(), programs.size());
}

INSTANTIATE_TEST_SUITE_P(Shards, NvrtcBuiltinsTest, ::testing::Range<size_t>(0, kShards));

// Every builtin the CPU library has has a CUDA signature (so a shard compiles it), and every
// program holds one.
TEST(NvrtcBuiltinsCoverageTest, EveryBuiltinAndProgramHasASignature) {
  std::set<std::string> names;
  std::set<size_t> programs;
  for (const CudaBuiltinSignature& sig : CudaBuiltinSignatures()) {
    names.insert(sig.name);
    absl::StatusOr<CudaBuiltinKernel> found =
        FindCudaBuiltin(sig.name, sig.num_buffers, sig.dtype, sig.out_dtype, sig.index_dtype);
    ASSERT_TRUE(found.ok()) << sig.name << ": " << found.status();
    programs.insert(found->program);
  }
  for (const std::string& name : BuiltinKernelNames()) EXPECT_TRUE(names.count(name)) << name;
  EXPECT_EQ(programs.size(), CudaBuiltinPrograms().size());
}

}  // namespace
}  // namespace cubed::kernels
