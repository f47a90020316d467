#pragma once
// SIGINT and SIGTERM during a train() with handle_signals: the first stops the run after the
// current step, a second ends the process at once. Private to strata::lm.

#include <csignal>
#include <string>

namespace strata::lm::detail {

/// Whether SIGINT or SIGTERM arrived while a signal_scope was active (since the last one began).
/// Safe from any thread.
bool interrupt_requested();

/// Installs the interrupt handler for SIGINT and SIGTERM for its lifetime (when `active`): the
/// first signal writes "<program>: interrupted: ..." to stderr and sets interrupt_requested(), so
/// that the run stops after the current step (saved when there is a checkpoint); a second one
/// ends the process at once (SA_RESETHAND), which saves are atomic against. The previous handlers
/// come back at its end.
class signal_scope {
public:
  signal_scope(bool active, const std::string& program);
  ~signal_scope();
  signal_scope(const signal_scope&) = delete;
  signal_scope& operator=(const signal_scope&) = delete;

private:
  bool active_;
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace strata::lm::detail
