#pragma once
// One training run once its actor system is up: the pipeline built and restored from the
// checkpoint, the steps with their validations and checkpoints, and the end (final validation,
// --test, the sample, the summary). Private to strata::lm: the steps in training_run.cpp, the end
// in training_end.cpp.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "run_log.hpp"
#include "strata/actor_system.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/lm/trainer.hpp"
#include "trainer_setup.hpp"

namespace strata::lm::detail {

/// The run once its system is up (train() after prepare_run and place_stages): returns `result`
/// with the run's figures. The pipeline stops before it returns (and, with a trace, before the
/// system's shutdown writes the trace).
training_result run_training(const trainer_options& o, const trainer_events& events, prepared_run& run,
                             training_result result, actor_system& system);

/// The steps of run_training, one method each: run() reads as the run's list.
class training_run {
public:
  /// Builds the pipeline on `run`'s devices and restores it from `run.resume`; opens the log.
  training_run(const trainer_options& o, const trainer_events& events, prepared_run& run, training_result result,
               actor_system& system);

  /// The steps from the first to the last (or to a stop), then the end of the run.
  training_result run();

private:
  using named_parameters = std::vector<named_parameter>;
  using validation = std::pair<eval_result, named_parameters>;

  // ---- training_run.cpp: the pipeline and the steps ----------------------------------------
  void restore_checkpoint();
  void fill_batch(std::size_t step);
  std::optional<named_parameters> begin_step(std::size_t step);
  double set_learning_rate(std::size_t step);
  std::pair<step_result, double> train_step(std::size_t step, const std::optional<named_parameters>& carried_before);
  void record_step(std::size_t step, const step_result& r, double wall_ms, double lr);
  bool validate_or_save(std::size_t done);
  void crash_if_asked(std::size_t done) const;
  bool stop_after(std::size_t done, bool saved);
  validation validate(std::size_t step);
  void plateau_check(double val_loss);
  void save(std::size_t step, const named_parameters* have);

  // ---- training_end.cpp: after the last step ----------------------------------------------
  training_result finish();
  void final_validation(std::size_t final_step);
  void held_out_and_sample(std::size_t final_step);
  void summarise(std::size_t final_step);
  void write_summary(std::size_t final_step);
  void write_trace();

  const trainer_options& o_;
  const trainer_events& events_;
  prepared_run& run_;
  actor_system& system_;
  training_result result_;
  const training_setup& su_;  ///< result_.setup
  const lm::config& cfg_;     ///< su_.model
  const bool rank0_;          ///< prints, logs and writes the checkpoint (across ranks: rank 0)
  /// Owned through a pointer so that it stops before the system's shutdown writes the trace.
  std::unique_ptr<lm_pipeline> pipe_;
  const lr_schedule schedule_;
  schedule_record plateau_;  ///< a plateau's position comes back with a resume of the same schedule
  run_log log_;

  // Per step: the figures the summary takes medians of, and the step's tokens.
  std::vector<double> step_ms_, bubbles_, tokens_per_s_;
  std::vector<std::vector<double>> fwd_ms_, bwd_ms_;
  std::vector<std::int32_t> x_, y_, xj_, yj_;
  std::chrono::steady_clock::time_point started_;
  std::optional<validation> last_val_;
  std::size_t last_val_step_ = static_cast<std::size_t>(-1);
};

}  // namespace strata::lm::detail
