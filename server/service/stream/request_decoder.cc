#include "server/service/stream/request_decoder.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "server/service/stream/stream_command_conversion.h"
#include "server/service/stream/wire_reader.h"

namespace cubed {
namespace {

constexpr uint32_t kOpenTag = wire::Tag(1, wire::kLength);      // SessionRequest.open.
constexpr uint32_t kCommandsTag = wire::Tag(2, wire::kLength);  // SessionRequest.commands.

absl::Status DoesNotParse(absl::string_view request) {
  return absl::InvalidArgumentError(absl::StrCat(
      "a request of ", request.size(), " bytes does not parse as a cubed.v1.SessionRequest"));
}

}  // namespace

RequestDecoder::RequestDecoder(const RequestLimits& limits, uint64_t max_commands, bool fast)
    : limits_(limits), max_commands_(max_commands), fast_(fast) {}

void RequestDecoder::Reset() {
  commands_.clear();
  has_open_ = false;
  open_.Clear();
  too_many_ = 0;
  arena_.Reset();
}

void RequestDecoder::ConvertParsed(v1::SessionRequest& parsed, int count, size_t first) {
  for (int i = 0; i < count; ++i) {
    ToStreamCommand(*parsed.mutable_commands(i), limits_,
                    commands_[first + static_cast<size_t>(i)]);
  }
}

bool RequestDecoder::ParseRun(absl::string_view run, size_t first, size_t count) {
  auto* parsed = arena_.Create<v1::SessionRequest>();
  if (!parsed->ParseFromArray(run.data(), static_cast<int>(run.size()))) return false;
  // The run holds exactly the placeholders' commands, in order.
  if (static_cast<size_t>(parsed->commands_size()) != count) return false;
  ConvertParsed(*parsed, parsed->commands_size(), first);
  return true;
}

absl::Status RequestDecoder::Merge(absl::string_view request) {
  if (request.size() > static_cast<size_t>(INT_MAX)) return DoesNotParse(request);
  const size_t before = commands_.size();
  const bool had_open = has_open_;
  // Room for every command first: growing the vector as they come moved each 728-byte
  // StreamCommand about once more and faulted in fresh pages for the larger copies (perf on the
  // 2-core VM, 2026-12-07: the reading thread's relocations, constructions and page faults).
  size_t listed = 0;
  for (wire::WireReader scan(request); !scan.done();) {
    const uint32_t tag = scan.ReadShortTag();
    absl::string_view skipped;
    if ((tag != kOpenTag && tag != kCommandsTag) || !scan.ReadBytes(skipped)) break;
    if (tag == kCommandsTag) ++listed;
  }
  // At least doubled: the ring merges requests of one command each into one read.
  const size_t needed = before + std::min<size_t>(listed, max_commands_);
  if (needed > commands_.capacity()) commands_.reserve(std::max(needed, 2 * commands_.capacity()));
  wire::WireReader in(request);
  bool opened = false;
  uint64_t count = 0;
  bool parsed = true;
  bool unusual = false;  // A top-level form this loop leaves to protobuf's parse of the whole.
  // The run of commands the execute decoder declined since the last one it took: their fields,
  // contiguous in `request`, parse as one SessionRequest (Note [Fast execute decode]), into the
  // placeholders from `run_first` on.
  const char* run_start = nullptr;
  const char* run_end = nullptr;
  size_t run_first = 0;
  size_t run_count = 0;
  const auto flush_run = [&] {
    if (run_start == nullptr) return true;
    const bool ok = ParseRun(absl::string_view(run_start, static_cast<size_t>(run_end - run_start)),
                             run_first, run_count);
    run_start = nullptr;
    return ok;
  };
  while (!in.done()) {
    const char* field_start = in.position();
    const uint32_t tag = in.ReadShortTag();
    // A repeated `open` protobuf merges: its parse decides that too.
    if ((tag != kOpenTag && tag != kCommandsTag) || (tag == kOpenTag && opened)) {
      unusual = true;
      break;
    }
    absl::string_view field;
    if (!in.ReadBytes(field)) {
      parsed = false;
      break;
    }
    if (tag == kOpenTag) {
      opened = true;
      if (!open_.ParseFromArray(field.data(), static_cast<int>(field.size()))) {
        parsed = false;
        break;
      }
      has_open_ = true;
      continue;
    }
    if (++count > max_commands_) continue;  // Counted, not converted: too_many() reports it.
    StreamCommand& command = commands_.emplace_back();
    const ExecuteDecoder::Result decoded =
        fast_ ? executes_.Decode(field, limits_, command) : ExecuteDecoder::Result::kNotExecute;
    if (decoded == ExecuteDecoder::Result::kTaken) {
      ++fast_decoded_;
      continue;
    }
    // A placeholder, filled by the run's parse.
    if (decoded == ExecuteDecoder::Result::kDeclined) command = StreamCommand();
    if (run_start == nullptr || run_end != field_start) {
      if (!flush_run()) {
        parsed = false;
        break;
      }
      run_start = field_start;
      run_first = commands_.size() - 1;
      run_count = 0;
    }
    run_end = in.position();
    ++run_count;
  }
  if (parsed && !unusual && !flush_run()) parsed = false;
  if (parsed && !unusual) {
    if (count > max_commands_) too_many_ = std::max(too_many_, count);
    return absl::OkStatus();
  }
  commands_.erase(commands_.begin() + static_cast<ptrdiff_t>(before), commands_.end());
  has_open_ = had_open;
  if (!parsed) return DoesNotParse(request);
  return MergeParsed(request);
}

absl::Status RequestDecoder::MergeParsed(absl::string_view request) {
  auto* parsed = arena_.Create<v1::SessionRequest>();
  if (!parsed->ParseFromArray(request.data(), static_cast<int>(request.size()))) {
    return DoesNotParse(request);
  }
  if (parsed->has_open()) {
    open_ = parsed->open();
    has_open_ = true;
  }
  const uint64_t count = static_cast<uint64_t>(parsed->commands_size());
  if (count > max_commands_) too_many_ = std::max(too_many_, count);
  const size_t first = commands_.size();
  const uint64_t converted = std::min(count, max_commands_);
  commands_.resize(first + converted);
  ConvertParsed(*parsed, static_cast<int>(converted), first);
  return absl::OkStatus();
}

}  // namespace cubed
