#include "strata/lm/config.hpp"

#include <cmath>
#include <random>
#include <stdexcept>

namespace strata::lm {

void lm_config::validate() const {
  auto positive = [](std::size_t v, const char* what) {
    if (v == 0) throw std::invalid_argument(std::string("model setting '") + what + "' must be at least 1");
  };
  positive(vocab, "vocab");
  positive(embed, "embed");
  positive(layers, "layers");
  positive(hidden, "hidden");
  positive(batch, "batch");
  positive(seq, "seq");
  positive(micro_batches, "micro-batches");
  positive(chunks, "chunks");
  if (batch % micro_batches != 0)
    throw std::invalid_argument("batch " + std::to_string(batch) + " is not divisible into " +
                                std::to_string(micro_batches) + " micro-batches");
  if (seq % chunks != 0)
    throw std::invalid_argument("sequence length " + std::to_string(seq) + " is not divisible into " +
                                std::to_string(chunks) + " chunks");
  if (!(lr >= 0) || !(clip > 0))
    throw std::invalid_argument("learning rate must be >= 0 and clip > 0");
}

std::vector<stage_span> make_spans(std::size_t layers, const std::vector<std::size_t>& counts) {
  if (counts.empty()) throw std::invalid_argument("a pipeline needs at least one stage");
  std::vector<stage_span> spans;
  std::size_t next = 0;
  for (std::size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] == 0)
      throw std::invalid_argument("stage " + std::to_string(s) + " would own no LSTM layer");
    spans.push_back(stage_span{next, next + counts[s], s == 0, s + 1 == counts.size()});
    next += counts[s];
  }
  if (next != layers)
    throw std::invalid_argument("the stages own " + std::to_string(next) + " LSTM layers but the model has " +
                                std::to_string(layers));
  return spans;
}

std::vector<std::string> parameter_names(const lm_config& c) {
  std::vector<std::string> names{"embedding.weight"};
  for (std::size_t l = 0; l < c.layers; ++l)
    for (const char* kind : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"})
      names.push_back("lstm." + std::string(kind) + "_l" + std::to_string(l));
  names.push_back("decoder.weight");
  names.push_back("decoder.bias");
  return names;
}

std::vector<std::size_t> parameter_shape(const lm_config& c, const std::string& name) {
  if (name == "embedding.weight") return {c.vocab, c.embed};
  if (name == "decoder.weight") return {c.vocab, c.hidden};
  if (name == "decoder.bias") return {c.vocab};
  auto pos = name.rfind("_l");
  if (name.rfind("lstm.", 0) == 0 && pos != std::string::npos) {
    std::size_t layer = std::stoul(name.substr(pos + 2));
    std::string kind = name.substr(5, pos - 5);
    std::size_t in = layer == 0 ? c.embed : c.hidden;
    if (kind == "weight_ih") return {4 * c.hidden, in};
    if (kind == "weight_hh") return {4 * c.hidden, c.hidden};
    if (kind == "bias_ih" || kind == "bias_hh") return {4 * c.hidden};
  }
  throw std::invalid_argument("'" + name + "' is not a parameter of the LSTM language model");
}

std::vector<float> initial_parameter(const lm_config& c, const std::string& name) {
  auto shape = parameter_shape(c, name);
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  std::seed_seq seq{static_cast<std::uint32_t>(c.seed), static_cast<std::uint32_t>(c.seed >> 32),
                    static_cast<std::uint32_t>(std::hash<std::string>{}(name))};
  std::mt19937_64 rng(seq);
  std::vector<float> v(n);
  if (name == "embedding.weight") {
    std::normal_distribution<float> dist(0.f, 1.f);
    for (auto& x : v) x = dist(rng);
  } else {
    float k = 1.f / std::sqrt(static_cast<float>(c.hidden));
    std::uniform_real_distribution<float> dist(-k, k);
    for (auto& x : v) x = dist(rng);
  }
  return v;
}

}  // namespace strata::lm
