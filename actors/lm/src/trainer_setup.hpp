#pragma once
// What train() checks and prepares before its first step: the options, the corpus and its
// vocabulary, the devices, the placement and the checkpoint to resume from. Private to strata::lm:
// prepare_run's steps in trainer_setup.cpp, the option and output checks in trainer_checks.cpp,
// the text in trainer_data.cpp, the placement in trainer_placement.cpp.

#include <optional>
#include <string>
#include <vector>

#include "strata/device/device.hpp"
#include "strata/lm/checkpoint.hpp"
#include "strata/lm/data.hpp"
#include "strata/lm/trainer.hpp"

namespace strata::lm::detail {

/// A training run, checked and ready to start.
struct prepared_run {
  training_setup setup;
  std::vector<device> devices;
  vocabulary vocab;
  std::optional<token_batches> batches;
  std::vector<std::int32_t> validation_ids;
  std::vector<std::int32_t> test_ids;  ///< --test (empty: none)
  std::optional<checkpoint> resume;
  std::size_t stages = 0;                ///< of one pipeline (across ranks: ranks / replicas)
  pipeline::partition_spec partition;   ///< --partition, parsed for `stages`
};

/// Checks `o`, reads the corpus, makes the devices and finds the checkpoint to resume from.
/// Throws input_error for bad input.
prepared_run prepare_run(const trainer_options& o);

/// Places the layers (setup.placement, layer_counts, costs_note; across ranks link and
/// link_note); reports the measured costs (partition auto) through `events`. Across ranks it is
/// collective, after `o.ranks->attach`: the link between ranks is measured (unless given) and
/// rank 0's costs and link go to every rank, so that every rank places alike (checked).
/// Throws input_error for a placement that does not fit, std::runtime_error when the ranks fail.
void place_stages(prepared_run& run, const trainer_options& o, const trainer_events& events);

/// The option checks that need nothing read yet: one input_error sentence for the first bad flag.
void check_options(const trainer_options& o);

/// Fails before the run, not after it, when an output (--checkpoint, --report, --trace, --log)
/// cannot be written; creates the directories that are missing.
void check_outputs(const trainer_options& o);

/// Reads the corpus (and --valid, --test) into `run`: the vocabulary, the training windows, the
/// held-out ids, and the setup's token counts, accumulation, carried state and windows.
/// Needs run.setup.tokens.
void open_data(const trainer_options& o, prepared_run& run);

/// The ids of the held-out file `path` (`flag` names it in errors): unknown words are <unk>;
/// with characters, one the vocabulary lacks is an input_error naming it.
std::vector<std::int32_t> held_out_ids(const char* flag, const std::string& path, const vocabulary& vocab);

/// "%.*f" of `v`.
std::string fixed(double v, int precision);

}  // namespace strata::lm::detail
