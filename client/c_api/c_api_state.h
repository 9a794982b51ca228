#pragma once

// What the C ABI's files (cubed_client_c.cc, cubed_client_c_read.cc) share: the opaque client
// and reply behind cubed_client_c.h, and the helpers that fill errors and replies. Internal to
// libcubed_client_c.so; not installed.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/c_api/cubed_client_c.h"
#include "client/client.h"
#include "common/spin_wait.h"
#include "cubed/v1/session.pb.h"

namespace cubed::c_api {

// Tags of completed replies that cubed_reply_notify asked for (cubed_client_next_done), shared by
// a client and its replies, whose callbacks may run while the client closes.
struct DoneQueue {
  absl::Mutex mu;
  std::deque<uint64_t> tags ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;
  int pollers ABSL_GUARDED_BY(mu) = 0;  // Calls inside cubed_client_next_done.
};

// One command's answer, filled once by the stream's reader thread.
struct ReplyState {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool notify ABSL_GUARDED_BY(mu) = false;  // cubed_reply_notify asked.
  bool queued ABSL_GUARDED_BY(mu) = false;  // Its tag went to `queue`.
  std::shared_ptr<DoneQueue> queue;         // The client's; set before it is sent.
  // Written before `done` is set, read only after: no lock needed then.
  absl::Status stream_status;  // Not OK: the stream's error, no answer.
  v1::Reply reply;             // Its read data moved to `data`.
  std::vector<std::string> data;
  uint64_t read_size = 0;  // cubed_client_read_into_async: the bytes written.
  std::string bytes;       // `reply` serialized, on first cubed_reply_bytes (under mu).
  bool serialized ABSL_GUARDED_BY(mu) = false;
  uint64_t tag = 0;
  std::atomic<bool> used{false};  // Handed to a send.
  // `done`, for polling without mu (Note [Waiting awake]): set after `done`, under mu.
  std::atomic<bool> ready{false};
  absl::Duration spin;  // The client's reply spin; set before it is sent.

  bool Done() const { return ready.load(std::memory_order_acquire); }

  // Polls `ready` for `spin`, then sleeps on mu until `done` or `timeout` passed; true once
  // done. Any thread.
  bool Wait(absl::Duration timeout) {
    if (SpinUntil(std::min(spin, timeout), [this] { return Done(); })) return true;
    absl::MutexLock lock(&mu);
    return mu.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
};

// Fills `error` (may be NULL) with `status` and returns its code.
int32_t Fail(cubed_error* error, const absl::Status& status);
// Fail with INVALID_ARGUMENT `what`.
int32_t Invalid(cubed_error* error, absl::string_view what);
// FAILED_PRECONDITION "the client is closed".
absl::Status Closed();

}  // namespace cubed::c_api

struct cubed_client {
  // Guards `client` against cubed_client_close: calls hold it shared, close exclusive.
  absl::Mutex mu;
  std::unique_ptr<cubed::Client> client ABSL_GUARDED_BY(mu);  // Null once closed.
  std::shared_ptr<cubed::c_api::DoneQueue> queue = std::make_shared<cubed::c_api::DoneQueue>();
  uint64_t session = 0;
  int64_t lease_ms = 0;
  int32_t transport = 0;
  int32_t carrier = 2;
  absl::Duration reply_spin;  // Client::reply_spin().
};

struct cubed_reply {
  std::shared_ptr<cubed::c_api::ReplyState> state;
};

namespace cubed::c_api {

// Hands fresh `reply` to a command of `c` (INVALID_ARGUMENT when it was handed out before).
int32_t ClaimReply(cubed_client* c, cubed_reply* reply, cubed_error* error);
// Completes `state`: `fill` writes its result (under its lock), then it is done, and its tag
// goes to the client's queue when cubed_reply_notify asked for it. Any thread, once.
void CompleteReply(ReplyState& state, const std::function<void(ReplyState&)>& fill);
// Queues `command` on `c`'s stream, serialized where it is (it may live on a stack arena: Note
// [Commands on the stack] in client/stack_command.h); its seq field is set. `reply`, when set
// (fresh), gets its answer.
int32_t Send(cubed_client* c, v1::Command& command, cubed_reply* reply, cubed_error* error);

}  // namespace cubed::c_api
