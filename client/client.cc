#include "client/client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/handle_state.h"
#include "client/proto_conversion.h"
#include "client/tensor_launch.h"
#include "common/status_macros.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace cubed {

Handle Client::Impl::MakeHandle(uint64_t id, uint64_t size) const {
  return Handle(std::make_shared<Handle::State>(id, size, batcher));
}

namespace {

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

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  InitGrpcOnce();
  if (options.address.empty()) return absl::InvalidArgumentError("ClientOptions.address is empty");
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions.max_message_bytes must be > 0, got ",
                                                   options.max_message_bytes));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(impl->options.max_message_bytes);
  args.SetMaxSendMessageSize(impl->options.max_message_bytes);
  impl->channel = grpc::CreateCustomChannel(impl->options.address,
                                            grpc::InsecureChannelCredentials(), args);
  impl->stub = v1::Compute::NewStub(impl->channel);

  if (impl->options.session != 0) {
    impl->session = impl->options.session;
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
}

uint64_t Client::session() const { return impl_->session; }

absl::Duration Client::lease() const { return impl_->lease; }

const ClientOptions& Client::options() const { return impl_->options; }

absl::StatusOr<Handle> Client::Create(absl::Span<const uint8_t> data) {
  v1::CreateRequest request;
  request.set_session(impl_->session);
  request.set_data(data.data(), data.size());
  v1::CreateResponse response;
  RETURN_IF_ERROR(impl_->Call("Create", &Impl::Stub::Create, request, &response));
  return impl_->MakeHandle(response.handle(), response.size());
}

absl::StatusOr<Tensor> Client::CreateTensor(absl::Span<const uint8_t> data,
                                            std::vector<uint64_t> shape, uint32_t elem_size) {
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
  v1::EmptyRequest request;
  request.set_session(impl_->session);
  request.set_size(size);
  v1::EmptyResponse response;
  RETURN_IF_ERROR(impl_->Call("Empty", &Impl::Stub::Empty, request, &response));
  return impl_->MakeHandle(response.handle(), response.size());
}

absl::StatusOr<Tensor> Client::EmptyTensor(std::vector<uint64_t> shape, uint32_t elem_size) {
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

absl::Status Client::Execute(const BuiltinKernel& kernel, CubeCount count,
                             const LaunchBindings& bindings, ExecutionMode mode) {
  v1::ExecuteRequest request;
  request.set_session(impl_->session);
  ToProto(kernel, request.mutable_kernel()->mutable_builtin());
  v1::CubeCount::Static* c = request.mutable_count()->mutable_static_count();
  c->set_x(count.x);
  c->set_y(count.y);
  c->set_z(count.z);
  v1::Bindings* b = request.mutable_bindings();
  for (const Binding& binding : bindings.buffers) RETURN_IF_ERROR(ToProto(binding, b->add_buffers()));
  b->mutable_metadata()->Add(bindings.metadata.begin(), bindings.metadata.end());
  for (const Scalars& s : bindings.scalars) RETURN_IF_ERROR(ToProto(s, b->add_scalars()));
  request.set_mode(mode == ExecutionMode::kUnchecked ? v1::EXECUTION_MODE_UNCHECKED
                                                     : v1::EXECUTION_MODE_CHECKED);
  v1::ExecuteResponse response;
  return impl_->Call("Execute", &Impl::Stub::Execute, request, &response);
}

absl::Status Client::Execute(const BuiltinKernel& kernel, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& outputs, std::vector<Scalars> scalars) {
  ASSIGN_OR_RETURN(TensorLaunch launch, BuildTensorLaunch(inputs, outputs, std::move(scalars)));
  return Execute(kernel, launch.count, launch.bindings, ExecutionMode::kChecked);
}

absl::Status Client::Flush() {
  v1::FlushRequest request;
  request.set_session(impl_->session);
  v1::FlushResponse response;
  return impl_->Call("Flush", &Impl::Stub::Flush, request, &response);
}

absl::StatusOr<MemoryUsage> Client::GetMemoryUsage() {
  v1::MemoryUsageRequest request;
  request.set_device(impl_->options.device);
  v1::MemoryUsageResponse response;
  RETURN_IF_ERROR(impl_->Call("MemoryUsage", &Impl::Stub::MemoryUsage, request, &response));
  return FromProto(response.usage());
}

absl::StatusOr<MemoryUsage> Client::MemoryCleanup() {
  v1::MemoryCleanupRequest request;
  request.set_device(impl_->options.device);
  v1::MemoryCleanupResponse response;
  RETURN_IF_ERROR(impl_->Call("MemoryCleanup", &Impl::Stub::MemoryCleanup, request, &response));
  return FromProto(response.usage());
}

absl::Status Client::StartProfile() {
  v1::StartProfileRequest request;
  request.set_session(impl_->session);
  v1::StartProfileResponse response;
  return impl_->Call("StartProfile", &Impl::Stub::StartProfile, request, &response);
}

absl::StatusOr<absl::Duration> Client::EndProfile() {
  v1::EndProfileRequest request;
  request.set_session(impl_->session);
  v1::EndProfileResponse response;
  RETURN_IF_ERROR(impl_->Call("EndProfile", &Impl::Stub::EndProfile, request, &response));
  return absl::Nanoseconds(static_cast<int64_t>(response.duration_ns()));
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

absl::Status Client::FlushReleases() { return impl_->batcher->Flush(); }

}  // namespace cubed
