// strata::lm::train: a run prepared (trainer_setup.hpp), placed, then trained on its actor system
// (training_run.hpp); and the learning-rate schedules.
#include "strata/lm/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "strata/actor_system.hpp"
#include "trainer_setup.hpp"
#include "training_run.hpp"

namespace strata::lm {

double scheduled_lr(const lr_schedule& s, std::size_t step, double plateau_scale) {
  const double k = static_cast<double>(step);
  if (step < s.warmup_steps) return s.base * plateau_scale * (k + 1) / static_cast<double>(s.warmup_steps);
  const double after = k - static_cast<double>(s.warmup_steps);
  if (s.kind == "constant") return s.base;
  if (s.kind == "plateau") return s.base * plateau_scale;
  if (s.kind == "step") return s.base * std::pow(s.decay, std::floor(after / static_cast<double>(std::max<std::size_t>(1, s.step_size))));
  if (s.kind == "cosine") {
    const double span = static_cast<double>(s.total_steps > s.warmup_steps ? s.total_steps - s.warmup_steps : 1);
    return s.base * 0.5 * (1 + std::cos(std::acos(-1.0) * std::min(after / span, 1.0)));
  }
  throw std::invalid_argument("learning-rate schedule '" + s.kind + "' is not one of constant, step, cosine, plateau");
}

training_result train(const trainer_options& o, const trainer_events& events) {
  auto run = detail::prepare_run(o);
  training_result result;
  auto start = [&] {
    detail::place_stages(run, o, events);
    result.setup = run.setup;
    if (events.on_start) events.on_start(result.setup);
  };

  system_config sc;
  sc.worker_threads = 2;
  sc.trace_file = o.trace;  // across ranks each writes FILE.rank<r>; the program joins them (lstm_lm)
  if (!o.ranks) {
    start();  // before the system: --partition auto measures the costs on idle devices
    actor_system system(sc);
    return detail::run_training(o, events, run, std::move(result), system);
  }
  actor_system system(sc);
  // Across ranks a failure ends this process at once (the MPI job with it): the other ranks wait
  // in collective calls that a rank that unwinds would never join. The placement needs the
  // ranks joined: they measure the link between them and take rank 0's costs.
  o.ranks->attach(system);
  try {
    start();
    auto done = detail::run_training(o, events, run, std::move(result), system);
    o.ranks->detach();
    return done;
  } catch (const std::exception& e) {
    o.ranks->fail(e);
    throw;  // not reached: fail() ends the process
  }
}

}  // namespace strata::lm
