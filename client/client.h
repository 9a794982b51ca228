#pragma once

// cubed::Client: the C++ SDK. Mirrors CubeCL's ComputeServer trait over gRPC to a cubed daemon.
//
//   auto client = cubed::Client::Connect({.address = "unix:/run/user/1000/cubed.sock"});
//   auto x = (*client)->CreateTensor(bytes, {2, 3}, 4);
//   auto y = (*client)->EmptyTensor({2, 3}, 4);
//   (*client)->Execute(cubed::Builtin("relu", cubed::ElemType::kF32), {*x}, {*y});
//   auto out = (*client)->ReadTensor({*y}).get();
//
// Thread-safety: a Client may be used from many threads at once; commands sent from one thread
// run in the order sent. Every call carries a deadline (ClientOptions::timeout): a unary call's
// own, and on the session stream (the default, see Transport) each answering command's future
// resolves DEADLINE_EXCEEDED when no reply came in time. Handles must not outlive their Client:
// the session they belong to ends with it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/shared_memory.h"
#include "common/elem_type.h"
#include "common/memory_usage.h"
#include "common/spin_wait.h"
#include "cubed/v1/compute.pb.h"
#include "cubed/v1/session.pb.h"
#include "cubed/v1/types.pb.h"

namespace cubed {

// How a Client talks to the daemon. kStream: one pipelined session stream
// (proto/cubed/v1/session.proto): allocations, executes, flushes and releases return at once
// and their errors surface at the next read or sync touching what they wrote (the handle is
// poisoned; docs/api.md, "The session stream"). kUnary: one blocking RPC per call; errors come
// back from the call itself.
enum class Transport { kStream, kUnary };

// What carries the session stream (kStream). kAuto: the daemon's command ring in shared memory
// when the daemon is on this host (a "unix:" address whose ring socket opens one; docs/api.md,
// "The command ring"), gRPC otherwise. kRing: the ring, or Connect fails saying why. kGrpc:
// always gRPC.
enum class StreamCarrier { kAuto, kRing, kGrpc };

struct ClientOptions {
  // gRPC target: "unix:/path/to/cubed.sock" or "host:port".
  std::string address;
  // Deadline of each call.
  absl::Duration timeout = absl::Seconds(60);
  // Device to open the session on.
  uint32_t device = 0;
  // Session lease; 0 = the daemon's default. The daemon frees the session's handles when this
  // long passes without a call.
  absl::Duration lease = absl::ZeroDuration();
  // Largest message sent or received, bytes. On the session stream's gRPC carrier a command
  // larger than this alone (an inline create: below bulk_threshold) is refused by the call that
  // sends it, INVALID_ARGUMENT naming this option, and the session goes on.
  int max_message_bytes = 1 << 30;
  // Security of a "host:port" address (docs/security.md); a Unix socket needs none (the daemon
  // knows the peer's uid). TLS when tls_ca_file is set: PEM file of the CA that signed the
  // daemon's certificate; otherwise plain TCP (a daemon started with --insecure_tcp).
  std::string tls_ca_file;
  // mTLS: PEM files of this client's certificate (chain) and its key.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Name the daemon's certificate is checked against; empty = the host of `address`.
  std::string tls_server_name;
  // Bearer token sent as "authorization: Bearer TOKEN" on every call; empty = none.
  std::string token;
  // Join an existing session instead of opening one (e.g. from `cubectl session open`). The
  // client then does not close it; it still releases the handles it created.
  uint64_t session = 0;
  // kStream unless the environment variable CUBED_CLIENT_TRANSPORT is "unary" (it may also say
  // "stream"; it overrides this field either way). A joined session (`session` != 0) always uses
  // kUnary: the stream opens its own session.
  Transport transport = Transport::kStream;
  // kAuto unless the environment variable CUBED_CLIENT_CARRIER is "ring", "grpc" or "auto" (it
  // overrides this field; "ring" is kRing for unix: addresses and kAuto for others).
  StreamCarrier stream_carrier = StreamCarrier::kAuto;
  // Session stream only: creates and reads of this many bytes or more move their bytes in
  // chunks on the stream's Upload / Download RPCs (docs/api.md, "Bulk transfers"), so their
  // size is not bounded by max_message_bytes and neither side holds more than a few chunks
  // besides the data itself. Such a Create / CreateTensor returns once every byte is on the
  // daemon, with the daemon's error if the create failed. 0 = never.
  uint64_t bulk_threshold = uint64_t{4} << 20;
  // Chunk size of those transfers, 1 byte .. 4 MiB; a chunk and its header must fit one message
  // either way, so with a max_message_bytes under 4 MiB + 128 the chunks are that much smaller.
  uint64_t bulk_chunk = uint64_t{4} << 20;
  // Connections one of those transfers may spread its bytes over, 1 .. 16 (Note [Bulk lanes],
  // server/service/stream/bulk_transfers.h): one connection moves what gRPC's per-byte work on
  // one thread at each end allows (~1.5 GiB/s on the H200 machine); a transfer of at least
  // 2 × bulk_lane_bytes runs up to this many Upload / Download RPCs at once, each on its own
  // connection (opened at the first such transfer), each with at least bulk_lane_bytes.
  // 0 = by this host's cores: one lane per 4 cores, 1 .. 4 (more lanes only cost a host of few
  // cores: the lanes' threads compete for them, and a read's result is zero-filled first).
  uint32_t bulk_lanes = 0;
  uint64_t bulk_lane_bytes = uint64_t{16} << 20;
  // Session stream over a Unix socket (a daemon on this host): creates and reads of this many
  // bytes or more copy them through a shared-memory region the client registers with its session
  // (docs/api.md, "Shared-memory regions"): one memcpy on this side, no gRPC message, before
  // bulk_threshold applies. A Create through it returns once the daemon has the bytes. 0 =
  // never; a daemon without a region socket turns it off by itself.
  uint64_t region_threshold = uint64_t{1} << 20;
  // Session stream over gRPC (not the command ring): when the daemon ends the stream
  // UNAVAILABLE (it drained with a checkpoint), keep trying this long to resume the session on
  // the daemon that restores it (Note [Stream resume], stream_transport.h; docs/api.md,
  // "Resume"). Commands awaiting a reply then fail UNAVAILABLE saying whether they ran, and the
  // next Sync fails UNAVAILABLE naming the commands that did not run; later calls go on in the
  // same session. Makes the stream a gRPC one whatever stream_carrier or CUBED_CLIENT_CARRIER
  // say, and turns region_threshold off (regions do not survive a restart). 0 = never:
  // the stream's end loses the session (Note [Session lost]).
  absl::Duration resume_timeout = absl::ZeroDuration();
  // Told how far a Create / CreateTensor has moved its bytes, as (bytes done, total): after each
  // chunk of a bulk upload (bulk_threshold) that gRPC accepted, and after each 64 MiB of the
  // copy into the staging region (region_threshold), the last call with done == total. Called on
  // the thread of the Create, before it returns; not called for creates sent in one message.
  // Empty: no calls. For progress bars of applications on the session stream.
  std::function<void(uint64_t done, uint64_t total)> upload_progress;
  // Releases are sent in one RPC once this many are queued ...
  size_t release_batch = 64;
  // ... or this long after the first of a batch was queued.
  absl::Duration release_delay = absl::Milliseconds(20);
  // How long Client::Await (and the SDK's own waits for a reply) poll before they sleep (Note
  // [Waiting awake]). Negative: four times what the daemon suggests when it opens the command
  // ring (its --ring_spin_us: 50 us on hosts with 8 cores or more, 0 on smaller ones), 0 on
  // gRPC; at most 1 ms. Zero: never poll. Above 1 s: INVALID_ARGUMENT at Connect.
  absl::Duration reply_spin = absl::Microseconds(-1);
};

class Client;
class ReleaseBatcher;

// A reference-counted handle to daemon memory (CubeCL's Handle). Copies share one reference on
// the daemon; when the last copy is destroyed the SDK releases it (batched, asynchronously; see
// Client::FlushReleases). A default-constructed Handle is empty. Thread-safe like shared_ptr.
class Handle {
 public:
  Handle() = default;
  // Daemon handle id; 0 when empty.
  uint64_t id() const;
  // Bytes of the allocation (padding included for tensors); 0 when empty.
  uint64_t size() const;
  explicit operator bool() const { return state_ != nullptr; }

