// The Client methods of the shared-memory data path (docs/api.md, "Shared-memory regions"):
// registering regions over the daemon's region socket, and creates and reads whose bytes stay in
// them.

#include <future>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/proto_conversion.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

using RegionRead = absl::StatusOr<uint64_t>;

std::future<RegionRead> Ready(RegionRead value) {
  std::promise<RegionRead> p;
  p.set_value(std::move(value));
  return p.get_future();
}

void ToProto(const Region& region, uint64_t offset, uint64_t size, v1::RegionSlice* out) {
  out->set_region(region.id);
  out->set_offset(offset);
  out->set_size(size);
}

RegionRead RegionBytes(absl::StatusOr<v1::Reply*> reply) {
  RETURN_IF_ERROR(ReplyStatus(reply));
  return (*reply)->region_bytes();
}

}  // namespace

absl::StatusOr<Region> Client::RegisterRegion(std::shared_ptr<SharedMemory> memory) {
  constexpr absl::string_view kUnix = "unix:";
  if (impl_->stream == nullptr || !absl::StartsWith(impl_->options.address, kUnix)) {
    return absl::FailedPreconditionError(
        "regions need the session stream over a Unix socket (a daemon on this host)");
  }
  if (memory == nullptr) return absl::InvalidArgumentError("region: no memory");
  const std::string socket = absl::StrCat(impl_->options.address.substr(kUnix.size()), ".regions");
  ASSIGN_OR_RETURN(const uint64_t id, RegisterSharedMemory(socket, impl_->session, *memory));
  return Region{id, std::move(memory)};
}

absl::Status Client::ReleaseRegion(const Region& region) {
  if (impl_->stream == nullptr) return absl::FailedPreconditionError("regions need the stream");
  v1::Command command;
  command.mutable_release_region()->set_region(region.id);
  return impl_->stream->Send(std::move(command));
}

absl::StatusOr<Handle> Client::CreateFromRegion(const Region& region, uint64_t offset,
                                                uint64_t size) {
  if (impl_->stream == nullptr) return absl::FailedPreconditionError("regions need the stream");
  v1::Command command;
  const uint64_t id = impl_->stream->NextId();
  command.mutable_create()->set_id(id);
  ToProto(region, offset, size, command.mutable_create()->mutable_region());
  RETURN_IF_ERROR(impl_->stream->Send(std::move(command)));
  return impl_->MakeHandle(id, size);
}

absl::StatusOr<Tensor> Client::CreateTensorFromRegion(const Region& region, uint64_t offset,
                                                      std::vector<uint64_t> shape,
                                                      uint32_t elem_size) {
  if (impl_->stream == nullptr) return absl::FailedPreconditionError("regions need the stream");
  uint64_t bytes = elem_size;
  for (uint64_t d : shape) bytes *= d;  // Checked by the daemon; a wrong size fails there.
  uint64_t id = 0;
  v1::Command command = impl_->CreateTensorCommand(shape, elem_size, &id);
  ToProto(region, offset, bytes, command.mutable_create_tensor()->mutable_region());
  return impl_->StreamTensor(std::move(command), id, std::move(shape), elem_size);
}

std::future<RegionRead> Client::ReadIntoRegion(std::vector<Binding> bindings, const Region& region,
                                               uint64_t offset, uint64_t size) {
  if (impl_->stream == nullptr) {
    return Ready(absl::FailedPreconditionError("regions need the stream"));
  }
  v1::Command command;
  v1::Command::Read* read = command.mutable_read();
  for (const Binding& b : bindings) {
    if (absl::Status s = ToProto(b, read->add_bindings()); !s.ok()) return Ready(std::move(s));
  }
  ToProto(region, offset, size, read->mutable_into());
  return impl_->Ask<RegionRead>(std::move(command), RegionBytes);
}

std::future<RegionRead> Client::ReadTensorIntoRegion(std::vector<Tensor> tensors,
                                                     const Region& region, uint64_t offset,
                                                     uint64_t size) {
  if (impl_->stream == nullptr) {
    return Ready(absl::FailedPreconditionError("regions need the stream"));
  }
  v1::Command command;
  v1::Command::ReadTensor* read = command.mutable_read_tensor();
  for (const Tensor& t : tensors) {
    if (absl::Status s = ToProto(t, read->add_bindings()); !s.ok()) return Ready(std::move(s));
  }
  ToProto(region, offset, size, read->mutable_into());
  return impl_->Ask<RegionRead>(std::move(command), RegionBytes);
}

}  // namespace cubed
