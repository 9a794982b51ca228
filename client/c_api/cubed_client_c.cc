// The C ABI (cubed_client_c.h) over cubed::Client: Note [One client core]. Its reads are in
// cubed_client_c_read.cc, what both share in c_api_state.h.

#include "client/c_api/cubed_client_c.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/c_api/c_api_state.h"
#include "client/client.h"
#include "client/stack_command.h"
#include "cubed/v1/session.pb.h"

namespace {

using cubed::c_api::ClaimReply;
using cubed::c_api::Closed;
using cubed::c_api::CompleteReply;
using cubed::c_api::DoneQueue;
using cubed::c_api::Fail;
using cubed::c_api::Invalid;
using cubed::c_api::ReplyState;
using cubed::c_api::Send;
using cubed::v1::Command;
using cubed::v1::Reply;

// Whether the daemon answers `command` (session.proto): those need a reply to be asked for.
bool Answers(const Command& command) {
  switch (command.kind_case()) {
    case Command::kCreateTensor:
    case Command::kEmptyTensor:
    case Command::kRead:
    case Command::kReadTensor:
    case Command::kSync:
    case Command::kMemoryUsage:
    case Command::kEndProfile:
    case Command::kEndGraph:
      return true;
    default:
      return false;
  }
}

absl::Duration Timeout(int64_t timeout_ms) {
  return timeout_ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(timeout_ms);
}

}  // namespace

