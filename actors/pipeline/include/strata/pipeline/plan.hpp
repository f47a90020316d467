#pragma once
/// \file
/// Pipeline schedules as plans computed up front: one ordered action list per stage, which a
/// stage actor executes in order. Pure logic: no actors, no devices.
///
/// Example:
/// \code
///   auto p = strata::pipeline::make_plan(strata::pipeline::schedule_kind::one_f_one_b, 4, 8);
///   for (const auto& a : p.stages[1]) std::cout << to_string(a) << '\n';
/// \endcode

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::pipeline {

/// Which schedule a plan follows. Details and diagrams: docs/pipeline.md.
enum class schedule_kind : std::uint8_t {
  gpipe,        ///< Fill-drain: all forwards, then all backwards in reverse micro-batch order.
  one_f_one_b,  ///< PipeDream-flush / Megatron non-interleaved 1F1B.
  wavefront,    ///< 1F1B over (micro-batch, time chunk) units: LSTM stages overlap inside a sequence.
};

/// "gpipe", "1f1b", "wavefront".
const char* to_string(schedule_kind kind) noexcept;

/// The schedule named `name` ("gpipe", "1f1b", "wavefront"); throws `std::invalid_argument`
/// naming the input and the accepted names otherwise.
schedule_kind parse_schedule(std::string_view name);

/// What one step of a stage's plan does.
enum class action_kind : std::uint8_t {
  recv_activation,  ///< Wait for the activation of (micro_batch, chunk) from stage s-1.
  forward,          ///< Forward of (micro_batch, chunk) through this stage's layers.
  send_activation,  ///< Send the forward output of (micro_batch, chunk) to stage s+1 (asynchronous).
  recv_gradient,    ///< Wait for the input gradient of (micro_batch, chunk) from stage s+1.
  backward,         ///< Backward of (micro_batch, chunk); accumulates parameter gradients.
  send_gradient,    ///< Send dx of (micro_batch, chunk) to stage s-1 (asynchronous).
  push_gradients,   ///< Push the accumulated parameter gradients to the kvstore (once, at the end).
  pull_weights,     ///< Pull the updated weights from the kvstore (once, last).
};

/// "forward", "recv_activation", ...
const char* to_string(action_kind kind) noexcept;

/// One step of a stage's plan. `micro_batch` and `chunk` are -1 for push_gradients/pull_weights.
struct action {
  action_kind kind = action_kind::forward;
  int micro_batch = -1;
  int chunk = -1;

  friend bool operator==(const action&, const action&) = default;
};

/// "forward mb 3 chunk 1", "push_gradients".
std::string to_string(const action& a);

/// True for forward and backward, the actions that do the math.
constexpr bool is_compute(action_kind k) noexcept {
  return k == action_kind::forward || k == action_kind::backward;
}

/// A schedule for one training step: `stages[s]` is stage s's actions in execution order.
///
/// Stage 0 reads its inputs from the data loader (no receive); the last stage computes the loss
/// in its forward, so its backwards need no received gradient. Sends are asynchronous (the stage
/// does not wait for them); receives block the stage until the message is there. Chunk c of a
/// micro-batch holds timesteps [c*T/C, (c+1)*T/C).
struct plan {
  schedule_kind schedule = schedule_kind::gpipe;
  int num_stages = 0;
  int micro_batches = 0;
  int chunks = 1;
  std::vector<std::vector<action>> stages{};

  /// The plan's computes, one stage per line ("stage 0: F0 F1 B1 B0"; "F0.2" is micro-batch 0,
  /// chunk 2 when chunks > 1), for logs and tests.
  std::string to_string() const;
};

/// The plan of `schedule` for `num_stages` stages, `micro_batches` micro-batches per step and
/// `chunks` time chunks per micro-batch.
///
/// Requirements: num_stages >= 1, micro_batches >= 1, chunks >= 1, and chunks == 1 unless the
/// schedule is wavefront. Violations throw `std::invalid_argument` with one sentence naming the
/// parameter and what was expected. `wavefront` with one chunk equals `one_f_one_b`.
plan make_plan(schedule_kind schedule, int num_stages, int micro_batches, int chunks = 1);

/// The plan built from compute orders: `order[s]` lists stage s's forwards and backwards only;
/// the receives, sends and the closing push_gradients/pull_weights are inserted around them
/// (a receive right before the compute that needs it, a send right after the compute that
/// produced it). `make_plan` uses it; tests use it to build deliberately broken plans.
plan plan_from_compute_order(schedule_kind schedule, int micro_batches, int chunks,
                             const std::vector<std::vector<action>>& order);

}  // namespace strata::pipeline
