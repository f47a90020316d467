#include "lm_step.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>

#include "strata/kernels/cpu.hpp"

namespace strata::lm {
namespace {

namespace kcpu = strata::kernels::cpu;
using strata::kernels::lstm_dims;

constexpr std::size_t align_floats = 16;  // 64 bytes

std::size_t round_up(std::size_t n) noexcept { return (n + align_floats - 1) / align_floats * align_floats; }

lstm_dims layer_dims(const config& c, std::size_t l) noexcept {
  return {.steps = c.seq, .batch = c.batch, .input = l == 0 ? c.embed : c.hidden, .hidden = c.hidden};
}

class phase_timer {
 public:
  explicit phase_timer(double& into) : into_(into), start_(std::chrono::steady_clock::now()) {}
  ~phase_timer() {
    into_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  phase_timer(const phase_timer&) = delete;
  phase_timer& operator=(const phase_timer&) = delete;

 private:
  double& into_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

struct lstm_lm::layer_buffers {
  lstm_dims dims;
  std::size_t w_ih = 0, w_hh = 0, b_ih = 0, b_hh = 0;  // indices into params_
  float* y = nullptr;                                   // [T, B, H]
  float* reserve = nullptr;                             // lstm_reserve_size(dims)
};

void lstm_lm::arena_deleter::operator()(float* p) const noexcept {
  ::operator delete[](p, std::align_val_t{64});
}

lstm_lm::lstm_lm(const lm::config& config) : config_(config) {
  const auto& c = config_;
  if (c.vocab == 0 || c.embed == 0 || c.layers == 0 || c.hidden == 0 || c.batch == 0 || c.seq == 0) {
    throw std::invalid_argument("lstm_lm: vocab, embed, layers, hidden, batch and seq must all be at least 1.");
  }
  if (!(c.clip >= 0.0) || !(c.lr >= 0.0)) {
    throw std::invalid_argument("lstm_lm: clip and lr must be non-negative numbers.");
  }
  carve();
  initialise();
}

lstm_lm::~lstm_lm() = default;

// Lays every buffer out in one 64-byte-aligned arena: first the parameters, then the
// gradients in the same layout, then activations, reserves and workspaces.
void lstm_lm::carve() {
  const auto& c = config_;
  const std::size_t tb = c.seq * c.batch;

  const std::vector<parameter_spec> specs = parameter_layout(c);

  std::vector<std::size_t> offsets;
  std::size_t block = 0;
  for (const auto& s : specs) {
    offsets.push_back(block);
    block += round_up(s.numel());
  }

  std::size_t total = 2 * block;
  auto reserve_region = [&](std::size_t n) {
    const std::size_t at = total;
    total += round_up(n);
    return at;
  };
  const std::size_t embedded_at = reserve_region(tb * c.embed);
  const std::size_t dtop_at = reserve_region(tb * c.hidden);
  const std::size_t dx_at[2] = {reserve_region(tb * std::max(c.embed, c.hidden)),
                                reserve_region(tb * std::max(c.embed, c.hidden))};
  std::vector<std::size_t> y_at, reserve_at;
  lstm_workspace_size_ = 0;
  for (std::size_t l = 0; l < c.layers; ++l) {
    const lstm_dims d = layer_dims(c, l);
    y_at.push_back(reserve_region(tb * c.hidden));
    reserve_at.push_back(reserve_region(strata::kernels::lstm_reserve_size(d)));
    lstm_workspace_size_ = std::max(lstm_workspace_size_, strata::kernels::lstm_backward_workspace_size(d));
  }
  const std::size_t lstm_ws_at = reserve_region(lstm_workspace_size_);
  // The whole [T*B, V] logits block: one GEMM per decoder product (docs/kernels.md: fastest).
  decoder_workspace_size_ = strata::kernels::linear_cross_entropy_workspace_size({tb, c.hidden, c.vocab}, tb);
  const std::size_t dec_ws_at = reserve_region(decoder_workspace_size_);

  arena_floats_ = total;
  arena_.reset(static_cast<float*>(::operator new[](total * sizeof(float), std::align_val_t{64})));
  float* base = arena_.get();
  // Zero everything once: padding between tensors then stays zero in both blocks, so the
  // block-wide norm and update see exactly the tensors' elements. Touching every page here also
  // keeps first-touch page faults out of the timed steps.
  std::memset(base, 0, total * sizeof(float));

  param_block_ = {base, block};
  grad_block_ = {base + block, block};
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::size_t n = specs[i].numel();
    params_.push_back({specs[i], {base + offsets[i], n}, {base + block + offsets[i], n}});
  }
  embedded_ = base + embedded_at;
  dtop_ = base + dtop_at;
  dx_[0] = base + dx_at[0];
  dx_[1] = base + dx_at[1];
  lstm_workspace_ = base + lstm_ws_at;
  decoder_workspace_ = base + dec_ws_at;
  for (std::size_t l = 0; l < c.layers; ++l) {
    layer_buffers lb;
    lb.dims = layer_dims(c, l);
    lb.w_ih = 1 + 4 * l;
    lb.w_hh = lb.w_ih + 1;
    lb.b_ih = lb.w_ih + 2;
    lb.b_hh = lb.w_ih + 3;
    lb.y = base + y_at[l];
    lb.reserve = base + reserve_at[l];
    layers_.push_back(lb);
  }
}

void lstm_lm::initialise() {
  for (auto& p : params_) {
    const auto values = initial_parameter(config_, p.name);
    std::copy(values.begin(), values.end(), p.value.begin());
  }
}

const lm_parameter& lstm_lm::parameter(const std::string& name) const {
  for (const auto& p : params_) {
    if (p.name == name) return p;
  }
  throw std::out_of_range("lstm_lm: no parameter called '" + name + "'.");
}

std::size_t lstm_lm::parameter_count() const noexcept {
  std::size_t n = 0;
  for (const auto& p : params_) n += p.value.size();
  return n;
}

double lstm_lm::forward_backward(const std::int32_t* tokens, const std::int32_t* targets) {
  const auto& c = config_;
  const std::size_t tb = c.seq * c.batch;
  times_ = {};
  {
    phase_timer t(times_.zero_grad);
    kcpu::fill(grad_block_.size(), 0.0f, grad_block_.data());
  }
  const lm_parameter& emb = params_.front();
  const lm_parameter& dec_w = params_[params_.size() - 2];
  const lm_parameter& dec_b = params_.back();
  {
    phase_timer t(times_.embedding_forward);
    kcpu::embedding_forward(c.vocab, c.embed, emb.value.data(), tb, tokens, embedded_);
  }
  auto weights = [&](const layer_buffers& lb) {
    return strata::kernels::lstm_weights{params_[lb.w_ih].value.data(), params_[lb.w_hh].value.data(),
                                         params_[lb.b_ih].value.data(), params_[lb.b_hh].value.data()};
  };
  {
    phase_timer t(times_.lstm_forward);
    const float* x = embedded_;
    for (auto& lb : layers_) {
      kcpu::lstm_forward(lb.dims, weights(lb), {.x = x, .y = lb.y, .reserve = lb.reserve});
      x = lb.y;
    }
  }
  double loss = 0;
  {
    phase_timer t(times_.decoder);
    loss = kcpu::linear_cross_entropy_forward_backward(
        {tb, c.hidden, c.vocab},
        {.h = layers_.back().y, .w = dec_w.value.data(), .b = dec_b.value.data(), .targets = targets,
         .reduction = strata::kernels::loss_reduction::mean},
        {.dh = dtop_, .dw = dec_w.grad.data(), .db = dec_b.grad.data()}, decoder_workspace_,
        decoder_workspace_size_);
  }
  const float* dy = dtop_;
  {
    phase_timer t(times_.lstm_backward);
    for (std::size_t l = layers_.size(); l-- > 0;) {
      const layer_buffers& lb = layers_[l];
      float* dx = dx_[l % 2];
      kcpu::lstm_backward(lb.dims, weights(lb),
                          {.x = l == 0 ? embedded_ : layers_[l - 1].y, .reserve = lb.reserve, .dy = dy,
                           .dx = dx, .workspace = lstm_workspace_},
                          {params_[lb.w_ih].grad.data(), params_[lb.w_hh].grad.data(),
                           params_[lb.b_ih].grad.data(), params_[lb.b_hh].grad.data()});
      dy = dx;
    }
  }
  {
    phase_timer t(times_.embedding_backward);
    kcpu::embedding_backward(c.vocab, c.embed, tb, tokens, dy, emb.grad.data());
  }
  return loss;
}

double lstm_lm::clip() {
  phase_timer t(times_.clip);
  const std::span<float> all[] = {grad_block_};
  grad_norm_ = kcpu::clip_grad_norm(all, config_.clip);
  return grad_norm_;
}

void lstm_lm::sgd() {
  phase_timer t(times_.sgd);
  kcpu::sgd_step(param_block_.size(), param_block_.data(), grad_block_.data(), nullptr, {.lr = config_.lr});
}

float lstm_lm::step(const std::int32_t* tokens, const std::int32_t* targets) {
  const double loss = forward_backward(tokens, targets);
  clip();
  sgd();
  return static_cast<float>(loss);
}

}  // namespace strata::lm
