#include "session.hpp"

#include <cstdint>
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
      ++in_flight_;
      auto promise = c.promise;
      request<request_type>(store_, timeout_, std::move(c.msg))
          .then(
              [this, promise](R& r) {
                promise->set_value(expected<R>(std::move(r)));
                finished();
              },
              [this, promise](const error& e) {
                promise->set_value(expected<R>(e));
                finished();
              });
    };
  }
  void finished() {
    if (--in_flight_ == 0 && closing_) quit();
  }

public:
  behavior make_behavior() override {
    return {
        forward<unit_t, kvstore::init>(),
        forward<unit_t, kvstore::push>(),
        forward<std::vector<tensor>, kvstore::pull>(),
        forward<std::vector<tensor>, kvstore::pushpull>(),
        forward<unit_t, kvstore::set_updater>(),
        forward<unit_t, kvstore::set_optimizer>(),
        forward<std::uint64_t, kvstore::version>(),
        forward<unit_t, kvstore::save>(),
        forward<unit_t, kvstore::load>(),
        [this](const detail::session_close&) {
          closing_ = true;
          if (in_flight_ == 0) quit();
        },
    };
  }

private:
  actor_ref store_;
  std::chrono::nanoseconds timeout_;
  std::size_t in_flight_ = 0;
  bool closing_ = false;
};

}  // namespace

actor_ref spawn_session(actor_system& system, actor_ref store, std::chrono::nanoseconds timeout) {
  return system.spawn_with<kvstore_session>(spawn_options{.name = "kvstore-client"}, std::move(store), timeout);
}

}  // namespace strata::kvstore::internal
