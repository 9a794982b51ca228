// The C ABI's reads (cubed_client_c.h): cubed_client_read, cubed_client_read_into and
// cubed_client_read_into_async, over cubed::Client (Note [One client core]).

#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/c_api/c_api_state.h"
#include "client/c_api/cubed_client_c.h"
#include "common/checked_math.h"

using cubed::c_api::ClaimReply;
using cubed::c_api::Closed;
using cubed::c_api::CompleteReply;
using cubed::c_api::Fail;
using cubed::c_api::Invalid;
using cubed::c_api::ReplyState;
using cubed::c_api::Send;
using cubed::v1::Command;

extern "C" {

int32_t cubed_client_read(cubed_client* client, uint64_t id, uint64_t offset_start,
                          uint64_t offset_end, cubed_reply* reply, cubed_error* error) {
  if (client == nullptr || reply == nullptr) {
    return Invalid(error, "cubed_client_read: client or reply is NULL");
  }
  if (id == 0) return Invalid(error, "cubed_client_read: handle id 0");
  Command command;
  cubed::v1::Binding* b = command.mutable_read()->add_bindings();
  b->set_handle(id);
  b->set_offset_start(offset_start);
  b->set_offset_end(offset_end);
  return Send(client, command, reply, error);
}

namespace {

// Whether a read_into of `capacity` bytes is a large read (capacity >= the client's
// bulk_threshold on the stream, and offset_start + capacity + offset_end fits 64 bits). Not when
// the SDK would read it through its staging region (region_threshold): that path sizes the bytes by
// the handle, and `capacity` may be more than the read holds; such reads stay one message.
bool IsLargeRead(cubed_client& c, uint64_t offset_start, uint64_t capacity, uint64_t offset_end) {
  absl::ReaderMutexLock lock(&c.mu);
  if (c.client == nullptr || c.client->transport() != cubed::Transport::kStream) return false;
  const cubed::ClientOptions& o = c.client->options();
  if (o.bulk_threshold == 0 || capacity < o.bulk_threshold) return false;
  if (o.region_threshold != 0 && capacity >= o.region_threshold) return false;
  const std::optional<uint64_t> whole = cubed::CheckedAdd(offset_start, capacity);
  return whole.has_value() && cubed::CheckedAdd(*whole, offset_end).has_value();
}

// Starts cubed::Client::ReadInto of handle `id` (adopted, and detached at once: the caller owns
// its reference) into `out`: its bulk read downloads straight into it. INVALID_ARGUMENT when
// offset_start + capacity + offset_end (the handle's size as far as the SDK knows) overflows;
// FAILED_PRECONDITION once closed.
absl::Status StartReadInto(cubed_client& c, uint64_t id, uint64_t offset_start, uint64_t offset_end,
                           void* out, uint64_t capacity,
                           std::future<absl::StatusOr<uint64_t>>* read) {
  std::optional<uint64_t> whole = cubed::CheckedAdd(offset_start, capacity);
  if (whole.has_value()) whole = cubed::CheckedAdd(*whole, offset_end);
  if (!whole.has_value()) {
    return absl::InvalidArgumentError("offset_start + capacity + offset_end overflows 64 bits");
  }
  absl::ReaderMutexLock lock(&c.mu);
  if (c.client == nullptr) return Closed();
  cubed::Handle handle = c.client->Adopt(id, *whole);
  handle.Detach();
  *read = c.client->ReadInto(cubed::Binding(handle, offset_start, offset_end),
                             absl::MakeSpan(static_cast<uint8_t*>(out), capacity));
  return absl::OkStatus();
}

}  // namespace

int32_t cubed_client_read_into_async(cubed_client* client, uint64_t id, uint64_t offset_start,
                                     uint64_t offset_end, void* out, uint64_t capacity,
                                     cubed_reply* reply, cubed_error* error) {
  if (client == nullptr || reply == nullptr || (out == nullptr && capacity != 0)) {
    return Invalid(error,
                   "cubed_client_read_into_async: client or reply is NULL, or out with capacity");
  }
  if (id == 0) return Invalid(error, "cubed_client_read_into_async: handle id 0");
  if (const int32_t code = ClaimReply(client, reply, error)) return code;
  std::future<absl::StatusOr<uint64_t>> read;
  if (absl::Status s = StartReadInto(*client, id, offset_start, offset_end, out, capacity, &read);
      !s.ok()) {
    reply->state->used.store(false);
    return Fail(error, s);
  }
  // The reply completes once nothing more can land in `out`.
  std::thread([read = std::move(read), state = reply->state]() mutable {
    absl::StatusOr<uint64_t> written = read.get();
    CompleteReply(*state, [&written](ReplyState& s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (written.ok()) {
        s.read_size = *written;
      } else {
        s.reply.set_code(static_cast<int32_t>(written.status().code()));
        s.reply.set_message(std::string(written.status().message()));
      }
    });
  }).detach();
  return 0;
}

uint64_t cubed_reply_read_size(const cubed_reply* reply) {
  if (reply == nullptr || !reply->state->Done()) return 0;
  return reply->state->read_size;
}

int32_t cubed_client_read_into(cubed_client* client, uint64_t id, uint64_t offset_start,
                               uint64_t offset_end, void* out, uint64_t capacity, uint64_t* size,
                               int64_t timeout_ms, cubed_error* error) {
  if (client == nullptr || size == nullptr || (out == nullptr && capacity != 0)) {
    return Invalid(error, "cubed_client_read_into: client or size is NULL, or out with capacity");
  }
  if (IsLargeRead(*client, offset_start, capacity, offset_end)) {
    // Waits until the read ended whatever `timeout_ms` says (the download has its own
    // deadline, BulkDeadline), so that nothing lands in `out` after this returns.
    std::future<absl::StatusOr<uint64_t>> read;
    if (absl::Status s = StartReadInto(*client, id, offset_start, offset_end, out, capacity, &read);
        !s.ok()) {
      return Fail(error, s);
    }
    absl::StatusOr<uint64_t> written = read.get();
    if (!written.ok()) return Fail(error, written.status());
    *size = *written;
    return 0;
  }
  cubed_reply reply{std::make_shared<ReplyState>()};
  if (const int32_t code = cubed_client_read(client, id, offset_start, offset_end, &reply, error)) {
    return code;
  }
  if (const int32_t code = cubed_reply_wait(&reply, timeout_ms, error)) return code;
  if (const int32_t code = cubed_reply_status(&reply, error)) return code;
  ReplyState* s = reply.state.get();  // Done: its fields are no longer written.
  if (s->data.size() != 1) {
    return Fail(error, absl::InternalError(absl::StrCat("read: the daemon answered ",
                                                        s->data.size(), " data entries, not 1")));
  }
  const std::string& bytes = s->data[0];
  if (bytes.size() > capacity) {
    return Fail(error,
                absl::OutOfRangeError(absl::StrCat("read: ", bytes.size(), " bytes do not fit the ",
                                                   capacity, " bytes of out")));
  }
  if (!bytes.empty()) std::memcpy(out, bytes.data(), bytes.size());
  *size = bytes.size();
  return 0;
}

}  // extern "C"
