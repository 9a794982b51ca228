// cubed_cuda_ipc_reader HANDLE_HEX OFFSET SIZE: stands in for a second process in the IPC test.
// Opens a CUDA IPC memory handle (64 bytes, hex) on device 0, copies SIZE bytes starting OFFSET
// bytes into the allocation, and prints them as hex on stdout. Exit 0 on success; 1 with the
// reason on stderr otherwise.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "common/cuda/cuda_context.h"
#include "common/cuda/cuda_driver.h"

int main(int argc, char** argv) {
  uint64_t offset = 0, size = 0;
  if (argc != 4 || !absl::SimpleAtoi(argv[2], &offset) || !absl::SimpleAtoi(argv[3], &size)) {
    std::fprintf(stderr, "usage: %s HANDLE_HEX OFFSET SIZE\n", argv[0]);
    return 1;
  }
  const std::string handle_bytes = absl::HexStringToBytes(argv[1]);
  CUipcMemHandle handle;
  if (handle_bytes.size() != sizeof(handle.reserved)) {
    std::fprintf(stderr, "the handle must be %zu bytes\n", sizeof(handle.reserved));
    return 1;
  }
  std::memcpy(handle.reserved, handle_bytes.data(), sizeof(handle.reserved));
  absl::StatusOr<std::unique_ptr<cubed::CudaContext>> context = cubed::CudaContext::Retain(0);
  if (!context.ok()) {
    std::fprintf(stderr, "%s\n", context.status().ToString().c_str());
    return 1;
  }
  CUdeviceptr base = 0;
  absl::Status status =
      CU_STATUS(cubed::Cu().IpcOpenMemHandle(&base, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  std::string bytes(size, '\0');
  if (status.ok()) status = CU_STATUS(cubed::Cu().MemcpyDtoH(bytes.data(), base + offset, size));
  if (base != 0) cubed::Cu().IpcCloseMemHandle(base);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", absl::BytesToHexString(bytes).c_str());
  return 0;
}
