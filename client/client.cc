#include "client/client.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/bulk_transfer.h"
#include "client/client_impl.h"
#include "client/execute_encoding.h"
#include "client/handle_state.h"
#include "client/proto_conversion.h"
#include "client/ring_session_wire.h"
#include "client/secure_channel.h"
#include "client/tensor_launch.h"
#include "common/bulk_lanes.h"
#include "common/status_macros.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace cubed {

Handle Client::Impl::MakeHandle(uint64_t id, uint64_t size,
                                std::shared_ptr<const void> keep_alive) const {
  return Handle(std::make_shared<Handle::State>(id, size, batcher, std::move(keep_alive)));
}

namespace {

// Copies `data` to `to` in 64 MiB pieces, telling `progress` (when set) after each
// (ClientOptions::upload_progress).
void CopyReporting(uint8_t* to, absl::Span<const uint8_t> data,
                   const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!progress) {
    std::memcpy(to, data.data(), data.size());
    return;
  }
  constexpr uint64_t kPiece = uint64_t{64} << 20;
  for (uint64_t done = 0; done < data.size();) {
    const uint64_t n = std::min<uint64_t>(kPiece, data.size() - done);
    std::memcpy(to + done, data.data() + done, n);
    done += n;
    progress(done, data.size());
  }
}

// Note [gRPC lifetime]: the callback API finishes a call on a gRPC thread that still touches the
// call after our callback returned (it drops its last reference). If that callback let the user
// destroy the last Channel, grpc_shutdown would race with that. The SDK therefore holds one
// grpc_init() reference for the life of the process.
void InitGrpcOnce() {
  static const bool initialized = [] {
    grpc_init();
    return true;
  }();
  (void)initialized;
}

// ClientOptions::transport after CUBED_CLIENT_TRANSPORT and joining.
Transport ChooseTransport(const ClientOptions& options) {
  if (options.session != 0) return Transport::kUnary;
  const char* env = std::getenv("CUBED_CLIENT_TRANSPORT");
  if (env != nullptr && std::strcmp(env, "unary") == 0) return Transport::kUnary;
  if (env != nullptr && std::strcmp(env, "stream") == 0) return Transport::kStream;
  return options.transport;
}

// ClientOptions::stream_carrier after CUBED_CLIENT_CARRIER.
// "ring" requires the ring only of a daemon on this host (a test suite run over the ring still
// reaches TCP daemons over gRPC).
StreamCarrier ChooseCarrier(const ClientOptions& options) {
  const char* env = std::getenv("CUBED_CLIENT_CARRIER");
  if (env != nullptr && std::strcmp(env, "ring") == 0) {
    return absl::StartsWith(options.address, "unix:") ? StreamCarrier::kRing : StreamCarrier::kAuto;
  }
  if (env != nullptr && std::strcmp(env, "grpc") == 0) return StreamCarrier::kGrpc;
  if (env != nullptr && std::strcmp(env, "auto") == 0) return StreamCarrier::kAuto;
  return options.stream_carrier;
}

// The wire of the session stream: the command ring when it is wanted and opens (Note [Command
// ring], common/shm_ring.h), else gRPC; an error only when the ring is required. `*used` says
// which it is.
absl::StatusOr<std::unique_ptr<SessionWire>> OpenSessionWire(
    const ClientOptions& options, StreamCarrier carrier,
    const std::shared_ptr<grpc::Channel>& channel, StreamCarrier* used) {
  constexpr absl::string_view kUnix = "unix:";
  if (carrier != StreamCarrier::kGrpc) {
    if (!absl::StartsWith(options.address, kUnix)) {
      if (carrier == StreamCarrier::kRing) {
        return absl::FailedPreconditionError(absl::StrCat(
            "StreamCarrier::kRing needs a daemon on this host (a unix: address), not '",
            options.address, "'"));
      }
    } else {
      const std::string socket = absl::StrCat(options.address.substr(kUnix.size()), ".ring");
      absl::StatusOr<std::unique_ptr<RingSessionWire>> ring =
          RingSessionWire::Open(socket, RingSessionWireOptions{});
      if (ring.ok()) {
        *used = StreamCarrier::kRing;
        return std::unique_ptr<SessionWire>(*std::move(ring));
      }
      if (carrier == StreamCarrier::kRing) {
        return absl::Status(ring.status().code(),
                            absl::StrCat("command ring: ", ring.status().message()));
      }
    }
  }
  *used = StreamCarrier::kGrpc;
  return MakeGrpcSessionWire(channel);
}

