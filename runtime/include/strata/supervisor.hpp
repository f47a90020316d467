#pragma once
/// \file
/// How a supervisor (actor_system::spawn_supervisor) answers a failed child.

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace strata {

/// Which children a supervisor restarts when one of them fails.
enum class restart_strategy : std::uint8_t {
  /// Only the failed child: for children that do not depend on each other.
  one_for_one,
  /// Every child: the failed one at once, each sibling after the handler it is running (its
  /// queued messages wait for the fresh instance). For children that only make sense together,
  /// such as the stages of one pipeline, whose in-flight work is lost with any one of them.
  all_for_one,
  /// The failed child and every child started after it (in the order they were spawned), each
  /// sibling after the handler it is running; children started before it keep running. For
  /// chains where a later child depends on an earlier one (a reader, then its parser).
  rest_for_one,
};

/// How long a supervisor waits before restarting a failed child: `initial` for the first restart
/// within the policy's window, then `factor` times the previous wait, at most `max`. The child
/// stays suspended meanwhile (its queued messages wait for the fresh instance). The default,
/// `initial` = 0, restarts at once.
struct restart_backoff {
  std::chrono::milliseconds initial{0};
  double factor = 2.0;                      ///< At least 1.
  std::chrono::milliseconds max{30'000};    ///< At least `initial`.
};

/// The restart limits and strategy of a supervisor.
///
/// One-for-one and rest-for-one count restarts per failing child; all-for-one counts the group's
/// restarts (a sibling restarted because another failed does not count). Past `max_restarts` within `within` the
/// supervisor stops the failing child and fails itself with `errc::restart_limit`, which stops
/// the other children.
struct restart_policy {
  std::size_t max_restarts = 3;                  ///< Restarts allowed ...
  std::chrono::milliseconds within{5'000};       ///< ... within this sliding window.
  restart_strategy strategy = restart_strategy::one_for_one;
  restart_backoff backoff{};                     ///< Wait before each restart (none by default).
};

}  // namespace strata
