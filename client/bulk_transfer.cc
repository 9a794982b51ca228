#include "client/bulk_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/fresh_bytes.h"
#include "client/status_conversion.h"
#include "common/bulk_lanes.h"
#include "common/status_macros.h"
#include "cubed/v1/session.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/sync_stream.h"

namespace cubed {
namespace {

// Note [Bulk wire format]: chunks travel as raw grpc::ByteBuffers in the protobuf wire format of
// UploadChunk / DownloadChunk, so that their `data` is neither copied into a message nor
// serialized again: an upload chunk is its small header (the other fields, serialized) followed
// by field 5 pointing straight at the caller's bytes; a download chunk is parsed in place and its
// `data` copied once, from gRPC's receive buffers into the result. The daemon does the same on
// its side (server/service/stream/upload_chunk_wire.h): an upload chunk's bytes go from its
// receive buffers straight into the allocation or its staging buffer.

constexpr char kUploadMethod[] = "/cubed.v1.SessionStream/Upload";
constexpr char kDownloadMethod[] = "/cubed.v1.SessionStream/Download";
// Download chunks received and not yet copied into the result (bounds the client's memory).
constexpr size_t kDownloadQueue = 4;

void SetBulkDeadline(grpc::ClientContext* context, absl::Duration timeout, uint64_t bytes) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(BulkDeadline(timeout, bytes)));
}

