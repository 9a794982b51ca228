// The Client methods whose results arrive through futures: Read, ReadTensor and Sync. They use
// gRPC's callback API (client/async_call.h), so no thread blocks per call.

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/bulk_transfer.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/fresh_bytes.h"
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

// Stream mode, Note [Bulk transfers]: sends the bulk read `command` and runs `download` (the
// transfer, given the route, session and seq; returns a T) on a thread of its own. The future is
// ready when both the download and the read's reply are in: the read's own verdict first,
// unless it only says that this side cancelled the download (then the download's error).
template <typename T, typename Download>
std::future<T> BulkReadWith(const Client::Impl& impl, v1::Command command, uint64_t bytes,
                            Download download) {
  uint64_t seq = 0;
  const absl::Duration deadline = BulkDeadline(impl.options.timeout, bytes);
  std::future<absl::Status> answer = impl.Ask<absl::Status>(
      std::move(command), [](absl::StatusOr<v1::Reply*> r) { return ReplyStatus(r); }, &seq,
      deadline);
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> result = promise->get_future();
  std::thread([route = impl.bulk_route, session = impl.session, seq, answer = std::move(answer),
               download = std::move(download), promise]() mutable {
    T data = download(route, session, seq);
    absl::Status status = answer.get();
    if (!status.ok() && !(absl::IsCancelled(status) && !data.ok())) {
      promise->set_value(std::move(status));
    } else {
      promise->set_value(std::move(data));
    }
  }).detach();
  return result;
}

// The bulk read `command` of `bytes` (an estimate) into new strings.
std::future<ReadResult> BulkRead(const Client::Impl& impl, v1::Command command, uint64_t bytes) {
  return BulkReadWith<ReadResult>(impl, std::move(command), bytes,
                                  [bytes](const BulkRoute& route, uint64_t session, uint64_t seq) {
                                    return BulkDownload(route, session, seq, bytes);
                                  });
}

// The bulk read `command` straight into `into`.
std::future<absl::StatusOr<uint64_t>> BulkReadInto(const Client::Impl& impl, v1::Command command,
                                                   absl::Span<uint8_t> into) {
  return BulkReadWith<absl::StatusOr<uint64_t>>(
      impl, std::move(command), into.size(),
      [into](const BulkRoute& route, uint64_t session, uint64_t seq) {
        return BulkDownloadInto(route, session, seq, into);
      });
}

// Stream mode, ClientOptions::region_threshold: the bytes land in the staging region (held from
// here until they are copied out, on the reader thread) instead of a message. `into` is the
// read's or read_tensor's `into`; `sizes` the bytes of each binding, in order.
std::future<ReadResult> ReadThroughRegion(Client::Impl& impl, const Region& region,
                                          v1::Command command, v1::RegionSlice* into,
                                          std::vector<uint64_t> sizes) {
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  into->set_region(region.id);
  into->set_size(total);
  RegionStaging* staging = impl.staging.get();
  const uint8_t* bytes = region.memory->bytes().data();
  return impl.Ask<ReadResult>(
      std::move(command),
      [staging, bytes, sizes = std::move(sizes)](absl::StatusOr<v1::Reply*> reply) -> ReadResult {
        absl::Status status = ReplyStatus(reply);
        std::vector<std::string> out;
        if (status.ok()) {
          out.reserve(sizes.size());
          uint64_t at = 0;
          for (uint64_t s : sizes) {
            out.push_back(CopyForRead(bytes + at, s));
            at += s;
          }
        }
        staging->Release();
        if (!status.ok()) return status;
        return out;
      });
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
    uint64_t bytes = 0;
    std::vector<uint64_t> sizes;
    for (const Binding& b : bindings) {
      const uint64_t size = b.handle.size();
      const uint64_t cut = b.offset_start + b.offset_end;
      sizes.push_back(size > cut ? size - cut : 0);
      bytes += sizes.back();
    }
    if (impl_->UsesRegion(bytes)) {
      if (const Region* region = impl_->staging->Acquire(bytes)) {
        v1::RegionSlice* into = command.mutable_read()->mutable_into();
        return ReadThroughRegion(*impl_, *region, std::move(command), into, std::move(sizes));
      }
    }
    if (impl_->Bulk(bytes)) {
      command.mutable_read()->set_bulk(true);
      return BulkRead(*impl_, std::move(command), bytes);
    }
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

std::future<absl::StatusOr<uint64_t>> Client::ReadInto(const Binding& binding,
                                                       absl::Span<uint8_t> out) {
  if (impl_->stream != nullptr) {
    const uint64_t size = binding.handle.size();
    const uint64_t cut = binding.offset_start + binding.offset_end;
    const uint64_t bytes = size > cut ? size - cut : 0;
    if (!impl_->UsesRegion(bytes) && impl_->Bulk(bytes)) {
      v1::Command command;
      absl::Status s = ToProto(binding, command.mutable_read()->add_bindings());
      if (!s.ok()) return ReadyFuture<absl::StatusOr<uint64_t>>(std::move(s));
      command.mutable_read()->set_bulk(true);
      return BulkReadInto(*impl_, std::move(command), out);
    }
  }
  // Any other read: as Read, copied in on a thread of its own once it is there.
  auto read = std::make_shared<std::future<ReadResult>>(Read({binding}));
  auto promise = std::make_shared<std::promise<absl::StatusOr<uint64_t>>>();
  std::future<absl::StatusOr<uint64_t>> result = promise->get_future();
  std::thread([read, out, promise] {
    ReadResult got = read->get();
    if (!got.ok()) {
      promise->set_value(got.status());
    } else if (got->size() != 1) {
      promise->set_value(absl::InternalError(
          absl::StrCat("read: the daemon answered ", got->size(), " data entries, not 1")));
    } else if ((*got)[0].size() > out.size()) {
      promise->set_value(absl::OutOfRangeError(absl::StrCat(
          "read: ", (*got)[0].size(), " bytes do not fit the ", out.size(), " bytes of out")));
    } else {
      if (!(*got)[0].empty()) std::memcpy(out.data(), (*got)[0].data(), (*got)[0].size());
      promise->set_value((*got)[0].size());
    }
  }).detach();
  return result;
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
    uint64_t bytes = 0;
    std::vector<uint64_t> sizes;
    for (const Tensor& t : tensors) {
      sizes.push_back(t.NumElements() * t.elem_size);
      bytes += sizes.back();
    }
    if (impl_->UsesRegion(bytes)) {
      if (const Region* region = impl_->staging->Acquire(bytes)) {
        v1::RegionSlice* into = command.mutable_read_tensor()->mutable_into();
        return ReadThroughRegion(*impl_, *region, std::move(command), into, std::move(sizes));
      }
    }
    if (impl_->Bulk(bytes)) {
      command.mutable_read_tensor()->set_bulk(true);
      return BulkRead(*impl_, std::move(command), bytes);
    }
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
