#pragma once
// lstm_lm's three commands (train, eval, generate): each runs from its parsed flags and prints what
// it did; main.cpp holds the command line.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "strata/lm/trainer.hpp"

namespace lstm_lm {

/// Bad input from the user: main prints the sentence and exits with status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `lstm_lm train`: trains with progress on stderr, then prints the run's figures (and writes the
/// report, joins the ranks' traces). Returns the exit status (130 when interrupted).
int run_train(strata::lm::trainer_options o);

/// `lstm_lm eval`: the mean next-token loss of `text_file` under the checkpoint in `checkpoint`.
int run_eval(const std::string& checkpoint, const std::string& text_file, bool as_json);

/// `lstm_lm generate`: `length` tokens sampled after `prompt` from the checkpoint in `checkpoint`.
int run_generate(const std::string& checkpoint, const std::string& prompt, std::size_t length, double temperature,
                 std::uint64_t seed);

}  // namespace lstm_lm