extern "C" {

int32_t cubed_c_api_version(void) { return CUBED_C_API_VERSION; }

void cubed_error_clear(cubed_error* error) {
  if (error == nullptr) return;
  std::free(error->message);
  error->message = nullptr;
  error->code = 0;
}

void cubed_connect_options_init(cubed_connect_options* options) {
  if (options == nullptr) return;
  const cubed::ClientOptions d;
  *options = cubed_connect_options{};
  options->struct_size = sizeof(cubed_connect_options);
  options->timeout_ms = absl::ToInt64Milliseconds(d.timeout);
  options->device = d.device;
  options->lease_ms = absl::ToInt64Milliseconds(d.lease);
  options->max_message_bytes = d.max_message_bytes;
  options->session = d.session;
  options->transport = 0;
  options->carrier = 0;
  options->bulk_threshold = d.bulk_threshold;
  options->bulk_chunk = d.bulk_chunk;
  options->region_threshold = d.region_threshold;
  options->resume_timeout_ms = absl::ToInt64Milliseconds(d.resume_timeout);
  options->reply_spin_us = -1;
  options->bulk_lanes = d.bulk_lanes;
}

int32_t cubed_client_connect(const cubed_connect_options* options, cubed_client** client,
                             cubed_error* error) {
  if (options == nullptr) return Invalid(error, "cubed_client_connect: options is NULL");
  if (client == nullptr) return Invalid(error, "cubed_client_connect: client is NULL");
  *client = nullptr;
  const cubed_connect_options& o = *options;
  if (o.struct_size < sizeof(cubed_connect_options)) {
    return Invalid(error, absl::StrCat("cubed_connect_options.struct_size is ", o.struct_size,
                                       ", this library needs ", sizeof(cubed_connect_options),
                                       " (call cubed_connect_options_init)"));
  }
  if (o.address == nullptr || o.address[0] == '\0') {
    return Invalid(error, "cubed_connect_options.address is empty");
  }
  if (o.timeout_ms <= 0) {
    return Invalid(
        error, absl::StrCat("cubed_connect_options.timeout_ms must be > 0, got ", o.timeout_ms));
  }
  if (o.lease_ms < 0) {
    return Invalid(error,
                   absl::StrCat("cubed_connect_options.lease_ms must be >= 0, got ", o.lease_ms));
  }
  if (o.max_message_bytes <= 0 || o.max_message_bytes > INT32_MAX) {
    return Invalid(error, absl::StrCat("cubed_connect_options.max_message_bytes must be 1 .. ",
                                       INT32_MAX, ", got ", o.max_message_bytes));
  }
  if (o.transport != 0 && o.transport != 1) {
    return Invalid(error, absl::StrCat("cubed_connect_options.transport must be 0 (stream) or 1 "
                                       "(unary), got ",
                                       o.transport));
  }
  if (o.carrier < 0 || o.carrier > 2) {
    return Invalid(error, absl::StrCat("cubed_connect_options.carrier must be 0 (auto), 1 (ring) "
                                       "or 2 (grpc), got ",
                                       o.carrier));
  }
  if (o.bulk_chunk < 1 || o.bulk_chunk > (uint64_t{4} << 20)) {
    return Invalid(error, absl::StrCat("cubed_connect_options.bulk_chunk must be 1 .. 4194304, "
                                       "got ",
                                       o.bulk_chunk));
  }
  if (o.bulk_lanes > 16) {
    return Invalid(error, absl::StrCat("cubed_connect_options.bulk_lanes must be 0 .. 16, got ",
                                       o.bulk_lanes));
  }
  if (o.resume_timeout_ms < 0) {
    return Invalid(error, absl::StrCat("cubed_connect_options.resume_timeout_ms must be >= 0, "
                                       "got ",
                                       o.resume_timeout_ms));
  }
  if (o.reply_spin_us > 1000000) {
    return Invalid(error, absl::StrCat("cubed_connect_options.reply_spin_us must be at most "
                                       "1000000, got ",
                                       o.reply_spin_us));
  }
  auto text = [](const char* s) { return s == nullptr ? std::string() : std::string(s); };
  cubed::ClientOptions options_cc;
  options_cc.address = o.address;
  options_cc.timeout = absl::Milliseconds(o.timeout_ms);
  options_cc.device = o.device;
  options_cc.lease = absl::Milliseconds(o.lease_ms);
  options_cc.max_message_bytes = static_cast<int>(o.max_message_bytes);
  options_cc.token = text(o.token);
  options_cc.tls_ca_file = text(o.tls_ca_file);
  options_cc.tls_cert_file = text(o.tls_cert_file);
  options_cc.tls_key_file = text(o.tls_key_file);
  options_cc.tls_server_name = text(o.tls_server_name);
  options_cc.session = o.session;
  options_cc.transport = o.transport == 1 ? cubed::Transport::kUnary : cubed::Transport::kStream;
  options_cc.stream_carrier = o.carrier == 1   ? cubed::StreamCarrier::kRing
                              : o.carrier == 2 ? cubed::StreamCarrier::kGrpc
                                               : cubed::StreamCarrier::kAuto;
  options_cc.bulk_threshold = o.bulk_threshold;
  options_cc.bulk_chunk = o.bulk_chunk;
  options_cc.bulk_lanes = o.bulk_lanes;
  options_cc.region_threshold = o.region_threshold;
  options_cc.resume_timeout = absl::Milliseconds(o.resume_timeout_ms);
  options_cc.reply_spin =
      o.reply_spin_us < 0 ? absl::Microseconds(-1) : absl::Microseconds(o.reply_spin_us);
  // The library's callers (Python, other languages) do not use Abseil themselves: its lock-order
  // graph, on in Debian's build, is only this library's cost (docs/api.md, "Abseil's lock-order
  // graph").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<std::unique_ptr<cubed::Client>> connected =
      cubed::Client::Connect(std::move(options_cc));
  if (!connected.ok()) return Fail(error, connected.status());
  auto c = std::make_unique<cubed_client>();
  cubed::Client& cc = **connected;
  c->session = cc.session();
  c->lease_ms = absl::ToInt64Milliseconds(cc.lease());
  c->reply_spin = cc.reply_spin();
  c->transport = cc.transport() == cubed::Transport::kUnary ? 1 : 0;
  c->carrier = cc.transport() == cubed::Transport::kStream &&
                       cc.stream_carrier() == cubed::StreamCarrier::kRing
                   ? 1
                   : 2;
  {
    absl::MutexLock lock(&c->mu);
    c->client = *std::move(connected);
  }
  *client = c.release();
  return 0;
}

void cubed_client_close(cubed_client* client) {
  if (client == nullptr) return;
  std::unique_ptr<cubed::Client> closing;
  {
    absl::MutexLock lock(&client->mu);
    closing = std::move(client->client);
  }
  closing.reset();  // Ends the session; fails the replies still awaited (their callbacks run).
  absl::MutexLock lock(&client->queue->mu);
  client->queue->closed = true;
}

void cubed_client_cancel(cubed_client* client) {
  if (client == nullptr) return;
  absl::ReaderMutexLock lock(&client->mu);
  if (client->client != nullptr) client->client->CancelStream();
}

void cubed_client_free(cubed_client* client) {
  if (client == nullptr) return;
  cubed_client_close(client);
  {
    DoneQueue* q = client->queue.get();
    absl::MutexLock lock(&q->mu);
    q->mu.Await(absl::Condition(
        +[](DoneQueue* queue)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue->mu) { return queue->pollers == 0; },
        q));
  }
  delete client;
}

