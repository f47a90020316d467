#include "session.hpp"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/actor.hpp"
#include "strata/kvstore/kvstore.hpp"

namespace strata::kvstore::internal {

namespace {

class kvstore_session final : public actor {
public:
  kvstore_session(actor_ref store, std::chrono::nanoseconds timeout) : store_(std::move(store)), timeout_(timeout) {}

private:
  template <class R, class M>
  auto forward() {
    return [this](detail::call<R, M>& c) {
      using request_type = std::conditional_t<std::is_same_v<R, unit_t>, void, R>;
      const std::uint64_t seq = next_call_++;
      outstanding_.insert(seq);
      auto promise = c.promise;
      request<request_type>(store_, timeout_, std::move(c.msg))
          .then(
              [this, promise, seq](R& r) {
                promise->set_value(expected<R>(std::move(r)));
                finished(seq);
              },
              [this, promise, seq](const error& e) {
                promise->set_value(expected<R>(e));
                finished(seq);
              });
    };
  }
  void finished(std::uint64_t seq) {
    outstanding_.erase(seq);
    release_barriers();
    if (outstanding_.empty() && closing_) quit();
  }
  /// Answers the barriers whose earlier calls have all been answered.
  void release_barriers() {
    const std::uint64_t oldest = outstanding_.empty() ? next_call_ : *outstanding_.begin();
    std::erase_if(barriers_, [oldest](auto& b) {
      if (b.first > oldest) return false;
      b.second->set_value(expected<unit_t>(unit));
      return true;
    });
  }

public:
  behavior make_behavior() override {
    return {
        forward<unit_t, kvstore::init>(),
        forward<unit_t, kvstore::push>(),
        forward<std::vector<tensor>, kvstore::pull>(),
        forward<std::vector<tensor>, kvstore::pushpull>(),
        forward<std::vector<tensor>, kvstore::pushpull_in_place>(),
        forward<std::vector<tensor>, kvstore::broadcast>(),
        forward<bool, kvstore::is_capable>(),
        forward<unit_t, kvstore::set_updater>(),
        forward<unit_t, kvstore::set_optimizer>(),
        forward<unit_t, kvstore::set_gradient_compression>(),
        forward<std::uint64_t, kvstore::version>(),
        forward<unit_t, kvstore::save>(),
        forward<unit_t, kvstore::load>(),
        forward<unit_t, kvstore::push_row_sparse>(),
        forward<std::vector<tensor>, kvstore::row_sparse_pull>(),
        forward<unit_t, kvstore::save_optimizer_states>(),
        forward<unit_t, kvstore::load_optimizer_states>(),
        forward<std::string, kvstore::store_type>(),
        [this](detail::session_barrier& b) {
          barriers_.emplace_back(next_call_, std::move(b.promise));
          release_barriers();
        },
        [this](const detail::session_close&) {
          closing_ = true;
          if (outstanding_.empty()) quit();
        },
    };
  }

private:
  actor_ref store_;
  std::chrono::nanoseconds timeout_;
  std::uint64_t next_call_ = 0;           // sequence number of the next call
  std::set<std::uint64_t> outstanding_;   // calls not answered yet
  std::vector<std::pair<std::uint64_t, std::shared_ptr<std::promise<expected<unit_t>>>>> barriers_;  // (calls before it, promise)
  bool closing_ = false;
};

}  // namespace

actor_ref spawn_session(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout) {
  return system.spawn_with<kvstore_session>(spawn_options{.name = "kvstore-client"}, std::move(store), timeout);
}

}  // namespace strata::kvstore::internal
