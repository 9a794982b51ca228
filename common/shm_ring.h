#pragma once

// The command ring's memory: two byte rings in one shared-memory file, and the readers and
// writers of their chunks. Used by the daemon (server/service/ring/) and the C++ SDK
// (client/ring_wire.h); the Python SDK implements the same layout (cubed_client/_ring.py).
//
// Note [Command ring]: a local client's session stream can travel through shared memory instead
// of gRPC. The client creates a memfd (sealed against shrinking, as a region), lays out the header
// below and passes the descriptor over the daemon's ring socket (proto/cubed/v1/ring.proto); the
// daemon answers with three eventfds. From then on the client writes the session stream's
// SessionRequests (the first carrying `open`) into the command ring and reads SessionResponses
// from the reply ring: the same messages, seq rules and replies as the gRPC stream, without a
// gRPC message, HTTP/2 frame or thread hop per batch. The connection on the ring socket stays open
// for the life of the session: closing it (or the client's death) ends the stream like a cancel.
//
// Layout (every integer little-endian; offsets in bytes):
//     0  u64 magic kRingMagic        16  u64 command capacity    64  u64 command tail
//     8  u32 version kRingVersion    24  u64 reply capacity     128  u64 command head
//    12  u32 0                                                  192  u64 reply tail
//   256  u64 reply head   320 u32 daemon waiting   384 u32 client waiting for replies
//   448  u32 client waiting for command space
//   kRingHeaderBytes: the command ring's bytes, then the reply ring's. The file is exactly
//   kRingHeaderBytes + both capacities; each capacity is a power of two, kMinRingCapacity or more.
// A ring's tail counts the bytes its writer published, its head those its reader consumed (both
// only grow, modulo 2^64); tail - head bytes wait at ring offset head mod capacity. The client
// writes the command tail and the reply head, the daemon the command head and the reply tail.
//
// Chunks: an 8-byte header (u32 payload length, u32 flags: the kind in bits 0..7, kChunkMore in
// bit 8) and the payload, padded to a multiple of 8 bytes; a payload may wrap around the ring's
// end, a header never does (it starts at a multiple of 8). A message is one or more chunks of the
// same kind, all but the last flagged kChunkMore, so a message may be larger than its ring. A
// writer publishes its tail only after the chunk's bytes are in place, with release order; a
// reader loads it with acquire order.
//
// Sleeping (no core burnt while idle): a side that finds nothing to do sets its waiting word to 1,
// looks once more, and only then sleeps in poll on its eventfd; the other side, after it published
// a tail or a head, takes the word (exchanges it with 0; sequentially consistent on both sides, so
// one of them sees the other) and writes 1 to the sleeper's eventfd when it was set. Taking the
// word makes it one doorbell per sleep: a writer that only read it rang again for every chunk it
// published until the sleeper ran and cleared it (on the 2-core VM one write(2) per 2-9 commands
// of P2; the pure-Python core still only reads it: correct, with more doorbells). A sleeper sets
// the word again before each sleep. Each side may spin for a few
// microseconds before it sleeps (Note [Spin checks] in common/spin_wait.h).
//
// Note [Cached positions]: each side keeps the other's position as it last read it, and reads the
// shared word again only when that one says it must wait: a writer the head when the message does
// not fit behind it, a reader the tail when it has read everything up to it. The other side writes
// its word after every chunk, so each read of it moved the cache line between the cores (on a
// host of many cores ~100 ns, several times per command of P2 on both sides); a stale position
// only under-states the room or the published bytes, never over-states them.
//
// Hostile writers (the daemon's view): the client may change any byte at any moment. The readers
// and writers here keep their own positions and never read back what they write; every value
// they read from shared memory (a tail, a head, a chunk header) is read once, then checked: a
// count past the capacity, a misaligned position, an unknown kind or flag, a chunk longer than
// what was published, or a message over the reader's limit is an error (the ring is corrupt),
// never an out-of-bounds access. Payloads are copied out before they are parsed.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubed {

inline constexpr uint64_t kRingMagic = 0x474E524445425543;  // "CUBEDRNG"
inline constexpr uint32_t kRingVersion = 1;
inline constexpr uint64_t kRingHeaderBytes = 4096;
inline constexpr uint64_t kMinRingCapacity = 4096;
inline constexpr uint32_t kChunkMore = 0x100;
// Free bytes a writer needs to make progress: a chunk header and 8 bytes of payload.
inline constexpr uint64_t kMinChunkRoom = 16;

// Header fields (Note [Command ring]).
enum RingOffset : uint64_t {
  kRingMagicAt = 0,
  kRingVersionAt = 8,
  kCommandCapacityAt = 16,
  kReplyCapacityAt = 24,
  kCommandTailAt = 64,
  kCommandHeadAt = 128,
  kReplyTailAt = 192,
  kReplyHeadAt = 256,
  kDaemonWaitingAt = 320,
  kClientReplyWaitingAt = 384,
  kClientSpaceWaitingAt = 448,
};

