// Copies between two allocations of one device (Note [Copies between devices],
// server/channel/device.h). Part of CudaServer (cuda_server.h).

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "server/compute/cuda/cuda_server.h"

namespace cubed {

absl::Status CudaServer::CopyWithin(const ResolvedBinding& from, const ResolvedBinding& to) {
  LaunchHeldBackOrLog();
  RETURN_IF_ERROR(LostStatus());
  if (from.size != to.size) {
    return absl::InternalError(
        absl::StrCat("copy of ", from.size, " bytes into a binding of ", to.size));
  }
  ASSIGN_OR_RETURN(const CUdeviceptr src, DevicePointer(from));
  ASSIGN_OR_RETURN(const CUdeviceptr dst, DevicePointer(to));
  RETURN_IF_ERROR(context_->MakeCurrent());
  // On the device's one stream: after every earlier command, before every later one.
  return Check(CU_STATUS(Cu().MemcpyDtoDAsync(dst, src, from.size, stream_)));
}

}  // namespace cubed
