#include "server/service/request_log.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr size_t kMaxRequestIdBytes = 64;

std::atomic<uint64_t> next_request_id{1};

// Printable ASCII only, at most kMaxRequestIdBytes: the id lands in logs verbatim.
std::string CleanRequestId(grpc::string_ref raw) {
  std::string id;
  for (size_t i = 0; i < raw.size() && id.size() < kMaxRequestIdBytes; ++i) {
    const char c = raw.data()[i];
    id.push_back(absl::ascii_isgraph(static_cast<unsigned char>(c)) ? c : '?');
  }
  return id;
}

// The request's uint64 `session` field (every cubed.v1 request that names a session has one),
// or 0.
uint64_t SessionOf(const google::protobuf::Message* request) {
  if (request == nullptr) return 0;
  const google::protobuf::FieldDescriptor* field =
      request->GetDescriptor()->FindFieldByName("session");
  if (field == nullptr || field->is_repeated() ||
      field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64) {
    return 0;
  }
  return request->GetReflection()->GetUInt64(*request, field);
}

// One per call: created by gRPC with the call, destroyed after it.
class RequestLog final : public grpc::experimental::Interceptor {
 public:
  explicit RequestLog(grpc::experimental::ServerRpcInfo* info) : info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      const auto* metadata = methods->GetRecvInitialMetadata();
      auto it = metadata->find("x-request-id");
      if (it != metadata->end()) request_id_ = CleanRequestId(it->second);
    }
    // Unary calls only: the request lives until the call ends, so its session is read only
    // when the call fails (no cost on success). A stream's messages are reused.
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        info_->type() == grpc::experimental::ServerRpcInfo::Type::UNARY) {
      request_ = static_cast<const google::protobuf::Message*>(methods->GetRecvMessage());
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (!status.ok()) Log(status, methods);
    }
    methods->Proceed();
  }

 private:
  void Log(const grpc::Status& status, grpc::experimental::InterceptorBatchMethods* methods) {
    if (request_id_.empty()) request_id_ = absl::StrCat("d-", next_request_id.fetch_add(1));
    methods->GetSendTrailingMetadata()->emplace("x-request-id", request_id_);
    const uint64_t session = SessionOf(request_);
    const grpc::StatusCode code = status.error_code();
    const bool bug = code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN ||
                     code == grpc::StatusCode::DATA_LOSS;
    spdlog::log(bug ? spdlog::level::err : spdlog::level::info,
                "request failed: method={} session={} request_id={} code={}: {}", info_->method(),
                session, request_id_, absl::StatusCodeToString(static_cast<absl::StatusCode>(code)),
                status.error_message());
  }

  grpc::experimental::ServerRpcInfo* info_;
  const google::protobuf::Message* request_ = nullptr;
  std::string request_id_;
};

class RequestLogFactoryImpl final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RequestLog(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RequestLogFactory() {
  return std::make_unique<RequestLogFactoryImpl>();
}

}  // namespace cubed
