#include "stage.hpp"

#include <algorithm>
#include <stdexcept>

#include "ops.hpp"
#include "strata/kernels/costs.hpp"

namespace strata::lm {

namespace k = strata::kernels;
using ops::attach;
using ops::fp;
using ops::ip;

tensor lm_stage::floats(std::size_t n, const stream& s) {
  return tensor::empty({static_cast<std::int64_t>(n)}, dtype::float32, dev_, s);
}

double* lm_stage::scalar_slot(std::size_t i) const { return reinterpret_cast<double*>(fp(scalars_)) + i; }

lm_stage::lm_stage(const lm::config& config, stage_span span, device dev, const stream& s, bool carry_state)
    : config_(config), span_(span), dev_(std::move(dev)), carry_state_(carry_state) {
  config_.validate();
#if !STRATA_HAS_CUDA
  if (dev_.kind() == device_kind::cuda)
    throw std::invalid_argument("LSTM pipeline stages on " + dev_.name() + " need strata built with CUDA (STRATA_CUDA=ON)");
#endif
  computes_ = dev_.kind() != device_kind::sim;
  bm_ = config_.micro_batch_size();
  tc_ = config_.chunk_steps();
  const std::size_t units = config_.micro_batches * config_.chunks;
  input_.assign(units, nullptr);
  dout_.assign(units, nullptr);
  stream str = s;
  make_parameters(str);
  if (!computes_) return;  // sim: costs only, no activation memory
  make_activations(str);
  make_carried_state(str);
  make_workspaces(str);
  str.synchronize();  // the initial values are in place before anyone (the store) reads them
}

void lm_stage::make_parameters(stream& s) {
  std::vector<std::vector<std::size_t>> shapes;
  for (auto& p : parameter_layout(config_, span_)) {
    if (p.name == "embedding.weight") emb_index_ = names_.size();
    if (p.name == "decoder.weight") dec_w_index_ = names_.size();
    if (p.name == "decoder.bias") dec_b_index_ = names_.size();
    if (p.name.rfind("lstm.weight_ih_l", 0) == 0) layer_index_.push_back(names_.size());
    shapes.push_back(std::move(p.shape));
    names_.push_back(std::move(p.name));
  }
  for (std::size_t i = 0; i < names_.size(); ++i) {
    const auto& name = names_[i];
    std::vector<std::int64_t> shape;
    for (auto d : shapes[i]) shape.push_back(static_cast<std::int64_t>(d));
    values_.push_back(tensor::empty(shape, dtype::float32, dev_, s));
    grads_.push_back(tensor::empty(shape, dtype::float32, dev_, s));
    if (computes_) {
      auto init = initial_parameter(config_, name);
      s.copy_from_host(values_.back().storage(), init.data(), init.size() * sizeof(float));
      std::vector<float> zeros(init.size(), 0.f);
      s.copy_from_host(grads_.back().storage(), zeros.data(), zeros.size() * sizeof(float));
    }
  }
}

void lm_stage::make_activations(stream& s) {
  const std::size_t H = config_.hidden, M = config_.micro_batches, units = M * config_.chunks;
  const std::size_t steps_rows = tc_ * bm_;
  for (std::size_t mb = 0; mb < M; ++mb) {
    const auto n = static_cast<std::int64_t>(config_.seq * bm_);
    if (span_.embedding) tokens_.push_back(tensor::empty({n}, dtype::int32, dev_, s));
    if (span_.decoder) targets_.push_back(tensor::empty({n}, dtype::int32, dev_, s));
  }
  emb_out_.resize(units);
  y_.resize(units);
  reserve_.resize(units);
  h_.resize(units);
  c_.resize(units);
  dtop_.resize(units);
  dx_out_.resize(units);
  for (std::size_t u = 0; u < units; ++u) {
    if (span_.embedding) emb_out_[u] = floats(steps_rows * config_.embed, s);
    for (std::size_t l = span_.first; l < span_.last; ++l) {
      y_[u].push_back(floats(steps_rows * H, s));
      reserve_[u].push_back(floats(k::lstm_reserve_size({tc_, bm_, layer_input(l), H}), s));
      h_[u].push_back(floats(bm_ * H, s));
      c_[u].push_back(floats(bm_ * H, s));
    }
    if (span_.decoder) dtop_[u] = floats(steps_rows * H, s);
    if (!span_.embedding) dx_out_[u] = floats(steps_rows * layer_input(span_.first), s);
  }
}

void lm_stage::make_carried_state(stream& s) {
  const std::size_t H = config_.hidden, M = config_.micro_batches, nl = span_.last - span_.first;
  carry_.resize(M * nl);
  for (auto& c : carry_)
    for (int i = 0; i < 4; ++i) c.push_back(floats(bm_ * H, s));
  if (!carry_state_) return;
  state_h_.resize(M);
  state_c_.resize(M);
  std::vector<float> zeros(bm_ * H, 0.f);
  for (std::size_t mb = 0; mb < M; ++mb)
    for (std::size_t kl = 0; kl < nl; ++kl) {
      state_h_[mb].push_back(floats(bm_ * H, s));
      state_c_[mb].push_back(floats(bm_ * H, s));
      s.copy_from_host(state_h_[mb].back().storage(), zeros.data(), zeros.size() * sizeof(float));
      s.copy_from_host(state_c_[mb].back().storage(), zeros.data(), zeros.size() * sizeof(float));
    }
}

void lm_stage::make_workspaces(stream& s) {
  const std::size_t H = config_.hidden, units = config_.micro_batches * config_.chunks;
  const std::size_t max_in = std::max(config_.embed, H);
  const std::size_t steps_rows = tc_ * bm_;
  dx_a_ = floats(steps_rows * max_in, s);
  dx_b_ = floats(steps_rows * max_in, s);
  workspace_ = floats(k::lstm_backward_workspace_size({tc_, bm_, max_in, H}), s);
  const bool gpu = dev_.kind() == device_kind::cuda;
  if (span_.decoder) {
    const k::linear_cross_entropy_dims d{steps_rows, H, config_.vocab};
    const std::size_t block = std::min<std::size_t>(steps_rows, 256);
    ce_workspace_ = floats(gpu ? k::cuda_ops::linear_cross_entropy_workspace(d, block)
                               : k::cpu_ops::linear_cross_entropy_workspace(d, block),
                           s);
  }
  if (gpu) norm_workspace_ = floats(k::cuda_ops::global_norm_workspace(grads_.size()), s);
  scalars_ = floats(2 * (units + 1), s);
  host_scalars_.assign(units + 1, 0.0);
  std::vector<float> zeros(2 * (units + 1), 0.f);
  s.copy_from_host(scalars_.storage(), zeros.data(), zeros.size() * sizeof(float));
}

std::vector<float> lm_stage::read_value(std::size_t i, const stream& s) const {
  if (!computes_) return {};
  return values_[i].to_host<float>(s);
}

std::vector<float> lm_stage::read_state(const stream& s) const {
  std::vector<float> out;
  if (!computes_ || !carry_state_) return out;
  const std::size_t n = bm_ * config_.hidden;
  for (std::size_t kl = 0; kl < span_.last - span_.first; ++kl)
    for (const auto* part : {&state_h_, &state_c_})
      for (std::size_t mb = 0; mb < part->size(); ++mb) {
        auto v = (*part)[mb][kl].to_host<float>(s);
        out.insert(out.end(), v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
      }
  return out;
}

void lm_stage::write_state(std::span<const float> values, const stream& s) {
  if (!computes_ || !carry_state_) return;
  const std::size_t n = bm_ * config_.hidden, layers = span_.last - span_.first;
  if (values.size() != 2 * layers * state_h_.size() * n)
    throw std::invalid_argument("the carried state of this stage has " + std::to_string(2 * layers * state_h_.size() * n) +
                                " values, not " + std::to_string(values.size()));
  stream str = s;
  std::size_t at = 0;
  for (std::size_t kl = 0; kl < layers; ++kl)
    for (auto* part : {&state_h_, &state_c_})
      for (std::size_t mb = 0; mb < part->size(); ++mb, at += n)
        str.copy_from_host((*part)[mb][kl].storage(), values.data() + at, n * sizeof(float));
}

void lm_stage::write_value(std::size_t i, std::span<const float> values, const stream& s) {
  if (!computes_) return;
  if (values.size() != count(i))
    throw std::invalid_argument("parameter '" + names_[i] + "' has " + std::to_string(values.size()) +
                                " values; the model expects " + std::to_string(count(i)));
  stream str = s;
  str.copy_from_host(values_[i].storage(), values.data(), values.size_bytes());
}

void lm_stage::set_tokens(std::size_t mb, const std::vector<std::int32_t>& tokens, const stream& s) {
  if (!computes_ || !span_.embedding) return;
  stream str = s;
  str.copy_from_host(tokens_[mb].storage(), tokens.data(), tokens.size() * sizeof(std::int32_t));
}

void lm_stage::set_targets(std::size_t mb, const std::vector<std::int32_t>& targets, const stream& s) {
  if (!computes_ || !span_.decoder) return;
  stream str = s;
  str.copy_from_host(targets_[mb].storage(), targets.data(), targets.size() * sizeof(std::int32_t));
}

template <class Ops>
void lm_stage::drop(const Ops& ops, std::uint64_t step, std::size_t site, std::size_t mb, std::size_t chunk,
                    std::size_t dim, const float* x, float* y) const {
  const k::dropout_block block{tc_, bm_, dim, chunk * tc_, mb * bm_, config_.batch};
  ops.dropout(block, {k::dropout_key(config_.seed, step, site), static_cast<float>(config_.dropout)}, x, y);
}

template <class Ops>
void lm_stage::forward_math(const Ops& ops, std::size_t mb, std::size_t chunk, std::uint64_t step) {
  const std::size_t u = unit(mb, chunk), t0 = chunk * tc_, H = config_.hidden;
  const bool dropping = config_.dropout > 0;
  const float* x = nullptr;
  if (span_.embedding) {
    ops.embedding_forward(config_.vocab, config_.embed, fp(values_[emb_index_]), tc_ * bm_,
                          ip(tokens_[mb]) + t0 * bm_, fp(emb_out_[u]));
    // Dropped in place: the embedding's backward reads only the ids and the gradient.
    if (dropping) drop(ops, step, 0, mb, chunk, config_.embed, fp(emb_out_[u]), fp(emb_out_[u]));
    x = fp(emb_out_[u]);
  } else {
    x = input_[u];
  }
  for (std::size_t kl = 0; kl < span_.last - span_.first; ++kl) {
    const std::size_t l = span_.first + kl, p = layer_index_[kl];
    const float* h_in = nullptr;  // chunk 0: zeros, or the state carried from the previous step
    const float* c_in = nullptr;
    if (chunk > 0) {
      h_in = fp(h_[unit(mb, chunk - 1)][kl]);
      c_in = fp(c_[unit(mb, chunk - 1)][kl]);
    } else if (carry_state_) {
      h_in = fp(state_h_[mb][kl]);
      c_in = fp(state_c_[mb][kl]);
    }
    ops.lstm_forward({tc_, bm_, layer_input(l), H},
                     {fp(values_[p]), fp(values_[p + 1]), fp(values_[p + 2]), fp(values_[p + 3])},
                     {x, h_in, c_in, fp(y_[u][kl]), fp(h_[u][kl]), fp(c_[u][kl]), fp(reserve_[u][kl])});
    // The LSTM's backward reads its reserve, not y, so the sum may overwrite y.
    if (config_.residual_layer(l)) ops.axpy(tc_ * bm_ * H, 1.f, x, fp(y_[u][kl]));
    // The output is the next layer's (or the decoder's) dropped input, here or on the next stage.
    if (dropping) drop(ops, step, l + 1, mb, chunk, H, fp(y_[u][kl]), fp(y_[u][kl]));
    x = fp(y_[u][kl]);
  }
  if (span_.decoder) {
    k::linear_cross_entropy_inputs in{x, fp(values_[dec_w_index_]), fp(values_[dec_b_index_]),
                                      ip(targets_[mb]) + t0 * bm_, k::loss_reduction::sum};
    ops.linear_cross_entropy({tc_ * bm_, H, config_.vocab}, in, {fp(dtop_[u]), fp(grads_[dec_w_index_]), fp(grads_[dec_b_index_])},
                fp(ce_workspace_), static_cast<std::size_t>(ce_workspace_.numel()), scalar_slot(u));
  }
}

template <class Ops>
void lm_stage::backward_math(const Ops& ops, std::size_t mb, std::size_t chunk, std::uint64_t step) {
  const std::size_t u = unit(mb, chunk), t0 = chunk * tc_, H = config_.hidden, nl = span_.last - span_.first;
  const bool dropping = config_.dropout > 0;
  const float* dy = span_.decoder ? fp(dtop_[u]) : dout_[u];
  float* scratch[2] = {fp(dx_a_), fp(dx_b_)};
  if (dropping) {  // the gradient of the top layer's dropped output; the layer writes scratch[(nl-1) % 2]
    drop(ops, step, span_.last, mb, chunk, H, dy, scratch[nl % 2]);
    dy = scratch[nl % 2];
  }
  for (std::size_t kk = nl; kk-- > 0;) {
    const std::size_t l = span_.first + kk, p = layer_index_[kk];
    const float* x = kk > 0 ? fp(y_[u][kk - 1]) : (span_.embedding ? fp(emb_out_[u]) : input_[u]);
    float* dx = (kk == 0 && !span_.embedding) ? fp(dx_out_[u]) : scratch[kk % 2];
    auto& carry = carry_[mb * nl + kk];
    const bool last_chunk = chunk + 1 == config_.chunks;
    const std::size_t read = (chunk + 1) % 2, write = chunk % 2;
    ops.lstm_backward({tc_, bm_, layer_input(l), H},
                      {fp(values_[p]), fp(values_[p + 1]), fp(values_[p + 2]), fp(values_[p + 3])},
                      {x, fp(reserve_[u][kk]), dy, last_chunk ? nullptr : fp(carry[read]),
                       last_chunk ? nullptr : fp(carry[2 + read]), dx, chunk == 0 ? nullptr : fp(carry[write]),
                       chunk == 0 ? nullptr : fp(carry[2 + write]), fp(workspace_)},
                      {fp(grads_[p]), fp(grads_[p + 1]), fp(grads_[p + 2]), fp(grads_[p + 3])});
    if (config_.residual_layer(l)) ops.axpy(tc_ * bm_ * H, 1.f, dy, dx);  // the skip's gradient
    // dx is the gradient of the dropped input; the previous stage drops its own output's.
    if (dropping && (kk > 0 || span_.embedding)) drop(ops, step, l, mb, chunk, layer_input(l), dx, dx);
    dy = dx;
  }
  if (span_.embedding)
    ops.embedding_backward(config_.vocab, config_.embed, tc_ * bm_, ip(tokens_[mb]) + t0 * bm_, dy,
                           fp(grads_[emb_index_]));
}

template <class Ops>
void lm_stage::norm_math(const Ops& ops) {
  std::vector<std::span<const float>> spans;
  for (const auto& g : grads_) spans.emplace_back(fp(g), static_cast<std::size_t>(g.numel()));
  const std::size_t units = config_.micro_batches * config_.chunks;
  ops.global_norm(spans, norm_workspace_.valid() ? fp(norm_workspace_) : nullptr,
                  norm_workspace_.valid() ? static_cast<std::size_t>(norm_workspace_.numel()) : 0,
                  scalar_slot(units));
  // Every forward of the step is done: keep where each micro-batch's columns ended.
  for (std::size_t mb = 0; mb < state_h_.size(); ++mb)
    for (std::size_t kl = 0; kl < state_h_[mb].size(); ++kl) {
      const std::size_t last = unit(mb, config_.chunks - 1);
      ops.copy(bm_ * config_.hidden, fp(h_[last][kl]), fp(state_h_[mb][kl]));
      ops.copy(bm_ * config_.hidden, fp(c_[last][kl]), fp(state_c_[mb][kl]));
    }
}

template <class Ops>
void lm_stage::zero_state_math(const Ops& ops) {
  for (std::size_t mb = 0; mb < state_h_.size(); ++mb)
    for (std::size_t kl = 0; kl < state_h_[mb].size(); ++kl) {
      ops.fill(bm_ * config_.hidden, 0.f, fp(state_h_[mb][kl]));
      ops.fill(bm_ * config_.hidden, 0.f, fp(state_c_[mb][kl]));
    }
}

kernel_work lm_stage::forward_work(std::size_t mb, std::size_t chunk) {
  k::work_cost cost;
  for (std::size_t l = span_.first; l < span_.last; ++l) cost += k::lstm_forward_cost({tc_, bm_, layer_input(l), config_.hidden});
  if (span_.decoder) cost += k::decoder_cost(tc_ * bm_, config_.hidden, config_.vocab);
  kernel_work w{.name = "forward", .kind = work_kind::matmul, .flops = cost.flops, .bytes = cost.bytes};
  auto run = [this, mb, chunk, step = step_](const auto& ops) {
    maybe_fail();
    forward_math(ops, mb, chunk, step);
  };
  attach(w, dev_.kind(), config_.precision, run);
  return w;
}

kernel_work lm_stage::backward_work(std::size_t mb, std::size_t chunk) {
  k::work_cost cost;
  for (std::size_t l = span_.first; l < span_.last; ++l) cost += k::lstm_backward_cost({tc_, bm_, layer_input(l), config_.hidden});
  kernel_work w{.name = "backward", .kind = work_kind::matmul, .flops = cost.flops, .bytes = cost.bytes};
  auto run = [this, mb, chunk, step = step_](const auto& ops) {
    maybe_fail();
    backward_math(ops, mb, chunk, step);
  };
  attach(w, dev_.kind(), config_.precision, run);
  return w;
}

void lm_stage::maybe_fail() {
  const std::size_t at = fail_at_.load(std::memory_order_relaxed);
  if (at != 0 && ++work_count_ == at)
    throw std::runtime_error("injected device fault in work item " + std::to_string(at) + " on " + dev_.name());
}

void lm_stage::enqueue_norm(const stream& s) {
  double n = 0;
  for (const auto& g : grads_) n += static_cast<double>(g.numel());
  kernel_work w{.name = "grad_norm", .kind = work_kind::pointwise, .flops = 2 * n, .bytes = 4 * n};
  auto run = [this](const auto& ops) { norm_math(ops); };
  attach(w, dev_.kind(), config_.precision, run);
  stream str = s;
  str.launch(std::move(w));
  if (dev_.kind() == device_kind::cuda)
    str.copy_to_host(host_scalars_.data(), scalars_.storage(), host_scalars_.size() * sizeof(double));
}

double lm_stage::sq_norm() const noexcept {
  if (!computes_) return 0;
  const std::size_t units = config_.micro_batches * config_.chunks;
  const double norm = dev_.kind() == device_kind::cuda ? host_scalars_[units] : *scalar_slot(units);
  return norm * norm;
}

double lm_stage::loss_sum() const noexcept {
  if (!computes_ || !span_.decoder) return 0;
  const std::size_t units = config_.micro_batches * config_.chunks;
  double loss = 0;
  for (std::size_t u = 0; u < units; ++u) loss += dev_.kind() == device_kind::cuda ? host_scalars_[u] : *scalar_slot(u);
  return loss;
}

kernel_work lm_stage::scale_work(double scale) {
  double n = 0;
  for (const auto& g : grads_) n += static_cast<double>(g.numel());
  kernel_work w{.name = "scale_gradients", .kind = work_kind::pointwise, .flops = n, .bytes = 8 * n};
  auto run = [this, f = static_cast<float>(scale)](const auto& ops) {
    for (auto& g : grads_) ops.scale(static_cast<std::size_t>(g.numel()), f, fp(g));
  };
  attach(w, dev_.kind(), config_.precision, run);
  return w;
}

kernel_work lm_stage::zero_state_work() {
  const double n = 2.0 * static_cast<double>(config_.micro_batches * (span_.last - span_.first) * bm_ * config_.hidden);
  kernel_work w{.name = "zero_state", .kind = work_kind::pointwise, .flops = 0, .bytes = 4 * n};
  auto run = [this](const auto& ops) { zero_state_math(ops); };
  attach(w, dev_.kind(), config_.precision, run);
  return w;
}

kernel_work lm_stage::zero_grad_work() {
  double n = 0;
  for (const auto& g : grads_) n += static_cast<double>(g.numel());
  kernel_work w{.name = "zero_gradients", .kind = work_kind::pointwise, .flops = 0, .bytes = 4 * n};
  auto run = [this](const auto& ops) {
    for (auto& g : grads_) ops.fill(static_cast<std::size_t>(g.numel()), 0.f, fp(g));
  };
  attach(w, dev_.kind(), config_.precision, run);
  return w;
}

}  // namespace strata::lm
