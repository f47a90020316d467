#include "strata/error.hpp"

#include <ostream>

namespace strata {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::none: return "none";
    case errc::normal_exit: return "normal_exit";
    case errc::stopped: return "stopped";
    case errc::unhandled_exception: return "unhandled_exception";
    case errc::linked_exit: return "linked_exit";
    case errc::request_timeout: return "request_timeout";
    case errc::unhandled_message: return "unhandled_message";
    case errc::target_terminated: return "target_terminated";
    case errc::mailbox_full: return "mailbox_full";
    case errc::type_mismatch: return "type_mismatch";
    case errc::restart_limit: return "restart_limit";
    case errc::invalid_argument: return "invalid_argument";
    case errc::runtime_failure: return "runtime_failure";
    case errc::rank_down: return "rank_down";
    case errc::not_found: return "not_found";
    case errc::stash_full: return "stash_full";
  }
  return "unknown";
}

std::string error::to_string() const {
  std::string out = strata::to_string(code_);
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, errc code) { return os << to_string(code); }
std::ostream& operator<<(std::ostream& os, const error& err) { return os << err.to_string(); }

}  // namespace strata
