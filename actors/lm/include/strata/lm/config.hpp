#pragma once
/// \file
/// Configuration of the LSTM language model and how its layers are split into pipeline stages.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::lm {

/// The update rule the KVStore applies (torch.optim's semantics, strata::kernels' optimizers).
enum class optimizer_kind : std::uint8_t {
  sgd,       ///< plain SGD (weight decay allowed, no momentum)
  momentum,  ///< SGD with heavy-ball momentum
  nesterov,  ///< SGD with Nesterov momentum
  adam,      ///< Adam (weight decay added to the gradient, as torch.optim.Adam)
  adamw,     ///< AdamW (decoupled weight decay)
};
/// "sgd", "momentum", "nesterov", "adam", "adamw".
const char* to_string(optimizer_kind kind) noexcept;
/// The kind named `name`; throws std::invalid_argument with one sentence for another name.
optimizer_kind parse_optimizer(const std::string& name);

/// Math of the matrix products on cuda stages (LSTM gates, their gradients, the decoder); the
/// parameters, activations, gradients and the KVStore's copies stay float32 whatever the choice.
enum class precision {
  fp32,  ///< IEEE float32 (the default; cpu stages always compute so)
  tf32,  ///< tensor cores, inputs rounded to TF32 (10-bit mantissa), float32 accumulation
  bf16,  ///< tensor cores, inputs rounded to bfloat16 (7-bit mantissa), float32 accumulation
};
/// "fp32", "tf32", "bf16".
const char* to_string(precision p) noexcept;
/// The precision named `name`; throws std::invalid_argument with one sentence for another name.
precision parse_precision(const std::string& name);

/// Sizes and training settings of the LSTM language model (defaults: the seed configuration).
struct config {
  std::size_t vocab = 10000;      ///< V: embedding rows and decoder classes
  std::size_t embed = 200;        ///< E: embedding width (layer 0's input)
  std::size_t layers = 8;         ///< L: stacked LSTM layers
  std::size_t hidden = 400;       ///< H
  std::size_t batch = 20;         ///< B: global batch (columns of the token matrix)
  std::size_t seq = 35;           ///< T: timesteps per step (tokens are [T, B], seq-major)
  std::size_t micro_batches = 1;  ///< M: B is split into M micro-batches of B/M columns
  std::size_t chunks = 1;         ///< C: each micro-batch's T is split into C chunks (wavefront)
  double lr = 1.0;                ///< learning rate (the base rate of a schedule)
  double clip = 5.0;              ///< global-norm gradient clipping (PyTorch clip_grad_norm_)
  std::uint64_t seed = 0;         ///< initialisation seed
  optimizer_kind optimizer = optimizer_kind::sgd;  ///< the update rule the KVStore applies
  double momentum = 0.9;          ///< momentum and nesterov: the momentum factor
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  ///< adam and adamw
  double weight_decay = 0.0;      ///< L2 penalty (adamw: decoupled)
  /// Residual connections from the third layer on: layer l >= 2 outputs LSTM_l(x) + x, its input
  /// x being layer l-1's output (as deep translation models stack LSTMs). The recurrent state
  /// of a layer is its LSTM's own (h, c), without the residual.
  bool residual = false;
  /// Dropout probability in training, in [0, 1): on the embedding output, between LSTM layers
  /// (as nn.LSTM's `dropout`) and on the decoder input, so every LSTM layer's input and the
  /// decoder's input are dropped (a residual layer adds its dropped input). The masks are
  /// kernels::dropout_key(seed, step, site) with site 0 the embedding output and site l + 1
  /// LSTM layer l's output, over the step's [seq, batch, width] activation: the same whatever
  /// the pipeline split, micro-batches or threads. Evaluation never drops.
  double dropout = 0.0;
  /// Matrix-product math on cuda stages (cpu stages compute in float32 whatever it says; the
  /// trainer refuses tf32 and bf16 without a cuda stage). docs/lstm_lm.md, "Precision on GPUs".
  lm::precision precision = lm::precision::fp32;

  std::size_t micro_batch_size() const noexcept { return batch / micro_batches; }
  std::size_t chunk_steps() const noexcept { return seq / chunks; }
  /// True when layer `layer` adds its input to its output (residual and layer >= 2).
  bool residual_layer(std::size_t layer) const noexcept { return residual && layer >= 2; }
  /// Throws std::invalid_argument with one sentence if a size is zero or does not divide, an
  /// optimizer hyper-parameter is negative or not a number (betas must lie in [0, 1), eps > 0)
  /// or dropout lies outside [0, 1).
  void validate() const;
};

/// The layers one pipeline stage owns: LSTM layers [first, last), plus the embedding (first
/// stage) and the decoder with the loss (last stage).
struct stage_span {
  std::size_t first = 0;
  std::size_t last = 0;
  bool embedding = false;
  bool decoder = false;
};

/// Contiguous LSTM layer ranges per stage (`counts[s]` layers on stage s), embedding on the first
/// stage and decoder on the last. Throws std::invalid_argument if the counts do not cover
/// `layers` exactly or a stage gets none.
std::vector<stage_span> make_spans(std::size_t layers, const std::vector<std::size_t>& counts);

/// One parameter tensor of the model: PyTorch's name and shape.
struct parameter_spec {
  std::string name;                ///< e.g. "lstm.weight_ih_l3"
  std::vector<std::size_t> shape;  ///< e.g. {1600, 400}
  /// Number of values (the product of the shape).
  std::size_t numel() const noexcept;
};

/// A named parameter, PyTorch's name and row-major values.
struct named_parameter {
  std::string name;
  std::vector<float> values;
};

/// The model's parameters, the one definition every user of the model (pipeline stages,
/// inference, checkpoints, the kernels benchmark) takes its names, order and shapes from:
/// PyTorch's named_parameters() order of nn.Embedding(V, E) -> nn.LSTM(E, H, L) ->
/// nn.Linear(H, V): embedding.weight [V, E]; per layer l lstm.weight_ih_l<l> [4H, in],
/// lstm.weight_hh_l<l> [4H, H], lstm.bias_ih_l<l> [4H], lstm.bias_hh_l<l> [4H] (in = E for layer
/// 0, else H); decoder.weight [V, H], decoder.bias [V].
std::vector<parameter_spec> parameter_layout(const config& config);
/// The part of parameter_layout that the layers of `span` own, in the same order.
std::vector<parameter_spec> parameter_layout(const config& config, const stage_span& span);

/// The four parameter names of LSTM layer `layer`: weight_ih, weight_hh, bias_ih, bias_hh.
std::vector<std::string> lstm_parameter_names(std::size_t layer);

/// Names of every parameter in parameter_layout's order.
std::vector<std::string> parameter_names(const config& config);
/// Shape of parameter `name` (PyTorch's). Throws std::invalid_argument for a name the model
/// does not have.
std::vector<std::size_t> parameter_shape(const config& config, const std::string& name);

/// Deterministic initial values of parameter `name`, independent of how layers are split:
/// embedding ~ N(0, 1); every other weight and bias ~ U(-1/sqrt(H), 1/sqrt(H)) (PyTorch's
/// defaults), from a generator seeded by `seed` and the name.
std::vector<float> initial_parameter(const config& config, const std::string& name);

}  // namespace strata::lm
