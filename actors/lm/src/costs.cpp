#include "strata/stats.hpp"
#include "strata/lm/costs.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops.hpp"
#include "stage.hpp"
#include "strata/device/stream.hpp"
#include "strata/kernels/costs.hpp"
#include "strata/kernels/embedding.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"

namespace strata::lm {

namespace k = strata::kernels;

namespace {

constexpr std::uint64_t f32 = sizeof(float);

std::size_t ce_block_rows(const config& c) { return std::min<std::size_t>(c.chunk_steps() * c.micro_batch_size(), 256); }

std::uint64_t lstm_weights(const config& c, std::size_t in) {
  const std::size_t H = c.hidden;
  return 4 * H * in + 4 * H * H + 8 * H;
}

// The per-micro-batch buffers lm_stage allocates for one LSTM layer (per unit: y, reserve, h, c;
// per micro-batch: the backward's dh/dc carry, two parities).
std::uint64_t lstm_activation_floats(const config& c, std::size_t in) {
  const std::size_t tc = c.chunk_steps(), bm = c.micro_batch_size(), H = c.hidden;
  const std::size_t per_unit = tc * bm * H + k::lstm_reserve_size({tc, bm, in, H}) + 2 * bm * H;
  return c.chunks * per_unit + 4 * bm * H;
}

// Deterministic inputs: uniform(-scale, scale).
std::vector<float> random_floats(std::size_t n, float scale, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::vector<std::int32_t> random_ids(std::size_t n, std::size_t vocab, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// ---- cpu and cuda: the kernels for real, timed by the device ---------------------------------

/// Runs work items on a stream of `dev` and reads their durations from the device's work observer
/// (cpu: steady-clock times on the arena thread; cuda: CUDA events), so that one measurement
/// serves both backends. Buffers live on the device, uploaded on the same stream.
class device_timer {
public:
  device_timer(device& dev, const cost_measurement_options& o, precision math)
      : dev_(dev), stream_(dev.create_stream()), opt_(o), math_(math) {
    dev_.set_work_observer([seen = seen_](const work_record& r) {
      std::lock_guard lk(seen->mu);
      seen->seconds[*r.name].push_back(std::chrono::duration<double>(r.end - r.start).count());
      seen->cv.notify_all();
    });
  }
  ~device_timer() {
    try {
      stream_.synchronize();
    } catch (...) {
      // reported by the call that failed
    }
    dev_.set_work_observer({});
  }
  device_timer(const device_timer&) = delete;
  device_timer& operator=(const device_timer&) = delete;

  /// A device copy of `values`.
  template <class T>
  tensor upload(const std::vector<T>& values) {
    return tensor::from_host<T>(std::span<const T>(values), dev_, stream_);
  }
  tensor zeros(std::size_t n) { return upload(std::vector<float>(n, 0.f)); }

  /// Runs `run(ops)` warmup + repetitions times as work items; the median of the timed runs in
  /// seconds. `run` may reference the caller's buffers: this waits for it.
  template <class Run>
  double median_s(const std::string& name, Run run) {
    const int warmup = std::max(0, opt_.warmup), timed = std::max(1, opt_.repetitions);
    const std::string measured = "measure." + name;
    for (int i = 0; i < warmup + timed; ++i) {
      kernel_work w{.name = i < warmup ? "warmup." + name : measured, .kind = work_kind::matmul};
      ops::attach(w, dev_.kind(), math_, run);
      try {
        stream_.launch(std::move(w));
      } catch (...) {
        stream_.synchronize();  // earlier items reference the caller's buffers
        throw;
      }
    }
    stream_.synchronize();  // rethrows what a kernel threw
    std::unique_lock lk(seen_->mu);
    auto& samples = seen_->seconds[measured];
    if (!seen_->cv.wait_for(lk, std::chrono::seconds(60), [&] { return samples.size() >= static_cast<std::size_t>(timed); }))
      throw std::runtime_error("measure_layer_costs: " + dev_.name() + " reported " + std::to_string(samples.size()) +
                               " of " + std::to_string(timed) + " timed runs of " + name);
    return median(samples);
  }

private:
  struct seen_t {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::vector<double>> seconds;
  };
  device& dev_;
  stream stream_;
  cost_measurement_options opt_;
  precision math_;  ///< the matrix-product math the stages will use (cuda)
  std::shared_ptr<seen_t> seen_ = std::make_shared<seen_t>();
};

using ops::fp;
using ops::ip;

struct times {
  double forward = 0, backward = 0;
};

times measure_embedding(const config& c, device_timer& timer) {
  const std::size_t T = c.seq, bm = c.micro_batch_size(), tc = c.chunk_steps(), E = c.embed, V = c.vocab;
  auto table = timer.upload(random_floats(V * E, 1.0f, 1));
  auto grad = timer.zeros(V * E), out = timer.zeros(T * bm * E);
  auto ids = timer.upload(random_ids(T * bm, V, 2));
  auto dout = timer.upload(random_floats(T * bm * E, 1e-3f, 3));
  times t;
  t.forward = timer.median_s("embedding_forward", [&](const auto& o) {
    for (std::size_t ch = 0; ch < c.chunks; ++ch)
      o.embedding_forward(V, E, fp(table), tc * bm, ip(ids) + ch * tc * bm, fp(out) + ch * tc * bm * E);
  });
  t.backward = timer.median_s("embedding_backward", [&](const auto& o) {
    for (std::size_t ch = c.chunks; ch-- > 0;)
      o.embedding_backward(V, E, tc * bm, ip(ids) + ch * tc * bm, fp(dout) + ch * tc * bm * E, fp(grad));
  });
  return t;
}

// One LSTM layer with `in` inputs, run over the micro-batch's chunks as lm_stage runs it: forward
// chunks ascending carrying h/c, backward chunks descending carrying dh/dc.
times measure_lstm(const config& c, std::size_t in, device_timer& timer) {
  const std::size_t T = c.seq, bm = c.micro_batch_size(), tc = c.chunk_steps(), H = c.hidden, C = c.chunks;
  const float scale = 1.0f / std::sqrt(static_cast<float>(H));
  auto w_ih = timer.upload(random_floats(4 * H * in, scale, 11)), w_hh = timer.upload(random_floats(4 * H * H, scale, 12));
  auto b_ih = timer.upload(random_floats(4 * H, scale, 13)), b_hh = timer.upload(random_floats(4 * H, scale, 14));
  auto g_ih = timer.zeros(4 * H * in), g_hh = timer.zeros(4 * H * H), gb_ih = timer.zeros(4 * H), gb_hh = timer.zeros(4 * H);
  auto x = timer.upload(random_floats(T * bm * in, 1.0f, 15));
  auto dy = timer.upload(random_floats(T * bm * H, 1e-3f, 16));
  auto y = timer.zeros(T * bm * H), dx = timer.zeros(T * bm * in);
  const k::lstm_dims d{tc, bm, in, H};
  std::vector<tensor> reserve, h, cs, carry;
  for (std::size_t ch = 0; ch < C; ++ch) {
    reserve.push_back(timer.zeros(k::lstm_reserve_size(d)));
    h.push_back(timer.zeros(bm * H));
    cs.push_back(timer.zeros(bm * H));
  }
  for (int i = 0; i < 4; ++i) carry.push_back(timer.zeros(bm * H));
  auto workspace = timer.zeros(k::lstm_backward_workspace_size(d));
  const k::lstm_weights w{fp(w_ih), fp(w_hh), fp(b_ih), fp(b_hh)};
  times t;
  t.forward = timer.median_s("lstm_forward", [&](const auto& o) {
    for (std::size_t ch = 0; ch < C; ++ch) {
      const bool first = ch == 0;
      o.lstm_forward(d, w,
                     {fp(x) + ch * tc * bm * in, first ? nullptr : fp(h[ch - 1]), first ? nullptr : fp(cs[ch - 1]),
                      fp(y) + ch * tc * bm * H, fp(h[ch]), fp(cs[ch]), fp(reserve[ch])});
    }
  });
  t.backward = timer.median_s("lstm_backward", [&](const auto& o) {
    for (std::size_t ch = C; ch-- > 0;) {
      const bool last = ch + 1 == C;
      const std::size_t read = (ch + 1) % 2, write = ch % 2;
      o.lstm_backward(d, w,
                      {fp(x) + ch * tc * bm * in, fp(reserve[ch]), fp(dy) + ch * tc * bm * H,
                       last ? nullptr : fp(carry[read]), last ? nullptr : fp(carry[2 + read]),
                       fp(dx) + ch * tc * bm * in, ch == 0 ? nullptr : fp(carry[write]),
                       ch == 0 ? nullptr : fp(carry[2 + write]), fp(workspace)},
                      {fp(g_ih), fp(g_hh), fp(gb_ih), fp(gb_hh)});
    }
  });
  return t;
}

times measure_decoder(const config& c, device_timer& timer, bool gpu) {
  const std::size_t T = c.seq, bm = c.micro_batch_size(), tc = c.chunk_steps(), H = c.hidden, V = c.vocab;
  const float scale = 1.0f / std::sqrt(static_cast<float>(H));
  auto w = timer.upload(random_floats(V * H, scale, 21)), b = timer.upload(random_floats(V, scale, 22));
  auto dw = timer.zeros(V * H), db = timer.zeros(V), dh = timer.zeros(T * bm * H);
  auto h = timer.upload(random_floats(T * bm * H, 1.0f, 23));
  auto targets = timer.upload(random_ids(T * bm, V, 24));
  const k::linear_cross_entropy_dims d{tc * bm, H, V};
  const std::size_t ws_size = gpu ? k::cuda_ops::linear_cross_entropy_workspace(d, ce_block_rows(c))
                                  : k::cpu_ops::linear_cross_entropy_workspace(d, ce_block_rows(c));
  auto ws = timer.zeros(ws_size);
  auto loss = timer.zeros(2);  // one double
  times t;
  t.forward = timer.median_s("decoder", [&](const auto& o) {
    for (std::size_t ch = 0; ch < c.chunks; ++ch) {
      const std::size_t r0 = ch * tc * bm;
      k::linear_cross_entropy_inputs in{fp(h) + r0 * H, fp(w), fp(b), ip(targets) + r0, k::loss_reduction::sum};
      o.linear_cross_entropy(d, in, {fp(dh) + r0 * H, fp(dw), fp(db)}, fp(ws), ws_size, reinterpret_cast<double*>(fp(loss)));
    }
  });
  return t;
}

// ---- sim: the same work items' modelled durations --------------------------------------------

pipeline::model_costs model_on_sim(const config& c, device& dev, pipeline::model_costs m) {
  const std::size_t tc = c.chunk_steps(), bm = c.micro_batch_size(), H = c.hidden, E = c.embed, C = c.chunks;
  struct seen_t {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, double> seconds;
    std::size_t count = 0;
  };
  auto seen = std::make_shared<seen_t>();
  dev.set_work_observer([seen](const work_record& r) {
    std::lock_guard lk(seen->mu);
    seen->seconds[*r.name] += std::chrono::duration<double>(r.end - r.start).count();
    ++seen->count;
    seen->cv.notify_all();
  });
  struct remove_observer {
    device& d;
    ~remove_observer() { d.set_work_observer({}); }
  } guard{dev};
  stream s = dev.create_stream();
  std::size_t launched = 0;
  auto submit = [&](const std::string& name, work_kind kind, k::work_cost cost) {
    s.launch({.name = name, .kind = kind, .flops = cost.flops, .bytes = cost.bytes});
    ++launched;
  };
  // One micro-batch = C chunk work items per layer, as the stages submit them (a chunk pays the
  // launch latency again). The embedding's gather and scatter-add are pointwise memory traffic.
  for (std::size_t ch = 0; ch < C; ++ch) {
    submit("embedding_forward", work_kind::pointwise, k::embedding_forward_cost(tc * bm, E));
    submit("embedding_backward", work_kind::pointwise, k::embedding_backward_cost(tc * bm, E));
    submit("lstm_e_forward", work_kind::matmul, k::lstm_forward_cost({tc, bm, E, H}));
    submit("lstm_e_backward", work_kind::matmul, k::lstm_backward_cost({tc, bm, E, H}));
    if (c.layers > 1) {
      submit("lstm_h_forward", work_kind::matmul, k::lstm_forward_cost({tc, bm, H, H}));
      submit("lstm_h_backward", work_kind::matmul, k::lstm_backward_cost({tc, bm, H, H}));
    }
    submit("decoder", work_kind::matmul, k::decoder_cost(tc * bm, H, c.vocab));
  }
  s.synchronize();
  std::unique_lock lk(seen->mu);
  if (!seen->cv.wait_for(lk, std::chrono::seconds(60), [&] { return seen->count >= launched; }))
    throw std::runtime_error("measure_layer_costs: " + dev.name() + " reported " + std::to_string(seen->count) + " of " +
                             std::to_string(launched) + " work items");
  auto at = [&](const char* name) { return seen->seconds[name]; };
  m.embedding.forward_s = at("embedding_forward");
  m.embedding.backward_s = at("embedding_backward");
  for (std::size_t l = 0; l < c.layers; ++l) {
    m.lstm[l].forward_s = at(l == 0 ? "lstm_e_forward" : "lstm_h_forward");
    m.lstm[l].backward_s = at(l == 0 ? "lstm_e_backward" : "lstm_h_backward");
  }
  m.decoder.forward_s = at("decoder");
  m.decoder.backward_s = 0;
  return m;
}

}  // namespace

pipeline::model_costs layer_memory_costs(const config& c) {
  c.validate();
  const std::uint64_t T = c.seq, bm = c.micro_batch_size(), H = c.hidden, E = c.embed, V = c.vocab;
  pipeline::model_costs m;
  m.embedding.memory_bytes = 2 * f32 * V * E;
  m.embedding.activation_bytes = f32 * T * bm * E;
  for (std::size_t l = 0; l < c.layers; ++l) {
    const std::size_t in = l == 0 ? c.embed : c.hidden;
    pipeline::layer_cost lc;
    lc.memory_bytes = 2 * f32 * lstm_weights(c, in);
    lc.activation_bytes = f32 * lstm_activation_floats(c, in);
    lc.output_bytes = f32 * T * bm * H;  // h of every timestep: what a cut after it sends on
    m.lstm.push_back(lc);
  }
  m.decoder.memory_bytes = 2 * f32 * (V * H + V) + f32 * k::linear_cross_entropy_workspace_size({c.chunk_steps() * bm, c.hidden, c.vocab}, ce_block_rows(c));
  m.decoder.activation_bytes = f32 * T * bm * H;
  return m;
}

pipeline::model_costs estimate_layer_costs(const lm::config& c, const nominal_rates& rates) {
  if (!(rates.flops_per_s > 0) || !(rates.bytes_per_s > 0))
    throw std::invalid_argument("estimate_layer_costs needs positive FLOP and byte rates");
  auto m = layer_memory_costs(c);
  const std::size_t T = c.seq, bm = c.micro_batch_size(), H = c.hidden;
  auto seconds = [&](const k::work_cost& w) { return w.flops / rates.flops_per_s + w.bytes / rates.bytes_per_s; };
  m.embedding.forward_s = seconds(k::embedding_forward_cost(T * bm, c.embed));
  m.embedding.backward_s = seconds(k::embedding_backward_cost(T * bm, c.embed));
  for (std::size_t l = 0; l < c.layers; ++l) {
    const k::lstm_dims d{T, bm, l == 0 ? c.embed : H, H};
    m.lstm[l].forward_s = seconds(k::lstm_forward_cost(d));
    m.lstm[l].backward_s = seconds(k::lstm_backward_cost(d));
  }
  m.decoder.forward_s = seconds(k::decoder_cost(T * bm, H, c.vocab));
  m.decoder.backward_s = 0;
  return m;
}

pipeline::model_costs measure_layer_costs(const lm::config& config, device& dev, const cost_measurement_options& options) {
  config.validate();
  if (!dev.valid()) throw std::invalid_argument("measure_layer_costs needs a device");
  auto m = layer_memory_costs(config);
  if (dev.kind() == device_kind::sim) return model_on_sim(config, dev, std::move(m));
#if !STRATA_HAS_CUDA
  if (dev.kind() == device_kind::cuda)
    throw std::invalid_argument("measure_layer_costs on " + dev.name() + " needs strata built with CUDA (STRATA_CUDA=ON)");
#endif
  device_timer timer(dev, options, config.precision);
  const auto emb = measure_embedding(config, timer);
  m.embedding.forward_s = emb.forward;
  m.embedding.backward_s = emb.backward;
  const auto first = measure_lstm(config, config.embed, timer);
  const auto rest = config.layers > 1 ? measure_lstm(config, config.hidden, timer) : first;
  for (std::size_t l = 0; l < config.layers; ++l) {
    m.lstm[l].forward_s = l == 0 ? first.forward : rest.forward;
    m.lstm[l].backward_s = l == 0 ? first.backward : rest.backward;
  }
  // The fused decoder computes its backward in the forward pass, as the last stage runs it.
  m.decoder.forward_s = measure_decoder(config, timer, dev.kind() == device_kind::cuda).forward;
  m.decoder.backward_s = 0;
  return m;
}

}  // namespace strata::lm
