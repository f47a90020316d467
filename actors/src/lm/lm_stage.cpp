#include "lm_stage.hpp"

#include <algorithm>
#include <stdexcept>

#include "strata/kernels/embedding.hpp"
#include "strata/kernels/linear_cross_entropy.hpp"
#include "strata/kernels/lstm.hpp"

namespace strata::lm {

namespace k = strata::kernels;

lm_stage::lm_stage(const lm_config& config, stage_span span, device dev, const stream& s)
    : config_(config), span_(span), dev_(std::move(dev)) {
  config_.validate();
  if (dev_.kind() == device_kind::cuda)
    throw std::invalid_argument("LSTM pipeline stages run on cpu and sim devices; cuda stages are not implemented yet");
  computes_ = dev_.kind() == device_kind::cpu;
  bm_ = config_.micro_batch_size();
  tc_ = config_.chunk_steps();
  const std::size_t H = config_.hidden, M = config_.micro_batches, C = config_.chunks;
  const std::size_t units = M * C, nl = span_.last - span_.first;

  if (span_.embedding) {
    emb_index_ = names_.size();
    names_.push_back("embedding.weight");
  }
  for (std::size_t l = span_.first; l < span_.last; ++l) {
    layer_index_.push_back(names_.size());
    for (const char* kind : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"})
      names_.push_back("lstm." + std::string(kind) + "_l" + std::to_string(l));
  }
  if (span_.decoder) {
    dec_w_index_ = names_.size();
    names_.push_back("decoder.weight");
    dec_b_index_ = names_.size();
    names_.push_back("decoder.bias");
  }
  tokens_.resize(M);
  targets_.resize(M);
  input_.assign(units, nullptr);
  dout_.assign(units, nullptr);
  unit_loss_.assign(units, 0.0);
  for (const auto& name : names_) {
    std::vector<std::int64_t> shape;
    for (auto d : parameter_shape(config_, name)) shape.push_back(static_cast<std::int64_t>(d));
    values_.push_back(tensor::empty(shape, dtype::float32, dev_, s));
    grads_.push_back(tensor::empty(shape, dtype::float32, dev_, s));
    if (computes_) {
      auto init = initial_parameter(config_, name);
      std::copy(init.begin(), init.end(), values_.back().data<float>());
      std::fill_n(grads_.back().data<float>(), init.size(), 0.f);
    }
  }
  if (!computes_) return;  // sim: costs only, no activation memory

  const std::size_t max_in = std::max(config_.embed, H);
  emb_out_.resize(units);
  y_.resize(units);
  reserve_.resize(units);
  h_.resize(units);
  c_.resize(units);
  dtop_.resize(units);
  dx_out_.resize(units);
  for (std::size_t u = 0; u < units; ++u) {
    if (span_.embedding) emb_out_[u].assign(tc_ * bm_ * config_.embed, 0.f);
    for (std::size_t l = span_.first; l < span_.last; ++l) {
      y_[u].emplace_back(tc_ * bm_ * H, 0.f);
      reserve_[u].emplace_back(k::lstm_reserve_size({tc_, bm_, layer_input(l), H}), 0.f);
      h_[u].emplace_back(bm_ * H, 0.f);
      c_[u].emplace_back(bm_ * H, 0.f);
    }
    if (span_.decoder) dtop_[u].assign(tc_ * bm_ * H, 0.f);
    if (!span_.embedding) dx_out_[u].assign(tc_ * bm_ * layer_input(span_.first), 0.f);
  }
  carry_.resize(M * nl);
  for (auto& c : carry_) c.assign(4, std::vector<float>(bm_ * H, 0.f));
  dx_a_.assign(tc_ * bm_ * max_in, 0.f);
  dx_b_.assign(tc_ * bm_ * max_in, 0.f);
  workspace_.assign(k::lstm_backward_workspace_size({tc_, bm_, max_in, H}), 0.f);
  if (span_.decoder) {
    std::size_t block = std::min<std::size_t>(tc_ * bm_, 256);
    ce_workspace_.assign(k::linear_cross_entropy_workspace_size({tc_ * bm_, H, config_.vocab}, block), 0.f);
  }
}

void lm_stage::forward_math(std::size_t mb, std::size_t chunk) {
  const std::size_t u = unit(mb, chunk), t0 = chunk * tc_, H = config_.hidden;
  const float* x = nullptr;
  if (span_.embedding) {
    k::cpu::embedding_forward(config_.vocab, config_.embed, values_[emb_index_].data<float>(), tc_ * bm_,
                              tokens_[mb].data() + t0 * bm_, emb_out_[u].data());
    x = emb_out_[u].data();
  } else {
    x = input_[u];
  }
  for (std::size_t kl = 0; kl < span_.last - span_.first; ++kl) {
    const std::size_t l = span_.first + kl, p = layer_index_[kl];
    const bool first_chunk = chunk == 0;
    k::cpu::lstm_forward({tc_, bm_, layer_input(l), H},
                         {values_[p].data<float>(), values_[p + 1].data<float>(), values_[p + 2].data<float>(), values_[p + 3].data<float>()},
                         {x, first_chunk ? nullptr : h_[unit(mb, chunk - 1)][kl].data(),
                          first_chunk ? nullptr : c_[unit(mb, chunk - 1)][kl].data(), y_[u][kl].data(),
                          h_[u][kl].data(), c_[u][kl].data(), reserve_[u][kl].data()});
    x = y_[u][kl].data();
  }
  if (span_.decoder) {
    k::linear_cross_entropy_inputs in{x, values_[dec_w_index_].data<float>(), values_[dec_b_index_].data<float>(),
                                      targets_[mb].data() + t0 * bm_, k::loss_reduction::sum};
    unit_loss_[u] = k::cpu::linear_cross_entropy_forward_backward(
        {tc_ * bm_, H, config_.vocab}, in,
        {dtop_[u].data(), grads_[dec_w_index_].data<float>(), grads_[dec_b_index_].data<float>()}, ce_workspace_.data(),
        ce_workspace_.size());
  }
}

void lm_stage::backward_math(std::size_t mb, std::size_t chunk) {
  const std::size_t u = unit(mb, chunk), t0 = chunk * tc_, H = config_.hidden, nl = span_.last - span_.first;
  const float* dy = span_.decoder ? dtop_[u].data() : dout_[u];
  float* scratch[2] = {dx_a_.data(), dx_b_.data()};
  for (std::size_t kk = nl; kk-- > 0;) {
    const std::size_t l = span_.first + kk, p = layer_index_[kk];
    const float* x = kk > 0 ? y_[u][kk - 1].data() : (span_.embedding ? emb_out_[u].data() : input_[u]);
    float* dx = (kk == 0 && !span_.embedding) ? dx_out_[u].data() : scratch[kk % 2];
    auto& carry = carry_[mb * nl + kk];
    const bool last_chunk = chunk + 1 == config_.chunks;
    const std::size_t read = (chunk + 1) % 2, write = chunk % 2;
    k::cpu::lstm_backward(
        {tc_, bm_, layer_input(l), H},
        {values_[p].data<float>(), values_[p + 1].data<float>(), values_[p + 2].data<float>(), values_[p + 3].data<float>()},
        {x, reserve_[u][kk].data(), dy, last_chunk ? nullptr : carry[read].data(),
         last_chunk ? nullptr : carry[2 + read].data(), dx, chunk == 0 ? nullptr : carry[write].data(),
         chunk == 0 ? nullptr : carry[2 + write].data(), workspace_.data()},
        {grads_[p].data<float>(), grads_[p + 1].data<float>(), grads_[p + 2].data<float>(), grads_[p + 3].data<float>()});
    dy = dx;
  }
  if (span_.embedding)
    k::cpu::embedding_backward(config_.vocab, config_.embed, tc_ * bm_, tokens_[mb].data() + t0 * bm_, dy,
                               grads_[emb_index_].data<float>());
}

namespace {
double lstm_flops(std::size_t steps, std::size_t batch, std::size_t in, std::size_t hidden) {
  return 2.0 * static_cast<double>(steps * batch * 4 * hidden * (in + hidden));
}
}  // namespace

work_cost lstm_forward_cost(std::size_t steps, std::size_t batch, std::size_t input, std::size_t hidden) {
  return {lstm_flops(steps, batch, input, hidden),
          4.0 * static_cast<double>(steps * 4 * hidden * hidden + 4 * hidden * input + steps * batch * (input + 8 * hidden))};
}

work_cost lstm_backward_cost(std::size_t steps, std::size_t batch, std::size_t input, std::size_t hidden) {
  return {2 * lstm_flops(steps, batch, input, hidden),
          8.0 * static_cast<double>(steps * 4 * hidden * hidden + 4 * hidden * input + steps * batch * (input + 8 * hidden))};
}

work_cost decoder_cost(std::size_t rows, std::size_t hidden, std::size_t vocab) {
  return {3 * 2.0 * static_cast<double>(rows * hidden * vocab), 4.0 * static_cast<double>(3 * vocab * hidden + 2 * rows * vocab)};
}

kernel_work lm_stage::forward_work(std::size_t mb, std::size_t chunk) {
  double flops = 0, bytes = 0;
  for (std::size_t l = span_.first; l < span_.last; ++l) {
    const auto c = lstm_forward_cost(tc_, bm_, layer_input(l), config_.hidden);
    flops += c.flops;
    bytes += c.bytes;
  }
  if (span_.decoder) {
    const auto c = decoder_cost(tc_ * bm_, config_.hidden, config_.vocab);
    flops += c.flops;
    bytes += c.bytes;
  }
  kernel_work w{.name = "forward", .kind = work_kind::matmul, .flops = flops, .bytes = bytes};
  if (computes_) w.cpu = [this, mb, chunk] {
    maybe_fail();
    forward_math(mb, chunk);
  };
  return w;
}

kernel_work lm_stage::backward_work(std::size_t mb, std::size_t chunk) {
  double flops = 0, bytes = 0;
  for (std::size_t l = span_.first; l < span_.last; ++l) {
    const auto c = lstm_backward_cost(tc_, bm_, layer_input(l), config_.hidden);
    flops += c.flops;
    bytes += c.bytes;
  }
  kernel_work w{.name = "backward", .kind = work_kind::matmul, .flops = flops, .bytes = bytes};
  if (computes_) w.cpu = [this, mb, chunk] {
    maybe_fail();
    backward_math(mb, chunk);
  };
  return w;
}

void lm_stage::maybe_fail() {
  const std::size_t at = fail_at_.load(std::memory_order_relaxed);
  if (at != 0 && ++work_count_ == at)
    throw std::runtime_error("injected device fault in work item " + std::to_string(at) + " on " + dev_.name());
}

kernel_work lm_stage::norm_work() {
  double n = 0;
  for (const auto& name : names_) {
    auto shape = parameter_shape(config_, name);
    double e = 1;
    for (auto d : shape) e *= static_cast<double>(d);
    n += e;
  }
  kernel_work w{.name = "grad_norm", .kind = work_kind::pointwise, .flops = 2 * n, .bytes = 4 * n};
  if (computes_) {
    w.cpu = [this] {
      double sq = 0;
      for (const auto& g : grads_) {
        const float* p = g.data<float>();
        for (std::int64_t i = 0; i < g.numel(); ++i) sq += static_cast<double>(p[i]) * p[i];
      }
      sq_norm_ = sq;
      double loss = 0;
      for (double l : unit_loss_) loss += l;
      loss_sum_ = loss;
    };
  }
  return w;
}

kernel_work lm_stage::update_work(double scale, double lr) {
  double n = 0;
  for (const auto& v : values_) n += static_cast<double>(v.numel());
  kernel_work w{.name = "sgd", .kind = work_kind::pointwise, .flops = 3 * n, .bytes = 12 * n};
  if (computes_) {
    w.cpu = [this, step = static_cast<float>(lr * scale)] {
      for (std::size_t i = 0; i < values_.size(); ++i) {
        float* p = values_[i].data<float>();
        float* g = grads_[i].data<float>();
        for (std::size_t j = 0, n2 = static_cast<std::size_t>(values_[i].numel()); j < n2; ++j) {
          p[j] -= step * g[j];
          g[j] = 0.f;
        }
      }
    };
  }
  return w;
}

kernel_work lm_stage::scale_work(double scale) {
  double n = 0;
  for (const auto& g : grads_) n += static_cast<double>(g.numel());
  kernel_work w{.name = "scale_gradients", .kind = work_kind::pointwise, .flops = n, .bytes = 8 * n};
  if (computes_) {
    w.cpu = [this, f = static_cast<float>(scale)] {
      for (auto& g : grads_) {
        float* p = g.data<float>();
        for (std::int64_t i = 0; i < g.numel(); ++i) p[i] *= f;
      }
    };
  }
  return w;
}

kernel_work lm_stage::zero_grad_work() {
  double n = 0;
  for (const auto& g : grads_) n += static_cast<double>(g.numel());
  kernel_work w{.name = "zero_gradients", .kind = work_kind::pointwise, .flops = 0, .bytes = 4 * n};
  if (computes_) {
    w.cpu = [this] {
      for (auto& g : grads_) std::fill_n(g.data<float>(), g.numel(), 0.f);
    };
  }
  return w;
}

}  // namespace strata::lm
