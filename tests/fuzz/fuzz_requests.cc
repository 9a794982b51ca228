// libFuzzer target: the daemon's request decoding and validation, run against a real CPU device.
//
// Every input is parsed with protobuf exactly as the gRPC edge parses it, converted and checked
// by the same functions the daemon uses (server/service/request_conversion.h,
// server/channel/stream_command.h, common/kernel_metadata.h) and, when valid, executed on one
// CPU Device (server/channel/device.h, 1 MiB memory limit) created once per process, so the handle,
// offset, metadata and kernel bounds checks run against real storage. docs/security.md
// ("Fuzzing") says how to run it.
//
// Input: the first byte picks the mode (byte % 3):
//   0  session stream: the rest is one v1::SessionRequest; its commands run in order through
//      StreamRunner in one fresh session (client ids are chosen by the input, so later commands
//      can name what earlier ones created).
//   1  unary RPCs: the rest is records [rpc: 1 byte][length: 2 bytes LE][request bytes]; rpc % 18
//      picks the Compute RPC (order of compute.proto). The glue of compute_service.cc is mirrored
//      here (it needs a gRPC server around it); the checks and the device calls are the real ones.
//      Handle ids are random, so the harness maps small numbers: a session field below 16 names
//      the input's sessions[v % n] (the first is opened before the first record), a handle field
//      1 .. 64 names the (v-1) % n-th handle the input's RPCs created; other values pass as they
//      are (unknown ids).
//   2  kernel metadata: [num_buffers: 1 byte][num_tensors: 1 byte][u32 words LE...] decoded by
//      DecodeKernelMetadata; a decoded block must survive Encode -> Decode unchanged.
//
// No launch is capped by the harness: the kernels' own work bound (docs/kernel-abi.md, "Work
// bound") keeps every accepted launch proportional to the memory it binds.
//
// Invariants (a breach aborts with __builtin_trap, which libFuzzer reports as a crash):
//   * every error status has a message and is not INTERNAL, UNKNOWN or DATA_LOSS (those mean a
//     daemon bug, docs/error-model.md);
//   * a failed unary request leaves the device's allocations (count and bytes in use) unchanged;
//   * every completion callback (reads, syncs, profiles) runs exactly once, and every reserved
//     stream reply slot is filled exactly once (the CPU backend completes synchronously);
//   * a successful read returns one entry per binding;
//   * after the input's sessions are closed, no session is open and the allocation count and
//     bytes in use are back to zero.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kernel_metadata.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/session.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "server/channel/device.h"
#include "server/channel/stream_runner.h"
#include "server/compute/cpu/cpu_server.h"
#include "server/service/request_conversion.h"
#include "server/service/stream/stream_command_conversion.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// Invariant breach: a bug in the daemon, not in the input.
[[noreturn]] void Breach(const char* what) {
  std::fprintf(stderr, "fuzz_requests: invariant broken: %s\n", what);
  __builtin_trap();
}

void Check(bool ok, const char* what) {
  if (!ok) Breach(what);
}

bool IsBugCode(absl::StatusCode code) {
  return code == absl::StatusCode::kInternal || code == absl::StatusCode::kUnknown ||
         code == absl::StatusCode::kDataLoss;
}