// Copies a tensor layout reply into `t`.
absl::Status TakeLayout(const absl::StatusOr<v1::Reply*>& reply, Tensor* t, uint64_t* size) {
  RETURN_IF_ERROR(ReplyStatus(reply));
  const v1::Reply& r = **reply;
  t->strides.assign(r.tensor().strides().begin(), r.tensor().strides().end());
  *size = r.tensor().size();
  return absl::OkStatus();
}

}  // namespace

absl::Status ReplyStatus(const absl::StatusOr<v1::Reply*>& reply) {
  if (!reply.ok()) return reply.status();
  const v1::Reply& r = **reply;
  if (r.code() == 0) return absl::OkStatus();
  const absl::StatusCode code = (r.code() >= 1 && r.code() <= 16)
                                    ? static_cast<absl::StatusCode>(r.code())
                                    : absl::StatusCode::kUnknown;
  return absl::Status(code, r.message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  InitGrpcOnce();
  if (options.address.empty()) return absl::InvalidArgumentError("ClientOptions.address is empty");
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.max_message_bytes must be > 0, got ", options.max_message_bytes));
  }
  if (options.bulk_lanes > kMaxBulkLanes) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.bulk_lanes must be 0 .. ",
                                                   kMaxBulkLanes, ", got ", options.bulk_lanes));
  }
  if (options.bulk_lanes == 0) {
    options.bulk_lanes = std::clamp<uint32_t>(std::thread::hardware_concurrency() / 4, 1, 4);
  }
  if (options.reply_spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.reply_spin must be at most 1 s, got ",
                     absl::FormatDuration(options.reply_spin)));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->reply_spin = std::max(impl->options.reply_spin, absl::ZeroDuration());
  impl->options.transport = ChooseTransport(impl->options);
  if (impl->options.resume_timeout > absl::ZeroDuration()) {
    // Note [Stream resume]: only a gRPC stream resumes, and regions do not survive a restart.
    impl->options.region_threshold = 0;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(impl->options.max_message_bytes);
  args.SetMaxSendMessageSize(impl->options.max_message_bytes);
  if (impl->options.resume_timeout > absl::ZeroDuration()) {
    // Note [Stream resume]: the channel finds the restarted daemon sooner than after gRPC's
    // default backoff (1 s growing to 120 s); the stream itself resumes on fresh channels.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  }
  const ClientOptions& o = impl->options;
  ASSIGN_OR_RETURN(impl->channel,
                   CreateSecureChannel(o.address,
                                       ChannelSecurity{o.tls_ca_file, o.tls_cert_file,
                                                       o.tls_key_file, o.tls_server_name, o.token},
                                       args));
  impl->stub = v1::Compute::NewStub(impl->channel);
  impl->bulk_route.channels.push_back(impl->channel);
  if (impl->options.transport == Transport::kStream) {
    // Note [Bulk lanes]: each lane's channel has subchannels of its own, so its own connection
    // (channels with the same arguments would share one); they connect at their first transfer.
    grpc::ChannelArguments lane_args = args;
    lane_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    for (uint32_t lane = 1; lane < impl->options.bulk_lanes; ++lane) {
      ASSIGN_OR_RETURN(
          std::shared_ptr<grpc::Channel> lane_channel,
          CreateSecureChannel(o.address,
                              ChannelSecurity{o.tls_ca_file, o.tls_cert_file, o.tls_key_file,
                                              o.tls_server_name, o.token},
                              lane_args));
      impl->bulk_route.channels.push_back(std::move(lane_channel));
    }
  }
  impl->bulk_route.lane_bytes = impl->options.bulk_lane_bytes;
  // A chunk with its header fits one message each way (a larger one fails the transfer before
  // the daemon hears of it, leaving the command waiting for its bytes).
  constexpr int kChunkHeaderRoom = 128;
  impl->bulk_route.chunk = std::min<uint64_t>(
      impl->options.bulk_chunk,
      static_cast<uint64_t>(std::max(1, impl->options.max_message_bytes - kChunkHeaderRoom)));
  impl->bulk_route.timeout = impl->options.timeout;

  if (impl->options.session != 0) {
    impl->session = impl->options.session;
  } else if (impl->options.transport == Transport::kStream) {
    ASSIGN_OR_RETURN(std::unique_ptr<SessionWire> wire,
                     OpenSessionWire(impl->options,
                                     impl->options.resume_timeout > absl::ZeroDuration()
                                         ? StreamCarrier::kGrpc
                                         : ChooseCarrier(impl->options),
                                     impl->channel, &impl->carrier));
    if (impl->options.reply_spin < absl::ZeroDuration()) {  // Note [Waiting awake].
      impl->reply_spin = std::min(4 * wire->suggested_spin(), absl::Milliseconds(1));
    }
    // Note [Stream resume]: each attempt on a fresh channel with subchannels of its own, so
    // that it connects at once instead of answering from the old channel's reconnect backoff
    // (which kept failing "No such file or directory" for ~10 s after the new daemon served).
    grpc::ChannelArguments resume_args = args;
    resume_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    StreamTransport::WireFactory reconnect =
        [address = o.address,
         security = ChannelSecurity{o.tls_ca_file, o.tls_cert_file, o.tls_key_file,
                                    o.tls_server_name, o.token},
         resume_args]() -> absl::StatusOr<std::unique_ptr<SessionWire>> {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          CreateSecureChannel(address, security, resume_args);
      if (!channel.ok()) return channel.status();
      return MakeGrpcSessionWire(*channel);
    };
    StreamTransport::Options stream_options;
    stream_options.device = impl->options.device;
    stream_options.lease_ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(impl->options.lease));
    stream_options.call_timeout = impl->options.timeout;
    stream_options.max_request_bytes = static_cast<size_t>(impl->options.max_message_bytes);
    stream_options.reconnect = std::move(reconnect);
    stream_options.resume_timeout = impl->options.resume_timeout;
    ASSIGN_OR_RETURN(impl->stream,
                     StreamTransport::Open(std::move(wire), std::move(stream_options)));
    impl->session = impl->stream->opened().session();
    impl->owns_session = true;
    impl->lease = absl::Milliseconds(static_cast<int64_t>(impl->stream->opened().lease_ms()));
  } else {
    v1::OpenSessionRequest request;
    request.set_device(impl->options.device);
    request.set_lease_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(impl->options.lease)));
    v1::OpenSessionResponse response;
    RETURN_IF_ERROR(impl->Call("OpenSession", &Impl::Stub::OpenSession, request, &response));
    impl->session = response.session();
    impl->owns_session = true;
    impl->lease = absl::Milliseconds(response.lease_ms());
  }

  Impl* raw = impl.get();
  if (impl->stream != nullptr) {
    // Releases go into the stream, behind every command that used the handles.
    impl->batcher = std::make_shared<ReleaseBatcher>(
        [raw](const std::vector<uint64_t>& ids) {
          v1::Command command;
          command.mutable_release()->mutable_ids()->Add(ids.begin(), ids.end());
          return raw->stream->Send(std::move(command));
        },
        impl->options.release_batch, impl->options.release_delay);
    std::unique_ptr<Client> client(new Client(std::move(impl)));
    if (absl::StartsWith(client->options().address, "unix:") &&
        client->options().region_threshold != 0) {
      client->impl_->staging = std::make_unique<RegionStaging>(*client);
    }
    return client;
  }
  impl->batcher = std::make_shared<ReleaseBatcher>(
      [raw](const std::vector<uint64_t>& ids) {
        v1::ReleaseRequest request;
        request.set_session(raw->session);
        request.mutable_handles()->Add(ids.begin(), ids.end());
        v1::ReleaseResponse response;
        return raw->Call("Release", &Impl::Stub::Release, request, &response);
      },
      impl->options.release_batch, impl->options.release_delay);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  if (impl_->stream != nullptr) {
    // The stream's end closes the session and releases every handle, queued or not.
    impl_->batcher->Close();
    impl_->stream->Close(impl_->options.timeout);
    impl_->batcher->DropAll();  // The session has ended: no import is mapped any more.
    return;
  }
  if (impl_->owns_session) {
    // Closing the session releases every handle, queued or not.
    impl_->batcher->Close();
    v1::CloseSessionRequest request;
    request.set_session(impl_->session);
    v1::CloseSessionResponse response;
    (void)impl_->Call("CloseSession", &Impl::Stub::CloseSession, request, &response);
  } else {
    (void)impl_->batcher->Flush();
    impl_->batcher->Close();
  }
  impl_->batcher->DropAll();  // Note [Import keep-alive]: the session ended or saw the releases.
}