uint64_t cubed_client_session(const cubed_client* client) {
  return client == nullptr ? 0 : client->session;
}

int64_t cubed_client_lease_ms(const cubed_client* client) {
  return client == nullptr ? 0 : client->lease_ms;
}

int64_t cubed_client_reply_spin_us(const cubed_client* client) {
  return client == nullptr ? 0 : absl::ToInt64Microseconds(client->reply_spin);
}

int32_t cubed_client_transport(const cubed_client* client) {
  return client == nullptr ? 0 : client->transport;
}

int32_t cubed_client_carrier(const cubed_client* client) {
  return client == nullptr ? 2 : client->carrier;
}

int32_t cubed_client_call(cubed_client* client, const char* method, const void* request,
                          size_t size, cubed_reply* reply, cubed_error* error) {
  if (client == nullptr || method == nullptr || reply == nullptr) {
    return Invalid(error, "cubed_client_call: client, method or reply is NULL");
  }
  if (request == nullptr && size != 0) return Invalid(error, "cubed_client_call: request is NULL");
  if (method[0] != '/') {
    return Invalid(error, absl::StrCat("cubed_client_call: method '", method,
                                       "' is not a full name like /cubed.v1.Compute/GetInfo"));
  }
  if (reply->state->used.exchange(true)) {
    return Invalid(error, "the cubed_reply was sent before (make one per command)");
  }
  absl::StatusOr<std::string> response;
  {
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client == nullptr) {
      response = Closed();
    } else {
      response = client->client->CallUnary(
          method, absl::string_view(static_cast<const char*>(request), size));
    }
  }
  if (!response.ok()) {
    reply->state->used.store(false);
    return Fail(error, response.status());
  }
  ReplyState* s = reply->state.get();
  absl::MutexLock lock(&s->mu);
  s->data.push_back(*std::move(response));
  s->done = true;
  s->ready.store(true, std::memory_order_release);
  return 0;
}

void cubed_client_resume_state(cubed_client* client, uint64_t* resumes, int32_t* resuming) {
  uint64_t n = 0;
  bool now = false;
  if (client != nullptr) {
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client != nullptr) {
      n = client->client->StreamResumes();
      now = client->client->StreamResuming();
    }
  }
  if (resumes != nullptr) *resumes = n;
  if (resuming != nullptr) *resuming = now ? 1 : 0;
}

int32_t cubed_client_next_id(cubed_client* client, uint64_t* id, cubed_error* error) {
  if (client == nullptr || id == nullptr) {
    return Invalid(error, "cubed_client_next_id: client or id is NULL");
  }
  absl::StatusOr<uint64_t> next;
  {
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client == nullptr) return Fail(error, Closed());
    next = client->client->NewStreamId();
  }
  if (!next.ok()) return Fail(error, next.status());
  *id = *next;
  return 0;
}

