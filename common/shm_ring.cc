#include "common/shm_ring.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"

namespace cubed {
namespace {

constexpr uint64_t kChunkHeader = 8;

uint64_t Pad8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

bool ValidCapacity(uint64_t c) { return c >= kMinRingCapacity && absl::has_single_bit(c); }

// Copies `n` bytes at ring position `pos` out of (or into) a ring of `capacity`, wrapping.
void CopyOut(const uint8_t* data, uint64_t capacity, uint64_t pos, uint8_t* out, uint64_t n) {
  if (n == 0) return;  // An empty string's data may be null.
  const uint64_t at = pos & (capacity - 1);
  const uint64_t first = std::min(n, capacity - at);
  std::memcpy(out, data + at, first);
  if (first < n) std::memcpy(out + first, data, n - first);
}
void CopyIn(uint8_t* data, uint64_t capacity, uint64_t pos, const uint8_t* in, uint64_t n) {
  if (n == 0) return;  // An empty message's `in` may be null.
  const uint64_t at = pos & (capacity - 1);
  const uint64_t first = std::min(n, capacity - at);
  std::memcpy(data + at, in, first);
  if (first < n) std::memcpy(data, in + first, n - first);
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("command ring: ", what));
}

}  // namespace

absl::StatusOr<uint64_t> RingFileBytes(uint64_t command_capacity, uint64_t reply_capacity) {
  for (auto [name, c] : {std::pair<const char*, uint64_t>{"command", command_capacity},
                         std::pair<const char*, uint64_t>{"reply", reply_capacity}}) {
    if (!ValidCapacity(c) || c > (uint64_t{1} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat("command ring: the ", name, " capacity ", c,
                                                     " is not a power of two from ",
                                                     kMinRingCapacity, " to 2^40 bytes"));
    }
  }
  return kRingHeaderBytes + command_capacity + reply_capacity;
}

void InitRingHeader(const RingMemory& memory) {
  std::memset(memory.base, 0, kRingHeaderBytes);
  *memory.word64(kRingMagicAt) = kRingMagic;
  *memory.word32(kRingVersionAt) = kRingVersion;
  *memory.word64(kCommandCapacityAt) = memory.command_capacity;
  *memory.word64(kReplyCapacityAt) = memory.reply_capacity;
}

absl::StatusOr<RingMemory> ReadRingHeader(uint8_t* base, uint64_t file_bytes) {
  if (file_bytes < kRingHeaderBytes + 2 * kMinRingCapacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("command ring: the file has ", file_bytes, " bytes, fewer than the ",
                     kRingHeaderBytes + 2 * kMinRingCapacity, " of the smallest ring"));
  }
  // Each field read once into a local: the client may be changing them.
  RingMemory m;
  m.base = base;
  const uint64_t magic = LoadAcquire(m.word64(kRingMagicAt));
  if (magic != kRingMagic) {
    return absl::InvalidArgumentError("command ring: the header's magic is not \"CUBEDRNG\"");
  }
  const uint32_t version = __atomic_load_n(m.word32(kRingVersionAt), __ATOMIC_RELAXED);
  if (version != kRingVersion) {
    return absl::InvalidArgumentError(absl::StrCat("command ring: layout version ", version,
                                                   "; this daemon knows ", kRingVersion));
  }
  m.command_capacity = LoadAcquire(m.word64(kCommandCapacityAt));
  m.reply_capacity = LoadAcquire(m.word64(kReplyCapacityAt));
  absl::StatusOr<uint64_t> bytes = RingFileBytes(m.command_capacity, m.reply_capacity);
  if (!bytes.ok()) return bytes.status();
  if (*bytes != file_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("command ring: the header's capacities need a file of ", *bytes,
                     " bytes; it has ", file_bytes));
  }
  for (RingOffset at : {kCommandTailAt, kCommandHeadAt, kReplyTailAt, kReplyHeadAt}) {
    if (LoadAcquire(m.word64(at)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("command ring: position at offset ",
                                                     static_cast<uint64_t>(at),
                                                     " is not 0 in a fresh ring"));
    }
  }
  return m;
}