uint64_t Client::session() const { return impl_->session; }

absl::Duration Client::lease() const { return impl_->lease; }

const ClientOptions& Client::options() const { return impl_->options; }

Transport Client::transport() const { return impl_->options.transport; }
StreamCarrier Client::stream_carrier() const { return impl_->carrier; }

absl::Duration Client::reply_spin() const { return impl_->reply_spin; }

absl::StatusOr<Handle> Client::Create(absl::Span<const uint8_t> data) {
  if (impl_->stream != nullptr) {
    if (data.empty()) return absl::InvalidArgumentError("create: data is empty (need >= 1 byte)");
    if (impl_->UsesRegion(data.size())) {
      if (const Region* region = impl_->staging->Acquire(data.size())) {
        CopyReporting(region->memory->bytes().data(), data, impl_->options.upload_progress);
        absl::StatusOr<Handle> h = CreateFromRegion(*region, 0, data.size());
        // The staging bytes are free once the create ran: a later answer says so (the barrier
        // answers in order and leaves sync's failures alone).
        absl::Status ran = h.ok() ? impl_->StreamBarrier() : absl::OkStatus();
        impl_->staging->Release();
        RETURN_IF_ERROR(ran);
        return h;
      }
    }
    v1::Command command;
    const uint64_t id = impl_->stream->NextId();
    command.mutable_create()->set_id(id);
    if (impl_->Bulk(data.size())) {  // Note [Bulk transfers]: the bytes follow on Upload.
      command.mutable_create()->set_bulk_size(data.size());
      uint64_t seq = 0;
      RETURN_IF_ERROR(impl_->stream->Send(std::move(command), nullptr, &seq));
      impl_->stream->Push();
      absl::Status uploaded =
          BulkUpload(impl_->bulk_route, impl_->session, seq, data, impl_->options.upload_progress);
      if (!uploaded.ok()) {
        impl_->ReleasePoisoned(id);
        return uploaded;
      }
      return impl_->MakeHandle(id, data.size());
    }
    command.mutable_create()->set_data(data.data(), data.size());
    RETURN_IF_ERROR(impl_->stream->Send(std::move(command)));
    return impl_->MakeHandle(id, data.size());
  }
  v1::CreateRequest request;
  request.set_session(impl_->session);
  request.set_data(data.data(), data.size());
  v1::CreateResponse response;
  RETURN_IF_ERROR(impl_->Call("Create", &Impl::Stub::Create, request, &response));
  return impl_->MakeHandle(response.handle(), response.size());
}

