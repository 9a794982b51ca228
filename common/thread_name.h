#pragma once

#include "absl/strings/string_view.h"

namespace cubed {

// Names the calling thread for `top -H`, /proc/<pid>/task/*/comm and debuggers. Linux keeps 15
// bytes: longer names are cut. Best effort: a failure is ignored.
void NameThisThread(absl::string_view name);

}  // namespace cubed
