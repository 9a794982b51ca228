#pragma once

// Note [Fast execute decode]: a pipelined tiny execute (P2) cost the daemon's reading thread
// ~0.45 µs of CPU in protobuf alone on the 2-core VM: parsing a 69-byte Command built a dozen
// arena messages (0.36–0.44 µs), and converting them into a StreamCommand took 0.09 more
// (cubed_decode_bench). That thread bounded P2 over TCP there (38% of both cores, 2026-12-07).
// Most commands of a busy stream are executes of a builtin kernel with a static cube count,
// which this decoder reads straight from their wire bytes into the StreamCommand, by protobuf's
// own wire format rules (wire_reader.h), and converts with the checks ToExecuteCommand uses
// (request_conversion.h), so that errors and results are the same by construction.
//
// It takes only the forms it can decode exactly as protobuf would: each singular field at most
// once with its declared wire type, packed repeated scalars, known fields only, ASCII kernel
// names, integers in their field's range. Anything else (another command kind, a client kernel,
// a dynamic count, a field repeated, an unknown field, malformed bytes) it declines, and the
// caller parses that command with protobuf, which decides. tests/fuzz/fuzz_decoder.cc checks the
// two against each other on arbitrary bytes.
//
// The daemon uses it with --fast_execute_decode, off by default: on the 2-core VM it cut the
// reading thread's CPU by ~0.4 µs a command and raised P2 over TCP by ~40% (same binary, the flag
// alternated), but on a 16-core H100 host (run 100, 2026-12-07) the C++ SDK's P2 fell ~20% over
// the ring and ~16% over TCP with it, unexplained so far (docs/gpu-runs.md, run 100): the default
// stays protobuf's until a GPU host measures it ahead.

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "server/channel/stream_command.h"
#include "server/service/request_conversion.h"
#include "server/service/stream/wire_reader.h"

namespace cubed {

// Decodes serialized cubed.v1.Command messages that are builtin executes. Keeps scratch space
// across commands; not thread-safe (one owner: the stream's reader).
class ExecuteDecoder {
 public:
  enum class Result {
    kTaken,       // Decoded into `out` (`out.invalid` holds a conversion error, if any).
    kNotExecute,  // Declined before its execute (or it has none): `out` untouched.
    kDeclined,    // Declined: `out` unspecified (reset it before using it).
  };

  // Decodes `command` into `out` (default-constructed) as ToStreamCommand would after protobuf
  // parsed it, or declines it (the caller starts over with protobuf).
  Result Decode(absl::string_view command, const RequestLimits& limits, StreamCommand& out);

 private:
  // One ScalarGroup as read from the wire, converted once the whole command parsed.
  struct Scalars {
    int elem = 0;
    absl::InlinedVector<double, 4> floats;
    absl::InlinedVector<int64_t, 2> ints;
    absl::InlinedVector<uint64_t, 2> uints;
  };

  bool ReadExecute(wire::WireReader& in, StreamCommand& out);
  bool ReadBindings(wire::WireReader& in, ExecuteCommand& execute);
  bool ReadScalars(wire::WireReader& in, Scalars& group);

  BuiltinKernelFields builtin_;
  int mode_ = 0;
  std::vector<Scalars> scalars_;  // The first `scalar_count_` are this command's.
  size_t scalar_count_ = 0;
};

}  // namespace cubed