// Chunk kinds.
enum class RingChunk : uint8_t {
  kRequest = 1,       // Command ring: a serialized cubed.v1.SessionRequest.
  kRequestsDone = 2,  // Command ring, empty: no more requests (the stream's half-close).
  kResponse = 3,      // Reply ring: a serialized cubed.v1.SessionResponse.
  kEnd = 4,           // Reply ring, last: a serialized cubed.v1.RingEnd (the stream's status).
};

// The two rings of a mapped ring file. Does not own the memory.
struct RingMemory {
  uint8_t* base = nullptr;
  uint64_t command_capacity = 0;
  uint64_t reply_capacity = 0;

  uint8_t* command_data() const { return base + kRingHeaderBytes; }
  uint8_t* reply_data() const { return base + kRingHeaderBytes + command_capacity; }
  uint64_t* word64(RingOffset at) const { return reinterpret_cast<uint64_t*>(base + at); }
  uint32_t* word32(RingOffset at) const { return reinterpret_cast<uint32_t*>(base + at); }
};

// The file size of a ring file with these capacities, or INVALID_ARGUMENT naming which capacity
// is not a power of two of kMinRingCapacity or more (or when the sum overflows).
absl::StatusOr<uint64_t> RingFileBytes(uint64_t command_capacity, uint64_t reply_capacity);

// Writes a fresh header (magic, version, capacities; every position and word 0) into `memory`,
// which has RingFileBytes(...) bytes. The client does this before passing the file.
void InitRingHeader(const RingMemory& memory);

// Reads and checks the header of a ring file of `file_bytes` bytes at `base` (the daemon, once,
// when the file arrives): the magic, the version, capacities that are powers of two, at least
// kMinRingCapacity and that add up to the file's size, and positions and words still 0.
// INVALID_ARGUMENT naming the first field that is wrong.
absl::StatusOr<RingMemory> ReadRingHeader(uint8_t* base, uint64_t file_bytes);

// Shared-memory words, read and written atomically.
uint64_t LoadAcquire(const uint64_t* word);
// Whether the sleeper's word was set, clearing it (an exchange with 0). Sequentially consistent.
bool TakeWaiting(uint32_t* word);
void StoreWaiting(uint32_t* word, uint32_t value);  // Sequentially consistent.
void StoreSeqCst(uint64_t* word, uint64_t value);   // A position another side may sleep on.

// Writes 1 to an eventfd (wakes its sleeper); EAGAIN (the counter is full) is ignored.
void RingDoorbell(int eventfd);
// Reads an eventfd's counter to zero without blocking (when it is non-blocking).
void DrainDoorbell(int eventfd);

// The writer of one ring. Used by one thread at a time.
class RingWriter {
 public:
  RingWriter() = default;
  // `data` holds `capacity` bytes; `tail` and `head` are the ring's words.
  RingWriter(uint8_t* data, uint64_t capacity, uint64_t* tail, const uint64_t* head)
      : data_(data), capacity_(capacity), tail_word_(tail), head_word_(head) {}

  // Appends as much of the message `rest` of `kind` as there is room for, as chunks, publishes
  // them, and drops what it wrote from the front of `rest`. Returns true once the whole message is
  // in the ring (for an empty message: its one chunk), false when it needs room (call again with
  // the rest once the reader consumed some). DATA_LOSS when the head read from shared memory is
  // impossible: the reader corrupted the ring; then the writer must not be used again.
  absl::StatusOr<bool> Append(RingChunk kind, absl::string_view& rest);

  // Bytes published and not yet consumed, as the head reads now (0 when the head is corrupt).
  uint64_t Pending() const;
  // The position this writer published (its own copy).
  uint64_t tail() const { return tail_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t* tail_word_ = nullptr;
  const uint64_t* head_word_ = nullptr;
  uint64_t tail_ = 0;
  uint64_t head_ = 0;  // The reader's head as last read (Note [Cached positions]).
};

// The reader of one ring. Used by one thread at a time.
class RingReader {
 public:
  RingReader() = default;
  // As RingWriter; messages longer than `max_message` bytes are an error.
  RingReader(const uint8_t* data, uint64_t capacity, const uint64_t* tail, uint64_t* head,
             uint64_t max_message)
      : data_(data),
        capacity_(capacity),
        tail_word_(tail),
        head_word_(head),
        max_message_(max_message) {}

  // Consumes the published chunks up to the end of the next message (publishing the head after
  // each), appending their payloads to the message being assembled. Returns true when a whole
  // message is assembled: its kind in `*kind`, its bytes in `*message` (which the caller clears
  // before the next one); false when the ring has no more published chunks yet (what was read
  // stays in `*message`). DATA_LOSS naming what was wrong when the ring is corrupt; then the
  // reader must not be used again.
  absl::StatusOr<bool> Next(std::string* message, RingChunk* kind);

  // Whether the writer published bytes this reader has not consumed.
  bool HasPublished() const;
  uint64_t head() const { return head_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  const uint64_t* tail_word_ = nullptr;
  uint64_t* head_word_ = nullptr;
  uint64_t max_message_ = 0;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;        // The writer's tail as last read (Note [Cached positions]).
  bool in_message_ = false;  // A chunk flagged kChunkMore was read.
  RingChunk message_kind_ = RingChunk::kRequest;
};

}  // namespace cubed