namespace {

// product(shape) * elem_size, or nullopt when it overflows 64 bits.
std::optional<uint64_t> DenseBytes(absl::Span<const uint64_t> shape, uint32_t elem_size) {
  uint64_t bytes = elem_size;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  }
  return bytes;
}

}  // namespace

absl::StatusOr<Tensor> Client::CreateTensor(absl::Span<const uint8_t> data,
                                            std::vector<uint64_t> shape, uint32_t elem_size) {
  if (impl_->stream != nullptr) {
    // A length that does not match the shape goes the ordinary way, to get the daemon's error.
    if (impl_->UsesRegion(data.size()) && DenseBytes(shape, elem_size) == data.size()) {
      if (const Region* region = impl_->staging->Acquire(data.size())) {
        CopyReporting(region->memory->bytes().data(), data, impl_->options.upload_progress);
        // The layout reply comes after the create ran: the staging bytes are free then.
        absl::StatusOr<Tensor> t = CreateTensorFromRegion(*region, 0, std::move(shape), elem_size);
        impl_->staging->Release();
        return t;
      }
    }
    uint64_t id = 0;
    v1::Command command = impl_->CreateTensorCommand(shape, elem_size, &id);
    v1::Command::CreateTensor* c = command.mutable_create_tensor();
    if (impl_->Bulk(data.size())) {  // Note [Bulk transfers]: the bytes follow on Upload.
      c->set_bulk(true);
      return impl_->StreamTensor(std::move(command), id, std::move(shape), elem_size, data);
    }
    c->set_data(data.data(), data.size());
    return impl_->StreamTensor(std::move(command), id, std::move(shape), elem_size);
  }
  v1::CreateTensorRequest request;
  request.set_session(impl_->session);
  request.set_data(data.data(), data.size());
  request.mutable_shape()->Add(shape.begin(), shape.end());
  request.set_elem_size(elem_size);
  v1::CreateTensorResponse response;
  RETURN_IF_ERROR(impl_->Call("CreateTensor", &Impl::Stub::CreateTensor, request, &response));
  Tensor t;
  t.handle = impl_->MakeHandle(response.handle(), response.size());
  t.shape = std::move(shape);
  t.strides.assign(response.strides().begin(), response.strides().end());
  t.elem_size = elem_size;
  return t;
}

