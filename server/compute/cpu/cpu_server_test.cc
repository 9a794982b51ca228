// The CPU backend against the ComputeServer conformance suite.

#include "server/compute/cpu/cpu_server.h"

#include "server/compute/compute_server_conformance.h"

namespace cubed {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, ComputeServerConformance,
                         testing::Values(ComputeServerFactory{
                             "cpu",
                             [](std::string*) -> std::unique_ptr<ComputeServer> {
                               CpuServerOptions options;
                               options.memory_limit = uint64_t{256} << 20;
                               return std::make_unique<CpuServer>(options);
                             }}),
                         ComputeServerFactoryName);

}  // namespace
}  // namespace cubed
