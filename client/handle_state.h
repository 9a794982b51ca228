#pragma once

// The shared state behind every copy of one cubed::Handle.

#include <atomic>
#include <cstdint>
#include <memory>

#include "client/client.h"
#include "client/release_batcher.h"

namespace cubed {

// One daemon reference. Destroyed with the last Handle copy; then it queues the release of `id`
// on `batcher` unless detached (Note [Release batching] in release_batcher.h).
// An imported handle's `keep_alive` goes to the batcher with the release (Note [Import
// keep-alive] in release_batcher.h).
struct Handle::State {
  State(uint64_t id, uint64_t size, std::shared_ptr<ReleaseBatcher> batcher,
        std::shared_ptr<const void> keep_alive = nullptr)
      : id(id), size(size), batcher(std::move(batcher)), keep_alive(std::move(keep_alive)) {}
  ~State() {
    if (batcher == nullptr) return;
    if (detached.load(std::memory_order_acquire)) {
      batcher->KeepUntilEnd(std::move(keep_alive));
    } else {
      batcher->Enqueue(id, std::move(keep_alive));
    }
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  const uint64_t id;
  const uint64_t size;
  const std::shared_ptr<ReleaseBatcher> batcher;
  std::shared_ptr<const void> keep_alive;
  std::atomic<bool> detached{false};
};

}  // namespace cubed
