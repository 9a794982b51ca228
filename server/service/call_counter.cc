#include "server/service/call_counter.h"

namespace cubed {
namespace {

// One per call: gRPC creates it with the call and destroys it with the call.
class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CountingInterceptor(std::atomic<int64_t>* count) : count_(count) {
    count_->fetch_add(1, std::memory_order_acq_rel);
  }
  ~CountingInterceptor() override { count_->fetch_sub(1, std::memory_order_acq_rel); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  std::atomic<int64_t>* count_;
};

class CountingFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(std::atomic<int64_t>* count) : count_(count) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* /*info*/) override {
    return new CountingInterceptor(count_);
  }

 private:
  std::atomic<int64_t>* count_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CallCounter::InterceptorFactory() {
  return std::make_unique<CountingFactory>(&in_flight_);
}

}  // namespace cubed
