#pragma once

// Float64 references for the kernel tests: plain loops in double, written for clarity, plus
// random data, finite differences and the error measure the tolerances are stated in.
//
// Tolerances (docs/kernels.md):
//   float32 kernel vs float64 reference ........ max|a - r| <= 1e-4 * max|r|   (k_fp32_tol)
//   float64 analytic gradient vs central FD .... max|a - fd| <= 1e-6 * max|fd| (k_fd64_tol)

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

namespace strata::kernels::test {

inline constexpr double k_fp32_tol = 1e-4;
inline constexpr double k_fd64_tol = 1e-6;

using vec = std::vector<double>;
using fvec = std::vector<float>;

/// Seeded random numbers in [lo, hi), never a constant fill.
class random_source {
 public:
  explicit random_source(std::uint64_t seed) : engine_(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(engine_); }
  std::size_t index(std::size_t lo, std::size_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<std::size_t>(lo, hi)(engine_);
  }
  /// n values in [lo, hi), rounded to float so the float and double runs see the same data.
  vec values(std::size_t n, double lo = -1.0, double hi = 1.0) {
    vec v(n);
    for (auto& x : v) x = static_cast<double>(static_cast<float>(uniform(lo, hi)));
    return v;
  }
  std::vector<std::int32_t> ids(std::size_t n, std::size_t bound) {
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = static_cast<std::int32_t>(index(0, bound - 1));
    return v;
  }

 private:
  std::mt19937_64 engine_;
};

inline fvec to_float(const vec& v) { return fvec(v.begin(), v.end()); }
inline vec to_double(std::span<const float> v) { return vec(v.begin(), v.end()); }

/// max|a - ref| / max|ref| (the absolute error when ref is all zeros).
inline double relative_error(std::span<const float> a, std::span<const double> ref) {
  double num = 0.0;
  double den = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return den > 0.0 ? num / den : num;
}

inline double relative_error(std::span<const double> a, std::span<const double> ref) {
  double num = 0.0;
  double den = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(a[i] - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return den > 0.0 ? num / den : num;
}

inline double dot(const vec& a, const vec& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// Central finite differences of loss() with respect to every element of x (step h).
inline vec finite_differences(vec& x, const std::function<double()>& loss, double h = 1e-5) {
  vec g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2.0 * h);
  }
  return g;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ---- GEMM -------------------------------------------------------------------------------
inline void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, double alpha,
                 const vec& a, std::size_t lda, const vec& b, std::size_t ldb, double beta, vec& c,
                 std::size_t ldc) {
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::size_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
      }
      c[i * ldc + j] = alpha * s + (beta == 0.0 ? 0.0 : beta * c[i * ldc + j]);
    }
  }
}

// ---- LSTM (PyTorch nn.LSTM, gate order i, f, g, o) ----------------------------------------
struct lstm_shape {
  std::size_t steps, batch, input, hidden;
};

struct lstm_params {
  vec w_ih, w_hh, b_ih, b_hh;  // [4H, I], [4H, H], [4H], [4H]
};

inline lstm_params random_lstm_params(random_source& rng, const lstm_shape& s) {
  const double k = 1.0 / std::sqrt(static_cast<double>(s.hidden));  // PyTorch's init range
  return {rng.values(4 * s.hidden * s.input, -k, k), rng.values(4 * s.hidden * s.hidden, -k, k),
          rng.values(4 * s.hidden, -k, k), rng.values(4 * s.hidden, -k, k)};
}

struct lstm_result {
  vec y, h, c;              // [T, B, H], [B, H], [B, H]
  vec gates;                // [T, B, 4H] post-activation
  vec cs;                   // [T+1, B, H] c_0 .. c_T
  vec hs;                   // [T+1, B, H] h_0 .. h_T
};

inline lstm_result lstm_forward(const lstm_shape& s, const lstm_params& p, const vec& x,
                                const vec& h0, const vec& c0) {
  const std::size_t T = s.steps, B = s.batch, I = s.input, H = s.hidden;
  lstm_result r;
  r.y.assign(T * B * H, 0.0);
  r.gates.assign(T * B * 4 * H, 0.0);
  r.cs.assign((T + 1) * B * H, 0.0);
  r.hs.assign((T + 1) * B * H, 0.0);
  std::copy(h0.begin(), h0.end(), r.hs.begin());
  std::copy(c0.begin(), c0.end(), r.cs.begin());
  vec z(4 * H);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t q = 0; q < 4 * H; ++q) {
        double v = p.b_ih[q] + p.b_hh[q];
        for (std::size_t i = 0; i < I; ++i) v += p.w_ih[q * I + i] * x[(t * B + b) * I + i];
        for (std::size_t j = 0; j < H; ++j) v += p.w_hh[q * H + j] * r.hs[(t * B + b) * H + j];
        z[q] = v;
      }
      for (std::size_t j = 0; j < H; ++j) {
        const double ig = sigmoid(z[j]);
        const double fg = sigmoid(z[H + j]);
        const double gg = std::tanh(z[2 * H + j]);
        const double og = sigmoid(z[3 * H + j]);
        const double c = fg * r.cs[(t * B + b) * H + j] + ig * gg;
        const double h = og * std::tanh(c);
        double* g = &r.gates[(t * B + b) * 4 * H];
        g[j] = ig;
        g[H + j] = fg;
        g[2 * H + j] = gg;
        g[3 * H + j] = og;
        r.cs[((t + 1) * B + b) * H + j] = c;
        r.hs[((t + 1) * B + b) * H + j] = h;
        r.y[(t * B + b) * H + j] = h;
      }
    }
  }
  r.h.assign(r.hs.end() - static_cast<std::ptrdiff_t>(B * H), r.hs.end());
  r.c.assign(r.cs.end() - static_cast<std::ptrdiff_t>(B * H), r.cs.end());
  return r;
}

