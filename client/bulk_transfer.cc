#include "client/bulk_transfer.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/status_conversion.h"
#include "cubed/v1/session.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace cubed {
namespace {

void SetBulkDeadline(grpc::ClientContext* context, absl::Duration timeout, uint64_t bytes) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(BulkDeadline(timeout, bytes)));
}

}  // namespace

absl::Duration BulkDeadline(absl::Duration timeout, uint64_t bytes) {
  return timeout + absl::Seconds(static_cast<int64_t>(bytes >> 26));
}

absl::Status BulkUpload(const std::shared_ptr<grpc::Channel>& channel, uint64_t session,
                        uint64_t seq, absl::Span<const uint8_t> data, uint64_t chunk,
                        absl::Duration timeout) {
  std::unique_ptr<v1::SessionStream::Stub> stub = v1::SessionStream::NewStub(channel);
  grpc::ClientContext context;
  SetBulkDeadline(&context, timeout, data.size());
  v1::UploadDone done;
  std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> writer = stub->Upload(&context, &done);
  v1::UploadChunk message;
  message.set_session(session);
  message.set_seq(seq);
  message.set_total_size(data.size());
  for (uint64_t offset = 0; offset < data.size();) {
    const uint64_t n = std::min<uint64_t>(chunk, data.size() - offset);
    message.set_offset(offset);
    message.set_data(data.data() + offset, n);
    if (!writer->Write(message)) break;  // The daemon ended the upload: Finish says why.
    offset += n;
    if (offset == n) message.Clear();  // Only the first chunk names the command.
  }
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish(), "SessionStream.Upload");
}

absl::StatusOr<std::vector<std::string>> BulkDownload(const std::shared_ptr<grpc::Channel>& channel,
                                                      uint64_t session, uint64_t seq,
                                                      uint64_t chunk, uint64_t expected,
                                                      absl::Duration timeout) {
  std::unique_ptr<v1::SessionStream::Stub> stub = v1::SessionStream::NewStub(channel);
  grpc::ClientContext context;
  SetBulkDeadline(&context, timeout, expected);
  v1::DownloadRequest request;
  request.set_session(session);
  request.set_seq(seq);
  request.set_chunk_bytes(chunk);
  std::unique_ptr<grpc::ClientReader<v1::DownloadChunk>> reader =
      stub->Download(&context, request);
  std::vector<std::string> out;
  std::vector<uint64_t> filled;
  bool first = true;
  absl::Status bad;
  v1::DownloadChunk message;
  while (reader->Read(&message)) {
    if (first) {
      first = false;
      out.resize(message.sizes_size());
      filled.assign(message.sizes_size(), 0);
      for (int i = 0; i < message.sizes_size(); ++i) out[i].resize(message.sizes(i));
    }
    const std::string& data = message.data();
    if (data.empty()) continue;
    if (message.binding() >= out.size() || message.offset() > out[message.binding()].size() ||
        data.size() > out[message.binding()].size() - message.offset()) {
      bad = absl::InternalError(absl::StrCat("SessionStream.Download: a chunk for binding ",
                                             message.binding(), " at offset ", message.offset(),
                                             " lies outside the sizes announced"));
      context.TryCancel();
      break;
    }
    std::memcpy(out[message.binding()].data() + message.offset(), data.data(), data.size());
    filled[message.binding()] += data.size();
  }
  absl::Status status = FromGrpcStatus(reader->Finish(), "SessionStream.Download");
  if (!bad.ok()) return bad;
  if (!status.ok()) return status;
  for (size_t i = 0; i < out.size(); ++i) {
    if (filled[i] != out[i].size()) {
      return absl::InternalError(absl::StrCat("SessionStream.Download: binding ", i, " got ",
                                              filled[i], " of ", out[i].size(), " bytes"));
    }
  }
  return out;
}

}  // namespace cubed
