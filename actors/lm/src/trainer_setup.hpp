#pragma once
// What train() checks and prepares before its first step: the options, the corpus and its
// vocabulary, the devices, the placement and the checkpoint to resume from. Private to strata::lm.

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
};

/// Checks `o`, reads the corpus, makes the devices and places the layers; reports the measured
/// costs (partition auto) through `events`. Throws input_error for bad input.
prepared_run prepare_run(const trainer_options& o, const trainer_events& events);

/// The ids of the held-out file `path` (`flag` names it in errors): unknown words are <unk>;
/// with characters, one the vocabulary lacks is an input_error naming it.
std::vector<std::int32_t> held_out_ids(const char* flag, const std::string& path, const vocabulary& vocab);

/// "%.*f" of `v`.
std::string fixed(double v, int precision);

}  // namespace strata::lm::detail