  // Keeps the handle alive on the daemon after the last copy goes (for tools that hand ids to
  // another process); applies to every copy. Returns the id (0 when empty).
  uint64_t Detach();

  // Implementation detail (client/handle_state.h).
  struct State;
  explicit Handle(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

// A byte view of a handle (CubeCL's Binding): offset_start bytes skipped at the front,
// offset_end cut from the back.
struct Binding {
  Binding() = default;
  Binding(Handle h) : handle(std::move(h)) {}  // NOLINT: implicit, like CubeCL's binding().
  Binding(Handle h, uint64_t start, uint64_t end)
      : handle(std::move(h)), offset_start(start), offset_end(end) {}
  Handle handle;
  uint64_t offset_start = 0;
  uint64_t offset_end = 0;
};

// A tensor on the daemon: its handle plus layout. Strides are in elements and may be padded.
struct Tensor {
  Handle handle;
  std::vector<uint64_t> shape;
  std::vector<uint64_t> strides;
  uint32_t elem_size = 0;

  // Product of the shape (1 for rank 0).
  uint64_t NumElements() const;
};

// A builtin kernel (docs/kernel-abi.md). `out_dtype` for cast; `axis` for reductions and
// gather; `index_dtype` (i32 or i64) for gather's indices; `allow_tf32` for an f32 matmul that
// may run on TF32 tensor cores (BuiltinKernel.allow_tf32 of types.proto).
struct BuiltinKernel {
  std::string name;
  ElemType dtype = ElemType::kF32;
  ElemType out_dtype = ElemType::kF32;
  uint32_t axis = 0;
  ElemType index_dtype = ElemType::kI64;
  bool allow_tf32 = false;
};
// A builtin kernel whose output type equals its input type, axis 0.
inline BuiltinKernel Builtin(std::string name, ElemType dtype) {
  return BuiltinKernel{std::move(name), dtype, dtype, 0};
}

// Scalars of one element type passed to a kernel; values are converted to `elem` by the daemon.
// Use `floats` for F32/F64/F16/BF16, `ints` for I8/I16/I32/I64, `uints` for U8/U16/U32 and
// BOOL (0 or 1).
struct Scalars {
  ElemType elem = ElemType::kF32;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<uint64_t> uints;
};

// A static cube count (CUDA grid).
struct CubeCount {
  uint32_t x = 1, y = 1, z = 1;
};

enum class ExecutionMode { kChecked, kUnchecked };

// Raw launch description for Execute: buffers, metadata and scalars exactly as sent.
struct LaunchBindings {
  std::vector<Binding> buffers;
  std::vector<uint32_t> metadata;
  std::vector<Scalars> scalars;
};

// Storage behind a binding (trait: get_resource).
struct Resource {
  uint64_t storage_id = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t device_pointer = 0;  // CUDA only.
  std::string ipc_handle;       // CUDA only.
};

// A shared-memory region of the client's session (docs/api.md, "Shared-memory regions"): memory
// of this process from which the daemon takes a create's bytes and into which it writes a read's,
// without carrying them through gRPC. Holds `memory` alive; the registration lasts until
// Client::ReleaseRegion or the session's end.
struct Region {
  uint64_t id = 0;  // The region's id in the session.
  std::shared_ptr<SharedMemory> memory;
};

// Memory of another process on the daemon's host as CUDA IPC shares it (Client::ImportCudaIpc;
// docs/api.md, "Importing memory (C++ SDK)").
struct CudaIpcMemory {
  // The 64 bytes of cuIpcGetMemHandle of the producer's allocation, taken at the allocation's
  // base address (cuMemGetAddressRange).
  std::string ipc_handle;
  uint64_t offset = 0;      // Bytes from the allocation's start to the range's first byte.
  uint64_t size = 0;        // Bytes of the range: >= 1, offset + size within the allocation.
  std::string device_uuid;  // The GPU, as DaemonInfo::device.uuid() prints it: the session's.
};

// A recorded graph of the session (docs/api.md, "Recorded graphs"), made by Client::EndGraph and
// run by Client::ReplayGraph. A plain value: the graph lives on the daemon until
// Client::ReleaseGraph or the session's end.
struct Graph {
  uint64_t id = 0;                        // The graph's id in the session.
  uint64_t steps = 0;                     // Executes recorded.
  std::vector<uint64_t> parameter_sizes;  // Bytes of each parameter's handle.
};

// Result of GetInfo.
struct DaemonInfo {
  v1::DeviceInfo device;
  uint32_t devices = 0;  // Devices the daemon serves.
  std::string version;   // Daemon version.
};

// future.get(), after polling `future` for `spin` (Note [Waiting awake], Client::reply_spin).
template <typename T>
T AwaitPolling(std::future<T> future, absl::Duration spin) {
  SpinUntil(spin, [&] {  // Note [Spin checks] in common/spin_wait.h.
    return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  return future.get();
}

class Client {
 public:
  // Connects and opens a session (or joins options.session). UNAVAILABLE when the daemon cannot
  // be reached; INVALID_ARGUMENT when the address is empty.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);

  // Closes the session (unless joined; then it sends the pending releases instead). Blocks up to
  // the deadline for that; errors are ignored. Handles still alive are no longer released.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The session id every request carries.
  uint64_t session() const;
  // The lease the daemon granted (zero for a joined session).
  absl::Duration lease() const;
  // The options the client was connected with.
  const ClientOptions& options() const;
  // The transport in use (options().transport after the environment and joining applied).
  Transport transport() const;
  // What carries the session stream: kRing or kGrpc (kGrpc in unary mode too).
  StreamCarrier stream_carrier() const;
  // How long a wait for a reply polls before it sleeps: options().reply_spin resolved (Note
  // [Waiting awake]).
  absl::Duration reply_spin() const;

  // Note [Waiting awake]: a thread that sleeps until a reply comes pays its wake-up on top of
  // the reply: the SDK's reader thread takes the reply and the sleeper must be scheduled again,
  // which on a virtual machine is an interrupt to an idle virtual CPU. On the H200 host (a
  // microVM) a 4-byte read over the command ring took 29-128 us with future.get() and 21-33 us
  // when the caller polled the future first (docs/benchmarks.md, runs 66-67). So a waiter polls
  // for reply_spin() (about what the daemon's own threads spin) before it sleeps; long waits
  // still sleep. On small hosts the daemon suggests 0, since a polling client would take the
  // core the daemon answers with.
  //
  // Waits for `future` as future.get() does, on this thread, polling it for reply_spin() first
  // (Note [Waiting awake]); e.g. `client.Await(client.Read({b}))`. Any thread.
  template <typename T>
  T Await(std::future<T> future) const {
    return AwaitPolling(std::move(future), reply_spin());
  }

  // trait: create. Stores `data` (1 byte or more) and returns a handle over exactly those bytes.
  absl::StatusOr<Handle> Create(absl::Span<const uint8_t> data);
  // Allocations: on the stream, Create and Empty return at once (bad sizes the daemon finds then
  // surface at the next read/sync of the handle); CreateTensor and EmptyTensor wait for the
  // daemon's layout reply and so return its errors (which the next Sync reports once more).
  //
  // trait: create_tensor. `data` is dense row-major, product(shape) * elem_size bytes; the
  // returned strides are the daemon's (possibly padded).
  absl::StatusOr<Tensor> CreateTensor(absl::Span<const uint8_t> data, std::vector<uint64_t> shape,
                                      uint32_t elem_size);
  // trait: empty. Uninitialized bytes.
  absl::StatusOr<Handle> Empty(uint64_t size);
  // trait: empty_tensor. Uninitialized.
  absl::StatusOr<Tensor> EmptyTensor(std::vector<uint64_t> shape, uint32_t elem_size);

  // Wraps handle `id` of this session (e.g. one Detach()ed by another client of the session) in
  // a Handle whose last copy releases one reference. Makes no call; an unknown id fails at use
  // (NOT_FOUND).
  Handle Adopt(uint64_t id, uint64_t size);

  // trait: read. The future is ready when the bytes of every binding arrived (after all earlier
  // work of the device); no thread waits meanwhile. INVALID_ARGUMENT for an empty handle.
  std::future<absl::StatusOr<std::vector<std::string>>> Read(std::vector<Binding> bindings);
  // trait: read_tensor. Densely packed row-major bytes per tensor; ready like Read.
  std::future<absl::StatusOr<std::vector<std::string>>> ReadTensor(std::vector<Tensor> tensors);
  // trait: read, into the caller's memory: the bytes of `binding` land at the front of `out`,
  // which must hold them (OUT_OF_RANGE otherwise, nothing meaningful in `out`). The future gives
  // how many bytes were written once they are all there. A bulk read (session stream,
  // bulk_threshold) downloads straight into `out`: no result strings, no second copy; other
  // reads go as Read and are copied in. `out` must stay valid and unread until the future is
  // ready; nothing is written to it after that.
  std::future<absl::StatusOr<uint64_t>> ReadInto(const Binding& binding, absl::Span<uint8_t> out);
  // trait: get_resource.
  absl::StatusOr<Resource> GetResource(const Binding& binding);

  // Copies the bytes of `source` (a binding of this session) into `target`'s session, a client
  // of the same daemon, usually on another device (ClientOptions::device; docs/api.md, "Several
  // devices"): into a new handle of `target` of the binding's size (target_handle empty), or
  // over bytes [target_offset, + size) of `target_handle`, a handle of `target`. The daemon
  // copies; nothing passes through this process. Ordered as the clients' own commands: waits
  // until the daemon took every command this client (and, with target_handle, `target`) sent
  // before, and returns once the copy is queued on both devices, so later commands of either
  // client run after it. Returns the target handle. The daemon's errors (NOT_FOUND for an
  // unknown or foreign session or handle, INVALID_ARGUMENT for a range, RESOURCE_EXHAUSTED over
  // the target's memory limit, UNAVAILABLE for a lost device) leave nothing allocated.
  absl::StatusOr<Handle> CopyToDevice(const Binding& source, Client& target,
                                      const Handle& target_handle = Handle(),
                                      uint64_t target_offset = 0);

  // Imports (docs/api.md, "Importing memory (C++ SDK)"; Note [Imported memory] in
  // server/compute/compute_server.h): a new handle of the session, with one reference, whose
  // bytes are memory another process of this host allocated, shared without a copy. It is used
  // like any handle (a Tensor over it takes the producer's shape and element strides). Neither
  // GetMemoryUsage nor the memory limit counts it; the session's quotas do. One blocking RPC.
  //
  // CUDA backend: a range of another process's CUDA allocation on the session's GPU. The
  // producer must keep the allocation until the daemon has processed the handle's last release:
  // `keep_alive` (may be null) is held that long, past the last Handle copy, until a later
  // FlushReleases returns OK or the Client is destroyed (Note [Import keep-alive] in
  // client/release_batcher.h). The producer's writes must be finished (synchronized) before
  // commands read them. Errors name the field: INVALID_ARGUMENT for handle bytes that are not 64
  // or that the driver cannot open, a size of 0, a range past the allocation, another GPU's UUID;
  // UNIMPLEMENTED on the CPU backend; RESOURCE_EXHAUSTED over a quota. Nothing stays mapped then.
  absl::StatusOr<Handle> ImportCudaIpc(const CudaIpcMemory& memory,
                                       std::shared_ptr<const void> keep_alive = nullptr);
  // CPU backend: bytes [offset, offset + size) of `region`, used in place: this process's writes
  // to region.memory show in the handle and the daemon's writes to the handle in the region.
  // Runs after every command sent before it. The handle keeps the daemon's mapping and holds
  // region.memory, so the region may be released at once. Session stream over a Unix socket only
  // (FAILED_PRECONDITION otherwise, as RegisterRegion). NOT_FOUND for a region the session does
  // not have (released before); INVALID_ARGUMENT for a size of 0 or a range past the region;
  // UNIMPLEMENTED on the CUDA backend; RESOURCE_EXHAUSTED over a quota.
  absl::StatusOr<Handle> ImportRegion(const Region& region, uint64_t offset, uint64_t size);

  // trait: execute, with a raw launch description. Returns once the launch is queued. Unary:
  // kernel errors the daemon finds at validation come back here. Stream: they poison the outputs
  // and come back from the next Sync and from reads of those outputs.
  absl::Status Execute(const BuiltinKernel& kernel, CubeCount count, const LaunchBindings& bindings,
                       ExecutionMode mode = ExecutionMode::kChecked);
  // Runs a builtin kernel on tensors: inputs then outputs as buffers, metadata built from their
  // layouts (buffer_len = handle bytes / elem size), cube count ceil(n / 256) for the first
  // output's n elements. The spans are read before this returns (nothing is copied to keep).
  absl::Status Execute(const BuiltinKernel& kernel, absl::Span<const Tensor> inputs,
                       absl::Span<const Tensor> outputs, absl::Span<const Scalars> scalars = {});

  // trait: flush.
  absl::Status Flush();
  // trait: sync. Ready when every earlier command of the device has finished; no thread waits.
  std::future<absl::Status> Sync();

  // trait: memory_usage of the session's device.
  absl::StatusOr<MemoryUsage> GetMemoryUsage();
  // trait: memory_cleanup; returns the usage afterwards.
  absl::StatusOr<MemoryUsage> MemoryCleanup();

  // trait: start_profile / end_profile. EndProfile returns the device time in between;
  // FAILED_PRECONDITION from the daemon when no profile was started.
  absl::Status StartProfile();
  absl::StatusOr<absl::Duration> EndProfile();

  // A traced profile (docs/operations.md, "Traces"): StartTrace waits for the session's earlier
  // commands (Sync), then opens a profile that also records up to `max_events` (1 .. 1,000,000)
  // of the session's commands; EndTrace waits for the commands sent since and returns them with
  // the device time in between (ChromeTraceJson in trace_json.h writes them for a trace viewer).
  // FAILED_PRECONDITION from the daemon when a profile is already open / none is.
  absl::Status StartTrace(uint32_t max_events = 100000);
  struct TraceResult {
    v1::Trace trace;  // Events in the order the daemon ran them, dropped, device.
    absl::Duration device_time;
  };
  absl::StatusOr<TraceResult> EndTrace();

  // Limits and features of the session's device.
  absl::StatusOr<DaemonInfo> GetInfo();

  // Shared-memory regions: the session stream over a Unix socket only (FAILED_PRECONDITION
  // otherwise). RegisterRegion passes `memory` to the daemon (its region socket: the socket's
  // path + ".regions") and returns the registration; the daemon's error otherwise.
  absl::StatusOr<Region> RegisterRegion(std::shared_ptr<SharedMemory> memory);
  // Unregisters `region` after the commands queued before; an error comes back from the next
  // Sync.
  absl::Status ReleaseRegion(const Region& region);
  // trait: create / create_tensor with the bytes [offset, offset + size) of `region` (for a
  // tensor: its dense bytes, product(shape) * elem_size). They are read when the command runs:
  // do not change them until a later Sync or read returned. Returns like Create / CreateTensor.
  absl::StatusOr<Handle> CreateFromRegion(const Region& region, uint64_t offset, uint64_t size);
  absl::StatusOr<Tensor> CreateTensorFromRegion(const Region& region, uint64_t offset,
                                                std::vector<uint64_t> shape, uint32_t elem_size);
  // trait: read / read_tensor into `region`: the bindings' bytes (tensors densely packed) one
  // after the other from `offset`, within `size` bytes. The future gives the bytes written once
  // they are in the region; ready like Read.
  std::future<absl::StatusOr<uint64_t>> ReadIntoRegion(std::vector<Binding> bindings,
                                                       const Region& region, uint64_t offset,
                                                       uint64_t size);
  std::future<absl::StatusOr<uint64_t>> ReadTensorIntoRegion(std::vector<Tensor> tensors,
                                                             const Region& region, uint64_t offset,
                                                             uint64_t size);

  // Recorded graphs: the session stream only (FAILED_PRECONDITION otherwise). BeginGraph starts
  // recording: the Executes sent after it, until EndGraph, are checked by the daemon and
  // recorded, not run (every other call runs as usual meanwhile). `parameters` are handles whose
  // places ReplayGraph fills with other handles of the same size; every other handle a recorded
  // Execute uses is kept alive by the graph. EndGraph waits for the daemon and returns the
  // graph, or the recording's first failure (a bad parameter, an execute that failed its checks,
  // FAILED_PRECONDITION when none was recording). ReplayGraph runs the graph with bindings[i] in
  // parameter i's place and returns once it is queued (INVALID_ARGUMENT here for a wrong count or
  // size); the daemon's errors come back from the next Sync and poison what it writes.
  // ReleaseGraph frees it after the commands queued before; an error comes back from Sync.
  absl::Status BeginGraph(const std::vector<Handle>& parameters);
  absl::StatusOr<Graph> EndGraph();
  absl::Status ReplayGraph(const Graph& graph, const std::vector<Handle>& bindings);
  absl::Status ReleaseGraph(const Graph& graph);

  // For SDKs of other languages built on this one (client/c_api, Note [One client core] in
  // client/c_api/cubed_client_c.h); session stream only (FAILED_PRECONDITION otherwise).
  // NewStreamId: a fresh client id of the stream (for a create / empty / *_tensor the binding
  // builds itself). SendStreamCommand: queues `command` (a session.proto Command; its seq is set
  // here) behind every command sent before; `on_reply`, when set, receives its reply, or the
  // stream's error when the stream ended first, on the stream's reader thread (the Reply may be
  // moved from). Returns the stream's error once it ended (`on_reply` is then not called).
  using StreamReplyCallback = std::function<void(absl::StatusOr<v1::Reply*>)>;
  absl::StatusOr<uint64_t> NewStreamId();
  absl::Status SendStreamCommand(v1::Command command, StreamReplyCallback on_reply = nullptr);
  // SendStreamCommand of a command the caller keeps (one parsed onto a stack arena): serialized
  // where it is before this returns, with no copy; its seq field is set.
  absl::Status SendStreamCommandInPlace(v1::Command& command,
                                        StreamReplyCallback on_reply = nullptr);
  // SendStreamCommand of a command already serialized, which the caller vouches parses as a
  // v1::Command that does not answer and is no sync (the C ABI's prepared launches, which build
  // it from checked parts: Note [Prepared C ABI launches] in
  // client/c_api/cubed_client_c_launch.cc); its seq is appended. A command that breaks that promise
  // fails the stream, not one command.
  absl::Status SendStreamSerialized(absl::string_view command);
  // ClientOptions::resume_timeout: how many times the stream resumed so far, and whether a
  // resume is in progress now (the daemon ended the stream and the SDK tries to take the session
  // back). Zero / false without the session stream.
  uint64_t StreamResumes() const;
  bool StreamResuming() const;
  // Ends the session stream at once from this side, from any thread: what awaits an answer fails
  // CANCELLED, later calls fail, and the daemon closes the session and frees its memory. No-op
  // without the stream.
  void CancelStream();
  // One unary RPC of the daemon on this client's channel (so on the daemon its session lives
  // on, with its security): `method` the full name ("/cubed.v1.Compute/GetInfo"), `request` the
  // serialized request. Returns the serialized response, or the call's error (its message
  // prefixed by the method). Blocks up to ClientOptions::timeout.
  absl::StatusOr<std::string> CallUnary(absl::string_view method, absl::string_view request);

  // Sends the batched releases now and waits until every release sent so far (also those in
  // flight on the background flusher) has been answered. Returns the first release error since
  // the previous call (unary; on the stream release errors are reported by Sync instead). Once
  // it returns OK, the keep_alive of every imported handle whose last copy went before the call
  // is dropped (ImportCudaIpc).
  absl::Status FlushReleases();

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cubed
