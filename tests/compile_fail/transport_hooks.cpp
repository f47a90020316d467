// Must NOT compile (unless STRATA_CONTROL is defined): the hooks a transport uses (here the
// inline-run switch of strata::net's communication thread) are declared only in
// strata/extension/transport.hpp, never by the headers a user includes. The control includes the
// extension header, as strata::net does. The ctest checks that the compiler names the reason.

#include "strata/strata.hpp"
#ifdef STRATA_CONTROL
#include "strata/extension/transport.hpp"
#endif

int main() {
  const bool was = strata::detail::host_inline_runs(true);
  strata::detail::host_inline_runs(was);
  return 0;
}