void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads the protobuf wire format across the slices of one ByteBuffer.
class WireCursor {
 public:
  explicit WireCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {}
  bool done() {
    Skip0();
    return i_ >= slices_.size();
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      Skip0();
      if (i_ >= slices_.size()) return false;
      const uint8_t b = slices_[i_].begin()[pos_++];
      *v |= (static_cast<uint64_t>(b & 0x7F) << shift);
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Remembers where the next `n` bytes lie (CopyTo copies them later) and skips them.
  bool Take(uint64_t n, size_t* slice, size_t* pos) {
    Skip0();
    *slice = i_;
    *pos = pos_;
    return Skip(n);
  }
  bool Skip(uint64_t n) {
    while (n > 0) {
      Skip0();
      if (i_ >= slices_.size()) return false;
      const uint64_t k = std::min<uint64_t>(n, slices_[i_].size() - pos_);
      pos_ += k;
      n -= k;
    }
    return true;
  }
  void CopyTo(size_t slice, size_t pos, uint64_t n, char* out) const {
    for (size_t i = slice; n > 0; ++i, pos = 0) {
      const uint64_t k = std::min<uint64_t>(n, slices_[i].size() - pos);
      std::memcpy(out, slices_[i].begin() + pos, k);
      out += k;
      n -= k;
    }
  }
  void AppendTo(size_t slice, size_t pos, uint64_t n, std::string* out) const {
    for (size_t i = slice; n > 0; ++i, pos = 0) {
      const uint64_t k = std::min<uint64_t>(n, slices_[i].size() - pos);
      out->append(reinterpret_cast<const char*>(slices_[i].begin() + pos), k);
      n -= k;
    }
  }

 private:
  void Skip0() {
    while (i_ < slices_.size() && pos_ >= slices_[i_].size()) {
      ++i_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0;
  size_t pos_ = 0;
};

// The result of a download, filled by its lanes' copier threads (one per lane, Note [Bulk
// lanes]). Thread-safe.
class DownloadSink {
 public:
  // `in_order`: one lane, whose chunks come in order: the bytes are appended (the copy is the
  // first touch of the result's pages). Otherwise the result is zero-filled once and each chunk
  // copied to its place.
  explicit DownloadSink(bool in_order) : in_order_(in_order) {}
  // Every binding's bytes, one after the other, into `into` instead (Result gives nothing).
  explicit DownloadSink(absl::Span<uint8_t> into) : in_order_(false), into_(into), to_span_(true) {}

  // Parses one DownloadChunk (Note [Bulk wire format]) and copies its data into the result.
  absl::Status Consume(const grpc::ByteBuffer& buffer) {
    std::vector<grpc::Slice> slices;
    if (!buffer.Dump(&slices).ok()) return Bad("unreadable chunk");
    WireCursor c(slices);
    std::vector<uint64_t> sizes;
    uint64_t binding = 0, offset = 0, data_len = 0;
    size_t data_slice = 0, data_pos = 0;
    bool has_data = false;
    while (!c.done()) {
      uint64_t tag = 0, v = 0;
      if (!c.Varint(&tag)) return Bad("truncated tag");
      const uint64_t field = tag >> 3;
      const int type = static_cast<int>(tag & 7);
      if (type == 0) {
        if (!c.Varint(&v)) return Bad("truncated varint");
        if (field == 1) sizes.push_back(v);
        if (field == 2) binding = v;
        if (field == 3) offset = v;
      } else if (type == 2) {
        if (!c.Varint(&v)) return Bad("truncated length");
        if (field == 1) {  // Packed sizes.
          size_t s = 0, p = 0;
          if (!c.Take(v, &s, &p)) return Bad("truncated sizes");
          std::string packed(v, '\0');
          c.CopyTo(s, p, v, packed.data());
          for (size_t k = 0; k < packed.size();) {
            uint64_t x = 0;
            for (int shift = 0; k < packed.size() && shift < 64; shift += 7) {
              const uint8_t b = static_cast<uint8_t>(packed[k++]);
              x |= (static_cast<uint64_t>(b & 0x7F) << shift);
              if ((b & 0x80) == 0) break;
            }
            sizes.push_back(x);
          }
        } else if (field == 4) {
          if (!c.Take(v, &data_slice, &data_pos)) return Bad("truncated data");
          data_len = v;
          has_data = true;
        } else if (!c.Skip(v)) {
          return Bad("truncated field");
        }
      } else if (type == 1) {
        if (!c.Skip(8)) return Bad("truncated field");
      } else if (type == 5) {
        if (!c.Skip(4)) return Bad("truncated field");
      } else {
        return Bad("bad wire type");
      }
    }
    std::string* out = nullptr;
    uint8_t* place = nullptr;  // to_span_: where the bytes go.
    {
      absl::MutexLock lock(&mu_);
      if (!sized_) {
        if (sizes.empty() && !has_data) return absl::OkStatus();
        sized_ = true;
        sizes_ = std::move(sizes);
        copied_.assign(sizes_.size(), 0);
        if (to_span_) {
          uint64_t total = 0;
          for (uint64_t size : sizes_) {
            bases_.push_back(total);
            if (size > into_.size() - total) {
              return absl::OutOfRangeError(absl::StrCat("read: the bindings hold more than the ",
                                                        into_.size(), " bytes of out"));
            }
            total += size;
          }
          total_ = total;
        } else {
          out_.resize(sizes_.size());
          std::vector<std::pair<char*, uint64_t>> ranges;
          for (size_t i = 0; i < sizes_.size(); ++i) {
            if (in_order_) {
              ReserveForRead(out_[i], sizes_[i]);
              ranges.emplace_back(out_[i].data(), sizes_[i]);
            } else {
              SizeForRead(out_[i], sizes_[i]);
            }
          }
          if (in_order_) prefault_ = std::make_unique<Prefault>(std::move(ranges));
        }
      } else if (!sizes.empty() && sizes != sizes_) {
        return Bad("lanes announce different sizes");
      }
      if (!has_data || data_len == 0) return absl::OkStatus();
      if (binding >= sizes_.size() || offset > sizes_[binding] ||
          data_len > sizes_[binding] - offset) {
        return absl::InternalError(absl::StrCat("SessionStream.Download: a chunk for binding ",
                                                binding, " at offset ", offset,
                                                " lies outside the sizes announced"));
      }
      // One lane's chunks of each binding come in order (session.proto), so its bytes are
      // appended; several lanes' chunks each go to their place.
      if (in_order_ && offset != out_[binding].size()) {
        return absl::InternalError(absl::StrCat("SessionStream.Download: a chunk for binding ",
                                                binding, " at offset ", offset, " after ",
                                                out_[binding].size(), " bytes of it"));
      }
      copied_[binding] += data_len;
      if (to_span_) {
        place = into_.data() + bases_[binding] + offset;  // Inside `into_`: checked above.
      } else {
        out = &out_[binding];  // Stays where it is: out_ is not resized again.
      }
    }
    if (to_span_) {
      c.CopyTo(data_slice, data_pos, data_len, reinterpret_cast<char*>(place));
    } else if (in_order_) {
      c.AppendTo(data_slice, data_pos, data_len, out);  // Only this lane's copier appends.
    } else {
      c.CopyTo(data_slice, data_pos, data_len, out->data() + offset);
    }
    return absl::OkStatus();
  }

  // Once every lane's copier is done.
  absl::StatusOr<std::vector<std::string>> Result() {
    RETURN_IF_ERROR(Check());
    absl::MutexLock lock(&mu_);
    return std::move(out_);
  }
  // The bytes written into `into` (to_span_), once every lane's copier is done.
  absl::StatusOr<uint64_t> Written() {
    RETURN_IF_ERROR(Check());
    absl::MutexLock lock(&mu_);
    return total_;
  }

 private:
  // Whether every binding got all its bytes.
  absl::Status Check() {
    absl::MutexLock lock(&mu_);
    prefault_.reset();
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (copied_[i] != sizes_[i]) {
        return absl::InternalError(absl::StrCat("SessionStream.Download: binding ", i, " got ",
                                                copied_[i], " of ", sizes_[i], " bytes"));
      }
    }
    return absl::OkStatus();
  }
  static absl::Status Bad(absl::string_view what) {
    return absl::InternalError(
        absl::StrCat("SessionStream.Download: a malformed chunk (", what, ")"));
  }
  const bool in_order_;
  const absl::Span<uint8_t> into_;
  const bool to_span_ = false;
  absl::Mutex mu_;
  std::vector<uint64_t> bases_ ABSL_GUARDED_BY(mu_);  // to_span_: where each binding starts.
  uint64_t total_ ABSL_GUARDED_BY(mu_) = 0;           // to_span_: the bytes of every binding.
  bool sized_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> out_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> sizes_ ABSL_GUARDED_BY(mu_);   // Announced by the first chunk.
  std::vector<uint64_t> copied_ ABSL_GUARDED_BY(mu_);  // Bytes of each binding received.
  // Faults in out_'s room ahead of the copies; declared after out_, so it stops before out_ goes.
  std::unique_ptr<Prefault> prefault_ ABSL_GUARDED_BY(mu_);
};

// The calls of one transfer's lanes: when one lane fails, the others are cancelled (the daemon
// would otherwise wait for the failed lane's bytes until the deadline). Thread-safe.
class LaneCalls {
 public:
  void Add(grpc::ClientContext* context) {
    absl::MutexLock lock(&mu_);
    contexts_.push_back(context);
    if (cancelled_) context->TryCancel();
  }
  void Remove(grpc::ClientContext* context) {
    absl::MutexLock lock(&mu_);
    contexts_.erase(std::find(contexts_.begin(), contexts_.end(), context));
  }
  void CancelAll() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    for (grpc::ClientContext* c : contexts_) c->TryCancel();
  }

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

// The transfer's status from its lanes': the first error that is not a cancel (a cancel is
// what the other lanes get when one fails), else the first error.
absl::Status CombineLanes(const std::vector<absl::Status>& lanes) {
  for (const absl::Status& s : lanes) {
    if (!s.ok() && !absl::IsCancelled(s)) return s;
  }
  for (const absl::Status& s : lanes) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Runs lane(i) for i in 1 .. lanes - 1 on threads of their own and lane(0) on this one.
void RunLanes(uint32_t lanes, const std::function<void(uint32_t)>& lane) {
  std::vector<std::thread> others;
  for (uint32_t i = 1; i < lanes; ++i) others.emplace_back(lane, i);
  lane(0);
  for (std::thread& t : others) t.join();
}

// One lane of an upload: the bytes [range.begin, range.end) of `data`.
absl::Status UploadLane(const BulkRoute& route, uint64_t session, uint64_t seq,
                        absl::Span<const uint8_t> data, uint32_t lanes, uint32_t lane,
                        LaneCalls& calls, std::atomic<uint64_t>& sent,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  absl::StatusOr<BulkLaneRange> range = UploadLaneRange(data.size(), lanes, lane);
  if (!range.ok()) return range.status();  // ChooseBulkLanes never picks such a count.
  const std::shared_ptr<grpc::Channel>& channel = route.channels[lane];
  grpc::ClientContext context;
  SetBulkDeadline(&context, route.timeout, range->end - range->begin);
  calls.Add(&context);
  v1::UploadDone done;
  const grpc::internal::RpcMethod method(kUploadMethod, grpc::internal::RpcMethod::CLIENT_STREAMING,
                                         channel);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), method, &context,
                                                                    &done));
  v1::UploadChunk header;
  header.set_session(session);
  header.set_seq(seq);
  header.set_total_size(data.size());
  if (lanes > 1) {
    header.set_lane(lane);
    header.set_lanes(lanes);
  }
  std::string head;
  for (uint64_t offset = range->begin; offset < range->end;) {
    const uint64_t n = std::min<uint64_t>(route.chunk, range->end - offset);
    header.set_offset(offset);
    head = header.SerializeAsString();
    head.push_back(static_cast<char>((5 << 3) | 2));  // Field 5 (data), length-delimited.
    AppendVarint(&head, n);
    // The data slice points into `data`, which outlives the call (Finish below).
    grpc::Slice slices[2] = {grpc::Slice(head.data(), head.size()),
                             grpc::Slice(data.data() + offset, n, grpc::Slice::STATIC_SLICE)};
    grpc::ByteBuffer message(slices, 2);
    if (!writer->Write(message)) break;  // The daemon ended the upload: Finish says why.
    const bool first = offset == range->begin;
    offset += n;
    const uint64_t all = sent.fetch_add(n) + n;
    if (progress && lane == 0) progress(all, data.size());
    if (first) header.Clear();  // Only the first chunk names the command.
  }
  writer->WritesDone();
  absl::Status status = FromGrpcStatus(writer->Finish(), "SessionStream.Upload");
  calls.Remove(&context);
  if (!status.ok()) calls.CancelAll();
  return status;
}

