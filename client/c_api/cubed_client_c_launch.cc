// The C ABI's prepared launches: cubed_launch_prepare, cubed_launch_free,
// cubed_client_send_launch.

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/c_api/c_api_state.h"
#include "client/c_api/cubed_client_c.h"
#include "client/execute_encoding.h"
#include "cubed/v1/session.pb.h"
#include "cubed/v1/types.pb.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/io/coded_stream.h"

// Note [Prepared C ABI launches]
// The Python SDK's launches came through cubed_client_send, which parsed each command onto a
// stack arena to check it (the daemon parses a SessionRequest whole: one that does not parse ends
// the stream, not one command) and serialized it again into the transport: ~0.6 of a ~0.8 us send
// on the 2-core VM, for a launch whose kernel, count, metadata and mode repeat (a chain of
// operations repeats a few launch keys) and whose buffers and scalars change. A prepared launch
// checks the fixed parts once (cubed_launch_prepare: a Command.Execute that parses, with a kernel
// and with neither buffers nor scalars) and keeps them serialized; each send
// (cubed_client_send_launch) writes the command around them: the buffers from numbers it encodes
// itself, the scalars as given once checked as a Bindings holding scalars only (the last checked
// bytes are remembered per thread: a model repeats its eps and scales, a fill its value). Every
// byte the stream carries is thus checked or written by the library; the transport frames the
// command as it is with its seq appended (AppendSerializedCommandBytes), with no parse.
struct cubed_launch {
  std::string head;      // The Execute's fields other than bindings (kernel, count, mode).
  std::string metadata;  // Its Bindings' fields other than buffers and scalars (the metadata).
};

namespace {

using cubed::c_api::Closed;
using cubed::c_api::Fail;
using cubed::c_api::Invalid;
using google::protobuf::io::CodedOutputStream;

// Wire tags (field number << 3 | wire type) of what a send writes.
constexpr uint8_t kExecuteTag = (cubed::v1::Command::kExecuteFieldNumber << 3) | 2;
constexpr uint8_t kBindingsTag = (cubed::v1::Command::Execute::kBindingsFieldNumber << 3) | 2;

void AppendLength(uint64_t n, std::string* out) {
  uint8_t bytes[10];
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(n, bytes);
  out->append(reinterpret_cast<const char*>(bytes), end - bytes);
}

// Parses `bytes` into `message` as the daemon will parse it, `depth` messages deep in a
// SessionRequest: with protobuf's recursion limit less those levels, so that nesting the check
// accepts cannot fail the daemon's parse of the whole request (which ends the stream).
bool ParseAtDepth(absl::string_view bytes, int depth, google::protobuf::MessageLite* message) {
  if (bytes.size() > INT32_MAX) return false;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(google::protobuf::io::CodedInputStream::GetDefaultRecursionLimit() - depth);
  return message->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
}

// Whether `scalars` is a serialized Bindings holding scalars only (Note [Prepared C ABI launches]).
bool ScalarsOnly(absl::string_view scalars) {
  thread_local std::string last_checked;
  if (scalars.empty() || scalars == last_checked) return true;
  alignas(std::max_align_t) char block[1024];
  google::protobuf::Arena arena(block, sizeof(block));
  auto* bindings = google::protobuf::Arena::CreateMessage<cubed::v1::Bindings>(&arena);
  // SessionRequest.commands -> Command.execute -> Execute.bindings: three levels down.
  if (!ParseAtDepth(scalars, 3, bindings) || bindings->buffers_size() != 0 ||
      bindings->metadata_size() != 0) {
    return false;
  }
  last_checked.assign(scalars.data(), scalars.size());
  return true;
}

}  // namespace

