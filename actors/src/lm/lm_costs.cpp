#include "strata/actors/lm_costs.hpp"

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

#include "lm_stage.hpp"
#include "strata/device/stream.hpp"
#include "strata/kernels/embedding.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"

namespace strata::lm {

namespace k = strata::kernels;

namespace {

constexpr std::uint64_t f32 = sizeof(float);

std::size_t ce_block_rows(const lm_config& c) { return std::min<std::size_t>(c.chunk_steps() * c.micro_batch_size(), 256); }

std::uint64_t lstm_weights(const lm_config& c, std::size_t in) {
  const std::size_t H = c.hidden;
  return 4 * H * in + 4 * H * H + 8 * H;
}

// The per-micro-batch buffers lm_stage allocates for one LSTM layer (per unit: y, reserve, h, c;
// per micro-batch: the backward's dh/dc carry, two parities).
std::uint64_t lstm_activation_floats(const lm_config& c, std::size_t in) {
  const std::size_t tc = c.chunk_steps(), bm = c.micro_batch_size(), H = c.hidden;
  const std::size_t per_unit = tc * bm * H + k::lstm_reserve_size({tc, bm, in, H}) + 2 * bm * H;
  return c.chunks * per_unit + 4 * bm * H;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

// ---- cpu: the kernels for real, timed on the device's arena thread ---------------------------

class cpu_timer {
public:
  cpu_timer(device& dev, const cost_measurement_options& o) : stream_(dev.create_stream()), opt_(o) {}

  /// Runs `body` warmup + repetitions times as work items on the stream, returns the median of
  /// the timed runs in seconds. `body` may reference the caller's buffers: this waits for it.
  template <class Body>
  double median_s(const std::string& name, Body body) {
    auto samples = std::make_shared<std::vector<double>>();
    const int runs = std::max(0, opt_.warmup) + std::max(1, opt_.repetitions);
    const int warmup = std::max(0, opt_.warmup);
    for (int i = 0; i < runs; ++i) {
      try {
        stream_.launch({.name = "measure." + name, .kind = work_kind::matmul, .cpu = [body, samples, timed = i >= warmup] {
                          const auto start = std::chrono::steady_clock::now();
                          body();
                          const auto end = std::chrono::steady_clock::now();
                          if (timed) samples->push_back(std::chrono::duration<double>(end - start).count());
                        }});
      } catch (...) {
        stream_.synchronize();  // earlier items reference the caller's buffers
        throw;
      }
    }
    stream_.synchronize();  // rethrows what a kernel threw
    return median(*samples);
  }

private:
  stream stream_;
  cost_measurement_options opt_;
};

struct times {
  double forward = 0, backward = 0;
};

times measure_embedding(const lm_config& c, cpu_timer& timer) {
  const std::size_t T = c.seq, bm = c.micro_batch_size(), tc = c.chunk_steps(), E = c.embed, V = c.vocab;
  auto table = random_floats(V * E, 1.0f, 1);
  std::vector<float> grad(V * E, 0.f), out(T * bm * E);
  auto ids = random_ids(T * bm, V, 2);
  auto dout = random_floats(T * bm * E, 1e-3f, 3);
  times t;
  t.forward = timer.median_s("embedding_forward", [&] {
    for (std::size_t ch = 0; ch < c.chunks; ++ch)
      k::cpu::embedding_forward(V, E, table.data(), tc * bm, ids.data() + ch * tc * bm, out.data() + ch * tc * bm * E);
  });
  t.backward = timer.median_s("embedding_backward", [&] {
    for (std::size_t ch = c.chunks; ch-- > 0;)
      k::cpu::embedding_backward(V, E, tc * bm, ids.data() + ch * tc * bm, dout.data() + ch * tc * bm * E, grad.data());
  });
  return t;
}

// One LSTM layer with `in` inputs, run over the micro-batch's chunks as lm_stage runs it: forward
// chunks ascending carrying h/c, backward chunks descending carrying dh/dc.
times measure_lstm(const lm_config& c, std::size_t in, cpu_timer& timer) {
  const std::size_t T = c.seq, bm = c.micro_batch_size(), tc = c.chunk_steps(), H = c.hidden, C = c.chunks;
  const float scale = 1.0f / std::sqrt(static_cast<float>(H));
  auto w_ih = random_floats(4 * H * in, scale, 11), w_hh = random_floats(4 * H * H, scale, 12);
  auto b_ih = random_floats(4 * H, scale, 13), b_hh = random_floats(4 * H, scale, 14);
  std::vector<float> g_ih(w_ih.size(), 0.f), g_hh(w_hh.size(), 0.f), gb_ih(4 * H, 0.f), gb_hh(4 * H, 0.f);
  auto x = random_floats(T * bm * in, 1.0f, 15);
  auto dy = random_floats(T * bm * H, 1e-3f, 16);
  std::vector<float> y(T * bm * H), dx(T * bm * in);
  const k::lstm_dims d{tc, bm, in, H};
  std::vector<std::vector<float>> reserve(C, std::vector<float>(k::lstm_reserve_size(d))), h(C, std::vector<float>(bm * H)),
      cs(C, std::vector<float>(bm * H)), carry(4, std::vector<float>(bm * H, 0.f));
  std::vector<float> workspace(k::lstm_backward_workspace_size(d));
  const k::lstm_weights w{w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data()};
  times t;
  t.forward = timer.median_s("lstm_forward", [&] {
    for (std::size_t ch = 0; ch < C; ++ch) {
      const bool first = ch == 0;
      k::cpu::lstm_forward(d, w,
                           {x.data() + ch * tc * bm * in, first ? nullptr : h[ch - 1].data(), first ? nullptr : cs[ch - 1].data(),
                            y.data() + ch * tc * bm * H, h[ch].data(), cs[ch].data(), reserve[ch].data()});
    }
  });
  t.backward = timer.median_s("lstm_backward", [&] {
    for (std::size_t ch = C; ch-- > 0;) {
      const bool last = ch + 1 == C;
      const std::size_t read = (ch + 1) % 2, write = ch % 2;
      k::cpu::lstm_backward(d, w,
                            {x.data() + ch * tc * bm * in, reserve[ch].data(), dy.data() + ch * tc * bm * H,
                             last ? nullptr : carry[read].data(), last ? nullptr : carry[2 + read].data(),
                             dx.data() + ch * tc * bm * in, ch == 0 ? nullptr : carry[write].data(),
                             ch == 0 ? nullptr : carry[2 + write].data(), workspace.data()},
                            {g_ih.data(), g_hh.data(), gb_ih.data(), gb_hh.data()});
    }
  });
  return t;
}

times measure_decoder(const lm_config& c, cpu_timer& timer) {
  const std::size_t T = c.seq, bm = c.micro_batch_size(), tc = c.chunk_steps(), H = c.hidden, V = c.vocab;
  const float scale = 1.0f / std::sqrt(static_cast<float>(H));
  auto w = random_floats(V * H, scale, 21), b = random_floats(V, scale, 22);
  std::vector<float> dw(V * H, 0.f), db(V, 0.f), dh(T * bm * H);
  auto h = random_floats(T * bm * H, 1.0f, 23);
  auto targets = random_ids(T * bm, V, 24);
  std::vector<float> ws(k::linear_cross_entropy_workspace_size({tc * bm, H, V}, ce_block_rows(c)));
  times t;
  t.forward = timer.median_s("decoder", [&] {
    for (std::size_t ch = 0; ch < c.chunks; ++ch) {
      const std::size_t r0 = ch * tc * bm;
      k::linear_cross_entropy_inputs in{h.data() + r0 * H, w.data(), b.data(), targets.data() + r0, k::loss_reduction::sum};
      (void)k::cpu::linear_cross_entropy_forward_backward({tc * bm, H, V}, in, {dh.data() + r0 * H, dw.data(), db.data()},
                                                          ws.data(), ws.size());
    }
  });
  return t;
}

// ---- sim: the same work items' modelled durations --------------------------------------------

pipeline::model_costs model_on_sim(const lm_config& c, device& dev, pipeline::model_costs m) {
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
  auto submit = [&](const std::string& name, work_kind kind, work_cost cost) {
    s.launch({.name = name, .kind = kind, .flops = cost.flops, .bytes = cost.bytes});
    ++launched;
  };
  // One micro-batch = C chunk work items per layer, as the stages submit them (a chunk pays the
  // launch latency again). The embedding's gather and scatter-add are pointwise memory traffic.
  const double rows = static_cast<double>(tc * bm), e = static_cast<double>(E);
  for (std::size_t ch = 0; ch < C; ++ch) {
    submit("embedding_forward", work_kind::pointwise, {0, f32 * 2 * rows * e + 4 * rows});
    submit("embedding_backward", work_kind::pointwise, {rows * e, f32 * 3 * rows * e + 4 * rows});
    submit("lstm_e_forward", work_kind::matmul, lstm_forward_cost(tc, bm, E, H));
    submit("lstm_e_backward", work_kind::matmul, lstm_backward_cost(tc, bm, E, H));
    if (c.layers > 1) {
      submit("lstm_h_forward", work_kind::matmul, lstm_forward_cost(tc, bm, H, H));
      submit("lstm_h_backward", work_kind::matmul, lstm_backward_cost(tc, bm, H, H));
    }
    submit("decoder", work_kind::matmul, decoder_cost(tc * bm, H, c.vocab));
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

pipeline::model_costs layer_memory_costs(const lm_config& c) {
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
    m.lstm.push_back(lc);
  }
  m.decoder.memory_bytes = 2 * f32 * (V * H + V) + f32 * k::linear_cross_entropy_workspace_size({c.chunk_steps() * bm, c.hidden, c.vocab}, ce_block_rows(c));
  m.decoder.activation_bytes = f32 * T * bm * H;
  return m;
}

pipeline::model_costs measure_layer_costs(const lm_config& config, device& dev, const cost_measurement_options& options) {
  config.validate();
  if (!dev.valid()) throw std::invalid_argument("measure_layer_costs needs a device");
  auto m = layer_memory_costs(config);
  switch (dev.kind()) {
    case device_kind::sim:
      return model_on_sim(config, dev, std::move(m));
    case device_kind::cpu:
      break;
    default:
      throw std::invalid_argument("measure_layer_costs runs on cpu and sim devices; " + dev.name() + " is neither");
  }
  cpu_timer timer(dev, options);
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
  m.decoder.forward_s = measure_decoder(config, timer).forward;
  m.decoder.backward_s = 0;
  return m;
}

}  // namespace strata::lm