uint64_t LoadAcquire(const uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void StoreSeqCst(uint64_t* word, uint64_t value) {
  __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
}
bool TakeWaiting(uint32_t* word) { return __atomic_exchange_n(word, 0, __ATOMIC_SEQ_CST) != 0; }
void StoreWaiting(uint32_t* word, uint32_t value) {
  __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
}

void RingDoorbell(int eventfd) {
  const uint64_t one = 1;
  while (write(eventfd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void DrainDoorbell(int eventfd) {
  uint64_t count;
  while (read(eventfd, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

absl::StatusOr<bool> RingWriter::Append(RingChunk kind, absl::string_view& rest) {
  // Note [Cached positions]: the head is read from shared memory only when the one this writer
  // saw last leaves too little room for the whole message.
  uint64_t free = capacity_ - (tail_ - head_);
  if (free < kChunkHeader + Pad8(rest.size())) {
    const uint64_t head = LoadAcquire(head_word_);
    const uint64_t used = tail_ - head;
    if (used > capacity_ || (head & 7) != 0) {
      return Corrupt(absl::StrCat("the reader's head (", head, ") is not within the ", capacity_,
                                  " bytes behind the tail (", tail_, ")"));
    }
    head_ = head;
    free = capacity_ - used;
  }
  bool first = true;
  while (free >= kChunkHeader + (rest.empty() ? 0 : 8) && (first || !rest.empty())) {
    first = false;
    const uint64_t room = free - kChunkHeader;
    const uint64_t n = std::min<uint64_t>(rest.size(), room);
    const bool more = n < rest.size();
    const uint32_t header[2] = {static_cast<uint32_t>(n),
                                static_cast<uint32_t>(kind) | (more ? kChunkMore : 0)};
    CopyIn(data_, capacity_, tail_, reinterpret_cast<const uint8_t*>(header), kChunkHeader);
    CopyIn(data_, capacity_, tail_ + kChunkHeader, reinterpret_cast<const uint8_t*>(rest.data()),
           n);
    const uint64_t chunk = kChunkHeader + Pad8(n);
    tail_ += chunk;
    free -= chunk;
    rest.remove_prefix(n);
    StoreSeqCst(tail_word_, tail_);
    if (!more) return true;
  }
  return false;
}

uint64_t RingWriter::Pending() const {
  const uint64_t used = tail_ - LoadAcquire(head_word_);
  return used > capacity_ ? 0 : used;
}

bool RingReader::HasPublished() const { return LoadAcquire(tail_word_) != head_; }

absl::StatusOr<bool> RingReader::Next(std::string* message, RingChunk* kind) {
  for (;;) {
    if (tail_ == head_) {  // Note [Cached positions]: read the tail only when all seen is read.
      const uint64_t tail = LoadAcquire(tail_word_);
      if (tail - head_ > capacity_ || (tail & 7) != 0) {
        return Corrupt(absl::StrCat("the writer's tail (", tail, ") is not within the ", capacity_,
                                    " bytes ahead of the head (", head_, ")"));
      }
      tail_ = tail;
    }
    const uint64_t published = tail_ - head_;
    if (published == 0) return false;
    if (published < kChunkHeader) return Corrupt("a chunk shorter than its header was published");
    uint32_t header[2];
    CopyOut(data_, capacity_, head_, reinterpret_cast<uint8_t*>(header), kChunkHeader);
    const uint64_t length = header[0];
    const uint32_t flags = header[1];
    const uint32_t k = flags & 0xff;
    if ((flags & ~(0xffu | kChunkMore)) != 0 || k < 1 || k > 4) {
      return Corrupt(absl::StrCat("a chunk has flags 0x", absl::Hex(flags),
                                  "; known kinds are 1..4 and the flag 0x100"));
    }
    const auto chunk_kind = static_cast<RingChunk>(k);
    const uint64_t chunk = kChunkHeader + Pad8(length);
    if (chunk > published) {
      return Corrupt(absl::StrCat("a chunk of ", length, " bytes is longer than the ",
                                  published - kChunkHeader, " published after its header"));
    }
    if (in_message_ && chunk_kind != message_kind_) {
      return Corrupt(absl::StrCat("a message of kind ", static_cast<int>(message_kind_),
                                  " continues with a chunk of kind ", k));
    }
    if (length > max_message_ || message->size() > max_message_ - length) {
      return Corrupt(absl::StrCat("a message is longer than ", max_message_, " bytes"));
    }
    const size_t at = message->size();
    message->resize(at + length);
    CopyOut(data_, capacity_, head_ + kChunkHeader,
            reinterpret_cast<uint8_t*>(message->data()) + at, length);
    head_ += chunk;
    StoreSeqCst(head_word_, head_);
    message_kind_ = chunk_kind;
    in_message_ = (flags & kChunkMore) != 0;
    if (!in_message_) {
      *kind = chunk_kind;
      return true;
    }
  }
}

}  // namespace cubed
