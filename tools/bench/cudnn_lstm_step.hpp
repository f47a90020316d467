#pragma once
// The GPU anchor of strata-bench-lm-gpu: the LSTM LM's training step as PyTorch runs it on a GPU
// (nn.Embedding -> nn.LSTM through cuDNN's RNN API -> decoder and cross-entropy -> backward ->
// clip_grad_norm_ -> SGD), on one CUDA stream. Needs no CUDA or cuDNN header.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/lm/config.hpp"

namespace strata::bench {

/// How the anchor multiplies float32 matrices.
enum class cudnn_math {
  fp32,  ///< LSTM CUDNN_FMA_MATH (PyTorch with torch.backends.cudnn.allow_tf32 = False), decoder fp32
  tf32,  ///< LSTM CUDNN_DEFAULT_MATH (PyTorch's default: TF32 allowed in cuDNN), decoder TF32
};

/// What one anchor step took, from CUDA events on its stream (ms), and what it computed.
struct cudnn_step_result {
  double step_ms = 0;      ///< tokens in, parameters updated, loss and norm back on the host
  double forward_ms = 0;   ///< token copy, zero_grad, embedding, cudnnRNNForward
  double decoder_ms = 0;   ///< decoder + cross-entropy forward and backward
  double backward_ms = 0;  ///< cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8, embedding backward
  double update_ms = 0;    ///< clip_grad_norm, SGD, loss and norm to the host
  double loss = 0;         ///< mean cross-entropy before the update
  double grad_norm = 0;    ///< before clipping
};

/// The LM step on GPU `gpu` with cuDNN for the LSTM stack (CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
/// CUDNN_RNN_ALGO_STANDARD, unidirectional, seq-major unpacked data, zero initial state, as
/// torch.nn.LSTM does) and strata::kernels::cuda for the embedding, the decoder with the loss,
/// the clipping and SGD (the same kernels strata's stages run, so only the LSTM differs).
/// Parameters start as strata::lm::initial_parameter(config, name), so the first step's loss
/// equals lm_pipeline's on the same tokens (up to float rounding).
///
/// Every failing CUDA, cuBLAS or cuDNN call throws std::runtime_error naming the call.
/// One caller at a time.
class cudnn_lm_step {
public:
  cudnn_lm_step(int gpu, const lm::config& config, cudnn_math math);
  ~cudnn_lm_step();
  cudnn_lm_step(const cudnn_lm_step&) = delete;
  cudnn_lm_step& operator=(const cudnn_lm_step&) = delete;

  /// One training step on tokens and targets, both [seq, batch] row-major; waits for it.
  cudnn_step_result step(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets);

  /// Bytes cuDNN asked for: weight space, workspace and reserve space.
  std::size_t weight_space_bytes() const noexcept;
  std::size_t workspace_bytes() const noexcept;
  std::size_t reserve_bytes() const noexcept;

private:
  struct state;
  std::unique_ptr<state> state_;
};

/// The cuDNN library's version as "9.19.0" (cudnnGetVersion), and the GPU's name.
std::string cudnn_version();
std::string gpu_name(int gpu);

/// The number of visible CUDA GPUs; 0 with the reason in `why` when there is none (e.g.
/// "cudaGetDeviceCount returned cudaErrorNoDevice (no CUDA-capable device is detected)").
int visible_gpus(std::string& why);

}  // namespace strata::bench
