// libFuzzer target: the daemon's request decoding, validation and device calls, run against a
// real CPU device.
//
// Every request is converted and checked by the same functions the daemon uses
// (server/service/request_conversion.h, server/service/stream/stream_command_conversion.h,
// common/kernel_metadata.h) and, when valid, executed on one CPU Device (server/channel/device.h,
// 1 MiB memory limit) created once per process, so the handle, offset, size, metadata and kernel
// bounds checks run against real storage. docs/security.md ("Fuzzing") says how to run it.
//
// Input: the first byte picks the mode (byte % 4):
//   0  session stream: the rest is one v1::SessionRequest, parsed as the gRPC edge parses it; its
//      commands run in order in one fresh session (stream_client.h; client ids are chosen by the
//      input, so later commands can name what earlier ones created; a bulk command moves its
//      bytes as a client would: one upload chunk, or download pieces of 256 KiB).
//   1  unary RPCs: the rest is records [rpc: 1 byte][length: 2 bytes LE][request bytes]; rpc picks
//      the Compute method (server/auth/rpc.h Method, modulo the number of Compute methods), the
//      bytes are parsed as its request (unary_client.h). GetStats takes no fields and reads only
//      the metrics: its records are skipped. Handle ids are random, so the harness maps small
//      numbers: a session field below 16 names the input's sessions[v % n] (the first is opened
//      before the first record), a handle field 1 .. 64 names the (v-1) % n-th handle the input's
//      RPCs created; other values pass as they are (unknown ids).
//   2  kernel metadata: [num_buffers: 1 byte][num_tensors: 1 byte][u32 words LE...] decoded by
//      DecodeKernelMetadata; a decoded block must survive Encode -> Decode unchanged.
//   3  program: the rest is a compact program of unary requests and stream commands over the
//      input's live sessions and handles, every numeric operand an edge value picked by one byte
//      (program.h has the format). Nearly every input is well-formed, so the fuzzer spends its
//      time on sizes, offsets, shapes, strides and counts rather than on protobuf syntax.
//
// Steering: Note [Magnitude feedback] (magnitude.h) turns each new order of magnitude of the
// sizes a request implies into coverage, and program inputs are mutated by their structure
// (program_mutator.h); the harness's own code is not coverage-instrumented, nor is library code
// (coverage_ignorelist.txt).
//
// No launch is capped by the harness: the kernels' own work bound (docs/kernel-abi.md, "Work
// bound") keeps every accepted launch proportional to the memory it binds.
//
// Invariants (a breach aborts with __builtin_trap, which libFuzzer reports as a crash):
//   * every error status has a message and is not INTERNAL, UNKNOWN or DATA_LOSS (those mean a
//     daemon bug, docs/error-model.md);
//   * no device call throws a C++ exception (on the daemon's loop thread that ends the process);
//   * a failed unary request, and a failed stream command other than release, leaves the
//     device's allocations (count and bytes in use) unchanged;
//   * every completion callback (reads, syncs, profiles, transfer pieces) runs exactly once, and
//     every reserved stream reply slot is filled exactly once (the CPU backend completes
//     synchronously);
//   * a successful read returns one entry per binding, each of the bytes its binding addresses
//     (the view, or product(shape) * elem_size), at most max_read_bytes in all; a bulk read's
//     pieces are in order, within their chunk, and add up to the dense size of each binding;
//   * after the input's sessions are closed, no session is open and the allocation count and
//     bytes in use are back to zero.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/kernel_metadata.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/session.pb.h"
#include "server/auth/rpc.h"
#include "tests/fuzz/harness.h"
#include "tests/fuzz/program.h"
#include "tests/fuzz/program_mutator.h"
#include "tests/fuzz/stream_client.h"
#include "tests/fuzz/unary_client.h"

