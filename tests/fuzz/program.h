#pragma once

// Mode 3 of cubed_fuzz_requests: the input is a compact program rather than protobuf bytes, so
// that nearly every input is a sequence of well-formed requests over live sessions and handles,
// and every numeric field takes edge values (Note [Edge values]) with one byte of input. Each op
// builds one wire request (unary) or command (session stream) and runs it through UnaryClient /
// StreamClient, which check the invariants (harness.h).
//
// A program is up to 64 ops, each an op byte (op % 24) and its operands; reading past the end
// yields 0 bytes. Unary requests (session first, as compute.proto orders the fields):
//    0 OpenSession    num lease_ms, byte flags (bit 0: for the quota principal; bit 1: device 1)
//    1 CloseSession   session
//    2 Create         session, data
//    3 CreateTensor   session, shape, num elem_size, tensor_data
//    4 Empty          session, num size
//    5 EmptyTensor    session, shape, num elem_size
//    6 Read           session, list of binding
//    7 ReadTensor     session, list of tensor
//    8 GetResource    session, binding
//    9 Execute        session, execute
//   10 Flush / Sync / StartProfile / EndProfile: byte (% 4), session
//   11 MemoryUsage / MemoryCleanup / GetInfo: byte (% 3)
//   12 Release        session, list of handle
//   13 (time)         num ms: sessions whose lease ends within ms from now expire
// Session stream commands (the stream opens at the first, lease 0 = default; seq counts up):
//   14 create         id, byte (bit 0: bulk: num bulk_size, upload; else: data)
//   15 create_tensor  id, shape, num elem_size, byte (bit 0: bulk, upload; else: tensor_data)
//   16 empty          id, num size
//   17 empty_tensor   id, shape, num elem_size
//   18 execute        execute
//   19 release        list of id
//   20 read           list of binding, byte (bit 0: bulk, download)
//   21 read_tensor    list of tensor, byte (bit 0: bulk, download)
//   22 flush / sync / memory_usage / memory_cleanup / start_profile / end_profile / no kind /
//      sync repeating the previous seq: byte (% 8)
//   23 (reopen)       num lease_ms, byte (bit 0: for the quota principal): ends the stream and
//                     opens a new one
// Operands:
//   num       Note [Edge values]: one selector byte v, then
//               0x00-0x3f  v itself (0 .. 63)
//               0x40-0x7f  2^k, k = v - 0x40                (1 .. 2^63)
//               0x80-0xbf  2^(k+1) - 1, k = v - 0x80        (1 .. 2^64 - 1)
//               0xc0-0xfe  2^(k+1) + 1, k = v - 0xc0        (3 .. 2^63 + 1)
//               0xff       the next 8 bytes, little-endian
//             32-bit fields take the low 32 bits.
//   session   byte s: s < 0x80: the input's (s % n)-th session (the first is opened before the
//             first op; the stream's joins when it opens); else a num follows.
//   handle    byte h: h < 0x80: the (h % n)-th handle or client id the input created in the
//             request's session (live, released or poisoned; any session when it has none; h
//             itself when the input created none); else a num follows.
//   id        byte i: i < 0x80: a fresh client id (2^63 + k); i < 0xc0: a handle (as above,
//             from i - 0x80); else a num follows.
//   binding   handle, num offset_start, num offset_end
//   shape     byte r: r % 10 dims (0 and 9 are out of bounds), each a num
//   strides   byte m: m % 4: 0 dense row-major for the shape, 1 all zero, 2 one num per dim,
//             3 (m >> 2) % 10 nums (any count)
//   tensor    binding, shape, strides, num elem_size
//   list of X byte c: c % 8 distinct X decoded, then the list repeated
//             {1, 2, 3, 4, 8, 16, 64, 1025}[(c >> 3) % 8] times (the same binding several times)
//   data      num length (at most 64 KiB + 1), byte fill: 0xff: the next input bytes (zeros past
//             the end); else fill, fill + 1, ... (256 bytes), then fill
//   tensor_data byte d: bit 0: a data follows; else the shape's dense bytes (pattern from d;
//             none when they exceed 64 KiB + 1)
//   upload    byte u: bit 6: (u % 8) explicit chunks, each num offset, num bytes; else num
//             chunk bytes, in order; bit 7: cancel after ((u >> 3) % 8) chunks
//   download  num chunk_bytes, byte c: bit 7: cancel after (c % 128) pieces
//   execute   kernel, count, list of binding (the buffers), metadata, scalars, byte mode (% 4)
//   kernel    byte k: k % 4: 0 builtin: byte name (% names + 1: the last is unknown), byte dtype
//             (% 7), byte out_dtype (% 7), num axis, allow_tf32 = bit 7 of k; 1 cuda_source,
//             2 ptx: num x, y, z cube_dim, num shared_memory_bytes; 3 none
//   count     byte c: bit 0: dynamic: binding; else static: num x, y, z
//   metadata  byte m: m % 4: 0 none; 1 every buffer a tensor of the shape it was created with
//             (1-D for plain buffers), encoded; 2 as 1, then byte index, num word replaces one
//             word; 3 byte n, then n % 64 nums, the words
//   scalars   byte g: g % 4 groups, each byte elem (% 7), byte n (% 8) values, each a num

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cubed::fuzz {

// The ops, numbered as above (make_seeds.cc writes programs with them).
enum ProgramOp : uint8_t {
  kOpOpenSession,
  kOpCloseSession,
  kOpCreate,
  kOpCreateTensor,
  kOpEmpty,
  kOpEmptyTensor,
  kOpRead,
  kOpReadTensor,
  kOpGetResource,
  kOpExecute,
  kOpSessionCall,
  kOpDeviceCall,
  kOpRelease,
  kOpTime,
  kOpStreamCreate,
  kOpStreamCreateTensor,
  kOpStreamEmpty,
  kOpStreamEmptyTensor,
  kOpStreamExecute,
  kOpStreamRelease,
  kOpStreamRead,
  kOpStreamReadTensor,
  kOpStreamOther,
  kOpStreamReopen,
  kNumProgramOps,
};

// Note [Edge values]: the values at which size arithmetic breaks: 0, 1, small counts, 2^k and
// its neighbours (2^62 * 4 = 2^64 wraps to 0; 2^63 - 1 is the largest size the wire accepts;
// 2^64 - 1 is the largest uint64), reachable with one mutated byte.
// EdgeValue decodes a selector byte other than 0xff (the raw escape).
constexpr uint64_t EdgeValue(uint8_t v) {
  const unsigned k = v & 0x3f;
  switch (v >> 6) {
    case 0:
      return v;
    case 1:
      return uint64_t{1} << k;
    case 2:
      return k == 63 ? ~uint64_t{0} : (uint64_t{2} << k) - 1;
    default:
      return (uint64_t{2} << k) + 1;
  }
}

// Runs `data` as a program (above), then closes everything and checks the device's baseline.
void RunProgram(const uint8_t* data, size_t size);

// One byte of a program and what it is, for structure-aware mutation (program_mutator.h).
struct ProgramField {
  enum class Role : uint8_t {
    kOp,      // An op byte.
    kNum,     // A num's selector byte.
    kRaw,     // A byte of a raw num.
    kList,    // A list header (distinct count, repeats).
    kCount,   // Another count: rank, metadata words, scalar groups or values.
    kChoice,  // Anything else: a session, handle or id byte, a mode, a flag, a kind.
  };
  uint32_t pos = 0;  // Offset in the program (the input after its mode byte).
  Role role = Role::kOp;
};

// The fields of `data` in the order the program reads them (data bytes are not listed).
std::vector<ProgramField> ProgramLayout(const uint8_t* data, size_t size);

}  // namespace cubed::fuzz
