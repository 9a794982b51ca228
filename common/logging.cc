#include "common/logging.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace cubed {

absl::Status SetLogLevel(absl::string_view level) {
  const std::string name(level);
  spdlog::level::level_enum parsed = spdlog::level::from_str(name);
  // from_str returns `off` for anything it does not know; accept "off" only when asked for.
  if (parsed == spdlog::level::off && name != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", level, "' (expected trace, debug, info, warn, error or off)"));
  }
  // Logs go to stderr (systemd's journal takes both streams; stdout stays free for tools).
  static const bool once = [] {
    spdlog::set_default_logger(spdlog::stderr_color_mt("cubed"));
    return true;
  }();
  (void)once;
  spdlog::set_level(parsed);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  return absl::OkStatus();
}

}  // namespace cubed
