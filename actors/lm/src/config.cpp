#include "strata/lm/config.hpp"

#include <cmath>
#include <random>
#include <stdexcept>

namespace strata::lm {

void config::validate() const {
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
  if (!(momentum >= 0) || !std::isfinite(momentum)) throw std::invalid_argument("momentum must be a number >= 0");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
    throw std::invalid_argument("weight decay must be a number >= 0");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    throw std::invalid_argument("beta1 and beta2 must lie in [0, 1)");
  if (!(eps > 0) || !std::isfinite(eps)) throw std::invalid_argument("eps must be a positive number");
  if (!(dropout >= 0 && dropout < 1)) throw std::invalid_argument("dropout must lie in [0, 1)");
}

const char* to_string(optimizer_kind kind) noexcept {
  switch (kind) {
    case optimizer_kind::sgd: return "sgd";
    case optimizer_kind::momentum: return "momentum";
    case optimizer_kind::nesterov: return "nesterov";
    case optimizer_kind::adam: return "adam";
    case optimizer_kind::adamw: return "adamw";
  }
  return "sgd";
}

optimizer_kind parse_optimizer(const std::string& name) {
  for (auto k : {optimizer_kind::sgd, optimizer_kind::momentum, optimizer_kind::nesterov, optimizer_kind::adam,
                 optimizer_kind::adamw})
    if (name == to_string(k)) return k;
  throw std::invalid_argument("optimizer '" + name + "' is not one of sgd, momentum, nesterov, adam, adamw");
}

const char* to_string(precision p) noexcept {
  switch (p) {
    case precision::fp32: return "fp32";
    case precision::tf32: return "tf32";
    case precision::bf16: return "bf16";
  }
  return "fp32";
}

precision parse_precision(const std::string& name) {
  for (auto p : {precision::fp32, precision::tf32, precision::bf16})
    if (name == to_string(p)) return p;
  throw std::invalid_argument("precision '" + name + "' is not one of fp32, tf32, bf16");
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

std::size_t parameter_spec::numel() const noexcept {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<std::string> lstm_parameter_names(std::size_t layer) {
  const std::string l = std::to_string(layer);
  return {"lstm.weight_ih_l" + l, "lstm.weight_hh_l" + l, "lstm.bias_ih_l" + l, "lstm.bias_hh_l" + l};
}

std::vector<parameter_spec> parameter_layout(const config& c, const stage_span& span) {
  std::vector<parameter_spec> specs;
  if (span.embedding) specs.push_back({"embedding.weight", {c.vocab, c.embed}});
  for (std::size_t l = span.first; l < span.last; ++l) {
    const auto names = lstm_parameter_names(l);
    const std::size_t gates = 4 * c.hidden, in = l == 0 ? c.embed : c.hidden;
    specs.push_back({names[0], {gates, in}});
    specs.push_back({names[1], {gates, c.hidden}});
    specs.push_back({names[2], {gates}});
    specs.push_back({names[3], {gates}});
  }
  if (span.decoder) {
    specs.push_back({"decoder.weight", {c.vocab, c.hidden}});
    specs.push_back({"decoder.bias", {c.vocab}});
  }
  return specs;
}

std::vector<parameter_spec> parameter_layout(const config& c) {
  return parameter_layout(c, stage_span{0, c.layers, true, true});
}

std::vector<std::string> parameter_names(const config& c) {
  std::vector<std::string> names;
  for (auto& p : parameter_layout(c)) names.push_back(std::move(p.name));
  return names;
}

std::vector<std::size_t> parameter_shape(const config& c, const std::string& name) {
  auto pos = name.rfind("_l");
  stage_span span{0, 0, true, true};
  if (name.rfind("lstm.", 0) == 0 && pos != std::string::npos && pos + 2 < name.size() &&
      name.find_first_not_of("0123456789", pos + 2) == std::string::npos && name.size() - pos - 2 < 10) {
    const std::size_t layer = std::stoul(name.substr(pos + 2));
    if (layer < c.layers) span = {layer, layer + 1, true, true};
  }
  for (auto& p : parameter_layout(c, span))
    if (p.name == name) return std::move(p.shape);
  throw std::invalid_argument("'" + name + "' is not a parameter of the LSTM language model");
}

std::vector<float> initial_parameter(const config& c, const std::string& name) {
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
