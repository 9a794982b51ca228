#include "common/cuda/cuda_context.h"

#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

thread_local CUcontext current_on_this_thread = nullptr;

}  // namespace

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Retain(int ordinal) {
  RETURN_IF_ERROR(LoadCudaDriver().status());
  ASSIGN_OR_RETURN(CUdevice device, CudaDeviceForOrdinal(ordinal));
  CUcontext context = nullptr;
  CU_RETURN_IF_ERROR(Cu().DevicePrimaryCtxRetain(&context, device));
  std::unique_ptr<CudaContext> c(new CudaContext(ordinal, device, context));
  RETURN_IF_ERROR(c->MakeCurrent());
  return c;
}

CudaContext::~CudaContext() {
  if (current_on_this_thread == context_) {
    Cu().CtxSetCurrent(nullptr);
    current_on_this_thread = nullptr;
  }
  Cu().DevicePrimaryCtxRelease(device_);
}

absl::Status CudaContext::MakeCurrent() const {
  if (current_on_this_thread == context_) return absl::OkStatus();
  CU_RETURN_IF_ERROR(Cu().CtxSetCurrent(context_));
  current_on_this_thread = context_;
  return absl::OkStatus();
}

}  // namespace cubed
