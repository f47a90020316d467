#include "device/cuda_completions.hpp"

#include <condition_variable>
#include <thread>
#include <utility>
#include <vector>

#include "strata/device/error.hpp"

namespace strata::cuda_backend {

completion_ledger::completion_ledger(std::string stream_name, fault_probe probe, std::shared_ptr<fault_watch> watch)
    : stream_name_(std::move(stream_name)), probe_(std::move(probe)), watch_(std::move(watch)) {}

std::uint64_t completion_ledger::add(completion&& c) {
  bool register_now = false;
  std::uint64_t ticket = 0;
  {
    std::lock_guard lk(mu_);
    if (fault_) return 0;
    ticket = next_ticket_++;
    entries_.emplace(ticket, std::move(c));
    if (!watched_ && watch_) register_now = watched_ = true;
  }
  if (register_now) watch_->watch(weak_from_this());
  return ticket;
}

void completion_ledger::run(std::uint64_t ticket) noexcept {
  completion c;
  {
    std::lock_guard lk(mu_);
    auto it = entries_.find(ticket);
    if (it == entries_.end()) return;  // completed by fail()
    c = std::move(it->second);
    entries_.erase(it);
  }
  try {
    c(nullptr);
  } catch (...) {
    // Documented: completions must not throw; nothing may escape into the CUDA runtime.
  }
}

void completion_ledger::fail(std::exception_ptr fault) noexcept {
  std::map<std::uint64_t, completion> taken;
  std::exception_ptr first;
  {
    std::lock_guard lk(mu_);
    if (!fault_) fault_ = std::move(fault);
    first = fault_;
    taken.swap(entries_);
  }
  for (auto& [ticket, c] : taken) {
    try {
      c(first);
    } catch (...) {
      // As in run(): a throwing completion must not stop the others.
    }
  }
}

bool completion_ledger::check() noexcept {
  {
    std::lock_guard lk(mu_);
    if (entries_.empty() || fault_) {
      watched_ = false;
      return false;
    }
  }
  std::optional<std::string> failure;
  try {
    failure = probe_();
  } catch (...) {
    return true;  // cannot tell now: ask again next interval
  }
  if (!failure) return true;
  fail(stream_fault(stream_name_, *failure));
  std::lock_guard lk(mu_);
  watched_ = false;
  return false;
}

std::exception_ptr completion_ledger::fault() const {
  std::lock_guard lk(mu_);
  return fault_;
}

std::size_t completion_ledger::pending() const {
  std::lock_guard lk(mu_);
  return entries_.size();
}

std::exception_ptr stream_fault(const std::string& stream_name, const std::string& description) {
  return std::make_exception_ptr(device_error(
      device_errc::backend_failure,
      stream_name + ": the GPU failed with work pending (" + description +
          "); the stream's pending events and callbacks complete with this error (set STRATA_CUDA_SYNC=1 "
          "to name the failing kernel)"));
}

struct fault_watch::core {
  explicit core(std::chrono::milliseconds i) : interval(i) {}
  const std::chrono::milliseconds interval;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::weak_ptr<completion_ledger>> ledgers;
  bool stop = false;
  bool started = false;
};

fault_watch::fault_watch(std::chrono::milliseconds interval) : core_(std::make_shared<core>(interval)) {}

fault_watch::~fault_watch() {
  std::unique_lock lk(core_->mu);
  core_->stop = true;
  core_->cv.notify_all();
  // The thread holds its own reference to the core and leaves at its next wake-up; it is never
  // joined, so that the last owner may let go on the thread itself (a completion dropping the
  // device) or on CUDA's callback thread.
}

void fault_watch::watch(std::weak_ptr<completion_ledger> ledger) {
  std::lock_guard lk(core_->mu);
  if (core_->stop) return;
  core_->ledgers.push_back(std::move(ledger));
  if (!core_->started) {
    core_->started = true;
    std::thread([c = core_] { run(c); }).detach();
  }
  core_->cv.notify_all();
}

void fault_watch::run(const std::shared_ptr<core>& c) {
  std::unique_lock lk(c->mu);
  for (;;) {
    c->cv.wait(lk, [&] { return c->stop || !c->ledgers.empty(); });
    if (c->stop) return;
    if (c->cv.wait_for(lk, c->interval, [&] { return c->stop; })) return;
    // Checked without the lock (a failing ledger runs its completions); ledgers added meanwhile
    // land in the emptied list and are kept.
    std::vector<std::weak_ptr<completion_ledger>> mine;
    mine.swap(c->ledgers);
    lk.unlock();
    std::vector<std::weak_ptr<completion_ledger>> kept;
    for (auto& w : mine)
      if (auto l = w.lock(); l && l->check()) kept.push_back(std::move(w));
    lk.lock();
    c->ledgers.insert(c->ledgers.end(), kept.begin(), kept.end());
  }
}

}  // namespace strata::cuda_backend
