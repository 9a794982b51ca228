#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/cuda/nvrtc_api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"

namespace cubed::kernels {
namespace {

using ::testing::HasSubstr;

constexpr char kScale[] = R"(
extern "C" __global__ void scale(float* x, unsigned n, float a) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
template <typename T>
__global__ void twice(T* x) { x[threadIdx.x] *= T(2); }
)";

class CudaCompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NvrtcApi::Load().ok())
      GTEST_SKIP() << "NVRTC not available: " << NvrtcApi::Load().status();
  }

  static std::unique_ptr<CudaKernelCompiler> Make(std::string cache_dir = "", size_t entries = 16,
                                                  int major = 9, int minor = 0) {
    auto c = CudaKernelCompiler::Create(CudaCompilerOptions{major, minor, cache_dir, entries, {}});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  static std::string TempDir() {
    std::string dir = testing::TempDir() + "/cuda_compiler_XXXXXX";
    EXPECT_NE(mkdtemp(dir.data()), nullptr);
    return dir;
  }

  static std::vector<std::string> Files(const std::string& dir) {
    std::vector<std::string> files;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') files.push_back(dir + "/" + e->d_name);
      }
      closedir(d);
    }
    return files;
  }
};

TEST_F(CudaCompilerTest, CompilesClientCudaSource) {
  auto c = Make();
  auto k = c->Client(kScale, "scale", {}, false);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE((*k)->is_cubin);
  EXPECT_EQ((*k)->entry_point, "scale");
  EXPECT_EQ((*k)->image.substr(0, 4),
            "\x7f"
            "ELF");
  auto t = c->Client(kScale, "twice<double>", {}, false);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->entry_point, HasSubstr("twice"));
  EXPECT_NE((*t)->entry_point, "twice<double>");  // Lowered (mangled).
  EXPECT_EQ(c->misses(), 2u);
}

TEST_F(CudaCompilerTest, SyntaxErrorIsInvalidArgumentWithTheLog) {
  auto c = Make();
  auto k = c->Client("__global__ void f(int* x) { x[0] = 1 }", "f", {}, false);
  ASSERT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
  EXPECT_THAT(k.status().message(), HasSubstr("error"));
  EXPECT_THAT(k.status().message(), HasSubstr("expected a \";\""));
}

TEST_F(CudaCompilerTest, UnknownEntryIsInvalidArgument) {
  auto c = Make();
  auto k = c->Client(kScale, "nope", {}, false);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
}

TEST_F(CudaCompilerTest, OptionsOutsideTheAllowlistAreRefused) {
  auto c = Make();
  for (const char* bad : {"-I/etc", "--gpu-architecture=sm_80", "--create-pch=/tmp/x", "-D"}) {
    const std::vector<std::string> options = {bad};
    auto k = c->Client(kScale, "scale", options, false);
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(k.status().message(), HasSubstr("not allowed")) << bad;
  }
  const std::vector<std::string> good = {"-DSCALE=2", "--use_fast_math", "-lineinfo"};
  auto k = c->Client(kScale, "scale", good, false);
  EXPECT_TRUE(k.ok()) << k.status();
}

TEST_F(CudaCompilerTest, MemoryCacheHitsAndEvictsLeastRecentlyUsed) {
  auto c = Make("", /*entries=*/1);
  auto a = c->Client(kScale, "scale", {}, false);
  ASSERT_TRUE(a.ok());
  auto again = c->Client(kScale, "scale", {}, false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*a, *again);
  EXPECT_EQ(c->hits(), 1u);
  EXPECT_EQ(c->misses(), 1u);
  ASSERT_TRUE(c->Client(kScale, "twice<float>", {}, false).ok());  // Evicts "scale".
  ASSERT_TRUE(c->Client(kScale, "scale", {}, false).ok());
  EXPECT_EQ(c->misses(), 3u);
}

