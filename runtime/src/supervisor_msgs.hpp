#pragma once
// Messages between supervised children, the runtime and their supervisor.

#include "strata/actor_ref.hpp"
#include "strata/error.hpp"

namespace strata::detail {

/// Sent (urgent) by the runtime when a supervised child's handler threw; the child is suspended
/// until the supervisor restarts or stops it.
struct child_failed {
  actor_ref child;
  error reason;
};

/// Sent when a child is spawned under a supervisor.
struct child_added {
  actor_ref child;
};

}  // namespace strata::detail
