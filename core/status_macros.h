// Status propagation macros. Debian's abseil (20220623) ships none, so Lockstep keeps
// these two in one place.
#ifndef LOCKSTEP_CORE_STATUS_MACROS_H_
#define LOCKSTEP_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LS_CONCAT_INNER_(a, b) a##b
#define LS_CONCAT_(a, b) LS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status ls_status_ = (expr);      \
    if (!ls_status_.ok()) return ls_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F());` declares x from an absl::StatusOr, or returns its error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(LS_CONCAT_(ls_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL_(var, lhs, rexpr)  \
  auto var = (rexpr);                            \
  if (!var.ok()) return std::move(var).status(); \
  lhs = std::move(var).value()

#endif  // LOCKSTEP_CORE_STATUS_MACROS_H_
