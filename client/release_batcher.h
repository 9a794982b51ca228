#pragma once

// ReleaseBatcher: collects the ids of handles whose last copy went away and releases them on the
// daemon in batches.
//
// Note [Release batching]: dropping a Handle must not block on an RPC and must not cost one RPC
// per handle. Ids are queued; a background flusher thread sends one Release RPC when
// `batch_size` ids are queued or `delay` after the first id of a batch was queued, whichever
// comes first. Flush() sends the queue from the caller's thread and then waits for releases in
// flight on the flusher, so after it returns the daemon has seen every earlier release.
//
// Note [Import keep-alive]: an imported handle (Client::ImportCudaIpc / ImportRegion) may carry
// what keeps the producer's memory allocated. The daemon maps that memory until it has processed
// the handle's release, which happens some time after the last copy went. So the keep-alive is
// not dropped with the handle: Enqueue buries it beside its id, under the same lock, and
// Client::FlushReleases takes the buried ones before it flushes the ids and drops them only
// once the daemon answered a command sent after those releases. The Client's destructor drops
// the rest once the session has ended (the daemon closes every mapping before it ends a session);
// a detached handle's keep-alive is kept until then too.

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cubed {

class ReleaseBatcher {
 public:
  // Sends one Release RPC for `ids` (at most kMaxIdsPerCall) and returns its status. Called from
  // the flusher thread and from Flush(), possibly concurrently.
  using SendFn = std::function<absl::Status(const std::vector<uint64_t>& ids)>;

  // The daemon's limit of ids per Release request.
  static constexpr size_t kMaxIdsPerCall = 65536;

  // Starts the flusher thread. `batch_size` >= 1.
  ReleaseBatcher(SendFn send, size_t batch_size, absl::Duration delay);
  // Close()s.
  ~ReleaseBatcher();

  ReleaseBatcher(const ReleaseBatcher&) = delete;
  ReleaseBatcher& operator=(const ReleaseBatcher&) = delete;

  // Queues one release of `id`. Never blocks on an RPC. Ignored after Close(). Thread-safe.
  // `keep`, when set, is buried (Note [Import keep-alive]), also after Close().
  void Enqueue(uint64_t id, std::shared_ptr<const void> keep = nullptr);
  // Keeps `keep` until DropAll (a detached imported handle). Thread-safe.
  void KeepUntilEnd(std::shared_ptr<const void> keep);
  // The keep-alives buried so far, whose ids were queued before this call. Thread-safe.
  std::vector<std::shared_ptr<const void>> TakeBuried();
  // Buries `keeps` again (a flush that failed). Thread-safe.
  void Rebury(std::vector<std::shared_ptr<const void>> keeps);
  // Drops every keep-alive, buried or kept (after the session's end). Thread-safe.
  void DropAll();

  // Sends everything queued, then waits until no release is in flight. Returns the first error of
  // any release since the previous Flush() (background ones included). Thread-safe.
  absl::Status Flush();

  // Stops the flusher thread (waiting for an RPC it has in flight) and drops what is queued; later
  // Enqueue()s are ignored. Idempotent. Must not be called from the flusher thread.
  void Close();

 private:
  void FlusherLoop();
  // Takes up to kMaxIdsPerCall queued ids, sends them without the lock held, records the error.
  void SendSome() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SendFn send_;
  const size_t batch_size_;
  const absl::Duration delay_;

  absl::Mutex mu_;
  absl::CondVar wake_;
  std::vector<uint64_t> pending_ ABSL_GUARDED_BY(mu_);
  absl::Time first_queued_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const void>> buried_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const void>> kept_ ABSL_GUARDED_BY(mu_);
  std::thread flusher_;
};

}  // namespace cubed
