// Must NOT compile (unless STRATA_CONTROL is defined): sending a type outside a typed handle's
// protocol is a compile-time error. The ctest checks the compiler names the reason.

#include "strata/strata.hpp"

struct listed {};
struct not_listed {};

class receiver : public strata::actor {
public:
  using protocol = strata::protocol<listed>;
  strata::behavior make_behavior() override { return {[](const listed&) {}}; }
};

int main() {
  strata::actor_system sys;
  auto r = sys.spawn<receiver>();
#ifdef STRATA_CONTROL
  sys.send(r, listed{});
#else
  sys.send(r, not_listed{});
#endif
  return 0;
}
