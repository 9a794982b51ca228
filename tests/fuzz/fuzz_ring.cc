// libFuzzer target over the command ring's shared memory as a hostile client leaves it (Note
// [Command ring], common/shm_ring.h): the header the daemon checks once, and the chunks and
// positions its reader takes from a ring the client keeps scribbling on, while the daemon's
// writer appends replies against a head the client may set to anything.
//
// An input is a header image followed by steps. Each step is one of: the client publishes a
// tail (any 64-bit value), writes bytes at an offset of the command ring, sets the reply ring's
// head (any value), the daemon reads the next message, or the daemon appends a reply. The
// invariants, beyond what the sanitizers check (no access outside the two rings, no undefined
// behaviour): a message the reader returns is at most max_message bytes and of a known kind,
// the reader's head never passes what was published and only moves forward, and after a
// DATA_LOSS neither side is used again (as RingWire does). A second mode writes messages with an
// honest writer, in pieces, and checks that the reader returns exactly them, in order.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/shm_ring.h"

namespace {

constexpr uint64_t kCapacity = cubed::kMinRingCapacity;  // Small: wrap-around is reached often.

void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_ring: invariant broken: %s\n", what);
  std::abort();
}

bool KnownKind(cubed::RingChunk kind) {
  return kind == cubed::RingChunk::kRequest || kind == cubed::RingChunk::kRequestsDone ||
         kind == cubed::RingChunk::kResponse || kind == cubed::RingChunk::kEnd;
}

// A ring file in ordinary memory: the header and two rings of kCapacity bytes.
struct RingFile {
  std::vector<uint64_t> words;  // uint64_t: the positions are 8-byte aligned as in a mapping.
  cubed::RingMemory memory;

  RingFile() : words((cubed::kRingHeaderBytes + 2 * kCapacity) / 8, 0) {
    memory.base = reinterpret_cast<uint8_t*>(words.data());
    memory.command_capacity = kCapacity;
    memory.reply_capacity = kCapacity;
    cubed::InitRingHeader(memory);
  }
  uint64_t bytes() const { return words.size() * 8; }
};

// The header check: a fuzzed header image over a fresh file must be accepted or refused, never
// trusted past what it checks.
void FuzzHeader(FuzzedDataProvider& in) {
  RingFile file;
  const std::vector<uint8_t> image = in.ConsumeBytes<uint8_t>(cubed::kRingHeaderBytes);
  if (!image.empty()) std::memcpy(file.memory.base, image.data(), image.size());
  const uint64_t claimed = in.ConsumeIntegralInRange<uint64_t>(0, file.bytes());
  absl::StatusOr<cubed::RingMemory> got = cubed::ReadRingHeader(file.memory.base, claimed);
  if (got.ok()) {
    if (got->command_capacity + got->reply_capacity + cubed::kRingHeaderBytes != claimed) {
      Fail("an accepted header's capacities do not add up to the file");
    }
    // Touch both rings: ASan reports it if the accepted layout reaches outside the file.
    volatile uint8_t sink = got->command_data()[got->command_capacity - 1];
    sink = got->reply_data()[got->reply_capacity - 1];
    (void)sink;
  }
}

