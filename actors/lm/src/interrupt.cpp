#include "interrupt.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace strata::lm::detail {

namespace {

// Set by SIGINT/SIGTERM while a train() with handle_signals runs. An atomic rather than volatile
// sig_atomic_t: the handler may run on any of the threads.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");
char interrupt_note[256];
std::size_t interrupt_note_size = 0;

extern "C" void on_interrupt(int) {
  interrupted.store(true, std::memory_order_relaxed);
  [[maybe_unused]] auto n = ::write(2, interrupt_note, interrupt_note_size);
}

}  // namespace

bool interrupt_requested() { return interrupted.load(std::memory_order_relaxed); }

signal_scope::signal_scope(bool active, const std::string& program) : active_(active) {
  if (!active_) return;
  const std::string note = "\n" + program + ": interrupted: stopping after this step (interrupt again to quit at once)\n";
  interrupt_note_size = std::min(note.size(), sizeof interrupt_note);
  std::memcpy(interrupt_note, note.data(), interrupt_note_size);
  interrupted.store(false, std::memory_order_relaxed);
  struct sigaction stop_after_step {};
  stop_after_step.sa_handler = on_interrupt;
  stop_after_step.sa_flags = SA_RESETHAND | SA_RESTART;
  ::sigemptyset(&stop_after_step.sa_mask);
  ::sigaction(SIGINT, &stop_after_step, &old_int_);
  ::sigaction(SIGTERM, &stop_after_step, &old_term_);
}

signal_scope::~signal_scope() {
  if (!active_) return;
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

}  // namespace strata::lm::detail