absl::StatusOr<Handle> Client::Empty(uint64_t size) {
  if (impl_->stream != nullptr) {
    if (size == 0) return absl::InvalidArgumentError("empty: size is 0 (need >= 1 byte)");
    v1::Command command;
    const uint64_t id = impl_->stream->NextId();
    command.mutable_empty()->set_id(id);
    command.mutable_empty()->set_size(size);
    RETURN_IF_ERROR(impl_->stream->Send(std::move(command)));
    return impl_->MakeHandle(id, size);
  }
  v1::EmptyRequest request;
  request.set_session(impl_->session);
  request.set_size(size);
  v1::EmptyResponse response;
  RETURN_IF_ERROR(impl_->Call("Empty", &Impl::Stub::Empty, request, &response));
  return impl_->MakeHandle(response.handle(), response.size());
}

absl::StatusOr<Tensor> Client::EmptyTensor(std::vector<uint64_t> shape, uint32_t elem_size) {
  if (impl_->stream != nullptr) {
    v1::Command command;
    const uint64_t id = impl_->stream->NextId();
    v1::Command::EmptyTensor* c = command.mutable_empty_tensor();
    c->set_id(id);
    c->mutable_shape()->Add(shape.begin(), shape.end());
    c->set_elem_size(elem_size);
    return impl_->StreamTensor(std::move(command), id, std::move(shape), elem_size);
  }
  v1::EmptyTensorRequest request;
  request.set_session(impl_->session);
  request.mutable_shape()->Add(shape.begin(), shape.end());
  request.set_elem_size(elem_size);
  v1::EmptyTensorResponse response;
  RETURN_IF_ERROR(impl_->Call("EmptyTensor", &Impl::Stub::EmptyTensor, request, &response));
  Tensor t;
  t.handle = impl_->MakeHandle(response.handle(), response.size());
  t.shape = std::move(shape);
  t.strides.assign(response.strides().begin(), response.strides().end());
  t.elem_size = elem_size;
  return t;
}

Handle Client::Adopt(uint64_t id, uint64_t size) { return impl_->MakeHandle(id, size); }

absl::StatusOr<Resource> Client::GetResource(const Binding& binding) {
  // The unary call must see every allocation queued on the stream so far.
  if (impl_->stream != nullptr) RETURN_IF_ERROR(impl_->StreamBarrier());
  v1::GetResourceRequest request;
  request.set_session(impl_->session);
  RETURN_IF_ERROR(ToProto(binding, request.mutable_binding()));
  v1::GetResourceResponse response;
  RETURN_IF_ERROR(impl_->Call("GetResource", &Impl::Stub::GetResource, request, &response));
  Resource r;
  r.storage_id = response.storage_id();
  r.offset = response.offset();
  r.size = response.size();
  r.device_pointer = response.device_pointer();
  r.ipc_handle = std::move(*response.mutable_ipc_handle());
  return r;
}

namespace {

// Client::Execute's launch from its parts (a LaunchBindings', or a tensor launch's buffers and
// metadata with the caller's scalars, not copied): on the stream, the command's bytes written
// directly (Note [Encoded executes] in execute_encoding.h); unary, an ExecuteRequest.
absl::Status ExecuteParts(Client::Impl& impl, const BuiltinKernel& kernel, CubeCount count,
                          absl::Span<const Binding> buffers, absl::Span<const uint32_t> metadata,
                          absl::Span<const Scalars> scalars, ExecutionMode mode) {
  if (impl.stream != nullptr) {
    // Note [Encoded executes]: the command's bytes, written directly into a buffer this thread
    // keeps (no allocation once it has grown).
    thread_local std::string encoded;
    encoded.clear();
    RETURN_IF_ERROR(
        AppendExecuteCommand(kernel, count, buffers, metadata, scalars, mode, &encoded));
    return impl.stream->SendSerialized(encoded);
  }
  v1::ExecuteRequest request;
  request.set_session(impl.session);
  ToProto(kernel, request.mutable_kernel()->mutable_builtin());
  v1::CubeCount::Static* c = request.mutable_count()->mutable_static_count();
  c->set_x(count.x);
  c->set_y(count.y);
  c->set_z(count.z);
  v1::Bindings* b = request.mutable_bindings();
  b->mutable_buffers()->Reserve(static_cast<int>(buffers.size()));
  for (const Binding& binding : buffers) RETURN_IF_ERROR(ToProto(binding, b->add_buffers()));
  b->mutable_metadata()->Add(metadata.begin(), metadata.end());
  for (const Scalars& s : scalars) RETURN_IF_ERROR(ToProto(s, b->add_scalars()));
  request.set_mode(ToWire(mode));
  v1::ExecuteResponse response;
  return impl.Call("Execute", &Client::Impl::Stub::Execute, request, &response);
}

}  // namespace

