#pragma once
/// \file
/// What a stage actor needs of a model (`stage_model`), the optional members it uses when present,
/// and the check of a model's time-chunk count against a plan's. Part of the stage actor's API
/// (strata/pipeline/stage_actor.hpp includes it; docs/pipeline.md has the tutorial).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/device/stream.hpp"
#include "strata/device/tensor.hpp"

namespace strata::pipeline {

/// What a stage actor needs of a model: the work of a unit (micro-batch `mb`, time chunk `ch`) on
/// the stage's stream, its output and input gradient, and the incoming tensors.
///
/// - `forward(mb, ch, s)` / `backward(mb, ch, s)` submit the unit's work to `s` (asynchronous);
///   backward accumulates the parameter gradients.
/// - `output(mb, ch)` / `input_grad(mb, ch)`: the tensors sent to the next / previous stage once
///   the forward / backward submitted before is done (invalid tensors on sim devices).
/// - `accept_input(mb, ch, t, s)` / `accept_output_grad(mb, ch, t, s)`: the unit's input activation
///   / output gradient, readable by work on `s` from `t.ready_event()` on (`s` already waits).
///
/// Optional members, used when present:
/// - `begin_step(step, s)`: at the start of each step (e.g. copy the step's data to the device).
/// - `end_compute(s)` and `std::vector<double> report()`: after the last compute `end_compute`
///   submits what the driver needs (a loss, a gradient norm); `report()` is read once that work has
///   completed and goes to the driver's update rule.
/// - `abandon_step(step, s)`: after a step failed (every stage restarted), called once on each
///   stage's fresh stream at the start of the next step, before `begin_step`: drop what the failed
///   step left behind (half-accumulated gradients, carried state). A model whose backward
///   accumulates gradients across a step needs it: without it, the failed step's partial gradients
///   join the next update.
/// - `set_chunks(n)` / `std::size_t chunks() const`: the plan's time-chunk count is passed to
///   `set_chunks` (which may throw std::invalid_argument to refuse it) and compared with `chunks()`
///   when spawn_pipeline builds the stages; a mismatch is refused in one sentence, never an index
///   out of bounds later.
/// - `update(args, s)`: applies the step's update locally (e.g. SGD on the stage's weights), with
///   the `args` the driver's update rule computed from every stage's report.
/// - or `exchange(args, s)` (used instead of `update` when a model has both) returning a request message for the stage's store, the reply type
///   `exchange_reply`, and `exchanged(reply, s)`: push gradients, pull weights through a parameter
///   server (the LSTM LM's kvstore). With `std::string exchange_name() const` ("push to the
///   kvstore") a refused exchange fails the stage as "stage S could not <name> during step N: ...";
///   without it, as "stage S could not update its weights: ...".
template <class M>
concept stage_model = requires(M& m, const M& cm, std::size_t mb, std::size_t ch, stream& s, const tensor& t) {
  m.forward(mb, ch, s);
  m.backward(mb, ch, s);
  { cm.output(mb, ch) } -> std::convertible_to<tensor>;
  { cm.input_grad(mb, ch) } -> std::convertible_to<tensor>;
  m.accept_input(mb, ch, t, s);
  m.accept_output_grad(mb, ch, t, s);
};

namespace detail {
template <class M>
concept has_begin_step = requires(M& m, stream& s) { m.begin_step(std::uint64_t{}, s); };
template <class M>
concept has_end_compute = requires(M& m, stream& s) {
  m.end_compute(s);
  { m.report() } -> std::convertible_to<std::vector<double>>;
};
template <class M>
concept has_local_update = requires(M& m, const std::vector<double>& a, stream& s) { m.update(a, s); };
template <class M>
concept has_exchange = requires(M& m, const std::vector<double>& a, stream& s, typename M::exchange_reply& r) {
  m.exchange(a, s);
  m.exchanged(r, s);
};
template <class M>
concept has_exchange_name = requires(const M& m) {
  { m.exchange_name() } -> std::convertible_to<std::string>;
};
template <class M>
concept has_abandon_step = requires(M& m, stream& s) { m.abandon_step(std::uint64_t{}, s); };
template <class M>
concept has_set_chunks = requires(M& m) { m.set_chunks(std::size_t{}); };
template <class M>
concept has_chunks = requires(const M& m) {
  { m.chunks() } -> std::convertible_to<std::size_t>;
};

/// Passes the plan's chunk count to stage `s`'s model and checks it (see stage_model).
/// \throws std::invalid_argument on a mismatch, naming the stage and both counts.
template <class M>
void check_model_chunks(M& model, int plan_chunks, std::size_t s) {
  const auto n = static_cast<std::size_t>(plan_chunks);
  if constexpr (has_set_chunks<M>) model.set_chunks(n);
  if constexpr (has_chunks<M>) {
    const std::size_t has = model.chunks();
    if (has != n)
      throw std::invalid_argument("stage " + std::to_string(s) + "'s model works in " + std::to_string(has) +
                                  " time chunks, but the plan has " + std::to_string(n));
  }
}
}  // namespace detail

/// The stage actor of a model `M` (see stage_model); spawned by spawn_pipeline.

}  // namespace strata::pipeline
