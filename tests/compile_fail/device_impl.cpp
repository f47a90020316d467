// Must NOT compile (unless STRATA_CONTROL is defined): a device handle's implementation belongs to
// the backends, which reach it through a friend; user code has no `impl()` member to call. The
// ctest checks that the compiler names the reason; the control uses the public API instead.

#include "strata/device/all.hpp"

int main() {
  auto devices = strata::make_devices("cpu:1");
#ifdef STRATA_CONTROL
  return devices.front().valid() ? 0 : 1;
#else
  return devices.front().impl() ? 0 : 1;
#endif
}
