// cubed_cuda_ipc_exporter SIZE GO_FILE: stands in for a producer process (torch, CuPy) in the
// import test. Allocates SIZE bytes on device 0, sets byte i to i % 251, prints the allocation's
// CUDA IPC handle as hex and a newline, then waits (up to 60 s) until GO_FILE exists, prints the
// allocation's bytes as hex and exits, freeing the memory. Exit 0 on success; 1 with the reason
// on stderr otherwise.

#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "common/cuda/cuda_context.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"

namespace {

absl::Status Run(uint64_t size, const char* go_file) {
  absl::StatusOr<std::unique_ptr<cubed::CudaContext>> context = cubed::CudaContext::Retain(0);
  if (!context.ok()) return context.status();
  RETURN_IF_ERROR((*context)->MakeCurrent());
  CUdeviceptr memory = 0;
  CU_RETURN_IF_ERROR(cubed::Cu().MemAlloc(&memory, size));
  std::string bytes(size, '\0');
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i % 251);
  absl::Status status = CU_STATUS(cubed::Cu().MemcpyHtoD(memory, bytes.data(), size));
  CUipcMemHandle handle;
  if (status.ok()) status = CU_STATUS(cubed::Cu().IpcGetMemHandle(&handle, memory));
  if (status.ok()) {
    std::printf("%s\n", absl::BytesToHexString(absl::string_view(handle.reserved, 64)).c_str());
    std::fflush(stdout);
    for (int i = 0; i < 6000 && access(go_file, F_OK) != 0; ++i) usleep(10000);
    status = CU_STATUS(cubed::Cu().MemcpyDtoH(bytes.data(), memory, size));
  }
  if (status.ok()) std::printf("%s\n", absl::BytesToHexString(bytes).c_str());
  cubed::Cu().MemFree(memory);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = 0;
  if (argc != 3 || !absl::SimpleAtoi(argv[1], &size) || size == 0) {
    std::fprintf(stderr, "usage: %s SIZE GO_FILE\n", argv[0]);
    return 1;
  }
  if (absl::Status s = Run(size, argv[2]); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
