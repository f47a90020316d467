// The actor behind strata::requester: makes its owner's calls in order, answers barriers once
// the calls before them are answered, and stops after its owner has gone and the calls are in.

#include "strata/requester.hpp"

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace strata::detail {

namespace {

class requester_actor final : public actor {
public:
  behavior make_behavior() override {
    return {
        [this](requester_job& job) {
          const std::uint64_t seq = next_call_++;
          open_.emplace(seq, std::move(job.fail));
          job.run(*this, [this, seq] { finished(seq); });
        },
        [this](requester_barrier& b) {
          barriers_.emplace_back(next_call_, std::move(b.promise));
          release_barriers();
        },
        [this](const requester_close&) {
          closing_ = true;
          if (open_.empty()) quit();
        },
    };
  }

  void on_exit(const error& reason) override {
    // Stopped before every call was answered (the system shut down): the callers hear why.
    const error stopped(errc::stopped, "the requester stopped before the response arrived (" + reason.to_string() + ")");
    for (auto& [seq, fail] : open_)
      if (fail) fail(stopped);
    open_.clear();
    for (auto& [seq, promise] : barriers_) promise->set_value(expected<unit_t>(stopped));
    barriers_.clear();
  }

private:
  void finished(std::uint64_t seq) {
    open_.erase(seq);
    release_barriers();
    if (closing_ && open_.empty()) quit();
  }
  /// Answers the barriers whose earlier calls have all been answered.
  void release_barriers() {
    const std::uint64_t oldest = open_.empty() ? next_call_ : open_.begin()->first;
    std::erase_if(barriers_, [oldest](auto& b) {
      if (b.first > oldest) return false;
      b.second->set_value(expected<unit_t>(unit));
      return true;
    });
  }

  std::uint64_t next_call_ = 0;
  std::map<std::uint64_t, std::function<void(const error&)>> open_;  // calls not answered yet
  std::vector<std::pair<std::uint64_t, std::shared_ptr<std::promise<expected<unit_t>>>>> barriers_;
  bool closing_ = false;
};

}  // namespace

actor_ref spawn_requester(actor_system& system, spawn_options options) {
  return system.spawn_with<requester_actor>(std::move(options));
}

}  // namespace strata::detail
