#pragma once
/// \file
/// Configuration of the LSTM language model and how its layers are split into pipeline stages.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::lm {

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
  double lr = 1.0;                ///< SGD learning rate
  double clip = 5.0;              ///< global-norm gradient clipping (PyTorch clip_grad_norm_)
  std::uint64_t seed = 0;         ///< initialisation seed

  std::size_t micro_batch_size() const noexcept { return batch / micro_batches; }
  std::size_t chunk_steps() const noexcept { return seq / chunks; }
  /// Throws std::invalid_argument with one sentence if a size is zero or does not divide.
  void validate() const;
};

/// The former name, kept for code written against it.
using lm_config = config;

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
