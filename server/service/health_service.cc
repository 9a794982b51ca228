#include "server/service/health_service.h"

#include <algorithm>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cubed {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr absl::string_view kDevicePrefix = "device/";

// One Watch stream: writes the current status, then every change, until cancelled or shut down.
// At most one write is in flight; a change seen meanwhile is written when it completes.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string name) : service_(service), name_(std::move(name)) {}

  // Called with the service's mutex held (lock order: service, then watcher). gRPC runs OnDone
  // on its own threads, never inside Finish, so Forget cannot deadlock against it.
  void Update(HealthCheckResponse::ServingStatus status) {
    absl::MutexLock lock(&mu_);
    if (finished_ || ending_) return;
    pending_ = status;
    if (!writing_) WriteNext();
  }
  // Ends the stream after the status already being written (NOT_SERVING at shutdown), so that
  // watchers see it: Finish while a write is in flight would drop that write.
  void End() {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    ending_ = true;
    if (!writing_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

 private:
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!pending_.has_value() || (last_.has_value() && *last_ == *pending_)) {
      pending_.reset();
      return;
    }
    response_.set_status(*pending_);
    last_ = pending_;
    pending_.reset();
    writing_ = true;
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      if (!finished_) {
        finished_ = true;
        Finish(grpc::Status::OK);
      }
      return;
    }
    if (finished_) return;
    WriteNext();
    if (ending_ && !writing_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }
  void OnCancel() override { End(); }
  void OnDone() override {
    service_->Forget(this);
    delete this;
  }

  HealthService* service_;
  std::string name_;
  absl::Mutex mu_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(mu_);
  std::optional<HealthCheckResponse::ServingStatus> pending_ ABSL_GUARDED_BY(mu_);
  std::optional<HealthCheckResponse::ServingStatus> last_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;  // End was called; finish after the write.

 public:
  const std::string& name() const { return name_; }
};

HealthService::HealthService(uint32_t devices) : device_serving_(devices, true) {}

HealthService::~HealthService() { Shutdown(); }

std::string HealthService::DeviceServiceName(uint32_t index) {
  return absl::StrCat(kDevicePrefix, index);
}

HealthCheckResponse::ServingStatus HealthService::StatusOf(const std::string& service) const {
  const bool up = serving_ && loops_responsive_;
  if (service.empty() || service == "cubed.v1.Compute") {
    const bool any_device =
        std::find(device_serving_.begin(), device_serving_.end(), true) != device_serving_.end();
    return up && any_device ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  }
  absl::string_view rest = service;
  uint32_t index = 0;
  if (absl::ConsumePrefix(&rest, kDevicePrefix) && !rest.empty() && rest[0] != '+' &&
      absl::SimpleAtoi(rest, &index) && index < device_serving_.size() &&
      service == DeviceServiceName(index)) {
    return up && device_serving_[index] ? HealthCheckResponse::SERVING
                                        : HealthCheckResponse::NOT_SERVING;
  }
  return HealthCheckResponse::SERVICE_UNKNOWN;
}

void HealthService::SetDeviceServing(uint32_t index, bool serving) {
  absl::MutexLock lock(&mu_);
  if (index >= device_serving_.size()) return;
  device_serving_[index] = serving;
  for (Watcher* w : watchers_) w->Update(StatusOf(w->name()));
}

void HealthService::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  serving_ = serving;
  for (Watcher* w : watchers_) w->Update(StatusOf(w->name()));
}

void HealthService::SetLoopsResponsive(bool responsive) {
  absl::MutexLock lock(&mu_);
  loops_responsive_ = responsive;
  for (Watcher* w : watchers_) w->Update(StatusOf(w->name()));
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  serving_ = false;
  for (Watcher* w : watchers_) w->End();
}

void HealthService::Forget(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const HealthCheckRequest* req,
                                               HealthCheckResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::ReaderMutexLock lock(&mu_);
  const HealthCheckResponse::ServingStatus status = StatusOf(req->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     absl::StrCat("unknown service '", req->service(),
                                  "' (known: \"\", \"cubed.v1.Compute\" and \"", kDevicePrefix,
                                  "0\" .. \"", kDevicePrefix, device_serving_.size() - 1, "\")")));
  } else {
    resp->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(grpc::CallbackServerContext*,
                                                                    const HealthCheckRequest* req) {
  auto* watcher = new Watcher(this, req->service());
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    watcher->End();
    return watcher;
  }
  watchers_.insert(watcher);
  watcher->Update(StatusOf(req->service()));
  return watcher;
}

}  // namespace cubed
