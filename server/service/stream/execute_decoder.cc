#include "server/service/stream/execute_decoder.h"

#include <climits>
#include <cstdint>

#include "absl/base/casts.h"
#include "common/status_macros.h"
#include "server/service/stream/wire_reader.h"

namespace cubed {
namespace {

using wire::kLength;
using wire::kVarint;
using wire::Tag;
using wire::WireReader;

bool ReadU32(WireReader& in, uint32_t& value) {
  uint64_t wide = 0;
  if (!in.ReadVarint(wide) || wide > UINT32_MAX) return false;  // Protobuf would truncate it.
  value = static_cast<uint32_t>(wide);
  return true;
}

// An enum field (int32 on the wire): negative numbers (10-byte varints) declined.
bool ReadEnum(WireReader& in, int& value) {
  uint64_t wide = 0;
  if (!in.ReadVarint(wide) || wide > INT32_MAX) return false;
  value = static_cast<int>(wide);
  return true;
}

// Marks `bit` in `seen`; false when it was there already (a singular field repeated, which
// protobuf merges: declined).
bool First(uint32_t& seen, uint32_t bit) {
  if ((seen & bit) != 0) return false;
  seen |= bit;
  return true;
}

// Reads a message's fields up to the current limit; `field(tag)` reads the field behind each tag
// and says whether it took it.
template <typename Field>
bool ReadFields(WireReader& in, Field field) {
  while (!in.done()) {
    if (!field(in.ReadShortTag())) return false;  // kOtherTag included: no field takes it.
  }
  return true;
}

// A length-delimited field read by `read(body)` (a callable returning bool), which must read all
// of it.
template <typename Read>
bool ReadNested(WireReader& in, Read read) {
  WireReader body;
  return in.ReadNested(body) && read(body) && body.done();
}

bool ReadBuiltin(WireReader& in, BuiltinKernelFields& b) {
  uint32_t seen = 0;
  return ReadFields(in, [&](uint32_t tag) {
    switch (tag) {
      case Tag(1, kLength):
        if (!First(seen, 1) || !in.ReadBytes(b.name)) return false;
        for (const char c : b.name) {
          if (static_cast<unsigned char>(c) >= 0x80) return false;  // UTF-8: protobuf checks.
        }
        return true;
      case Tag(2, kVarint):
        return First(seen, 2) && ReadEnum(in, b.dtype);
      case Tag(3, kVarint):
        return First(seen, 4) && ReadEnum(in, b.out_dtype);
      case Tag(4, kVarint):
        return First(seen, 8) && ReadU32(in, b.axis);
      case Tag(5, kVarint):
        return First(seen, 16) && ReadEnum(in, b.index_dtype);
      case Tag(6, kVarint): {
        uint64_t flag = 0;
        if (!First(seen, 32) || !in.ReadVarint(flag)) return false;
        b.allow_tf32 = flag != 0;
        return true;
      }
      default:
        return false;
    }
  });
}

// A message of one oneof whose member field 1, a message read by `read(body)`, must be the one
// set: Kernel { builtin } (a client kernel is declined), CubeCount { static_count } (a dynamic
// count is declined).
template <typename Read>
bool ReadFirstMember(WireReader& in, Read read) {
  uint32_t seen = 0;
  return ReadFields(in,
                    [&](uint32_t tag) {
                      return tag == Tag(1, kLength) && First(seen, 1) && ReadNested(in, read);
                    }) &&
         seen == 1;
}

bool ReadStaticCount(WireReader& in, uint32_t (&count)[3]) {
  uint32_t seen = 0;
  count[0] = count[1] = count[2] = 0;  // A field left out is 0, as protobuf reads it.
  return ReadFields(in, [&](uint32_t tag) {
    const uint32_t field = tag >> 3;
    if ((tag & 7) != kVarint || field < 1 || field > 3) return false;
    return First(seen, 1u << field) && ReadU32(in, count[field - 1]);
  });
}

bool ReadBinding(WireReader& in, BindingRef& binding) {
  uint32_t seen = 0;
  uint64_t handle = 0;
  const bool ok = ReadFields(in, [&](uint32_t tag) {
    switch (tag) {
      case Tag(1, kVarint):
        return First(seen, 1) && in.ReadVarint(handle);
      case Tag(2, kVarint):
        return First(seen, 2) && in.ReadVarint(binding.offset_start);
      case Tag(3, kVarint):
        return First(seen, 4) && in.ReadVarint(binding.offset_end);
      default:
        return false;
    }
  });
  binding.handle = HandleId(handle);
  return ok;
}

// A packed repeated varint field's body: `add(value)` for each, which says whether it took it.
template <typename Add>
bool ReadPackedVarints(WireReader& in, Add add) {
  return ReadNested(in, [&](WireReader& body) {
    while (!body.done()) {
      uint64_t value = 0;
      if (!body.ReadVarint(value) || !add(value)) return false;
    }
    return true;
  });
}

}  // namespace

bool ExecuteDecoder::ReadScalars(WireReader& in, Scalars& group) {
  uint32_t seen = 0;
  group.elem = 0;
  group.floats.clear();
  group.ints.clear();
  group.uints.clear();
  return ReadFields(in, [&](uint32_t tag) {
    switch (tag) {
      case Tag(1, kVarint):
        return First(seen, 1) && ReadEnum(in, group.elem);
      case Tag(2, kLength):  // Packed doubles (repeated occurrences append, as in protobuf).
        return ReadNested(in, [&](WireReader& body) {
          if (body.left() % 8 != 0) return false;
          while (!body.done()) {
            uint64_t bits = 0;
            if (!body.ReadFixed64(bits)) return false;
            group.floats.push_back(absl::bit_cast<double>(bits));
          }
          return true;
        });
      case Tag(3, kLength):
        return ReadPackedVarints(in, [&](uint64_t v) {
          group.ints.push_back(static_cast<int64_t>(v));
          return true;
        });
      case Tag(4, kLength):
        return ReadPackedVarints(in, [&](uint64_t v) {
          group.uints.push_back(v);
          return true;
        });
      default:
        return false;
    }
  });
}

bool ExecuteDecoder::ReadBindings(WireReader& in, ExecuteCommand& execute) {
  return ReadFields(in, [&](uint32_t tag) {
    switch (tag) {
      case Tag(1, kLength):
        return ReadNested(in, [&](WireReader& body) {
          return ReadBinding(body, execute.buffers.emplace_back());
        });
      case Tag(2, kLength):
        return ReadPackedVarints(in, [&](uint64_t word) {
          if (word > UINT32_MAX) return false;  // Protobuf would truncate it.
          execute.kernel.builtin.metadata.push_back(static_cast<uint32_t>(word));
          return true;
        });
      case Tag(3, kLength):
        if (scalar_count_ == scalars_.size()) scalars_.emplace_back();
        return ReadNested(
            in, [&](WireReader& body) { return ReadScalars(body, scalars_[scalar_count_++]); });
      default:
        return false;
    }
  });
}

bool ExecuteDecoder::ReadExecute(WireReader& in, StreamCommand& out) {
  uint32_t seen = 0;
  const bool ok = ReadFields(in, [&](uint32_t tag) {
    switch (tag) {
      case Tag(1, kLength):
        return First(seen, 1) && ReadNested(in, [&](WireReader& kernel) {
                 return ReadFirstMember(
                     kernel, [&](WireReader& builtin) { return ReadBuiltin(builtin, builtin_); });
               });
      case Tag(2, kLength):
        return First(seen, 2) && ReadNested(in, [&](WireReader& count) {
                 return ReadFirstMember(count, [&](WireReader& static_count) {
                   return ReadStaticCount(static_count, out.execute.count);
                 });
               });
      case Tag(3, kLength):
        return First(seen, 4) &&
               ReadNested(in, [&](WireReader& body) { return ReadBindings(body, out.execute); });
      case Tag(4, kVarint):
        return First(seen, 8) && ReadEnum(in, mode_);
      default:
        return false;
    }
  });
  // Without a kernel or a count protobuf's conversion names the missing one: declined.
  return ok && (seen & 3) == 3;
}

ExecuteDecoder::Result ExecuteDecoder::Decode(absl::string_view command,
                                              const RequestLimits& limits, StreamCommand& out) {
  builtin_ = {};
  mode_ = 0;
  scalar_count_ = 0;
  WireReader in(command);
  uint32_t seen = 0;
  uint64_t seq = 0;
  const bool ok = ReadFields(in, [&](uint32_t tag) {
    switch (tag) {
      case Tag(1, kVarint):
        return First(seen, 1) && in.ReadVarint(seq);
      case Tag(6, kLength):
        seen |= 4;  // `out` is written from here on.
        return First(seen, 2) &&
               ReadNested(in, [&](WireReader& body) { return ReadExecute(body, out); });
      default:
        return false;
    }
  });
  if (!ok || (seen & 2) == 0) return (seen & 4) != 0 ? Result::kDeclined : Result::kNotExecute;

  // Converted as ToStreamCommand converts the parsed message (stream_command_conversion.cc):
  // the output first (Note [Poisoned handles], session.h), then ToExecuteCommand's checks in
  // its order.
  out.seq = seq;
  out.kind = StreamCommand::Kind::kExecute;
  ExecuteCommand& execute = out.execute;
  if (!execute.buffers.empty()) out.outputs.emplace_back(execute.buffers.back().handle);
  out.invalid = [&]() -> absl::Status {
    RETURN_IF_ERROR(ToBuiltinCall(builtin_, execute.kernel.builtin));
    RETURN_IF_ERROR(CheckExecuteFields(mode_, execute.buffers.size(),
                                       execute.kernel.builtin.metadata.size(), limits, execute));
    for (size_t i = 0; i < scalar_count_; ++i) {
      const Scalars& group = scalars_[i];
      RETURN_IF_ERROR(AppendScalarGroup({group.elem, group.floats, group.ints, group.uints},
                                        static_cast<int>(i), execute.kernel.builtin.scalars));
    }
    return absl::OkStatus();
  }();
  return Result::kTaken;
}

}  // namespace cubed