TEST_F(CudaCompilerTest, PtxPassesThroughWithItsEntryChecked) {
  auto c = Make();
  const std::string ptx =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .entry noop()\n{\n  ret;\n}\n";
  auto k = c->Client(ptx, "noop", {}, true);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE((*k)->is_cubin);
  EXPECT_EQ((*k)->image, ptx + std::string(1, '\0'));
  EXPECT_EQ((*k)->entry_point, "noop");
  EXPECT_EQ(c->Client(ptx, "no", {}, true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Client(ptx, "noop", {"-DX"}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaCompilerTest, BuiltinErrors) {
  auto c = Make();
  BuiltinCall call;
  call.name = "nope";
  EXPECT_EQ(c->Builtin(call, 2).status().code(), absl::StatusCode::kNotFound);
  call.name = "exp";
  call.dtype = ElemType::kI32;
  EXPECT_EQ(c->Builtin(call, 2).status().code(), absl::StatusCode::kInvalidArgument);
  call.dtype = ElemType::kF32;
  EXPECT_EQ(c->Builtin(call, 3).status().code(), absl::StatusCode::kInvalidArgument);
  call.name = "cast";
  call.out_dtype = ElemType::kI64;
  auto k = c->Builtin(call, 2);
  ASSERT_TRUE(k.ok()) << k.status();
  auto again = c->Builtin(call, 2);
  EXPECT_EQ(*k, *again);
  EXPECT_EQ(c->hits(), 1u);
}

TEST_F(CudaCompilerTest, DiskCacheSurvivesARestartAndIgnoresCorruptFiles) {
  const std::string dir = TempDir() + "/cache";
  BuiltinCall fill;
  fill.name = "fill";
  fill.dtype = ElemType::kI32;
  std::string client_image, builtin_image;
  {
    auto c = Make(dir);
    auto k = c->Client(kScale, "scale", {}, false);
    auto b = c->Builtin(fill, 1);
    ASSERT_TRUE(k.ok() && b.ok());
    client_image = (*k)->image;
    builtin_image = (*b)->image;
    EXPECT_EQ(c->misses(), 2u);
    EXPECT_EQ(c->disk_hits(), 0u);
  }
  ASSERT_EQ(Files(dir).size(), 2u);
  {
    auto c = Make(dir);
    auto k = c->Client(kScale, "scale", {}, false);
    auto b = c->Builtin(fill, 1);
    ASSERT_TRUE(k.ok() && b.ok());
    EXPECT_EQ((*k)->image, client_image);
    EXPECT_EQ((*b)->image, builtin_image);
    EXPECT_EQ((*k)->entry_point, "scale");
    EXPECT_EQ(c->disk_hits(), 2u);
    EXPECT_EQ(c->misses(), 0u);
  }
  // Truncate every record: each is recompiled, and rewritten whole.
  for (const std::string& f : Files(dir)) ASSERT_EQ(truncate(f.c_str(), 100), 0) << f;
  {
    auto c = Make(dir);
    ASSERT_TRUE(c->Client(kScale, "scale", {}, false).ok());
    ASSERT_TRUE(c->Builtin(fill, 1).ok());
    EXPECT_EQ(c->disk_hits(), 0u);
    EXPECT_EQ(c->misses(), 2u);
  }
  {
    auto c = Make(dir);
    ASSERT_TRUE(c->Client(kScale, "scale", {}, false).ok());
    EXPECT_EQ(c->disk_hits(), 1u);
    EXPECT_EQ(c->misses(), 0u);
  }
  EXPECT_EQ(Files(dir).size(), 2u);  // No temporary files left behind.
}

// Issue 15's drill: a cache directory that cannot be made, or a disk that fills while a record
// is written, costs recompiles and a warning (on_cache_write_error), never a failed compile, a
// damaged record or a temporary file left behind.
TEST_F(CudaCompilerTest, AnUnusableCacheOrAFullDiskOnlyCostsRecompiles) {
  const std::string base = TempDir();
  std::string reference;
  {
    auto c = Make();
    auto k = c->Client(kScale, "scale", {}, false);
    ASSERT_TRUE(k.ok()) << k.status();
    reference = (*k)->image;
  }
  auto make = [](const std::string& dir, std::vector<std::string>* errors) {
    CudaCompilerOptions options;
    options.cache_dir = dir;
    options.on_cache_write_error = [errors](const absl::Status& s) {
      errors->push_back(s.ToString());
    };
    auto c = CudaKernelCompiler::Create(std::move(options));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  };

  // A file where the cache directory should be made.
  const std::string blocked = base + "/file";
  { std::ofstream(blocked) << "not a directory"; }
  std::vector<std::string> errors;
  for (int round = 0; round < 2; ++round) {
    auto c = make(blocked + "/cache", &errors);
    auto k = c->Client(kScale, "scale", {}, false);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ((*k)->image, reference);
    EXPECT_EQ(c->misses(), 1u);  // Compiled again each time: nothing could be stored.
    EXPECT_EQ(c->disk_write_failures(), 1u);
  }
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_THAT(errors[0], HasSubstr(blocked));

  // A disk that fills: a file-size limit far below a record (the write fails with EFBIG; the
  // signal it would raise is ignored, as the daemon ignores it).
  const std::string dir = base + "/cache";
  errors.clear();
  {
    rlimit old{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct sigaction ignore {
    }, previous{};
    ignore.sa_handler = SIG_IGN;
    ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &previous), 0);
    const rlimit small{64, old.rlim_max};
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    auto c = make(dir, &errors);
    auto k = c->Client(kScale, "scale", {}, false);
    const uint64_t failures = c->disk_write_failures();
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
    ASSERT_EQ(sigaction(SIGXFSZ, &previous, nullptr), 0);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ((*k)->image, reference);
    EXPECT_EQ(failures, 1u);
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("cannot write"));
  EXPECT_TRUE(Files(dir).empty()) << "a partial record or temporary file was left";
  {
    auto c = make(dir, &errors);  // The disk has room again: compiled, stored, then read back.
    ASSERT_TRUE(c->Client(kScale, "scale", {}, false).ok());
    EXPECT_EQ(c->misses(), 1u);
    EXPECT_EQ(c->disk_write_failures(), 0u);
  }
  {
    auto c = make(dir, &errors);
    auto k = c->Client(kScale, "scale", {}, false);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ((*k)->image, reference);
    EXPECT_EQ(c->disk_hits(), 1u);
  }
  EXPECT_EQ(errors.size(), 1u);
}

TEST_F(CudaCompilerTest, UnknownNewerArchitectureFallsBackToPtx) {
  auto c = Make("", 16, 99, 0);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->target(), HasSubstr("compute_"));
  auto k = c->Client(kScale, "scale", {}, false);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE((*k)->is_cubin);
  EXPECT_THAT((*k)->image, HasSubstr(".entry scale"));
  EXPECT_EQ((*k)->image.back(), '\0');
}

TEST_F(CudaCompilerTest, TooOldArchitectureIsFailedPrecondition) {
  auto c = CudaKernelCompiler::Create(CudaCompilerOptions{2, 0, "", 16, {}});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
}

}  // namespace
}  // namespace cubed::kernels