// One lane of a download, into `sink`.
absl::Status DownloadLane(const BulkRoute& route, uint64_t session, uint64_t seq, uint64_t expected,
                          uint32_t lanes, uint32_t lane, LaneCalls& calls, DownloadSink& sink) {
  const std::shared_ptr<grpc::Channel>& channel = route.channels[lane];
  grpc::ClientContext context;
  SetBulkDeadline(&context, route.timeout, expected);  // Any lane may carry most of it.
  calls.Add(&context);
  v1::DownloadRequest request;
  request.set_session(session);
  request.set_seq(seq);
  request.set_chunk_bytes(route.chunk);
  if (lanes > 1) {
    request.set_lane(lane);
    request.set_lanes(lanes);
  }
  const grpc::internal::RpcMethod method(kDownloadMethod,
                                         grpc::internal::RpcMethod::SERVER_STREAMING, channel);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel.get(), method, &context,
                                                                    request));
  // This thread reads; `copier` parses and copies (Note [Bulk wire format]).
  absl::Mutex mu;
  absl::CondVar changed;
  std::deque<grpc::ByteBuffer> queue;  // Guarded by mu.
  bool reading_done = false;           // Guarded by mu.
  absl::Status bad;                    // Guarded by mu: the first malformed chunk.
  std::thread copier([&] {
    for (;;) {
      grpc::ByteBuffer buffer;
      {
        absl::MutexLock lock(&mu);
        while (queue.empty() && !reading_done) changed.Wait(&mu);
        if (queue.empty()) return;
        buffer = std::move(queue.front());
        queue.pop_front();
        changed.SignalAll();
      }
      absl::Status s = sink.Consume(buffer);
      if (!s.ok()) {
        {
          absl::MutexLock lock(&mu);
          bad = std::move(s);
          queue.clear();
          changed.SignalAll();
        }
        calls.CancelAll();
        return;
      }
    }
  });
  grpc::ByteBuffer buffer;
  while (reader->Read(&buffer)) {
    absl::MutexLock lock(&mu);
    if (!bad.ok()) break;
    queue.push_back(std::move(buffer));
    changed.SignalAll();
    while (queue.size() >= kDownloadQueue && bad.ok()) changed.Wait(&mu);
  }
  {
    absl::MutexLock lock(&mu);
    reading_done = true;
    changed.SignalAll();
  }
  copier.join();
  absl::Status status = FromGrpcStatus(reader->Finish(), "SessionStream.Download");
  calls.Remove(&context);
  if (!bad.ok()) return bad;
  if (!status.ok()) calls.CancelAll();
  return status;
}

