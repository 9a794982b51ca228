#pragma once

// StackCommand: a session-stream Command built or parsed on a protobuf arena whose first block
// is on the caller's stack.

#include <cstddef>

#include "cubed/v1/session.pb.h"
#include "google/protobuf/arena.h"

namespace cubed {

// Note [Commands on the stack]: an Execute on the stream is built on a protobuf arena whose first
// block is on the caller's stack, and a direct wire (the command ring) serializes it from there:
// its dozen sub-messages, strings and repeated fields cost no heap allocation. Commands beyond
// the block spill into arena blocks on the heap, freed with the arena. The C ABI parses the
// commands it is handed the same way (cubed_client_send, cubed_client_execute).
//
// The Command lives as long as the StackCommand, on the thread that made it; send it in place
// (StreamTransport::SendInPlace, Client::SendStreamCommandInPlace), never by value (a copy).
class StackCommand {
 public:
  StackCommand()
      : arena_(block_, sizeof(block_)),
        command_(google::protobuf::Arena::CreateMessage<v1::Command>(&arena_)) {}
  StackCommand(const StackCommand&) = delete;
  StackCommand& operator=(const StackCommand&) = delete;
  v1::Command* operator->() { return command_; }
  v1::Command& operator*() { return *command_; }

 private:
  alignas(std::max_align_t) char block_[2048];
  google::protobuf::Arena arena_;
  v1::Command* command_;
};

}  // namespace cubed
