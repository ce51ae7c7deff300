// Where Gloo's exceptions become absl::Status. Contract: gloo_status.h.
#include "workers/gloo/gloo_status.h"

#include <exception>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"

namespace lockstep::gloo_internal {
namespace {

bool SaysTimeout(absl::string_view message) {
  const std::string lower = absl::AsciiStrToLower(message);
  return absl::StrContains(lower, "timeout") || absl::StrContains(lower, "timed out");
}

}  // namespace

absl::Status StatusFromCurrentException(absl::string_view what) {
  try {
    throw;
  } catch (const StoreError& e) {
    return absl::Status(e.status().code(), absl::StrCat(what, ": ", e.status().message()));
  } catch (const gloo::IoException& e) {
    const std::string message = absl::StrCat(what, ": ", e.what());
    return SaysTimeout(e.what()) ? absl::DeadlineExceededError(message)
                                 : absl::UnavailableError(message);
  } catch (const gloo::Exception& e) {
    const std::string message = absl::StrCat(what, ": ", e.what());
    return SaysTimeout(e.what()) ? absl::DeadlineExceededError(message)
                                 : absl::InternalError(message);
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat(what, ": gloo invariant: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unknown exception"));
  }
}

}  // namespace lockstep::gloo_internal