cubed_reply* cubed_reply_create(uint64_t tag) {
  auto* reply = new cubed_reply{std::make_shared<ReplyState>()};
  reply->state->tag = tag;
  return reply;
}

int32_t cubed_client_send(cubed_client* client, const void* command, size_t size,
                          cubed_reply* reply, cubed_error* error) {
  if (client == nullptr) return Invalid(error, "cubed_client_send: client is NULL");
  if (command == nullptr && size != 0) return Invalid(error, "cubed_client_send: command is NULL");
  if (size > INT32_MAX) {
    return Invalid(error, absl::StrCat("cubed_client_send: a command of ", size,
                                       " bytes (at most 2^31 - 1; use cubed_client_create for "
                                       "large data)"));
  }
  // Parsed onto the stack and sent from there (Note [Commands on the stack] in
  // client/stack_command.h): the Python SDK's every launch comes through here.
  cubed::StackCommand stack;
  Command& parsed = *stack;
  if (!parsed.ParseFromArray(command, static_cast<int>(size))) {
    return Invalid(
        error, absl::StrCat("cubed_client_send: ", size, " bytes that are not a cubed.v1.Command"));
  }
  if (parsed.kind_case() == Command::KIND_NOT_SET) {
    return Invalid(error, "cubed_client_send: a Command with no command set");
  }
  if ((parsed.has_create() && parsed.create().bulk_size() != 0) ||
      (parsed.has_create_tensor() && parsed.create_tensor().bulk()) ||
      (parsed.has_read() && parsed.read().bulk()) ||
      (parsed.has_read_tensor() && parsed.read_tensor().bulk())) {
    return Invalid(error,
                   "cubed_client_send: bulk transfers need their Upload / Download "
                   "(use cubed_client_create; the C++ SDK picks bulk by size)");
  }
  if (Answers(parsed) != (reply != nullptr)) {
    return Invalid(error, absl::StrCat("cubed_client_send: command #", parsed.kind_case(),
                                       Answers(parsed) ? " answers: pass a reply"
                                                       : " does not answer: pass no reply"));
  }
  return Send(client, parsed, reply, error);
}

int32_t cubed_client_create(cubed_client* client, const void* data, uint64_t size, uint64_t* id,
                            cubed_error* error) {
  if (client == nullptr || id == nullptr) {
    return Invalid(error, "cubed_client_create: client or id is NULL");
  }
  if (size == 0) return Invalid(error, "cubed_client_create: size is 0 (need >= 1 byte)");
  if (data == nullptr) return Invalid(error, "cubed_client_create: data is NULL");
  absl::StatusOr<cubed::Handle> handle;
  {
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client == nullptr) return Fail(error, Closed());
    handle = client->client->Create(absl::MakeConstSpan(static_cast<const uint8_t*>(data), size));
  }
  if (!handle.ok()) return Fail(error, handle.status());
  *id = handle->Detach();  // The caller releases it.
  return 0;
}

int32_t cubed_client_empty(cubed_client* client, uint64_t size, uint64_t* id, cubed_error* error) {
  if (client == nullptr || id == nullptr) {
    return Invalid(error, "cubed_client_empty: client or id is NULL");
  }
  if (size == 0) return Invalid(error, "cubed_client_empty: size is 0 (need >= 1 byte)");
  absl::StatusOr<cubed::Handle> handle;
  {
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client == nullptr) return Fail(error, Closed());
    handle = client->client->Empty(size);
  }
  if (!handle.ok()) return Fail(error, handle.status());
  *id = handle->Detach();
  return 0;
}

