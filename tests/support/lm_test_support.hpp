#pragma once
// Helpers shared by the LSTM language-model tests (tests/lm, tests/reliability, tests/trace_tools):
// small model configurations, a fresh directory with a generated corpus and a tiny trainer run
// over it, and the error measure their comparisons use.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "strata/lm/config.hpp"
#include "strata/lm/trainer.hpp"

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

/// An empty temporary directory (`name` and the process id) holding corpus.txt: 300 generated
/// lines.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream corpus(dir / "corpus.txt");
  for (int i = 0; i < 300; ++i) corpus << "row " << i << ": " << (i * 7919 % 1000) << " pears and " << (i * 31 % 17) << " figs\n";
  return dir;
}

/// A tiny model (2 layers of 12, embeddings of 6, batch 4 x 6, seed 7) on cpu:2, one thread each,
/// trained `steps` steps over `dir`'s corpus.txt.
inline lm::trainer_options tiny(const std::filesystem::path& dir, std::size_t steps) {
  return {.corpus = (dir / "corpus.txt").string(), .devices = "cpu:2", .layers = 2, .hidden = 12, .embed = 6,
          .batch = 4, .seq = 6, .steps = steps, .seed = 7, .val_tokens = 200, .cpu_threads = 1};
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
