// The cuDNN anchor of strata-bench-lm-gpu: the LM training step as PyTorch runs it on a GPU.
// What PyTorch 2.x does for nn.LSTM on CUDA (aten/src/ATen/native/cudnn/RNN.cpp with the v8 RNN
// API) and what is done here: cudnnSetRNNDescriptor_v8(CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM,
// CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, float data and math precision,
// math type CUDNN_DEFAULT_MATH when TF32 is allowed (PyTorch's default) else CUDNN_FMA_MATH,
// projSize = hidden, a no-dropout descriptor, CUDNN_RNN_PADDED_IO_ENABLED for unpacked input);
// CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED data descriptors; zero hx/cx; the backward as
// cudnnRNNBackwardData_v8 then cudnnRNNBackwardWeights_v8 (CUDNN_WGRAD_MODE_ADD into a zeroed
// gradient space).

#include "cudnn_lstm_step.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/kernels/cuda.hpp"

namespace strata::bench {
namespace {

namespace kc = strata::kernels::cuda;

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void check(cudnnStatus_t e, const char* call) {
  if (e != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(call) + " failed: " + cudnnGetErrorString(e));
}

void check(cublasStatus_t e, const char* call) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed: " + cublasGetStatusName(e) + " (" + cublasGetStatusString(e) + ")");
}

int to_int(std::size_t v, const char* what) {
  if (v > 0x7fffffffU) throw std::runtime_error(std::string(what) + " does not fit cuDNN's int sizes.");
  return static_cast<int>(v);
}

/// Device memory of `n` elements of T, zero-filled, freed on destruction.
template <class T>
class device_array {
public:
  device_array() = default;
  explicit device_array(std::size_t n) : n_(n) {
    if (n == 0) return;
    void* p = nullptr;
    check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
    p_ = static_cast<T*>(p);
    check(cudaMemset(p_, 0, n * sizeof(T)), "cudaMemset");
  }
  ~device_array() {
    if (p_ != nullptr) cudaFree(p_);
  }
  device_array(device_array&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  device_array& operator=(device_array&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  std::size_t bytes() const noexcept { return n_ * sizeof(T); }

private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

void upload(float* dst, const std::vector<float>& src) {
  check(cudaMemcpy(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (parameters)");
}

}  // namespace

struct cudnn_lm_step::state {
  lm::config c;
  cudnn_math math = cudnn_math::fp32;
  std::size_t rows = 0;  // seq * batch

  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnRNNDataDescriptor_t x_desc = nullptr, y_desc = nullptr;
  cudnnTensorDescriptor_t h_desc = nullptr;
  std::array<cudaEvent_t, 5> events{};

  std::size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
  // Parameters and gradients; the LSTM's in cuDNN's weight space (floats).
  device_array<float> embedding, d_embedding, weights, d_weights, dec_w, d_dec_w, dec_b, d_dec_b;
  // Activations, states, scratch.
  device_array<float> x, y, dx, dy, hx, cx, hy, cy, dhx, dcx, decoder_ws, norm_ws;
  device_array<std::byte> work, reserve;
  device_array<std::int32_t> tokens, targets, seq_lengths;
  device_array<double> scalars;  // [0] loss, [1] gradient norm
  std::int32_t* host_ids = nullptr;  // pinned: tokens then targets
  double* host_scalars = nullptr;    // pinned: loss, norm

  ~state() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (cudaEvent_t e : events)
      if (e != nullptr) cudaEventDestroy(e);
    if (host_ids != nullptr) cudaFreeHost(host_ids);
    if (host_scalars != nullptr) cudaFreeHost(host_scalars);
    if (h_desc != nullptr) cudnnDestroyTensorDescriptor(h_desc);
    if (x_desc != nullptr) cudnnDestroyRNNDataDescriptor(x_desc);
    if (y_desc != nullptr) cudnnDestroyRNNDataDescriptor(y_desc);
    if (rnn != nullptr) cudnnDestroyRNNDescriptor(rnn);
    if (dropout != nullptr) cudnnDestroyDropoutDescriptor(dropout);
    if (dnn != nullptr) cudnnDestroy(dnn);
    if (blas != nullptr) cublasDestroy(blas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  kc::cuda_context context() const {
    return {.stream = stream, .blas = blas, .math = math == cudnn_math::tf32 ? kc::gemm_math::tf32 : kc::gemm_math::fp32};
  }

  void describe() {
    const int L = to_int(c.layers, "--layers"), H = to_int(c.hidden, "--hidden"), E = to_int(c.embed, "--embed");
    const int B = to_int(c.batch, "--batch"), T = to_int(c.seq, "--seq");
    check(cudnnCreateDropoutDescriptor(&dropout), "cudnnCreateDropoutDescriptor");
    // No dropout: no random states are needed (PyTorch's set_no_dropout does the same).
    check(cudnnSetDropoutDescriptor(dropout, dnn, 0.0f, nullptr, 0, 0), "cudnnSetDropoutDescriptor");
    check(cudnnCreateRNNDescriptor(&rnn), "cudnnCreateRNNDescriptor");
    const cudnnMathType_t math_type = math == cudnn_math::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    check(cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
                                   CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, math_type, E, H, H, L,
                                   dropout, CUDNN_RNN_PADDED_IO_ENABLED),
          "cudnnSetRNNDescriptor_v8");
    std::vector<int> lengths(c.batch, T);
    float padding = 0.0f;
    check(cudnnCreateRNNDataDescriptor(&x_desc), "cudnnCreateRNNDataDescriptor");
    check(cudnnSetRNNDataDescriptor(x_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, E,
                                    lengths.data(), &padding),
          "cudnnSetRNNDataDescriptor (x)");
    check(cudnnCreateRNNDataDescriptor(&y_desc), "cudnnCreateRNNDataDescriptor");
    check(cudnnSetRNNDataDescriptor(y_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, H,
                                    lengths.data(), &padding),
          "cudnnSetRNNDataDescriptor (y)");
    // h and c: [layers, batch, hidden], packed.
    const std::array<int, 3> dims{L, B, H}, strides{B * H, H, 1};
    check(cudnnCreateTensorDescriptor(&h_desc), "cudnnCreateTensorDescriptor");
    check(cudnnSetTensorNdDescriptor(h_desc, CUDNN_DATA_FLOAT, 3, dims.data(), strides.data()),
          "cudnnSetTensorNdDescriptor (h)");
    check(cudnnGetRNNWeightSpaceSize(dnn, rnn, &weight_bytes), "cudnnGetRNNWeightSpaceSize");
    check(cudnnGetRNNTempSpaceSizes(dnn, rnn, CUDNN_FWD_MODE_TRAINING, x_desc, &work_bytes, &reserve_bytes),
          "cudnnGetRNNTempSpaceSizes");
    if (weight_bytes % sizeof(float) != 0)
      throw std::runtime_error("cudnnGetRNNWeightSpaceSize returned " + std::to_string(weight_bytes) +
                               " bytes, not a whole number of floats.");
    std::vector<std::int32_t> seq(c.batch, T);
    seq_lengths = device_array<std::int32_t>(c.batch);
    check(cudaMemcpy(seq_lengths.get(), seq.data(), seq.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice),
          "cudaMemcpy (sequence lengths)");
  }

  /// Copies rows [gate*H, (gate+1)*H) of a PyTorch [4H, cols] weight and [4H] bias into the
  /// matrix and bias cuDNN keeps for linear layer `lin` of `layer` in the weight space.
  void load_gate(int layer, int lin, int gate, const std::vector<float>& w, std::size_t cols,
                 const std::vector<float>& b) {
    cudnnTensorDescriptor_t m_desc = nullptr, b_desc = nullptr;
    check(cudnnCreateTensorDescriptor(&m_desc), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&b_desc), "cudnnCreateTensorDescriptor");
    void* m_addr = nullptr;
    void* b_addr = nullptr;
    const cudnnStatus_t st =
        cudnnGetRNNWeightParams(dnn, rnn, layer, weight_bytes, weights.get(), lin, m_desc, &m_addr, b_desc, &b_addr);
    auto elements = [](cudnnTensorDescriptor_t d) {
      cudnnDataType_t type{};
      int nb = 0;
      std::array<int, 8> dims{}, strides{};
      if (cudnnGetTensorNdDescriptor(d, 8, &type, &nb, dims.data(), strides.data()) != CUDNN_STATUS_SUCCESS) return 0L;
      long n = 1;
      for (int i = 0; i < nb; ++i) n *= dims[static_cast<std::size_t>(i)];
      return n;
    };
    const long m_elems = elements(m_desc), b_elems = elements(b_desc);
    cudnnDestroyTensorDescriptor(m_desc);
    cudnnDestroyTensorDescriptor(b_desc);
    check(st, "cudnnGetRNNWeightParams");
    const std::size_t H = c.hidden;
    if (m_addr == nullptr || b_addr == nullptr || m_elems != static_cast<long>(H * cols) ||
        b_elems != static_cast<long>(H))
      throw std::runtime_error("cudnnGetRNNWeightParams: layer " + std::to_string(layer) + " linear layer " +
                               std::to_string(lin) + " has " + std::to_string(m_elems) + " weights and " +
                               std::to_string(b_elems) + " biases, expected " + std::to_string(H * cols) + " and " +
                               std::to_string(H) + ".");
    const std::size_t g = static_cast<std::size_t>(gate);
    check(cudaMemcpy(m_addr, w.data() + g * H * cols, H * cols * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy (LSTM weights)");
    check(cudaMemcpy(b_addr, b.data() + g * H, H * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (LSTM bias)");
  }

  void load_parameters() {
    embedding = device_array<float>(c.vocab * c.embed);
    upload(embedding.get(), lm::initial_parameter(c, "embedding.weight"));
    dec_w = device_array<float>(c.vocab * c.hidden);
    upload(dec_w.get(), lm::initial_parameter(c, "decoder.weight"));
    dec_b = device_array<float>(c.vocab);
    upload(dec_b.get(), lm::initial_parameter(c, "decoder.bias"));
    weights = device_array<float>(weight_bytes / sizeof(float));
    // cuDNN's LSTM linear layers 0-3 multiply the input, 4-7 the recurrent state, gates in the
    // order i, f, g (cuDNN's "c'"), o — PyTorch's row blocks of weight_ih / weight_hh.
    for (std::size_t l = 0; l < c.layers; ++l) {
      const auto names = lm::lstm_parameter_names(l);
      const auto w_ih = lm::initial_parameter(c, names[0]);
      const auto w_hh = lm::initial_parameter(c, names[1]);
      const auto b_ih = lm::initial_parameter(c, names[2]);
      const auto b_hh = lm::initial_parameter(c, names[3]);
      const std::size_t in = l == 0 ? c.embed : c.hidden;
      for (int gate = 0; gate < 4; ++gate) {
        load_gate(static_cast<int>(l), gate, gate, w_ih, in, b_ih);
        load_gate(static_cast<int>(l), gate + 4, gate, w_hh, c.hidden, b_hh);
      }
    }
  }
};

cudnn_lm_step::cudnn_lm_step(int gpu, const lm::config& config, cudnn_math math) : state_(std::make_unique<state>()) {
  state& s = *state_;
  s.c = config;
  s.math = math;
  s.rows = config.seq * config.batch;
  check(cudaSetDevice(gpu), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cublasCreate(&s.blas), "cublasCreate");
  check(cublasSetStream(s.blas, s.stream), "cublasSetStream");
  check(cudnnCreate(&s.dnn), "cudnnCreate");
  check(cudnnSetStream(s.dnn, s.stream), "cudnnSetStream");
  for (cudaEvent_t& e : s.events) check(cudaEventCreate(&e), "cudaEventCreate");
  s.describe();
  s.load_parameters();

  const std::size_t N = s.rows, H = config.hidden, E = config.embed, L = config.layers;
  s.d_embedding = device_array<float>(s.embedding.size());
  s.d_weights = device_array<float>(s.weights.size());
  s.d_dec_w = device_array<float>(s.dec_w.size());
  s.d_dec_b = device_array<float>(s.dec_b.size());
  s.x = device_array<float>(N * E);
  s.dx = device_array<float>(N * E);
  s.y = device_array<float>(N * H);
  s.dy = device_array<float>(N * H);
  for (auto* a : {&s.hx, &s.cx, &s.hy, &s.cy, &s.dhx, &s.dcx}) *a = device_array<float>(L * config.batch * H);
  s.work = device_array<std::byte>(s.work_bytes);
  s.reserve = device_array<std::byte>(s.reserve_bytes);
  const kernels::linear_cross_entropy_dims dd{.rows = N, .hidden = H, .classes = config.vocab};
  s.decoder_ws = device_array<float>(kc::linear_cross_entropy_device_workspace_size(dd, N));
  s.norm_ws = device_array<float>(kc::global_norm_workspace_size(4));
  s.tokens = device_array<std::int32_t>(N);
  s.targets = device_array<std::int32_t>(N);
  s.scalars = device_array<double>(2);
  void* p = nullptr;
  check(cudaMallocHost(&p, 2 * N * sizeof(std::int32_t)), "cudaMallocHost");
  s.host_ids = static_cast<std::int32_t*>(p);
  check(cudaMallocHost(&p, 2 * sizeof(double)), "cudaMallocHost");
  s.host_scalars = static_cast<double*>(p);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

cudnn_lm_step::~cudnn_lm_step() = default;

std::size_t cudnn_lm_step::weight_space_bytes() const noexcept { return state_->weight_bytes; }
std::size_t cudnn_lm_step::workspace_bytes() const noexcept { return state_->work_bytes; }
std::size_t cudnn_lm_step::reserve_bytes() const noexcept { return state_->reserve_bytes; }

cudnn_step_result cudnn_lm_step::step(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets) {
  state& s = *state_;
  const lm::config& c = s.c;
  const std::size_t N = s.rows;
  if (tokens.size() != N || targets.size() != N)
    throw std::invalid_argument("cudnn_lm_step::step: tokens and targets must hold seq x batch = " +
                                std::to_string(N) + " ids.");
  const kc::cuda_context ctx = s.context();
  cudaStream_t st = s.stream;
  std::memcpy(s.host_ids, tokens.data(), N * sizeof(std::int32_t));
  std::memcpy(s.host_ids + N, targets.data(), N * sizeof(std::int32_t));

  check(cudaEventRecord(s.events[0], st), "cudaEventRecord");
  check(cudaMemcpyAsync(s.tokens.get(), s.host_ids, N * sizeof(std::int32_t), cudaMemcpyHostToDevice, st),
        "cudaMemcpyAsync (tokens)");
  check(cudaMemcpyAsync(s.targets.get(), s.host_ids + N, N * sizeof(std::int32_t), cudaMemcpyHostToDevice, st),
        "cudaMemcpyAsync (targets)");
  // zero_grad; cudnnRNNBackwardWeights_v8 adds into its gradient space.
  for (auto* g : {&s.d_embedding, &s.d_weights, &s.d_dec_w, &s.d_dec_b})
    check(cudaMemsetAsync(g->get(), 0, g->bytes(), st), "cudaMemsetAsync (gradients)");

  kc::embedding_forward(ctx, c.vocab, c.embed, s.embedding.get(), N, s.tokens.get(), s.x.get());
  check(cudnnRNNForward(s.dnn, s.rnn, CUDNN_FWD_MODE_TRAINING, s.seq_lengths.get(), s.x_desc, s.x.get(), s.y_desc,
                        s.y.get(), s.h_desc, s.hx.get(), s.hy.get(), s.h_desc, s.cx.get(), s.cy.get(), s.weight_bytes,
                        s.weights.get(), s.work_bytes, s.work.get(), s.reserve_bytes, s.reserve.get()),
        "cudnnRNNForward");
  check(cudaEventRecord(s.events[1], st), "cudaEventRecord");

  const kernels::linear_cross_entropy_dims dd{.rows = N, .hidden = c.hidden, .classes = c.vocab};
  kc::linear_cross_entropy_forward_backward(
      ctx, dd, {.h = s.y.get(), .w = s.dec_w.get(), .b = s.dec_b.get(), .targets = s.targets.get()},
      {.dh = s.dy.get(), .dw = s.d_dec_w.get(), .db = s.d_dec_b.get()}, s.decoder_ws.get(), s.decoder_ws.size(),
      s.scalars.get());
  check(cudaEventRecord(s.events[2], st), "cudaEventRecord");

  // dhy, dcy null: the loss does not depend on the final state (zeros, as PyTorch passes).
  check(cudnnRNNBackwardData_v8(s.dnn, s.rnn, s.seq_lengths.get(), s.y_desc, s.y.get(), s.dy.get(), s.x_desc,
                                s.dx.get(), s.h_desc, s.hx.get(), nullptr, s.dhx.get(), s.h_desc, s.cx.get(), nullptr,
                                s.dcx.get(), s.weight_bytes, s.weights.get(), s.work_bytes, s.work.get(),
                                s.reserve_bytes, s.reserve.get()),
        "cudnnRNNBackwardData_v8");
  check(cudnnRNNBackwardWeights_v8(s.dnn, s.rnn, CUDNN_WGRAD_MODE_ADD, s.seq_lengths.get(), s.x_desc, s.x.get(),
                                   s.h_desc, s.hx.get(), s.y_desc, s.y.get(), s.weight_bytes, s.d_weights.get(),
                                   s.work_bytes, s.work.get(), s.reserve_bytes, s.reserve.get()),
        "cudnnRNNBackwardWeights_v8");
  kc::embedding_backward(ctx, c.vocab, c.embed, N, s.tokens.get(), s.dx.get(), s.d_embedding.get());
  check(cudaEventRecord(s.events[3], st), "cudaEventRecord");

  // clip_grad_norm_(parameters, clip) then SGD, over the four parameter tensors (the LSTM's
  // gradients are one tensor: cuDNN's gradient space, zero where it pads).
  const std::array<std::span<float>, 4> grads{std::span<float>(s.d_embedding.get(), s.d_embedding.size()),
                                              std::span<float>(s.d_weights.get(), s.d_weights.size()),
                                              std::span<float>(s.d_dec_w.get(), s.d_dec_w.size()),
                                              std::span<float>(s.d_dec_b.get(), s.d_dec_b.size())};
  kc::clip_grad_norm(ctx, grads, c.clip, s.norm_ws.get(), s.norm_ws.size(), s.scalars.get() + 1);
  const kernels::sgd_options sgd{.lr = c.lr};
  kc::sgd_step(ctx, s.embedding.size(), s.embedding.get(), s.d_embedding.get(), nullptr, sgd);
  kc::sgd_step(ctx, s.weights.size(), s.weights.get(), s.d_weights.get(), nullptr, sgd);
  kc::sgd_step(ctx, s.dec_w.size(), s.dec_w.get(), s.d_dec_w.get(), nullptr, sgd);
  kc::sgd_step(ctx, s.dec_b.size(), s.dec_b.get(), s.d_dec_b.get(), nullptr, sgd);
  check(cudaMemcpyAsync(s.host_scalars, s.scalars.get(), 2 * sizeof(double), cudaMemcpyDeviceToHost, st),
        "cudaMemcpyAsync (loss)");
  check(cudaEventRecord(s.events[4], st), "cudaEventRecord");
  check(cudaEventSynchronize(s.events[4]), "cudaEventSynchronize");
  check(cudaGetLastError(), "a kernel of the step");

  auto ms = [&](std::size_t a, std::size_t b) {
    float t = 0;
    check(cudaEventElapsedTime(&t, s.events[a], s.events[b]), "cudaEventElapsedTime");
    return static_cast<double>(t);
  };
  cudnn_step_result r;
  r.step_ms = ms(0, 4);
  r.forward_ms = ms(0, 1);
  r.decoder_ms = ms(1, 2);
  r.backward_ms = ms(2, 3);
  r.update_ms = ms(3, 4);
  r.loss = s.host_scalars[0];
  r.grad_norm = s.host_scalars[1];
  return r;
}

std::string cudnn_version() {
  const std::size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch since cuDNN 9
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string gpu_name(int gpu) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, gpu) != cudaSuccess) return "unknown GPU";
  return p.name;
}

int visible_gpus(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    why = std::string("cudaGetDeviceCount returned ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n == 0) why = "cudaGetDeviceCount found no device";
  return n;
}

}  // namespace strata::bench