namespace cubed::fuzz {
namespace {

// Mode 0: one SessionRequest, its commands run in a fresh stream session.
void RunStream(const uint8_t* data, size_t size) {
  v1::SessionRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  UnaryClient unary;  // No session of its own: it only closes the stream's at the end.
  {
    StreamClient stream(unary);
    if (stream.Open(request.open(), /*quota_owner=*/false)) {
      for (v1::Command& c : *request.mutable_commands()) stream.Run(c);
    }
  }
  unary.Finish();
}

// Mode 1: records of unary requests (RunUnary), their ids mapped by IdMap.

// Maps the small numbers of a raw request to the input's sessions and handles (see the top).
class IdMap {
 public:
  explicit IdMap(const UnaryClient& client) : client_(client) {}
  uint64_t Session(uint64_t v) const {
    const std::vector<SessionId>& s = client_.sessions();
    return v < 16 && !s.empty() ? s[v % s.size()].value() : v;
  }
  uint64_t Handle(uint64_t v) const {
    const std::vector<KnownHandle>& h = client_.handles();
    return v >= 1 && v <= 64 && !h.empty() ? h[(v - 1) % h.size()].id.value() : v;
  }
  void Binding(v1::Binding* b) const { b->set_handle(Handle(b->handle())); }
  template <typename Request>
  void SessionOf(Request& r) const {
    r.set_session(Session(r.session()));
  }

 private:
  const UnaryClient& client_;
};

// Parses `data` as the request of `rpc`, maps its ids and runs it; unparsable bytes are skipped
// (gRPC refuses them before the service sees them).
template <typename Request, typename Run>
void Parsed(const uint8_t* data, size_t size, Run run) {
  Request r;
  if (r.ParseFromArray(data, static_cast<int>(size))) run(r);
}

// The methods of cubed.v1.Compute: every Method before kSession (server/auth/rpc.h).
constexpr int kComputeMethods = static_cast<int>(Method::kSession);

void Dispatch(UnaryClient& c, const IdMap& map, Method method, const uint8_t* data, size_t size) {
  switch (method) {
    case Method::kOpenSession:
      return Parsed<v1::OpenSessionRequest>(data, size, [&](auto& r) { c.OpenSession(r, false); });
    case Method::kCloseSession:
      return Parsed<v1::CloseSessionRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        c.CloseSession(r);
      });
    case Method::kCreate:
      return Parsed<v1::CreateRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        c.Create(r);
      });
    case Method::kCreateTensor:
      return Parsed<v1::CreateTensorRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        c.CreateTensor(r);
      });
    case Method::kEmpty:
      return Parsed<v1::EmptyRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        c.Empty(r);
      });
    case Method::kEmptyTensor:
      return Parsed<v1::EmptyTensorRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        c.EmptyTensor(r);
      });
    case Method::kRead:
      return Parsed<v1::ReadRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        for (v1::Binding& b : *r.mutable_bindings()) map.Binding(&b);
        c.Read(r);
      });
    case Method::kReadTensor:
      return Parsed<v1::ReadTensorRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        for (v1::BindingWithMeta& b : *r.mutable_bindings()) map.Binding(b.mutable_binding());
        c.ReadTensor(r);
      });
    case Method::kGetResource:
      return Parsed<v1::GetResourceRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        map.Binding(r.mutable_binding());
        c.GetResource(r);
      });
    case Method::kExecute:
      return Parsed<v1::ExecuteRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        for (v1::Binding& b : *r.mutable_bindings()->mutable_buffers()) map.Binding(&b);
        if (r.count().has_dynamic()) map.Binding(r.mutable_count()->mutable_dynamic());
        c.Execute(r);
      });
    case Method::kStartProfile:  // Also trace_events (a traced profile).
      return Parsed<v1::StartProfileRequest>(data, size, [&](auto& r) {
        c.SessionCall(method, map.Session(r.session()), r.trace_events());
      });
    case Method::kFlush:
    case Method::kSync:
    case Method::kEndProfile:
      // Flush, Sync, EndProfile: `uint64 session = 1` only.
      return Parsed<v1::SyncRequest>(
          data, size, [&](auto& r) { c.SessionCall(method, map.Session(r.session())); });
    case Method::kMemoryUsage:
    case Method::kMemoryCleanup:
    case Method::kGetInfo:
      // `uint32 device = 1` only.
      return Parsed<v1::GetInfoRequest>(data, size,
                                        [&](auto& r) { c.DeviceCall(method, r.device()); });
    case Method::kRelease:
      return Parsed<v1::ReleaseRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        for (uint64_t& h : *r.mutable_handles()) h = map.Handle(h);
        c.Release(r);
      });
    case Method::kCopyToDevice:
      return Parsed<v1::CopyToDeviceRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        r.set_target_session(map.Session(r.target_session()));
        map.Binding(r.mutable_source());
        if (r.target_handle() != 0) r.set_target_handle(map.Handle(r.target_handle()));
        c.CopyToDevice(r);
      });
    case Method::kImportMemory:  // The fixture's CPU device: regions unknown, CUDA refused.
      return Parsed<v1::ImportMemoryRequest>(data, size, [&](auto& r) {
        map.SessionOf(r);
        c.ImportMemory(r);
      });
    case Method::kGetStats:  // No fields; answered from the metrics, not by the device.
    case Method::kDrain:     // Would end the daemon under test: never picked.
    case Method::kSession:   // Not a Compute method: never picked.
    case Method::kCount:
      return;
  }
}