// CUBED_FUZZ_VERBOSE=1 prints every status (for reading what a reproducer does).
bool Verbose() {
  static const bool verbose = std::getenv("CUBED_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

void CheckStatus(const absl::Status& s) {
  if (Verbose()) std::fprintf(stderr, "  -> %s\n", s.ToString().c_str());
  if (s.ok()) return;
  if (s.message().empty()) Breach("an error status without a message");
  if (IsBugCode(s.code())) {
    std::fprintf(stderr, "fuzz_requests: %s\n", s.ToString().c_str());
    Breach("an INTERNAL/UNKNOWN/DATA_LOSS status from client input");
  }
}

struct Fixture {
  RequestLimits limits;
  std::unique_ptr<Device> device;
};

Fixture& Get() {
  static Fixture* fixture = [] {
    spdlog::set_level(spdlog::level::off);
    // Parse failures (e.g. invalid UTF-8 in a string field) are logged by protobuf; the daemon
    // answers them with gRPC's own error, and here they only flood the fuzzer's output.
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    auto* f = new Fixture;
    CpuServerOptions cpu;
    cpu.memory_limit = 1 << 20;  // Small: keeps kernels and reads fast under ASan.
    DeviceOptions options;
    options.default_lease = absl::Seconds(600);
    options.max_read_bytes = 4 << 20;
    f->device = std::make_unique<Device>(0, std::make_unique<CpuServer>(cpu), options);
    return f;
  }();
  return *fixture;
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// After an input: everything the input opened is closed and nothing is left allocated.
void CheckBaseline(Device& device) {
  Check(device.session_count() == 0, "a session is still open after the input closed them");
  const MemoryUsage usage = device.Usage();
  Check(usage.number_allocs == 0, "allocations left after every session closed");
  Check(usage.bytes_in_use == 0, "bytes in use after every session closed");
}

// ---- Mode 0: the session stream ----------------------------------------------------------

// Collects replies; checks that each reserved slot is filled exactly once.
class CheckingSink final : public ReplySink {
 public:
  uint64_t Reserve() override {
    slots_.emplace_back();
    return slots_.size() - 1;
  }
  void Fill(uint64_t slot, StreamReply reply) override {
    Check(slot < slots_.size(), "Fill of a slot never reserved");
    Check(!slots_[slot].has_value(), "a reply slot filled twice");
    if (Verbose()) {
      std::fprintf(stderr, "reply %llu %s\n", static_cast<unsigned long long>(reply.seq),
                   reply.status.ToString().c_str());
    }
    if (!reply.status.ok()) CheckStatus(reply.status);
    slots_[slot] = std::move(reply);
  }
  void CheckAllFilled() const {
    for (const auto& slot : slots_) Check(slot.has_value(), "a reserved reply slot never filled");
  }

 private:
  std::vector<std::optional<StreamReply>> slots_;
};

void RunStream(const uint8_t* data, size_t size) {
  v1::SessionRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  Fixture& f = Get();
  // The daemon answers NOT_FOUND for another device before anything runs.
  if (request.open().device() != 0) return;
  // As session_stream.cc: every command is converted first, then run in order.
  std::vector<StreamCommand> commands;
  for (v1::Command& c : *request.mutable_commands()) {
    commands.push_back(ToStreamCommand(c, f.limits));
  }
  StreamRunner runner;
  absl::StatusOr<StreamOpened> opened = runner.Open(*f.device, request.open().lease_ms());
  CheckStatus(opened.status());
  if (opened.ok()) {
    auto sink = std::make_shared<CheckingSink>();
    for (StreamCommand& command : commands) runner.Run(*f.device, command, sink);
    sink->CheckAllFilled();
    runner.Close(*f.device);
  }
  CheckBaseline(*f.device);
}

// ---- Mode 1: unary RPCs ------------------------------------------------------------------

enum Rpc {
  kOpenSession,
  kCloseSession,
  kCreate,
  kCreateTensor,
  kEmpty,
  kEmptyTensor,
  kRead,
  kReadTensor,
  kGetResource,
  kExecute,
  kFlush,
  kSync,
  kMemoryUsage,
  kMemoryCleanup,
  kStartProfile,
  kEndProfile,
  kGetInfo,
  kRelease,
  kNumRpcs,
};

class UnaryRun {
 public:
  UnaryRun() : f_(Get()) {}

  // Opens the first session. False when that fails (never with the fixture's options).
  bool Start() {
    absl::StatusOr<SessionGrant> grant = device().OpenSession(0, absl::Now());
    CheckStatus(grant.status());
    if (!grant.ok()) return false;
    sessions_.push_back(grant->session);
    return true;
  }

  // Runs one request; checks the status and, on failure, that memory is as before.
  void Run(uint8_t rpc, const uint8_t* data, size_t size) {
    const MemoryUsage before = device().Usage();
    if (Verbose()) std::fprintf(stderr, "rpc %d (%zu bytes)\n", rpc % kNumRpcs, size);
    absl::Status status;
    if (!Dispatch(static_cast<Rpc>(rpc % kNumRpcs), data, size, status)) return;  // Unparsable.
    CheckStatus(status);
    if (!status.ok()) {
      const MemoryUsage after = device().Usage();
      Check(after.number_allocs == before.number_allocs, "a failed request changed number_allocs");
      Check(after.bytes_in_use == before.bytes_in_use, "a failed request changed bytes_in_use");
    }
  }

  // Closes every session the input opened.
  void Finish() {
    for (uint64_t s : sessions_) (void)device().CloseSession(s);  // NOT_FOUND if closed already.
    CheckBaseline(device());
  }

 private:
  Device& device() { return *f_.device; }

  uint64_t MapSession(uint64_t v) const { return v < 16 ? sessions_[v % sessions_.size()] : v; }
  uint64_t MapHandle(uint64_t v) const {
    if (v >= 1 && v <= 64 && !handles_.empty()) return handles_[(v - 1) % handles_.size()];
    return v;
  }
  void MapBinding(v1::Binding* b) const { b->set_handle(MapHandle(b->handle())); }

  template <typename Request>
  void MapSessionOf(Request& request) const {
    request.set_session(MapSession(request.session()));
  }

  // As ComputeService::OnSession / OnDevice: a session or device index on no device.
  static absl::Status NoSession(uint64_t session) {
    return absl::NotFoundError(absl::StrCat("session ", session, " is not open"));
  }
  static bool OnDevice(uint64_t session) { return DeviceOfSession(session) == 0; }

  void Created(const absl::StatusOr<NewHandle>& h) {
    if (h.ok()) handles_.push_back(h->handle);
  }

  // Runs a completion-style call and checks that `done` ran exactly once, synchronously.
  template <typename Call>
  absl::Status Completed(Call call) {
    int calls = 0;
    absl::Status result;
    call([&](absl::Status s) {
      ++calls;
      result = std::move(s);
    });
    Check(calls == 1, "a completion callback did not run exactly once");
    return result;
  }

  // Parses and runs; false when the bytes are not a valid message of that type.
  bool Dispatch(Rpc rpc, const uint8_t* data, size_t size, absl::Status& status) {
    const int n = static_cast<int>(size);
    const absl::Time now = absl::Now();
    switch (rpc) {
      case kOpenSession: {
        v1::OpenSessionRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        if (r.device() != 0) return true;  // NOT_FOUND at the edge.
        absl::StatusOr<SessionGrant> g = device().OpenSession(r.lease_ms(), now);
        if (g.ok()) sessions_.push_back(g->session);
        status = g.status();
        return true;
      }
      case kCloseSession: {
        v1::CloseSessionRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        status = OnDevice(r.session()) ? device().CloseSession(r.session()).status()
                                       : NoSession(r.session());
        return true;
      }
      case kCreate: {
        v1::CreateRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        if (r.data().empty()) {
          status = absl::InvalidArgumentError("data: empty");
        } else if (!OnDevice(r.session())) {
          status = NoSession(r.session());
        } else {
          absl::StatusOr<NewHandle> h = device().Create(r.session(), Bytes(r.data()), now);
          Created(h);
          status = h.status();
        }
        return true;
      }
      case kCreateTensor: {
        v1::CreateTensorRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        status = CheckCreateTensor(r);
        if (status.ok() && !OnDevice(r.session())) status = NoSession(r.session());
        if (status.ok()) {
          const std::vector<uint64_t> shape(r.shape().begin(), r.shape().end());
          absl::StatusOr<NewHandle> h =
              device().CreateTensor(r.session(), Bytes(r.data()), shape, r.elem_size(), now);
          if (h.ok()) Check(h->strides.size() == shape.size(), "CreateTensor: strides != rank");
          Created(h);
          status = h.status();
        }
        return true;
      }
      case kEmpty: {
        v1::EmptyRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        if (r.size() == 0) {
          status = absl::InvalidArgumentError("size: 0");
        } else if (!OnDevice(r.session())) {
          status = NoSession(r.session());
        } else {
          absl::StatusOr<NewHandle> h = device().Empty(r.session(), r.size(), now);
          Created(h);
          status = h.status();
        }
        return true;
      }
      case kEmptyTensor: {
        v1::EmptyTensorRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        const std::vector<uint64_t> shape(r.shape().begin(), r.shape().end());
        status = CheckTensorShape(shape, r.elem_size(), "empty_tensor").status();
        if (status.ok() && !OnDevice(r.session())) status = NoSession(r.session());
        if (status.ok()) {
          absl::StatusOr<NewHandle> h =
              device().EmptyTensor(r.session(), shape, r.elem_size(), now);
          if (h.ok()) Check(h->strides.size() == shape.size(), "EmptyTensor: strides != rank");
          Created(h);
          status = h.status();
        }
        return true;
      }
      case kRead: {
        v1::ReadRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        for (v1::Binding& b : *r.mutable_bindings()) MapBinding(&b);
        absl::StatusOr<std::vector<BindingRef>> bindings = ToReadBindings(r, f_.limits);
        status = bindings.status();
        if (status.ok() && !OnDevice(r.session())) status = NoSession(r.session());
        if (status.ok()) {
          std::vector<std::string> out;
          status = Completed([&](DoneCallback done) {
            device().Read(r.session(), *bindings, &out, now, std::move(done));
          });
          if (status.ok()) Check(out.size() == bindings->size(), "Read: entries != bindings");
        }
        return true;
      }
      case kReadTensor: {
        v1::ReadTensorRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        for (v1::BindingWithMeta& b : *r.mutable_bindings()) MapBinding(b.mutable_binding());
        absl::StatusOr<std::vector<TensorRef>> tensors = ToTensorRefs(r, f_.limits);
        status = tensors.status();
        if (status.ok() && !OnDevice(r.session())) status = NoSession(r.session());
        if (status.ok()) {
          std::vector<std::string> out;
          status = Completed([&](DoneCallback done) {
            device().ReadTensor(r.session(), *tensors, &out, now, std::move(done));
          });
          if (status.ok()) Check(out.size() == tensors->size(), "ReadTensor: entries != bindings");
        }
        return true;
      }
      case kGetResource: {
        v1::GetResourceRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        MapBinding(r.mutable_binding());
        status = OnDevice(r.session())
                     ? device().GetResource(r.session(), ToBindingRef(r.binding()), now).status()
                     : NoSession(r.session());
        return true;
      }
      case kExecute: {
        v1::ExecuteRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        for (v1::Binding& b : *r.mutable_bindings()->mutable_buffers()) MapBinding(&b);
        if (r.count().has_dynamic()) MapBinding(r.mutable_count()->mutable_dynamic());
        absl::StatusOr<ExecuteCommand> command = ToExecuteCommand(r, f_.limits);
        status = command.status();
        if (status.ok() && !OnDevice(r.session())) status = NoSession(r.session());
        if (status.ok()) status = device().Execute(r.session(), *std::move(command), now);
        return true;
      }
      case kFlush:
      case kSync:
      case kStartProfile:
      case kEndProfile: {
        v1::SyncRequest r;  // Flush, Sync, StartProfile, EndProfile: `uint64 session = 1` only.
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        const uint64_t s = r.session();
        if (!OnDevice(s)) {
          status = NoSession(s);
        } else if (rpc == kFlush) {
          status = device().Flush(s, now);
        } else if (rpc == kSync) {
          status = Completed([&](DoneCallback done) { device().Sync(s, now, std::move(done)); });
        } else if (rpc == kStartProfile) {
          status = device().StartProfile(s, now);
        } else {
          status = Completed([&](DoneCallback done) {
            device().EndProfile(s, now,
                                [done = std::move(done)](absl::StatusOr<absl::Duration> d) mutable {
                                  done(d.status());
                                });
          });
        }
        return true;
      }
      case kMemoryUsage:
      case kMemoryCleanup:
      case kGetInfo: {
        v1::GetInfoRequest r;  // `uint32 device = 1` only.
        if (!r.ParseFromArray(data, n)) return false;
        if (r.device() != 0) return true;  // NOT_FOUND at the edge.
        if (rpc == kMemoryCleanup) device().Cleanup();
        (void)device().Usage();
        (void)device().Description();
        return true;
      }
      case kRelease: {
        v1::ReleaseRequest r;
        if (!r.ParseFromArray(data, n)) return false;
        MapSessionOf(r);
        for (uint64_t& h : *r.mutable_handles()) h = MapHandle(h);
        status = CheckRelease(r, f_.limits);
        if (status.ok() && !OnDevice(r.session())) status = NoSession(r.session());
        if (status.ok()) {
          status = device().Release(r.session(),
                                    absl::MakeConstSpan(r.handles().data(), r.handles_size()), now);
        }
        return true;
      }
      case kNumRpcs:
        break;
    }
    return false;
  }

  Fixture& f_;
  std::vector<uint64_t> sessions_;
  std::vector<uint64_t> handles_;
};

void RunUnary(const uint8_t* data, size_t size) {
  UnaryRun run;
  if (!run.Start()) return;
  int records = 0;
  while (size >= 3 && records++ < 64) {
    const uint8_t rpc = data[0];
    const size_t len = std::min<size_t>(data[1] | (size_t{data[2]} << 8), size - 3);
    run.Run(rpc, data + 3, len);
    data += 3 + len;
    size -= 3 + len;
  }
  run.Finish();
}

// ---- Mode 2: kernel metadata -------------------------------------------------------------

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
}  // namespace cubed

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
    case 0:
      cubed::RunStream(data + 1, size - 1);
      break;
    case 1:
      cubed::RunUnary(data + 1, size - 1);
      break;
    default:
      cubed::RunMetadata(data + 1, size - 1);
      break;
  }
  return 0;
}