int32_t cubed_client_execute(cubed_client* client, const void* command, size_t size,
                             cubed_error* error) {
  if (client == nullptr) return Invalid(error, "cubed_client_execute: client is NULL");
  if (command == nullptr || size == 0 || size > INT32_MAX) {
    return Invalid(error, absl::StrCat("cubed_client_execute: need a serialized Command, got ",
                                       size, " bytes"));
  }
  cubed::StackCommand stack;
  Command& parsed = *stack;
  if (!parsed.ParseFromArray(command, static_cast<int>(size)) || !parsed.has_execute()) {
    return Invalid(error,
                   "cubed_client_execute: the bytes are not a cubed.v1.Command with "
                   "`execute` set");
  }
  return Send(client, parsed, nullptr, error);
}

int32_t cubed_client_release(cubed_client* client, const uint64_t* ids, size_t count,
                             cubed_error* error) {
  if (client == nullptr) return Invalid(error, "cubed_client_release: client is NULL");
  if (count == 0) return 0;
  if (ids == nullptr) return Invalid(error, "cubed_client_release: ids is NULL");
  if (client->transport == 1) {  // Unary: the C++ SDK's batched Release RPCs, sent now.
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client == nullptr) return Fail(error, Closed());
    for (size_t i = 0; i < count; ++i) client->client->Adopt(ids[i], 0);  // Dropped: released.
    const absl::Status released = client->client->FlushReleases();
    return released.ok() ? 0 : Fail(error, released);
  }
  constexpr size_t kPerCommand = 65536;
  for (size_t start = 0; start < count; start += kPerCommand) {
    const size_t n = std::min(kPerCommand, count - start);
    Command command;
    command.mutable_release()->mutable_ids()->Add(ids + start, ids + start + n);
    if (int32_t code = Send(client, command, nullptr, error); code != 0) {
      return code;
    }
  }
  return 0;
}

int32_t cubed_client_flush(cubed_client* client, cubed_error* error) {
  if (client == nullptr) return Invalid(error, "cubed_client_flush: client is NULL");
  absl::Status flushed;
  {
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client == nullptr) return Fail(error, Closed());
    flushed = client->client->Flush();
  }
  return flushed.ok() ? 0 : Fail(error, flushed);
}

int32_t cubed_client_sync(cubed_client* client, cubed_reply* reply, cubed_error* error) {
  if (client == nullptr || reply == nullptr) {
    return Invalid(error, "cubed_client_sync: client or reply is NULL");
  }
  Command command;
  command.mutable_sync();
  return Send(client, command, reply, error);
}

int32_t cubed_client_memory_usage(cubed_client* client, cubed_memory_usage* usage,
                                  cubed_error* error) {
  if (client == nullptr || usage == nullptr) {
    return Invalid(error, "cubed_client_memory_usage: client or usage is NULL");
  }
  absl::StatusOr<cubed::MemoryUsage> got;
  {
    absl::ReaderMutexLock lock(&client->mu);
    if (client->client == nullptr) return Fail(error, Closed());
    got = client->client->GetMemoryUsage();
  }
  if (!got.ok()) return Fail(error, got.status());
  usage->number_allocs = got->number_allocs;
  usage->bytes_in_use = got->bytes_in_use;
  usage->bytes_padding = got->bytes_padding;
  usage->bytes_reserved = got->bytes_reserved;
  return 0;
}

int32_t cubed_client_next_done(cubed_client* client, int64_t timeout_ms, uint64_t* tag,
                               cubed_error* error) {
  if (client == nullptr || tag == nullptr) {
    return Invalid(error, "cubed_client_next_done: client or tag is NULL");
  }
  DoneQueue* q = client->queue.get();
  absl::MutexLock lock(&q->mu);
  ++q->pollers;
  auto ready = [q]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) { return !q->tags.empty() || q->closed; };
  q->mu.AwaitWithTimeout(absl::Condition(&ready), Timeout(timeout_ms));
  --q->pollers;
  if (!q->tags.empty()) {
    *tag = q->tags.front();
    q->tags.pop_front();
    return 0;
  }
  if (q->closed) return Fail(error, Closed());
  return Fail(error, absl::DeadlineExceededError(
                         absl::StrCat("no reply completed within ", timeout_ms, " ms")));
}

