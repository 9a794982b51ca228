#include "kernels/cpu/cpu_registry.h"

#include "gtest/gtest.h"
#include "kernels/kernel_def.h"

namespace cubed::kernels {
namespace {

// A builtin added to the catalogue without a CPU implementation (or listed out of order) would
// make RunBuiltinCpu fail with INTERNAL: the two tables must match row for row.
TEST(CpuRegistryTest, ImplementsEveryCatalogueRowInOrder) {
  const absl::Span<const KernelDef> defs = BuiltinKernelDefs();
  const absl::Span<const CpuKernel> cpu = CpuKernels();
  ASSERT_EQ(cpu.size(), defs.size());
  for (size_t i = 0; i < defs.size(); ++i) {
    EXPECT_EQ(cpu[i].name, defs[i].name) << i;
    EXPECT_EQ(cpu[i].num_buffers, defs[i].num_buffers) << defs[i].name;
    EXPECT_NE(cpu[i].run, nullptr) << defs[i].name;
    const absl::StatusOr<const CpuKernel*> found = FindCpuKernel(defs[i]);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(*found, &cpu[i]);
  }
}

}  // namespace
}  // namespace cubed::kernels
