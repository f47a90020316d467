#pragma once
// Helpers shared by the LSTM language-model tests (tests/actors, tests/lm, tests/reliability):
// small model configurations and the error measure their comparisons use.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "strata/lm/config.hpp"

namespace strata::lm::test {

/// A model of the given sizes, everything else lm::config's defaults.
inline lm::config config_of(std::size_t vocab, std::size_t embed, std::size_t hidden, std::size_t layers,
                             std::size_t seq, std::size_t batch, std::size_t micro_batches = 1) {
  lm::config c;
  c.vocab = vocab;
  c.embed = embed;
  c.hidden = hidden;
  c.layers = layers;
  c.seq = seq;
  c.batch = batch;
  c.micro_batches = micro_batches;
  return c;
}

/// max |a - b| / max |b| (the largest error relative to the reference's scale).
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace strata::lm::test
