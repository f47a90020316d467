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

/// A supervisor's own reminder (a delayed send): the backoff of `child` has passed.
struct restart_due {
  actor_ref child;
  error reason;
};

/// Sent when a child is spawned under a supervisor.
struct child_added {
  actor_ref child;
};

/// Sent (urgent, control) by an all-for-one supervisor to a sibling of a failed child: between two
/// handlers the sibling suspends itself and answers with `child_suspended`.
struct suspend_for_restart {
  error reason;
};

/// Sent (control, in order) by a pool's router to a worker it retires: the worker quits
/// normally once it has handled what was queued before.
struct retire_worker {};

/// A sibling suspended on `suspend_for_restart`: the supervisor restarts it (no failure counted).
struct child_suspended {
  actor_ref child;
};

}  // namespace strata::detail
