// The Client methods whose results arrive through futures: Read, ReadTensor and Sync. They use
// gRPC's callback API (client/async_call.h), so no thread blocks per call.

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/proto_conversion.h"

namespace cubed {
namespace {

using ReadResult = absl::StatusOr<std::vector<std::string>>;

template <typename T>
std::future<T> ReadyFuture(T value) {
  std::promise<T> p;
  p.set_value(std::move(value));
  return p.get_future();
}

// Moves the `data` entries of a read response out, checking there is one per binding.
template <typename Response>
ReadResult TakeData(absl::Status status, Response* response, int expected) {
  if (!status.ok()) return status;
  if (response->data_size() != expected) {
    return absl::InternalError(absl::StrCat("daemon returned ", response->data_size(),
                                            " buffers for ", expected, " bindings"));
  }
  std::vector<std::string> out;
  out.reserve(response->data_size());
  for (std::string& bytes : *response->mutable_data()) out.push_back(std::move(bytes));
  return out;
}

// Stream mode: a read reply's data.
ReadResult TakeReplyData(absl::StatusOr<v1::Reply*> reply, int expected) {
  absl::Status status = ReplyStatus(reply);
  if (!status.ok()) return status;
  return TakeData(absl::OkStatus(), (*reply)->mutable_read(), expected);
}

}  // namespace

std::future<ReadResult> Client::Read(std::vector<Binding> bindings) {
  v1::ReadRequest request;
  request.set_session(impl_->session);
  for (const Binding& b : bindings) {
    absl::Status s = ToProto(b, request.add_bindings());
    if (!s.ok()) return ReadyFuture<ReadResult>(std::move(s));
  }
  const int expected = request.bindings_size();
  if (impl_->stream != nullptr) {
    v1::Command command;
    command.mutable_read()->mutable_bindings()->Swap(request.mutable_bindings());
    return impl_->Ask<ReadResult>(std::move(command), [expected](absl::StatusOr<v1::Reply*> r) {
      return TakeReplyData(std::move(r), expected);
    });
  }
  v1::Compute::Stub::async_interface* async = impl_->stub->async();
  return AsyncUnaryCall<ReadResult, v1::ReadRequest, v1::ReadResponse>(
      "Read", impl_->options.timeout, std::move(request),
      [async](auto* context, auto* req, auto* resp, auto done) {
        async->Read(context, req, resp, std::move(done));
      },
      [expected](absl::Status status, v1::ReadResponse* response) {
        return TakeData(std::move(status), response, expected);
      });
}

std::future<ReadResult> Client::ReadTensor(std::vector<Tensor> tensors) {
  v1::ReadTensorRequest request;
  request.set_session(impl_->session);
  for (const Tensor& t : tensors) {
    absl::Status s = ToProto(t, request.add_bindings());
    if (!s.ok()) return ReadyFuture<ReadResult>(std::move(s));
  }
  const int expected = request.bindings_size();
  if (impl_->stream != nullptr) {
    v1::Command command;
    command.mutable_read_tensor()->mutable_bindings()->Swap(request.mutable_bindings());
    return impl_->Ask<ReadResult>(std::move(command), [expected](absl::StatusOr<v1::Reply*> r) {
      return TakeReplyData(std::move(r), expected);
    });
  }
  v1::Compute::Stub::async_interface* async = impl_->stub->async();
  return AsyncUnaryCall<ReadResult, v1::ReadTensorRequest, v1::ReadTensorResponse>(
      "ReadTensor", impl_->options.timeout, std::move(request),
      [async](auto* context, auto* req, auto* resp, auto done) {
        async->ReadTensor(context, req, resp, std::move(done));
      },
      [expected](absl::Status status, v1::ReadTensorResponse* response) {
        return TakeData(std::move(status), response, expected);
      });
}

std::future<absl::Status> Client::Sync() {
  if (impl_->stream != nullptr) {
    v1::Command command;
    command.mutable_sync();
    return impl_->Ask<absl::Status>(std::move(command),
                                    [](absl::StatusOr<v1::Reply*> r) { return ReplyStatus(r); });
  }
  v1::SyncRequest request;
  request.set_session(impl_->session);
  v1::Compute::Stub::async_interface* async = impl_->stub->async();
  return AsyncUnaryCall<absl::Status, v1::SyncRequest, v1::SyncResponse>(
      "Sync", impl_->options.timeout, std::move(request),
      [async](auto* context, auto* req, auto* resp, auto done) {
        async->Sync(context, req, resp, std::move(done));
      },
      [](absl::Status status, v1::SyncResponse*) { return status; });
}

}  // namespace cubed