void cubed_reply_notify(cubed_reply* reply) {
  if (reply == nullptr) return;
  ReplyState* s = reply->state.get();
  bool to_queue = false;
  {
    absl::MutexLock lock(&s->mu);
    s->notify = true;
    to_queue = s->done && !s->queued && s->queue != nullptr;
    s->queued = s->queued || to_queue;
  }
  if (to_queue) {
    absl::MutexLock lock(&s->queue->mu);
    s->queue->tags.push_back(s->tag);
  }
}

int32_t cubed_reply_wait(cubed_reply* reply, int64_t timeout_ms, cubed_error* error) {
  if (reply == nullptr) return Invalid(error, "cubed_reply_wait: reply is NULL");
  if (!reply->state->Wait(Timeout(timeout_ms))) {
    return Fail(error,
                absl::DeadlineExceededError(absl::StrCat("no reply within ", timeout_ms, " ms")));
  }
  return 0;
}

int32_t cubed_reply_done(const cubed_reply* reply) {
  return reply != nullptr && reply->state->Done() ? 1 : 0;
}

int32_t cubed_reply_status(const cubed_reply* reply, cubed_error* error) {
  if (reply == nullptr) return Invalid(error, "cubed_reply_status: reply is NULL");
  ReplyState* s = reply->state.get();
  if (!s->Done()) return Fail(error, absl::FailedPreconditionError("the reply has not come yet"));
  if (!s->stream_status.ok()) return Fail(error, s->stream_status);
  if (s->reply.code() == 0) return 0;
  const absl::StatusCode code = s->reply.code() >= 1 && s->reply.code() <= 16
                                    ? static_cast<absl::StatusCode>(s->reply.code())
                                    : absl::StatusCode::kUnknown;
  return Fail(error, absl::Status(code, s->reply.message()));
}

uint64_t cubed_reply_failed_commands(const cubed_reply* reply) {
  if (reply == nullptr || !reply->state->Done()) return 0;
  return reply->state->reply.failed_commands();
}

int32_t cubed_reply_bytes(cubed_reply* reply, const uint8_t** data, size_t* size,
                          cubed_error* error) {
  if (reply == nullptr || data == nullptr || size == nullptr) {
    return Invalid(error, "cubed_reply_bytes: reply, data or size is NULL");
  }
  ReplyState* s = reply->state.get();
  absl::MutexLock lock(&s->mu);
  if (!s->done) return Fail(error, absl::FailedPreconditionError("the reply has not come yet"));
  if (!s->stream_status.ok()) {
    return Fail(error, absl::FailedPreconditionError(
                           absl::StrCat("no answer came: ", s->stream_status.ToString())));
  }
  if (!s->serialized) {
    s->bytes = s->reply.SerializeAsString();
    s->serialized = true;
  }
  *data = reinterpret_cast<const uint8_t*>(s->bytes.data());
  *size = s->bytes.size();
  return 0;
}

size_t cubed_reply_data_count(const cubed_reply* reply) {
  if (reply == nullptr || !reply->state->Done()) return 0;
  return reply->state->data.size();
}

int32_t cubed_reply_data(const cubed_reply* reply, size_t index, const uint8_t** data,
                         uint64_t* size, cubed_error* error) {
  if (reply == nullptr || data == nullptr || size == nullptr) {
    return Invalid(error, "cubed_reply_data: reply, data or size is NULL");
  }
  const size_t count = cubed_reply_data_count(reply);
  if (index >= count) {
    return Invalid(error,
                   absl::StrCat("cubed_reply_data: entry ", index, " of a reply with ", count));
  }
  const std::string& bytes = reply->state->data[index];
  *data = reinterpret_cast<const uint8_t*>(bytes.data());
  *size = bytes.size();
  return 0;
}

void cubed_reply_free(cubed_reply* reply) { delete reply; }

}  // extern "C"