absl::Status Client::Execute(const BuiltinKernel& kernel, CubeCount count,
                             const LaunchBindings& bindings, ExecutionMode mode) {
  return ExecuteParts(*impl_, kernel, count, bindings.buffers, bindings.metadata, bindings.scalars,
                      mode);
}

absl::Status Client::Execute(const BuiltinKernel& kernel, absl::Span<const Tensor> inputs,
                             absl::Span<const Tensor> outputs, absl::Span<const Scalars> scalars) {
  ASSIGN_OR_RETURN(TensorLaunch launch, BuildTensorLaunch(inputs, outputs));
  return ExecuteParts(*impl_, kernel, launch.count, launch.bindings.buffers,
                      launch.bindings.metadata, scalars, ExecutionMode::kChecked);
}

absl::Status Client::Flush() {
  if (impl_->stream != nullptr) {
    v1::Command command;
    command.mutable_flush();
    RETURN_IF_ERROR(impl_->stream->Send(std::move(command)));
    impl_->stream->Push();
    return absl::OkStatus();
  }
  v1::FlushRequest request;
  request.set_session(impl_->session);
  v1::FlushResponse response;
  return impl_->Call("Flush", &Impl::Stub::Flush, request, &response);
}

absl::StatusOr<MemoryUsage> Client::GetMemoryUsage() {
  if (impl_->stream != nullptr) return impl_->StreamMemoryUsage();
  v1::MemoryUsageRequest request;
  request.set_device(impl_->options.device);
  v1::MemoryUsageResponse response;
  RETURN_IF_ERROR(impl_->Call("MemoryUsage", &Impl::Stub::MemoryUsage, request, &response));
  return FromProto(response.usage());
}

absl::StatusOr<MemoryUsage> Client::MemoryCleanup() {
  if (impl_->stream != nullptr) {
    v1::Command command;
    command.mutable_memory_cleanup();
    RETURN_IF_ERROR(impl_->stream->Send(std::move(command)));
    return impl_->StreamMemoryUsage();
  }
  v1::MemoryCleanupRequest request;
  request.set_device(impl_->options.device);
  v1::MemoryCleanupResponse response;
  RETURN_IF_ERROR(impl_->Call("MemoryCleanup", &Impl::Stub::MemoryCleanup, request, &response));
  return FromProto(response.usage());
}

absl::Status Client::StartProfile() {
  if (impl_->stream != nullptr) {
    v1::Command command;
    command.mutable_start_profile();
    return impl_->stream->Send(std::move(command));
  }
  v1::StartProfileRequest request;
  request.set_session(impl_->session);
  v1::StartProfileResponse response;
  return impl_->Call("StartProfile", &Impl::Stub::StartProfile, request, &response);
}

absl::StatusOr<absl::Duration> Client::EndProfile() {
  if (impl_->stream != nullptr) {
    v1::Command command;
    command.mutable_end_profile();
    return Await(impl_->Ask<absl::StatusOr<absl::Duration>>(
        std::move(command), [](absl::StatusOr<v1::Reply*> reply) -> absl::StatusOr<absl::Duration> {
          RETURN_IF_ERROR(ReplyStatus(reply));
          return absl::Nanoseconds(static_cast<int64_t>((*reply)->duration_ns()));
        }));
  }
  v1::EndProfileRequest request;
  request.set_session(impl_->session);
  v1::EndProfileResponse response;
  RETURN_IF_ERROR(impl_->Call("EndProfile", &Impl::Stub::EndProfile, request, &response));
  return absl::Nanoseconds(static_cast<int64_t>(response.duration_ns()));
}

