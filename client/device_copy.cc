// Client::CopyToDevice (client.h): a binding of this session copied into another client's
// session of the same daemon (Note [Copies between devices], server/channel/device.h).

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/proto_conversion.h"
#include "common/status_macros.h"
#include "cubed/v1/compute.grpc.pb.h"

namespace cubed {

absl::StatusOr<Handle> Client::CopyToDevice(const Binding& source, Client& target,
                                            const Handle& target_handle, uint64_t target_offset) {
  v1::CopyToDeviceRequest request;
  request.set_session(impl_->session);
  RETURN_IF_ERROR(ToProto(source, request.mutable_source()));
  request.set_target_session(target.impl_->session);
  if (target_handle) {
    request.set_target_handle(target_handle.id());
    request.set_target_offset(target_offset);
    // The daemon must have taken every command the target sent before: they write or read
    // target_handle before the copy lands.
    if (target.impl_->stream != nullptr) RETURN_IF_ERROR(target.impl_->StreamBarrier());
  } else if (target_offset != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyToDevice: target_offset ", target_offset, " without a target handle"));
  }
  // ... and every command this client sent before: the copy reads what they wrote.
  if (impl_->stream != nullptr) RETURN_IF_ERROR(impl_->StreamBarrier());
  v1::CopyToDeviceResponse response;
  RETURN_IF_ERROR(impl_->Call("CopyToDevice", &Impl::Stub::CopyToDevice, request, &response));
  if (target_handle) return target_handle;
  return target.Adopt(response.handle(), response.size());
}

}  // namespace cubed
