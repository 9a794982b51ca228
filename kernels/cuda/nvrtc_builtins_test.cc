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

TEST(NvrtcBuiltinsTest, EveryBuiltinCompilesToCubinForSm90) {
  absl::StatusOr<const NvrtcApi*> api = NvrtcApi::Load();
  if (!api.ok()) GTEST_SKIP() << "NVRTC not available: " << api.status();
  absl::StatusOr<std::unique_ptr<CudaKernelCompiler>> compiler =
      CudaKernelCompiler::Create(CudaCompilerOptions{9, 0, "", 16});
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  EXPECT_EQ((*compiler)->target(), "sm_90");

  const auto start = std::chrono::steady_clock::now();
  std::set<std::string> names;
  for (const CudaBuiltinSignature& sig : CudaBuiltinSignatures()) {
    BuiltinCall call;
    call.name = sig.name;
    call.dtype = sig.dtype;
    call.out_dtype = sig.out_dtype;
    const std::string what =
        absl::StrCat(sig.name, "/", sig.num_buffers, " ", ElemTypeName(sig.dtype), "->",
                     ElemTypeName(sig.out_dtype));
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
    names.insert(sig.name);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "compiled " << CudaBuiltinPrograms().size() << " programs ("
            << CudaBuiltinSignatures().size() << " signatures) in " << seconds << " s with NVRTC "
            << (*api)->version_major << "." << (*api)->version_minor << "\n";
  // One NVRTC compilation per program, and every builtin the CPU library has is covered.
  EXPECT_EQ((*compiler)->misses(), CudaBuiltinPrograms().size());
  for (const std::string& name : BuiltinKernelNames()) EXPECT_TRUE(names.count(name)) << name;
}

}  // namespace
}  // namespace cubed::kernels