void RunUnary(const uint8_t* data, size_t size) {
  UnaryClient client;
  if (!client.Start()) return;
  const IdMap map(client);
  int records = 0;
  while (size >= 3 && records++ < 64) {
    const auto method = static_cast<Method>(data[0] % kComputeMethods);
    const size_t len = std::min<size_t>(data[1] | (size_t{data[2]} << 8), size - 3);
    if (Verbose()) {
      std::fprintf(stderr, "record %s (%zu bytes)\n", std::string(MethodName(method)).c_str(), len);
    }
    Dispatch(client, map, method, data + 3, len);
    data += 3 + len;
    size -= 3 + len;
  }
  client.Finish();
}

// Mode 2: a kernel metadata block, decoded and round-tripped.
void RunMetadata(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const uint32_t num_buffers = data[0], num_tensors = data[1];
  std::vector<uint32_t> words((size - 2) / 4);
  if (!words.empty()) std::memcpy(words.data(), data + 2, words.size() * 4);
  absl::StatusOr<KernelMetadata> meta = DecodeKernelMetadata(words, num_buffers, num_tensors);
  CheckStatus(meta.status());
  if (!meta.ok()) return;
  Check(meta->buffer_len.size() == num_buffers && meta->logical_len.size() == num_buffers &&
            meta->tensors.size() == num_tensors,
        "DecodeKernelMetadata: wrong counts");
  const std::vector<uint64_t> lens(meta->buffer_len.begin(), meta->buffer_len.end());
  absl::StatusOr<std::vector<uint32_t>> encoded = EncodeKernelMetadata(lens, meta->tensors);
  Check(encoded.ok(), "EncodeKernelMetadata refused a decoded block");
  absl::StatusOr<KernelMetadata> again = DecodeKernelMetadata(*encoded, num_buffers, num_tensors);
  Check(again.ok(), "DecodeKernelMetadata refused an encoded block");
  Check(again->buffer_len == meta->buffer_len, "metadata round trip: buffer_len differs");
  for (uint32_t i = 0; i < num_tensors; ++i) {
    const TensorLayout& a = meta->tensors[i];
    const TensorLayout& b = again->tensors[i];
    Check(a.rank == b.rank && a.shape == b.shape && a.strides == b.strides,
          "metadata round trip: a tensor layout differs");
    Check(again->logical_len[i] == meta->logical_len[i], "metadata round trip: logical_len");
  }
}

}  // namespace
}  // namespace cubed::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  cubed::fuzz::SharedFixture();  // First: its setup silences logging.
  switch (data[0] % 4) {
    case 0:
      cubed::fuzz::RunStream(data + 1, size - 1);
      break;
    case 1:
      cubed::fuzz::RunUnary(data + 1, size - 1);
      break;
    case 2:
      cubed::fuzz::RunMetadata(data + 1, size - 1);
      break;
    default:
      cubed::fuzz::RunProgram(data + 1, size - 1);
      break;
  }
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  return cubed::fuzz::MutateInput(data, size, max_size, seed);
}