// Runs a download's `lanes` lanes into `sink`; their combined status.
absl::Status DownloadLanes(const BulkRoute& route, uint64_t session, uint64_t seq,
                           uint64_t expected, uint32_t lanes, DownloadSink& sink) {
  LaneCalls calls;
  std::vector<absl::Status> status(lanes);
  RunLanes(lanes, [&](uint32_t lane) {
    status[lane] = DownloadLane(route, session, seq, expected, lanes, lane, calls, sink);
  });
  return CombineLanes(status);
}

}  // namespace

absl::Duration BulkDeadline(absl::Duration timeout, uint64_t bytes) {
  return timeout + absl::Seconds(static_cast<int64_t>(bytes >> 26));
}

absl::Status BulkUpload(const BulkRoute& route, uint64_t session, uint64_t seq,
                        absl::Span<const uint8_t> data,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  const uint32_t lanes =
      ChooseBulkLanes(data.size(), static_cast<uint32_t>(route.channels.size()), route.lane_bytes);
  LaneCalls calls;
  std::atomic<uint64_t> sent{0};
  std::vector<absl::Status> status(lanes);
  RunLanes(lanes, [&](uint32_t lane) {
    status[lane] = UploadLane(route, session, seq, data, lanes, lane, calls, sent, progress);
  });
  absl::Status combined = CombineLanes(status);
  // The other lanes' last chunks, accepted after lane 0's last report.
  if (combined.ok() && lanes > 1 && progress) progress(data.size(), data.size());
  return combined;
}

absl::StatusOr<std::vector<std::string>> BulkDownload(const BulkRoute& route, uint64_t session,
                                                      uint64_t seq, uint64_t expected) {
  const uint32_t lanes =
      ChooseBulkLanes(expected, static_cast<uint32_t>(route.channels.size()), route.lane_bytes);
  DownloadSink sink(lanes == 1);
  RETURN_IF_ERROR(DownloadLanes(route, session, seq, expected, lanes, sink));
  return sink.Result();
}

absl::StatusOr<uint64_t> BulkDownloadInto(const BulkRoute& route, uint64_t session, uint64_t seq,
                                          absl::Span<uint8_t> into) {
  const uint32_t lanes =
      ChooseBulkLanes(into.size(), static_cast<uint32_t>(route.channels.size()), route.lane_bytes);
  DownloadSink sink(into);
  RETURN_IF_ERROR(DownloadLanes(route, session, seq, into.size(), lanes, sink));
  return sink.Written();
}

}  // namespace cubed