// The hostile client against the daemon's reader and writer.
void FuzzHostile(FuzzedDataProvider& in) {
  RingFile file;
  const cubed::RingMemory& m = file.memory;
  const uint64_t max_message = in.ConsumeIntegralInRange<uint64_t>(0, 4 * kCapacity);
  cubed::RingReader reader(m.command_data(), kCapacity, m.word64(cubed::kCommandTailAt),
                           m.word64(cubed::kCommandHeadAt), max_message);
  cubed::RingWriter writer(m.reply_data(), kCapacity, m.word64(cubed::kReplyTailAt),
                           m.word64(cubed::kReplyHeadAt));
  bool reader_ok = true, writer_ok = true;
  std::string message, reply;
  absl::string_view reply_rest;
  uint64_t published = 0;  // The largest tail the client published so far.
  for (int step = 0; step < 64 && in.remaining_bytes() > 0; ++step) {
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: {  // The client publishes a tail: honest-looking or anything.
        const uint64_t tail =
            in.ConsumeBool()
                ? in.ConsumeIntegral<uint64_t>()
                : reader.head() + 8 * in.ConsumeIntegralInRange<uint64_t>(0, kCapacity / 8);
        cubed::StoreSeqCst(m.word64(cubed::kCommandTailAt), tail);
        if (tail > published) published = tail;
        break;
      }
      case 1: {  // The client writes bytes into the command ring.
        const uint64_t at = in.ConsumeIntegralInRange<uint64_t>(0, kCapacity - 1);
        const std::vector<uint8_t> bytes =
            in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, kCapacity - at));
        if (!bytes.empty()) std::memcpy(m.command_data() + at, bytes.data(), bytes.size());
        break;
      }
      case 2:  // The client sets the reply ring's head.
        cubed::StoreSeqCst(m.word64(cubed::kReplyHeadAt), in.ConsumeIntegral<uint64_t>());
        break;
      case 3: {  // The daemon reads.
        if (!reader_ok) break;
        const uint64_t before = reader.head();
        cubed::RingChunk kind = cubed::RingChunk::kRequest;
        absl::StatusOr<bool> got = reader.Next(&message, &kind);
        if (!got.ok()) {
          reader_ok = false;
          break;
        }
        if (reader.head() < before) Fail("the reader's head moved back");
        if (reader.head() > published) Fail("the reader consumed more than was published");
        if (reader.head() - before > kCapacity) Fail("the reader consumed more than a ring");
        if (*got) {
          if (message.size() > max_message) Fail("a message longer than max_message");
          if (!KnownKind(kind)) Fail("a message of an unknown kind");
          message.clear();
        } else if (message.size() > max_message) {
          Fail("a partial message longer than max_message");
        }
        break;
      }
      case 4: {  // The daemon appends (the rest of) a reply.
        if (!writer_ok) break;
        if (reply_rest.empty()) {
          reply = in.ConsumeRandomLengthString(3 * kCapacity);
          reply_rest = reply;
        }
        absl::StatusOr<bool> done = writer.Append(cubed::RingChunk::kResponse, reply_rest);
        if (!done.ok()) writer_ok = false;
        break;
      }
    }
  }
}

// An honest writer and the reader: the messages arrive exactly, in order, whatever their sizes
// and however the reads interleave with the writes.
void FuzzRoundTrip(FuzzedDataProvider& in) {
  RingFile file;
  const cubed::RingMemory& m = file.memory;
  cubed::RingWriter writer(m.command_data(), kCapacity, m.word64(cubed::kCommandTailAt),
                           m.word64(cubed::kCommandHeadAt));
  cubed::RingReader reader(m.command_data(), kCapacity, m.word64(cubed::kCommandTailAt),
                           m.word64(cubed::kCommandHeadAt), 4 * kCapacity);
  std::vector<std::string> sent;
  size_t received = 0;
  std::string message, current;
  absl::string_view rest;
  bool writing = false;
  // One step: the writer appends (the rest of) the current message when `write`, then the reader
  // takes what was published, which must be the next message sent, unchanged.
  auto step = [&](bool write) {
    if (write) {
      absl::StatusOr<bool> done = writer.Append(cubed::RingChunk::kRequest, rest);
      if (!done.ok()) Fail("an honest writer saw a corrupt head");
      if (*done) writing = false;
    }
    cubed::RingChunk kind = cubed::RingChunk::kRequest;
    absl::StatusOr<bool> got = reader.Next(&message, &kind);
    if (!got.ok()) Fail("the reader refused an honest ring");
    if (*got) {
      if (received >= sent.size() || message != sent[received]) Fail("a message changed");
      if (kind != cubed::RingChunk::kRequest) Fail("a message changed kind");
      ++received;
      message.clear();
    }
  };
  for (int i = 0; i < 256 && (in.remaining_bytes() > 0 || writing); ++i) {
    if (!writing && in.remaining_bytes() > 0) {
      sent.push_back(in.ConsumeRandomLengthString(4 * kCapacity));
      current = sent.back();
      rest = current;
      writing = true;
    }
    step(writing && (in.remaining_bytes() == 0 || in.ConsumeBool()));
  }
  for (int drain = 0; drain < 8192 && received < sent.size(); ++drain) step(writing);
  if (!writing && received != sent.size()) Fail("a message written whole never arrived");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      FuzzHeader(in);
      break;
    case 1:
      FuzzHostile(in);
      break;
    default:
      FuzzRoundTrip(in);
      break;
  }
  return 0;
}