absl::Status Client::StartTrace(uint32_t max_events) {
  // Unary, even on the stream (whose StartProfile carries no fields): after a Sync, so that the
  // trace holds exactly the commands sent from now on.
  RETURN_IF_ERROR(Await(Sync()));
  v1::StartProfileRequest request;
  request.set_session(impl_->session);
  request.set_trace_events(max_events);
  v1::StartProfileResponse response;
  return impl_->Call("StartProfile", &Impl::Stub::StartProfile, request, &response);
}

absl::StatusOr<Client::TraceResult> Client::EndTrace() {
  RETURN_IF_ERROR(Await(Sync()));
  v1::EndProfileRequest request;
  request.set_session(impl_->session);
  v1::EndProfileResponse response;
  RETURN_IF_ERROR(impl_->Call("EndProfile", &Impl::Stub::EndProfile, request, &response));
  TraceResult result;
  result.trace = std::move(*response.mutable_trace());
  result.device_time = absl::Nanoseconds(static_cast<int64_t>(response.duration_ns()));
  return result;
}

absl::StatusOr<DaemonInfo> Client::GetInfo() {
  v1::GetInfoRequest request;
  request.set_device(impl_->options.device);
  v1::GetInfoResponse response;
  RETURN_IF_ERROR(impl_->Call("GetInfo", &Impl::Stub::GetInfo, request, &response));
  DaemonInfo info;
  info.device = std::move(*response.mutable_info());
  info.devices = response.devices();
  info.version = std::move(*response.mutable_version());
  return info;
}

absl::Status Client::FlushReleases() {
  // Note [Import keep-alive]: what was buried before the flush goes once the daemon saw it.
  std::vector<std::shared_ptr<const void>> keeps = impl_->batcher->TakeBuried();
  absl::Status status = impl_->batcher->Flush();
  if (status.ok() && impl_->stream != nullptr) status = impl_->StreamBarrier();
  if (!status.ok()) impl_->batcher->Rebury(std::move(keeps));
  return status;
}

v1::Command Client::Impl::CreateTensorCommand(const std::vector<uint64_t>& shape,
                                              uint32_t elem_size, uint64_t* id) const {
  v1::Command command;
  *id = stream->NextId();
  v1::Command::CreateTensor* c = command.mutable_create_tensor();
  c->set_id(*id);
  c->mutable_shape()->Add(shape.begin(), shape.end());
  c->set_elem_size(elem_size);
  return command;
}

void Client::Impl::ReleasePoisoned(uint64_t id) const {
  v1::Command release;
  release.mutable_release()->add_ids(id);
  (void)stream->Send(std::move(release));
}

absl::StatusOr<Tensor> Client::Impl::StreamTensor(v1::Command command, uint64_t id,
                                                  std::vector<uint64_t> shape, uint32_t elem_size,
                                                  absl::Span<const uint8_t> bulk) {
  Tensor t;
  t.shape = std::move(shape);
  t.elem_size = elem_size;
  uint64_t size = 0;
  uint64_t seq = 0;
  std::future<absl::Status> answer = Ask<absl::Status>(
      std::move(command),
      [&t, &size](absl::StatusOr<v1::Reply*> reply) { return TakeLayout(reply, &t, &size); }, &seq,
      bulk.empty() ? absl::ZeroDuration() : BulkDeadline(options.timeout, bulk.size()));
  absl::Status uploaded;
  if (!bulk.empty()) {
    uploaded = BulkUpload(bulk_route, session, seq, bulk, options.upload_progress);
  }
  absl::Status status = AwaitPolling(std::move(answer), reply_spin);
  if (status.ok()) status = uploaded;
  if (!status.ok()) {
    ReleasePoisoned(id);  // The id is in use (poisoned) until released.
    return status;
  }
  t.handle = MakeHandle(id, size);
  return t;
}

absl::StatusOr<MemoryUsage> Client::Impl::StreamMemoryUsage() {
  v1::Command command;
  command.mutable_memory_usage();
  return AwaitPolling(Ask<absl::StatusOr<MemoryUsage>>(
                          std::move(command),
                          [](absl::StatusOr<v1::Reply*> reply) -> absl::StatusOr<MemoryUsage> {
                            RETURN_IF_ERROR(ReplyStatus(reply));
                            return FromProto((*reply)->memory_usage());
                          }),
                      reply_spin);
}

absl::Status Client::Impl::StreamBarrier() { return StreamMemoryUsage().status(); }

}  // namespace cubed
