// Every builtin kernel the daemon advertises is one the kernel tests check against a reference.

#include <set>

#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

using KernelCoverageTest = DaemonTest;

// The kernels kernels_*_test.cc compare with host references. Add a kernel here only together
// with its reference test.
const std::set<std::string> kTestedKernels = {
    "fill",   "copy",      "cast",                                             // kernels_data_test
    "neg",    "abs",       "relu",   "exp", "log", "sqrt", "sigmoid", "tanh",  // kernels_unary_test
    "gelu",   "gelu_tanh", "silu",                                             // kernels_unary_test
    "add",    "sub",       "mul",    "div", "max", "min",  "pow",    // kernels_binary_test
    "eq",     "ne",        "lt",     "le",  "gt",  "ge",   "where",  // kernels_compare_test
    "sum",    "mean",      "argmax",                                 // kernels_reduce_test
    "matmul", "softmax",                                             // kernels_matmul_...
    "gather",                                                        // kernels_gather_test
};
// Names too long for the table above.
const std::set<std::string> kTestedLongNames = {
    "layer_norm", "rms_norm",              // kernels_norm_test
    "causal_softmax", "causal_attention",  // kernels_matmul_softmax_test
};

bool Tested(const std::string& name) {
  return kTestedKernels.count(name) > 0 || kTestedLongNames.count(name) > 0;
}

TEST_F(KernelCoverageTest, EveryAdvertisedKernelHasAReferenceTest) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto info = client->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  std::set<std::string> advertised(info->device.builtin_kernels().begin(),
                                   info->device.builtin_kernels().end());
  for (const std::string& name : advertised) {
    EXPECT_TRUE(Tested(name)) << "kernel \"" << name << "\" has no reference test";
  }
  for (const auto* tested : {&kTestedKernels, &kTestedLongNames}) {
    for (const std::string& name : *tested) {
      EXPECT_TRUE(advertised.count(name)) << "tested kernel \"" << name << "\" is not advertised";
    }
  }
}

TEST_F(KernelCoverageTest, EveryElementTypeIsAdvertised) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto info = client->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  std::set<int> types(info->device.elem_types().begin(), info->device.elem_types().end());
  for (ElemType t : kAllElemTypes) {
    EXPECT_TRUE(types.count(static_cast<int>(t))) << ElemTypeName(t);
  }
}

}  // namespace
}  // namespace cubed::integration
