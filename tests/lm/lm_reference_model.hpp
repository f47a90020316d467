#pragma once
// An independent float64 reference of the LSTM language model (residual connections and dropout
// with a given mask), for gradient checks against central finite differences. Shared by the
// tests of tests/lm.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "strata/kernels/dropout.hpp"
#include "strata/lm/config.hpp"

namespace strata::lm::test {

struct reference_model {
  lm::config c;
  std::map<std::string, std::vector<double>> p;
  /// The training step whose dropout masks apply (c.dropout > 0): site 0 the embedding output,
  /// site l + 1 layer l's output, element (t, b, f) of the [T, B, width] activation kept when
  /// kernels::dropout_keeps(kernels::dropout_key(c.seed, step, site), (t B + b) width + f, p).
  std::uint64_t step = 0;

  double sigmoid(double x) const { return 1.0 / (1.0 + std::exp(-x)); }

  /// Applies site `site`'s mask (inverted dropout) to the rows of x ([T * B] rows of `width`).
  void drop(std::size_t site, std::vector<std::vector<double>>& x) const {
    if (c.dropout <= 0) return;
    const std::uint64_t key = kernels::dropout_key(c.seed, step, site);
    const double scale = 1.0 / (1.0 - c.dropout);
    for (std::size_t r = 0; r < x.size(); ++r)
      for (std::size_t f = 0; f < x[r].size(); ++f)
        x[r][f] = kernels::dropout_keeps(key, r * x[r].size() + f, static_cast<float>(c.dropout)) ? x[r][f] * scale : 0.0;
  }

  /// Mean next-token cross-entropy of tokens/targets [T, B], zero initial state.
  double loss(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets) const {
    const std::size_t T = c.seq, B = c.batch, H = c.hidden, V = c.vocab;
    std::vector<std::vector<double>> x(T * B);
    const auto& emb = p.at("embedding.weight");
    for (std::size_t r = 0; r < T * B; ++r)
      x[r].assign(emb.begin() + static_cast<std::ptrdiff_t>(tokens[r] * c.embed),
                  emb.begin() + static_cast<std::ptrdiff_t>((tokens[r] + 1) * c.embed));
    drop(0, x);
    for (std::size_t l = 0; l < c.layers; ++l) {
      const auto names = lstm_parameter_names(l);
      const auto &wih = p.at(names[0]), &whh = p.at(names[1]), &bih = p.at(names[2]), &bhh = p.at(names[3]);
      const std::size_t in = l == 0 ? c.embed : H;
      std::vector<std::vector<double>> y(T * B, std::vector<double>(H));
      for (std::size_t b = 0; b < B; ++b) {
        std::vector<double> h(H, 0.0), cell(H, 0.0);
        for (std::size_t t = 0; t < T; ++t) {
          const auto& xt = x[t * B + b];
          std::vector<double> g(4 * H);
          for (std::size_t j = 0; j < 4 * H; ++j) {
            double s = bih[j] + bhh[j];
            for (std::size_t k = 0; k < in; ++k) s += wih[j * in + k] * xt[k];
            for (std::size_t k = 0; k < H; ++k) s += whh[j * H + k] * h[k];
            g[j] = s;
          }
          for (std::size_t k = 0; k < H; ++k) {  // gates i, f, g, o
            const double i = sigmoid(g[k]), f = sigmoid(g[H + k]), gg = std::tanh(g[2 * H + k]),
                         o = sigmoid(g[3 * H + k]);
            cell[k] = f * cell[k] + i * gg;
            h[k] = o * std::tanh(cell[k]);
          }
          for (std::size_t k = 0; k < H; ++k) y[t * B + b][k] = h[k] + (c.residual && l >= 2 ? xt[k] : 0.0);
        }
      }
      x = std::move(y);
      drop(l + 1, x);
    }
    const auto &w = p.at("decoder.weight"), &bias = p.at("decoder.bias");
    double total = 0;
    for (std::size_t r = 0; r < T * B; ++r) {
      std::vector<double> z(V);
      double m = -1e300;
      for (std::size_t v = 0; v < V; ++v) {
        z[v] = bias[v];
        for (std::size_t k = 0; k < H; ++k) z[v] += w[v * H + k] * x[r][k];
        m = std::max(m, z[v]);
      }
      double se = 0;
      for (double zv : z) se += std::exp(zv - m);
      total += m + std::log(se) - z[static_cast<std::size_t>(targets[r])];
    }
    return total / static_cast<double>(T * B);
  }
};

/// How far one plain-SGD step at rate 1 (no clipping: the update is the gradient) is from the
/// reference's central finite differences: `worst` the largest absolute error, `largest` the
/// largest |gradient|. `before`/`after`: the parameters around the step; `ref` holds `before`.
struct gradient_check {
  double worst = 0, largest = 0;
};
inline gradient_check check_gradient(reference_model& ref, const std::vector<named_parameter>& before,
                                     const std::vector<named_parameter>& after, const std::vector<std::int32_t>& tokens,
                                     const std::vector<std::int32_t>& targets) {
  gradient_check out;
  for (std::size_t i = 0; i < before.size(); ++i) {
    auto& values = ref.p[before[i].name];
    for (std::size_t k = 0; k < values.size(); ++k) {
      const double keep = values[k], h = 1e-6;
      values[k] = keep + h;
      const double up = ref.loss(tokens, targets);
      values[k] = keep - h;
      const double down = ref.loss(tokens, targets);
      values[k] = keep;
      const double fd = (up - down) / (2 * h);
      const double got = static_cast<double>(before[i].values[k]) - static_cast<double>(after[i].values[k]);
      out.worst = std::max(out.worst, std::abs(fd - got));
      out.largest = std::max(out.largest, std::abs(fd));
    }
  }
  return out;
}

/// Random token ids and targets [seq, batch] for `c`.
inline void random_tokens(const lm::config& c, std::mt19937& rng, std::vector<std::int32_t>& tokens,
                          std::vector<std::int32_t>& targets) {
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab) - 1);
  tokens.clear();
  targets.clear();
  for (std::size_t i = 0; i < c.seq * c.batch; ++i) {
    tokens.push_back(id(rng));
    targets.push_back(id(rng));
  }
}

}  // namespace strata::lm::test
