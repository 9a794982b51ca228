#include "client/c_api/c_api_state.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace cubed::c_api {

using v1::Reply;

int32_t Fail(cubed_error* error, const absl::Status& status) {
  const int32_t code = static_cast<int32_t>(status.code());
  if (error != nullptr) {
    std::free(error->message);
    error->code = code;
    error->message = strdup(std::string(status.message()).c_str());
  }
  return code;
}

int32_t Invalid(cubed_error* error, absl::string_view what) {
  return Fail(error, absl::InvalidArgumentError(what));
}

absl::Status Closed() { return absl::FailedPreconditionError("the client is closed"); }

int32_t ClaimReply(cubed_client* c, cubed_reply* reply, cubed_error* error) {
  if (reply->state->used.exchange(true)) {
    return Invalid(error, "the cubed_reply was sent before (make one per command)");
  }
  {
    absl::MutexLock lock(&reply->state->mu);
    reply->state->queue = c->queue;
  }
  reply->state->spin = c->reply_spin;
  return 0;
}

void CompleteReply(ReplyState& state, const std::function<void(ReplyState&)>& fill) {
  bool to_queue = false;
  {
    absl::MutexLock lock(&state.mu);
    fill(state);
    state.done = true;
    state.ready.store(true, std::memory_order_release);
    to_queue = state.notify && !state.queued;
    state.queued = state.queued || to_queue;
  }
  if (to_queue) {
    absl::MutexLock lock(&state.queue->mu);
    state.queue->tags.push_back(state.tag);
  }
}

int32_t Send(cubed_client* c, v1::Command& command, cubed_reply* reply, cubed_error* error) {
  cubed::Client::StreamReplyCallback on_reply;
  if (reply != nullptr) {
    if (const int32_t code = ClaimReply(c, reply, error)) return code;
    on_reply = [state = reply->state](absl::StatusOr<Reply*> r) {
      CompleteReply(*state, [&r](ReplyState& s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (!r.ok()) {
          s.stream_status = r.status();
          return;
        }
        Reply& answer = **r;
        if (answer.has_read()) {
          auto* data = answer.mutable_read()->mutable_data();
          s.data.reserve(data->size());
          for (std::string& bytes : *data) s.data.push_back(std::move(bytes));
          data->Clear();
        }
        s.reply.Swap(&answer);
      });
    };
  }
  absl::Status sent;
  {
    absl::ReaderMutexLock lock(&c->mu);
    if (c->client == nullptr) {
      sent = Closed();
    } else {
      sent = c->client->SendStreamCommandInPlace(command, std::move(on_reply));
    }
  }
  if (!sent.ok()) {
    if (reply != nullptr) reply->state->used.store(false);
    return Fail(error, sent);
  }
  return 0;
}

}  // namespace cubed::c_api
