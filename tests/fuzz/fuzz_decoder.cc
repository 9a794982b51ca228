// libFuzzer target: the session stream's request decoder (RequestDecoder, with its fast execute
// decoder: Note [Fast execute decode], server/service/stream/execute_decoder.h) against what it
// stands in for, protobuf's parse of the SessionRequest followed by ToStreamCommand of each
// command. For any bytes the two must agree: both parse or neither; the same `open`; the same
// commands, each with the same kind, seq, outputs and conversion status (code and message), and
// for a valid execute the same kernel, count, buffers, metadata and scalar bytes. A decoder that
// refuses bytes must leave no command behind.
//
// The first input byte picks the mode: raw bytes as the request, or a request of executes built
// from the input (the form the SDKs write, with values anywhere in their types' ranges, some
// fields repeated or left out, and some client kernels and dynamic counts), serialized by
// protobuf and then cut or overwritten in a few places, so that both the fast path and every
// way out of it are reached.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cubed/v1/session.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "server/service/request_conversion.h"
#include "server/service/stream/request_decoder.h"
#include "server/service/stream/stream_command_conversion.h"

namespace {

using cubed::StreamCommand;

constexpr uint64_t kMaxCommands = 64;

void Fail(const char* what, size_t index) {
  std::fprintf(stderr, "fuzz_decoder: the decoder and protobuf differ: %s (command %zu)\n", what,
               index);
  std::abort();
}

void Check(bool same, const char* what, size_t index) {
  if (!same) Fail(what, index);
}

bool SameBinding(const cubed::BindingRef& a, const cubed::BindingRef& b) {
  return a.handle == b.handle && a.offset_start == b.offset_start && a.offset_end == b.offset_end;
}

bool SameGroups(const cubed::kernels::ScalarGroups& a, const cubed::kernels::ScalarGroups& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].elem != b[i].elem || a[i].bytes != b[i].bytes) return false;
  }
  return true;
}

void Compare(const StreamCommand& got, const StreamCommand& want, size_t i) {
  Check(got.kind == want.kind, "kind", i);
  Check(got.seq == want.seq, "seq", i);
  Check(got.invalid == want.invalid, "conversion status", i);
  Check(got.outputs == want.outputs, "outputs", i);
  if (want.kind != StreamCommand::Kind::kExecute || !want.invalid.ok()) return;
  const cubed::ExecuteCommand& a = got.execute;
  const cubed::ExecuteCommand& b = want.execute;
  Check(a.kernel.is_builtin == b.kernel.is_builtin, "kernel kind", i);
  const cubed::kernels::BuiltinCall& x = a.kernel.builtin;
  const cubed::kernels::BuiltinCall& y = b.kernel.builtin;
  Check(x.name == y.name && x.dtype == y.dtype && x.out_dtype == y.out_dtype && x.axis == y.axis &&
            x.index_dtype == y.index_dtype && x.allow_tf32 == y.allow_tf32,
        "builtin fields", i);
  Check(x.metadata == y.metadata, "metadata", i);
  Check(SameGroups(x.scalars, y.scalars), "scalars", i);
  Check(a.kernel.cuda.code == b.kernel.cuda.code &&
            a.kernel.cuda.entry_point == b.kernel.cuda.entry_point,
        "client kernel", i);
  Check(a.dynamic_count == b.dynamic_count && a.count[0] == b.count[0] &&
            a.count[1] == b.count[1] && a.count[2] == b.count[2] &&
            SameBinding(a.count_binding, b.count_binding),
        "count", i);
  Check(a.buffers.size() == b.buffers.size(), "buffer count", i);
  for (size_t k = 0; k < a.buffers.size(); ++k)
    Check(SameBinding(a.buffers[k], b.buffers[k]), "buffers", i);
  Check(a.unchecked == b.unchecked, "mode", i);
}

// Values a field of the wire may hold: often small and valid, sometimes anything.
uint64_t SomeU64(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegralInRange<uint64_t>(0, 16);
    case 1:
      return (uint64_t{1} << 63) + in.ConsumeIntegralInRange<uint64_t>(0, 16);
    default:
      return in.ConsumeIntegral<uint64_t>();
  }
}

int SomeEnum(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(0, 14) : in.ConsumeIntegral<int32_t>();
}

