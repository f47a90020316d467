#include "strata/lm/inference.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>
#include <string>

#include "strata/kernels/elementwise.hpp"
#include "strata/kernels/embedding.hpp"
#include "strata/kernels/gemm.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"

namespace strata::lm {

namespace k = strata::kernels;

model::model(const lm::config& config, const std::vector<named_parameter>& parameters) : config_(config) {
  std::map<std::string, const std::vector<float>*> by_name;
  for (const auto& p : parameters) by_name[p.name] = &p.values;
  auto take = [&](const std::string& name) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::invalid_argument("the model lacks parameter '" + name + "'");
    const std::size_t n = parameter_spec{name, parameter_shape(config_, name)}.numel();
    if (it->second->size() != n)
      throw std::invalid_argument("parameter '" + name + "' has " + std::to_string(it->second->size()) +
                                  " values, expected " + std::to_string(n));
    return *it->second;
  };
  embedding_ = take("embedding.weight");
  for (std::size_t l = 0; l < config_.layers; ++l) {
    const auto names = lstm_parameter_names(l);
    layers_.push_back({take(names[0]), take(names[1]), take(names[2]), take(names[3])});
  }
  decoder_w_ = take("decoder.weight");
  decoder_b_ = take("decoder.bias");
}

model::state model::zero_state(std::size_t batch) const {
  state s;
  s.batch = batch;
  s.h.assign(config_.layers, std::vector<float>(batch * config_.hidden, 0.f));
  s.c = s.h;
  return s;
}

void model::forward(const std::int32_t* tokens, std::size_t steps, state& s, std::vector<float>& top) const {
  const std::size_t B = s.batch, H = config_.hidden, E = config_.embed;
  std::vector<float> x(steps * B * E);
  k::cpu::embedding_forward(config_.vocab, E, embedding_.data(), steps * B, tokens, x.data());
  std::vector<float> y, reserve, h_out(B * H), c_out(B * H);
  std::size_t in = E;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const k::lstm_dims d{steps, B, in, H};
    y.assign(steps * B * H, 0.f);
    reserve.resize(k::lstm_reserve_size(d));
    const auto& w = layers_[l];
    k::cpu::lstm_forward(d, {w.w_ih.data(), w.w_hh.data(), w.b_ih.data(), w.b_hh.data()},
                         {x.data(), s.h[l].data(), s.c[l].data(), y.data(), h_out.data(), c_out.data(), reserve.data()});
    s.h[l].swap(h_out);
    s.c[l].swap(c_out);
    if (config_.residual_layer(l)) k::cpu::axpy(y.size(), 1.f, x.data(), y.data());
    x.swap(y);
    in = H;
  }
  top.swap(x);
}

double model::loss_sum(const std::int32_t* tokens, const std::int32_t* targets, std::size_t steps, state& s) const {
  std::vector<float> top;
  forward(tokens, steps, s, top);
  const std::size_t rows = steps * s.batch;
  std::vector<float> work(k::linear_cross_entropy_workspace_size({rows, config_.hidden, config_.vocab}, std::min<std::size_t>(rows, 256)));
  return k::cpu::linear_cross_entropy_forward({rows, config_.hidden, config_.vocab},
                                              {top.data(), decoder_w_.data(), decoder_b_.data(), targets, k::loss_reduction::sum},
                                              work.data(), work.size());
}

std::vector<float> model::logits(const std::vector<float>& top, std::size_t rows) const {
  const std::size_t V = config_.vocab, H = config_.hidden;
  std::vector<float> out(rows * V);
  k::cpu::gemm(k::transpose::no, k::transpose::yes, rows, V, H, 1.f, top.data(), H, decoder_w_.data(), H, 0.f, out.data(), V);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t v = 0; v < V; ++v) out[r * V + v] += decoder_b_[v];
  return out;
}

eval_result evaluate_stream(const model& model, const std::vector<std::int32_t>& ids, std::size_t window) {
  if (ids.size() < 2) throw std::invalid_argument("evaluation needs at least two tokens");
  window = std::max<std::size_t>(window, 1);
  auto s = model.zero_state(1);
  double sum = 0;
  const std::size_t n = ids.size() - 1;
  for (std::size_t t = 0; t < n; t += window) {
    const std::size_t steps = std::min(window, n - t);
    sum += model.loss_sum(ids.data() + t, ids.data() + t + 1, steps, s);
  }
  return {n, sum / static_cast<double>(n)};
}

eval_result evaluate_batched(const model& model, const std::vector<std::int32_t>& ids, std::size_t batch,
                             std::size_t seq, std::size_t max_tokens) {
  batch = std::max<std::size_t>(batch, 1);
  seq = std::max<std::size_t>(seq, 1);
  std::size_t rows = ids.size() / batch;
  if (rows < 2) return evaluate_stream(model, ids);
  if (max_tokens > 0) rows = std::min(rows, max_tokens / batch + 1);
  rows = std::max<std::size_t>(rows, 2);
  std::vector<std::int32_t> data(rows * batch);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t r = 0; r < rows; ++r) data[r * batch + b] = ids[b * (ids.size() / batch) + r];
  auto s = model.zero_state(batch);
  double sum = 0;
  for (std::size_t r = 0; r + 1 < rows; r += seq) {
    const std::size_t steps = std::min(seq, rows - 1 - r);
    sum += model.loss_sum(data.data() + r * batch, data.data() + (r + 1) * batch, steps, s);
  }
  const std::size_t n = (rows - 1) * batch;
  return {n, sum / static_cast<double>(n)};
}

std::vector<std::int32_t> generate(const model& model, const std::vector<std::int32_t>& prompt, std::size_t length,
                                   double temperature, std::uint64_t seed, std::int32_t excluded) {
  if (prompt.empty()) throw std::invalid_argument("generation needs a prompt of at least one token");
  std::mt19937_64 rng(seed);
  auto s = model.zero_state(1);
  std::vector<float> top;
  model.forward(prompt.data(), prompt.size(), s, top);
  const std::size_t H = model.config().hidden, V = model.config().vocab;
  std::vector<float> last(top.end() - static_cast<std::ptrdiff_t>(H), top.end());
  std::vector<std::int32_t> out;
  std::vector<double> p(V);
  for (std::size_t i = 0; i < length; ++i) {
    auto logits = model.logits(last, 1);
    if (excluded >= 0 && static_cast<std::size_t>(excluded) < V) logits[static_cast<std::size_t>(excluded)] = -1e30f;
    std::int32_t next = 0;
    if (temperature <= 0) {
      next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      const double mx = *std::max_element(logits.begin(), logits.end());
      for (std::size_t v = 0; v < V; ++v) p[v] = std::exp((logits[v] - mx) / temperature);
      std::discrete_distribution<std::int32_t> pick(p.begin(), p.end());
      next = pick(rng);
    }
    out.push_back(next);
    model.forward(&next, 1, s, top);
    last.assign(top.begin(), top.end());
  }
  return out;
}

}  // namespace strata::lm
