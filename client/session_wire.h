#pragma once

// SessionWire: what carries the session stream's messages for StreamTransport: gRPC's
// bidirectional stream (MakeGrpcSessionWire, below) or the daemon's command ring in shared memory
// (RingSessionWire, ring_session_wire.h; Note [Command ring] in common/shm_ring.h). The calls
// mirror grpc::ClientReaderWriter's: one thread may write while another reads.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cubed/v1/session.pb.h"
#include "grpcpp/channel.h"

namespace cubed {

// Appends to `out` what a SessionRequest's `commands` field holding `command` serializes to
// (the field's tag, the length, the command): any concatenation of such appends is the
// serialized SessionRequest that carries those commands in that order. INVALID_ARGUMENT naming
// the size, with nothing appended, for a command of 2 GiB or more (protobuf cannot frame it).
absl::Status AppendSerializedCommand(const v1::Command& command, std::string* out);
// AppendSerializedCommand for a command already serialized, `command` (whatever seq it holds),
// with `seq` as its seq: the bytes as they are, then the seq field, which protobuf's last-one-wins
// rule makes the command's (Note [Prepared C ABI launches] in
// client/c_api/cubed_client_c_launch.cc). The caller vouches that `command` parses as a
// v1::Command. INVALID_ARGUMENT as above.
absl::Status AppendSerializedCommandBytes(absl::string_view command, uint64_t seq,
                                          std::string* out);

class SessionWire {
 public:
  virtual ~SessionWire() = default;
  // Sends `request`, waiting for room; false once the wire is broken or over. One writer thread.
  virtual bool Write(const v1::SessionRequest& request) = 0;
  // Sends the serialized bytes of one SessionRequest (AppendSerializedCommand's), as they are,
  // as Write does.
  virtual bool WriteSerialized(absl::string_view request) = 0;
  // Waits for the next response; false once the stream is over (then call Finish). One reader
  // thread.
  virtual bool Read(v1::SessionResponse* response) = 0;
  // Tells the daemon that no more requests come (the writer thread, after its last Write).
  virtual void WritesDone() = 0;
  // After Read returned false: how the stream ended (the daemon's status; OK when it ended after
  // WritesDone).
  virtual absl::Status Finish() = 0;
  // Ends the stream at once, from any thread: pending and later Reads and Writes return false.
  virtual void Cancel() = 0;
  // Whether a Write costs so little that each command may be written as it comes, by the
  // thread that sends it (the command ring: a copy into shared memory), instead of batched by a
  // writer thread (gRPC: a message and a thread hop per write). Writes stay one at a time.
  virtual bool direct() const { return false; }
  // How long the daemon suggests a thread waiting for a reply on this wire polls before it
  // sleeps (the command ring's OpenRingResponse.spin_us: Note [Waiting awake], client.h); zero
  // where the daemon says nothing (gRPC).
  virtual absl::Duration suggested_spin() const { return absl::ZeroDuration(); }
};

// The session stream over gRPC (cubed.v1.SessionStream/Session) on `channel`, started here. Its
// requests go out as bytes (a grpc::ByteBuffer), so that StreamTransport's serialized batches
// need no message; its responses are parsed as usual. WriteSerialized copies the bytes into one
// slice (a memcpy: no parse, no serialization); Write serializes the request first.
std::unique_ptr<SessionWire> MakeGrpcSessionWire(const std::shared_ptr<grpc::Channel>& channel);

}  // namespace cubed