void AddExecute(FuzzedDataProvider& in, cubed::v1::Command& command) {
  command.set_seq(SomeU64(in));
  cubed::v1::Command::Execute& e = *command.mutable_execute();
  const int kernel = in.ConsumeIntegralInRange<int>(0, 9);
  if (kernel == 0) {
    e.mutable_kernel()->mutable_cuda_source()->set_source(in.ConsumeRandomLengthString(16));
    e.mutable_kernel()->mutable_cuda_source()->set_entry_point("k");
  } else if (kernel != 1) {  // 1: no kernel.
    cubed::v1::BuiltinKernel& b = *e.mutable_kernel()->mutable_builtin();
    static const char* const kNames[] = {"fill", "add", "cast", "sum", "", "matmul"};
    b.set_name(in.ConsumeBool() ? kNames[in.ConsumeIntegralInRange<int>(0, 5)]
                                : in.ConsumeRandomLengthString(80));
    b.set_dtype(static_cast<cubed::v1::ElemType>(SomeEnum(in)));
    if (in.ConsumeBool()) b.set_out_dtype(static_cast<cubed::v1::ElemType>(SomeEnum(in)));
    if (in.ConsumeBool()) b.set_axis(in.ConsumeIntegral<uint32_t>());
    if (in.ConsumeBool()) b.set_index_dtype(static_cast<cubed::v1::ElemType>(SomeEnum(in)));
    b.set_allow_tf32(in.ConsumeBool());
  }
  const int count = in.ConsumeIntegralInRange<int>(0, 7);
  if (count == 0) {
    e.mutable_count()->mutable_dynamic()->set_handle(SomeU64(in));
  } else if (count != 1) {  // 1: no count.
    cubed::v1::CubeCount::Static& s = *e.mutable_count()->mutable_static_count();
    s.set_x(in.ConsumeIntegralInRange<uint32_t>(0, 4));
    if (in.ConsumeBool()) s.set_y(in.ConsumeIntegral<uint32_t>());
    if (in.ConsumeBool()) s.set_z(in.ConsumeIntegralInRange<uint32_t>(0, 2));
  }
  cubed::v1::Bindings& bindings = *e.mutable_bindings();
  for (int i = in.ConsumeIntegralInRange<int>(0, 5); i > 0; --i) {
    cubed::v1::Binding& b = *bindings.add_buffers();
    b.set_handle(SomeU64(in));
    if (in.ConsumeBool()) b.set_offset_start(SomeU64(in));
    if (in.ConsumeBool()) b.set_offset_end(SomeU64(in));
  }
  for (int i = in.ConsumeIntegralInRange<int>(0, 12); i > 0; --i) {
    bindings.add_metadata(in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, 8)
                                           : in.ConsumeIntegral<uint32_t>());
  }
  for (int i = in.ConsumeIntegralInRange<int>(0, 3); i > 0; --i) {
    cubed::v1::ScalarGroup& g = *bindings.add_scalars();
    g.set_elem(static_cast<cubed::v1::ElemType>(SomeEnum(in)));
    for (int k = in.ConsumeIntegralInRange<int>(0, 3); k > 0; --k) {
      switch (in.ConsumeIntegralInRange<int>(0, 2)) {
        case 0:
          g.add_floats(in.ConsumeFloatingPoint<double>());
          break;
        case 1:
          g.add_ints(in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-300, 300)
                                      : in.ConsumeIntegral<int64_t>());
          break;
        default:
          g.add_uints(SomeU64(in));
          break;
      }
    }
  }
  if (in.ConsumeBool()) e.set_mode(static_cast<cubed::v1::ExecutionMode>(SomeEnum(in)));
}

// A request of executes (and the odd other command), serialized by protobuf, then damaged in a
// few places.
std::string BuiltRequest(FuzzedDataProvider& in) {
  cubed::v1::SessionRequest request;
  if (in.ConsumeBool())
    request.mutable_open()->set_device(in.ConsumeIntegralInRange<uint32_t>(0, 2));
  for (int i = in.ConsumeIntegralInRange<int>(0, 8); i > 0; --i) {
    cubed::v1::Command& command = *request.add_commands();
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
      command.set_seq(SomeU64(in));
      command.mutable_sync();
    } else {
      AddExecute(in, command);
    }
  }
  std::string bytes = request.SerializeAsString();
  for (int i = in.ConsumeIntegralInRange<int>(0, 3); i > 0 && !bytes.empty(); --i) {
    const size_t at = in.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1);
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
      case 0:
        bytes[at] = static_cast<char>(in.ConsumeIntegral<uint8_t>());
        break;
      case 1:
        bytes.erase(at, in.ConsumeIntegralInRange<size_t>(1, 4));
        break;
      default:
        bytes.insert(at, in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(1, 4)));
        break;
    }
  }
  // Sometimes a second copy of a piece (a field repeated, as a merge of two messages would be).
  if (in.ConsumeBool() && !bytes.empty()) {
    const size_t at = in.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1);
    bytes += bytes.substr(at);
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // Invalid UTF-8 in names is logged on every parse.
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string bytes =
      in.ConsumeBool() ? in.ConsumeRemainingBytesAsString() : BuiltRequest(in);
  cubed::RequestLimits limits;
  limits.max_buffers = 4;  // Low bounds, so that inputs reach them.
  limits.max_metadata_words = 10;

  cubed::RequestDecoder decoder(limits, kMaxCommands);
  const absl::Status merged = decoder.Merge(bytes);

  cubed::v1::SessionRequest parsed;
  const bool parses = parsed.ParseFromString(bytes);
  Check(merged.ok() == parses, "whether the request parses", 0);
  if (!parses) {
    Check(merged.code() == absl::StatusCode::kInvalidArgument, "the refusal's code", 0);
    Check(decoder.commands().empty() && !decoder.has_open(), "a refused request left nothing", 0);
    return 0;
  }
  Check(decoder.has_open() == parsed.has_open(), "open", 0);
  Check(decoder.open().device() == parsed.open().device() &&
            decoder.open().lease_ms() == parsed.open().lease_ms() &&
            decoder.open().resume_session() == parsed.open().resume_session(),
        "open's fields", 0);
  const size_t count = static_cast<size_t>(parsed.commands_size());
  Check(decoder.too_many() == (count > kMaxCommands ? count : 0), "too_many", 0);
  const size_t converted = std::min<size_t>(count, kMaxCommands);
  Check(decoder.commands().size() == converted, "the number of commands", 0);
  for (size_t i = 0; i < converted; ++i) {
    StreamCommand want;
    cubed::ToStreamCommand(*parsed.mutable_commands(static_cast<int>(i)), limits, want);
    Compare(decoder.commands()[i], want, i);
  }
  return 0;
}
