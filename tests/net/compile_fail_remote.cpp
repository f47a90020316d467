// Asking for a remote handle whose protocol has a type without serialization does not compile.
#include "strata/net/endpoint.hpp"

namespace {
struct serializable {
  int x = 0;
};
template <class A>
void serialize(A& a, serializable& m) {
  a(m.x);
}
struct opaque {
  int x = 0;
};
}  // namespace

#ifdef STRATA_CONTROL
using remote_protocol = strata::protocol<serializable>;
#else
using remote_protocol = strata::protocol<serializable, opaque>;
#endif

int main() {
  strata::actor_system sys;
  strata::net::endpoint net(sys);
  auto handle = net.remote<remote_protocol>(0, "someone");
  return handle.has_value() ? 0 : 1;
}
