// Must NOT compile unless STRATA_CONTROL is defined: one of the typed-reply mistakes below,
// chosen by STRATA_CASE (1: a request expecting another reply type than the protocol declares,
// 2: a typed_behavior without a handler for a message of its protocol, 3: a handler answering
// with another type than declared, 4: a handler for a message outside the protocol). The ctests
// check that the compiler names the reason.

#include <chrono>
#include <string>

#include "strata/strata.hpp"

struct add {
  int a = 0;
  int b = 0;
};
struct reset {};
struct outsider {};

class calculator : public strata::actor {
public:
  using protocol = strata::protocol<int(add), void(reset)>;
  strata::behavior make_behavior() override {
    return strata::typed_behavior<protocol>{
#if STRATA_CASE == 3
        [](const add& m) { return std::to_string(m.a + m.b); },
#else
        [](const add& m) { return m.a + m.b; },
#endif
#if STRATA_CASE == 4
        [](const outsider&) {},
#endif
#if STRATA_CASE != 2
        [](const reset&) {},
#endif
    };
  }
};

int main() {
  strata::actor_system sys;
  auto calc = sys.spawn<calculator>();
#if STRATA_CASE == 1
  auto sum = sys.request<long>(calc, std::chrono::seconds(1), add{1, 2});
#else
  auto sum = sys.request(calc, std::chrono::seconds(1), add{1, 2});
#endif
  return sum.get().has_value() ? 0 : 1;
}