struct lstm_grads {
  vec dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh;
};

/// Back-propagation through time in double, written independently of the kernel (per-element
/// loops, no shared buffers with it).
inline lstm_grads lstm_backward(const lstm_shape& s, const lstm_params& p, const vec& x,
                                const lstm_result& f, const vec& dy, const vec& dhT,
                                const vec& dcT) {
  const std::size_t T = s.steps, B = s.batch, I = s.input, H = s.hidden;
  lstm_grads g;
  g.dx.assign(T * B * I, 0.0);
  g.dw_ih.assign(4 * H * I, 0.0);
  g.dw_hh.assign(4 * H * H, 0.0);
  g.db_ih.assign(4 * H, 0.0);
  g.db_hh.assign(4 * H, 0.0);
  vec dh = dhT;
  vec dc = dcT;
  vec dz(4 * H);
  for (std::size_t t = T; t-- > 0;) {
    vec dh_prev(B * H, 0.0);
    for (std::size_t b = 0; b < B; ++b) {
      const double* gt = &f.gates[(t * B + b) * 4 * H];
      for (std::size_t j = 0; j < H; ++j) {
        const double ig = gt[j], fg = gt[H + j], gg = gt[2 * H + j], og = gt[3 * H + j];
        const double c = f.cs[((t + 1) * B + b) * H + j];
        const double cp = f.cs[(t * B + b) * H + j];
        const double dht = dh[b * H + j] + dy[(t * B + b) * H + j];
        const double tc = std::tanh(c);
        const double dct = dc[b * H + j] + dht * og * (1.0 - tc * tc);
        dz[j] = dct * gg * ig * (1.0 - ig);
        dz[H + j] = dct * cp * fg * (1.0 - fg);
        dz[2 * H + j] = dct * ig * (1.0 - gg * gg);
        dz[3 * H + j] = dht * tc * og * (1.0 - og);
        dc[b * H + j] = dct * fg;
      }
      for (std::size_t q = 0; q < 4 * H; ++q) {
        g.db_ih[q] += dz[q];
        g.db_hh[q] += dz[q];
        for (std::size_t i = 0; i < I; ++i) {
          g.dw_ih[q * I + i] += dz[q] * x[(t * B + b) * I + i];
          g.dx[(t * B + b) * I + i] += dz[q] * p.w_ih[q * I + i];
        }
        for (std::size_t j = 0; j < H; ++j) {
          g.dw_hh[q * H + j] += dz[q] * f.hs[(t * B + b) * H + j];
          dh_prev[b * H + j] += dz[q] * p.w_hh[q * H + j];
        }
      }
    }
    dh = dh_prev;
  }
  g.dh0 = dh;
  g.dc0 = dc;
  return g;
}

// ---- softmax cross-entropy of a linear layer -----------------------------------------------
struct xent_result {
  double loss;
  vec dh, dw, db;
};

inline xent_result linear_cross_entropy(std::size_t n, std::size_t h, std::size_t v, const vec& hv,
                                        const vec& w, const vec& b,
                                        const std::vector<std::int32_t>& targets, bool mean) {
  xent_result r{0.0, vec(n * h, 0.0), vec(v * h, 0.0), vec(v, 0.0)};
  const double scale = mean ? 1.0 / static_cast<double>(n) : 1.0;
  vec z(v);
  for (std::size_t i = 0; i < n; ++i) {
    double mx = -INFINITY;
    for (std::size_t c = 0; c < v; ++c) {
      double s = b[c];
      for (std::size_t k = 0; k < h; ++k) s += hv[i * h + k] * w[c * h + k];
      z[c] = s;
      mx = std::max(mx, s);
    }
    double sum = 0.0;
    for (std::size_t c = 0; c < v; ++c) sum += std::exp(z[c] - mx);
    const double lse = mx + std::log(sum);
    const auto t = static_cast<std::size_t>(targets[i]);
    r.loss += lse - z[t];
    for (std::size_t c = 0; c < v; ++c) {
      const double dz = (std::exp(z[c] - lse) - (c == t ? 1.0 : 0.0)) * scale;
      r.db[c] += dz;
      for (std::size_t k = 0; k < h; ++k) {
        r.dh[i * h + k] += dz * w[c * h + k];
        r.dw[c * h + k] += dz * hv[i * h + k];
      }
    }
  }
  r.loss *= scale;
  return r;
}

}  // namespace strata::kernels::test
