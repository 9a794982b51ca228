#pragma once

// RETURN_IF_ERROR / ASSIGN_OR_RETURN: Debian's Abseil 20220623 has no status macros of its own.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CUBED_CONCAT_INNER(a, b) a##b
#define CUBED_CONCAT(a, b) CUBED_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status cubed_status_ = (expr);         \
    if (!cubed_status_.ok()) return cubed_status_; \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, F())`: declares/assigns the value of a StatusOr, or returns its
// status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  CUBED_ASSIGN_OR_RETURN_IMPL(CUBED_CONCAT(cubed_statusor_, __LINE__), lhs, expr)

#define CUBED_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()