int32_t cubed_launch_prepare(const void* execute, size_t size, cubed_launch** launch,
                             cubed_error* error) {
  if (launch == nullptr) return Invalid(error, "cubed_launch_prepare: launch is NULL");
  *launch = nullptr;
  if (execute == nullptr && size != 0) {
    return Invalid(error, "cubed_launch_prepare: execute is NULL");
  }
  if (size > INT32_MAX) {
    return Invalid(error, absl::StrCat("cubed_launch_prepare: an Execute of ", size,
                                       " bytes (at most 2^31 - 1)"));
  }
  cubed::v1::Command::Execute parsed;  // Two levels down: SessionRequest.commands -> execute.
  if (!ParseAtDepth(absl::string_view(static_cast<const char*>(execute), size), 2, &parsed)) {
    return Invalid(error, absl::StrCat("cubed_launch_prepare: ", size,
                                       " bytes that are not a cubed.v1.Command.Execute"));
  }
  if (!parsed.has_kernel())
    return Invalid(error, "cubed_launch_prepare: an Execute with no kernel");
  if (parsed.bindings().buffers_size() != 0 || parsed.bindings().scalars_size() != 0) {
    return Invalid(error,
                   "cubed_launch_prepare: the Execute's bindings hold buffers or scalars (each "
                   "send gives its own)");
  }
  auto* prepared = new cubed_launch;
  prepared->metadata = parsed.bindings().SerializeAsString();
  parsed.clear_bindings();
  prepared->head = parsed.SerializeAsString();
  *launch = prepared;
  return 0;
}

void cubed_launch_free(cubed_launch* launch) { delete launch; }

int32_t cubed_client_send_launch(cubed_client* client, const cubed_launch* launch,
                                 const uint64_t* buffers, size_t count, const void* scalars,
                                 size_t scalars_size, cubed_error* error) {
  if (client == nullptr || launch == nullptr) {
    return Invalid(error, "cubed_client_send_launch: client or launch is NULL");
  }
  if (buffers == nullptr && count != 0) {
    return Invalid(error, "cubed_client_send_launch: buffers is NULL");
  }
  if (scalars == nullptr && scalars_size != 0) {
    return Invalid(error, "cubed_client_send_launch: scalars is NULL");
  }
  if (count > (uint64_t{1} << 20)) {
    return Invalid(error, absl::StrCat("cubed_client_send_launch: ", count,
                                       " buffers (a launch binds at most 64)"));
  }
  const absl::string_view scalar_bytes(static_cast<const char*>(scalars), scalars_size);
  if (!ScalarsOnly(scalar_bytes)) {
    return Invalid(error, absl::StrCat("cubed_client_send_launch: ", scalars_size,
                                       " bytes of scalars that are not a cubed.v1.Bindings "
                                       "holding scalars only"));
  }
  // Command{execute: head + bindings{buffers..., metadata, scalars}}, in a buffer each thread
  // reuses (no allocation once it has grown).
  thread_local std::string bindings;
  thread_local std::string command;
  bindings.clear();
  for (size_t i = 0; i < count; ++i) {
    const uint64_t* b = buffers + 3 * i;
    uint8_t entry[cubed::kMaxBufferEntryBytes];
    bindings.append(reinterpret_cast<const char*>(entry),
                    cubed::WriteBufferEntry(b[0], b[1], b[2], entry) - entry);
  }
  bindings.append(launch->metadata);
  bindings.append(scalar_bytes.data(), scalar_bytes.size());
  const uint64_t execute_size =
      launch->head.size() + 1 + CodedOutputStream::VarintSize64(bindings.size()) + bindings.size();
  command.clear();
  command.push_back(static_cast<char>(kExecuteTag));
  AppendLength(execute_size, &command);
  command.append(launch->head);
  command.push_back(static_cast<char>(kBindingsTag));
  AppendLength(bindings.size(), &command);
  command.append(bindings);
  absl::Status sent;
  {
    absl::ReaderMutexLock lock(&client->mu);
    sent = client->client == nullptr ? Closed() : client->client->SendStreamSerialized(command);
  }
  return sent.ok() ? 0 : Fail(error, sent);
}
