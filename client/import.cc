// Client::ImportCudaIpc and Client::ImportRegion (client.h): memory another process allocated,
// given to the session as a handle without a copy (Note [Imported memory],
// server/compute/compute_server.h; the keep-alive: Note [Import keep-alive], release_batcher.h).

#include <memory>
#include <utility>

#include "client/client.h"
#include "client/client_impl.h"
#include "common/status_macros.h"
#include "cubed/v1/compute.grpc.pb.h"

namespace cubed {

absl::StatusOr<Handle> Client::ImportCudaIpc(const CudaIpcMemory& memory,
                                             std::shared_ptr<const void> keep_alive) {
  v1::ImportMemoryRequest request;
  request.set_session(impl_->session);
  v1::CudaIpcMemory* ipc = request.mutable_cuda_ipc();
  ipc->set_ipc_handle(memory.ipc_handle);
  ipc->set_offset(memory.offset);
  ipc->set_size(memory.size);
  ipc->set_device_uuid(memory.device_uuid);
  v1::ImportMemoryResponse response;
  RETURN_IF_ERROR(impl_->Call("ImportMemory", &Impl::Stub::ImportMemory, request, &response));
  return impl_->MakeHandle(response.handle(), response.size(), std::move(keep_alive));
}

absl::StatusOr<Handle> Client::ImportRegion(const Region& region, uint64_t offset, uint64_t size) {
  if (impl_->stream == nullptr) {
    return absl::FailedPreconditionError(
        "ImportRegion: regions need the session stream over a Unix socket (a daemon on this "
        "host)");
  }
  v1::ImportMemoryRequest request;
  request.set_session(impl_->session);
  v1::RegionSlice* slice = request.mutable_region();
  slice->set_region(region.id);
  slice->set_offset(offset);
  slice->set_size(size);
  // The daemon must have run every command sent before: a release_region of this region makes
  // the import NOT_FOUND, as it would in stream order.
  RETURN_IF_ERROR(impl_->StreamBarrier());
  v1::ImportMemoryResponse response;
  RETURN_IF_ERROR(impl_->Call("ImportMemory", &Impl::Stub::ImportMemory, request, &response));
  return impl_->MakeHandle(response.handle(), response.size(), region.memory);
}

}  // namespace cubed
