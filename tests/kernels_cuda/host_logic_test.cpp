// Host-side logic of the CUDA kernels, checked without a GPU: the row-major -> column-major
// GEMM mapping (executed by a column-major reference and compared with cpu::gemm), workspace
// sizes, argument checks (which run before anything touches the device) and error messages.
#include "strata/kernels/cuda.hpp"

#include <bit>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cuda_test_support.hpp"
#include "half_bits.hpp"
#include "strata/kernels/cpu.hpp"
#include "strata/kernels/half.hpp"
#include "support.hpp"

namespace sk = strata::kernels;
namespace kc = strata::kernels::cuda;
using kc::test::random_source;
using sk::transpose;

namespace host_logic_test {

// What cuBLAS computes for a column-major call: C = alpha op(first) op(second) + beta C, with
// element (i, j) of a column-major matrix X at X[i + j * ld].
void column_major_reference(const kc::column_major_gemm& g, float alpha, const float* first,
                            const float* second, float beta, float* c) {
  for (std::size_t j = 0; j < g.n; ++j) {
    for (std::size_t i = 0; i < g.m; ++i) {
      double acc = 0.0;
      for (std::size_t l = 0; l < g.k; ++l) {
        const float x = g.op_first == transpose::yes ? first[l + i * g.ld_first] : first[i + l * g.ld_first];
        const float y = g.op_second == transpose::yes ? second[j + l * g.ld_second] : second[l + j * g.ld_second];
        acc += static_cast<double>(x) * static_cast<double>(y);
      }
      float& out = c[i + j * g.ldc];
      out = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * out));
    }
  }
}

// A context with no stream and no cuBLAS handle: enough for calls that fail their checks.
const kc::cuda_context no_device{};

template <class F>
void expect_invalid(const F& call, const std::string& message) {
  try {
    call();
    BOOST_ERROR("expected std::invalid_argument: " << message);
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == message);
  }
}

// The std::invalid_argument message `call` throws ("" if it throws none).
template <class F>
std::string invalid_argument_message(const F& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// The CPU and CUDA calls reject the same arguments with the same sentence, the CUDA one
// prefixed "cuda::".
template <class Cpu, class Cuda>
void expect_same_rejection(const Cpu& cpu_call, const Cuda& cuda_call) {
  const std::string cpu = invalid_argument_message(cpu_call);
  const std::string cuda = invalid_argument_message(cuda_call);
  BOOST_TEST(!cpu.empty());
  BOOST_TEST(cuda == "cuda::" + cpu);
}

BOOST_AUTO_TEST_SUITE(host_logic)

BOOST_AUTO_TEST_CASE(column_major_mapping_reproduces_the_row_major_product_for_all_transposes) {
  random_source rng(7);
  const std::size_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {13, 7, 1}, {1, 9, 30}, {33, 17, 29}};
  for (const auto& s : shapes) {
    const std::size_t m = s[0], n = s[1], k = s[2];
    for (int mode = 0; mode < 4; ++mode) {
      const transpose ta = (mode & 1) != 0 ? transpose::yes : transpose::no;
      const transpose tb = (mode & 2) != 0 ? transpose::yes : transpose::no;
      const std::size_t lda = (ta == transpose::yes ? m : k) + 3;
      const std::size_t ldb = (tb == transpose::yes ? k : n) + 1;
      const std::size_t ldc = n + 2;
      const auto a = rng.values((ta == transpose::yes ? k : m) * lda);
      const auto b = rng.values((tb == transpose::yes ? n : k) * ldb);
      const auto c0 = rng.values(m * ldc);
      auto expected = c0;
      sk::cpu::gemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, -0.5f, expected.data(), ldc);
      const kc::column_major_gemm g = kc::to_column_major(ta, tb, m, n, k, lda, ldb, ldc);
      BOOST_TEST((g.m == n && g.n == m && g.k == k));
      BOOST_TEST((g.op_first == tb && g.op_second == ta));
      BOOST_TEST((g.ld_first == ldb && g.ld_second == lda && g.ldc == ldc));
      auto got = c0;
      column_major_reference(g, 0.75f, b.data(), a.data(), -0.5f, got.data());
      // Padding columns of C (j >= n) are untouched by both.
      BOOST_TEST_INFO("m=" << m << " n=" << n << " k=" << k << " mode=" << mode);
      BOOST_TEST(kc::test::relative_error(got, expected) <= kc::test::k_fp32_tol);
    }
  }
}

BOOST_AUTO_TEST_CASE(column_major_mapping_turns_zero_leading_dimensions_into_one) {
  const kc::column_major_gemm g = kc::to_column_major(transpose::no, transpose::no, 0, 0, 0, 0, 0, 0);
  BOOST_TEST((g.ld_first == 1 && g.ld_second == 1 && g.ldc == 1));
}

BOOST_AUTO_TEST_CASE(workspace_sizes_match_the_cpu_kernels_where_the_layout_allows) {
  const sk::lstm_dims d{.steps = 35, .batch = 20, .input = 13, .hidden = 7};
  BOOST_TEST(kc::lstm_reserve_size(d) == sk::lstm_reserve_size(d));
  BOOST_TEST(kc::lstm_backward_workspace_size(d) == sk::lstm_backward_workspace_size(d));
  const sk::linear_cross_entropy_dims x{.rows = 13, .hidden = 7, .classes = 29};
  BOOST_TEST(kc::linear_cross_entropy_device_workspace_size(x, 5) == sk::linear_cross_entropy_workspace_size(x, 5) + 2 * 13);
  BOOST_TEST(kc::global_norm_workspace_size(0) == 2u);
  BOOST_TEST(kc::global_norm_workspace_size(3) == 2 * (3 * kc::norm_partials_per_tensor + 1));
}

BOOST_AUTO_TEST_CASE(bad_gemm_arguments_throw_before_anything_reaches_the_device) {
  float x[16] = {};
  expect_invalid([&] { kc::gemm(no_device, transpose::no, transpose::no, 2, 3, 4, 1.0f, x, 4, x, 3, 0.0f, x, 2); },
                 "cuda::gemm: ldc must be at least n.");
  expect_invalid([&] { kc::gemm(no_device, transpose::yes, transpose::no, 2, 3, 4, 1.0f, x, 1, x, 3, 0.0f, x, 3); },
                 "cuda::gemm: lda must be at least the stored column count of A (k, or m when transposed).");
  expect_invalid([&] { kc::gemm(no_device, transpose::no, transpose::no, 2, 3, 4, 1.0f, nullptr, 4, x, 3, 0.0f, x, 3); },
                 "cuda::gemm: a and b must not be null when m, n and k are positive.");
  expect_invalid([&] { kc::gemm(no_device, transpose::no, transpose::no, std::size_t{INT_MAX} + 1, 1, 1, 1.0f, x, 1, x, 1, 0.0f, x, 1); },
                 "cuda::gemm: m, n, k and the leading dimensions must fit in a 32-bit BLAS integer.");
  // Valid shapes but no cuBLAS handle.
  expect_invalid([&] { kc::gemm(no_device, transpose::no, transpose::no, 2, 3, 4, 1.0f, x, 4, x, 3, 0.0f, x, 3); },
                 "cuda::gemm: ctx.blas must not be null (matrix products need a cuBLAS handle).");
  expect_invalid([&] {
    kc::gemm_strided_batched(no_device, transpose::no, transpose::no, 2, 3, 4, 1.0f, x, 4, 8, x, 3, 12, 0.0f, x, 3, 5, 2);
  }, "cuda::gemm_strided_batched: stride_c must be at least (m - 1) * ldc + n so that the C matrices do not overlap.");
  // Empty products and batches are valid no-ops that need no device.
  kc::gemm(no_device, transpose::no, transpose::no, 0, 3, 4, 1.0f, nullptr, 4, nullptr, 3, 0.0f, nullptr, 3);
  kc::gemm_strided_batched(no_device, transpose::no, transpose::no, 2, 3, 4, 1.0f, nullptr, 4, 0, nullptr, 3, 0, 0.0f,
                           nullptr, 3, 0, 0);
}

BOOST_AUTO_TEST_CASE(bad_lstm_and_decoder_arguments_throw_before_anything_reaches_the_device) {
  alignas(16) float x[64] = {};
  const sk::lstm_weights w{.w_ih = x, .w_hh = x};
  expect_invalid([&] { kc::lstm_forward(no_device, {.steps = 2, .batch = 0, .input = 3, .hidden = 4}, w, {}); },
                 "cuda::lstm_forward: dims.batch must be at least 1.");
  expect_invalid([&] { kc::lstm_forward(no_device, {.steps = 2, .batch = 1, .input = 3, .hidden = 4}, w, {.y = x, .reserve = x}); },
                 "cuda::lstm_forward: args.x must not be null when dims.steps > 0.");
  expect_invalid([&] {
    kc::lstm_backward(no_device, {.steps = 2, .batch = 1, .input = 3, .hidden = 4}, w, {.x = x, .reserve = x}, {});
  }, "cuda::lstm_backward: args.workspace must not be null when dims.steps > 0.");
  expect_invalid([&] {
    kc::lstm_backward(no_device, {.steps = 2, .batch = 1, .input = 3, .hidden = 4}, {.w_hh = x}, {.reserve = x, .dx = x, .workspace = x}, {});
  }, "cuda::lstm_backward: weights.w_ih must not be null when args.dx is wanted.");

  const sk::linear_cross_entropy_dims d{.rows = 3, .hidden = 4, .classes = 5};
  const std::int32_t targets[3] = {0, 1, 2};
  const sk::linear_cross_entropy_inputs in{.h = x, .w = x, .targets = targets};
  double loss_slot = 0.0;
  expect_invalid([&] { kc::linear_cross_entropy_forward(no_device, d, in, x, 10, &loss_slot); },
                 "cuda::linear_cross_entropy_forward: the workspace must hold at least "
                 "cuda::linear_cross_entropy_device_workspace_size(dims, 1) floats.");
  expect_invalid([&] { kc::linear_cross_entropy_forward(no_device, d, in, x, 64, nullptr); },
                 "cuda::linear_cross_entropy_forward: loss must not be null.");
  expect_invalid([&] { kc::linear_cross_entropy_forward(no_device, d, in, x + 1, 60, &loss_slot); },
                 "cuda::linear_cross_entropy_forward: the workspace must be 8-byte aligned.");
  expect_invalid([&] { kc::linear_cross_entropy_forward_backward(no_device, {.rows = 0, .hidden = 4, .classes = 5}, in, {}, x, 64, nullptr); },
                 "cuda::linear_cross_entropy_forward_backward: dims.rows, dims.hidden and dims.classes must be at least 1.");
}

BOOST_AUTO_TEST_CASE(bad_elementwise_optimiser_and_norm_arguments_throw_before_anything_reaches_the_device) {
  float x[16] = {};
  const std::int32_t ids[2] = {0, 1};
  expect_invalid([&] { kc::embedding_forward(no_device, 0, 4, x, 2, ids, x); },
                 "cuda::embedding_forward: vocab and dim must be at least 1.");
  expect_invalid([&] { kc::embedding_backward(no_device, 4, 4, 2, nullptr, x, x); },
                 "cuda::embedding_backward: ids and the arrays must not be null when count > 0.");
  expect_invalid([&] { kc::sgd_step(no_device, 4, x, x, nullptr, {.lr = 0.1, .momentum = 0.9}); },
                 "cuda::sgd_step: momentum_buffer must not be null when momentum != 0.");
  expect_invalid([&] { kc::adam_step(no_device, 4, x, x, x, x, 0, {}); },
                 "cuda::adam_step: step must be at least 1 (steps count from 1).");
  expect_invalid([&] { kc::fill(no_device, 4, 1.0f, nullptr); }, "cuda::fill: x must not be null when n > 0.");
  expect_invalid([&] { kc::axpy(no_device, 4, 1.0f, nullptr, x); }, "cuda::axpy: x and y must not be null when n > 0.");
  expect_invalid([&] { kc::compress_gradient(no_device, 4, kc::gradient_quantizer::two_bit, 0.5f, x, nullptr, x, true); },
                 "cuda::compress_gradient: grad, residual and sent must not be null when n > 0.");
  kc::compress_gradient(no_device, 0, kc::gradient_quantizer::one_bit, 0.0f, nullptr, nullptr, nullptr, false);  // n = 0: nothing

  std::vector<const float*> inputs(300, x);
  float out[16] = {};
  inputs[299] = out;
  expect_invalid([&] { kc::sum_arrays(no_device, inputs, 16, out); },
                 "cuda::sum_arrays: out may be one of the first 256 inputs only (later launches read out as the "
                 "partial sum).");

  const std::span<const float> t[2] = {{x, 16}, {x, 3}};
  double norm = 0.0;
  expect_invalid([&] { kc::global_norm(no_device, t, x, kc::global_norm_workspace_size(2) - 1, &norm); },
                 "cuda::global_norm: the workspace must hold cuda::global_norm_workspace_size(tensor count) floats.");
  const std::span<float> g[1] = {{x, 16}};
  expect_invalid([&] { kc::clip_grad_norm(no_device, g, -1.0, x, 16, nullptr); },
                 "cuda::clip_grad_norm: max_norm must be a non-negative number.");
  // n == 0 is a no-op that needs no device.
  kc::fill(no_device, 0, 1.0f, nullptr);
  kc::sum_arrays(no_device, {}, 0, nullptr);
}

// The row-sparse kernels check their pointers before anything is enqueued; no rows (or rows of
// no element) enqueue nothing.
BOOST_AUTO_TEST_CASE(row_sparse_kernels_refuse_null_arrays_before_enqueueing) {
  float x[16] = {};
  const kc::row_span spans[2] = {{0, 0, 4}, {4, 8, 4}};
  const kc::row_sum plan[1] = {{0, 1, 0, 4}};
  const float* const sources[1] = {x};
  expect_invalid([&] { kc::copy_rows(no_device, 2, 4, nullptr, x, x); },
                 "cuda::copy_rows: spans, from and to must not be null when count > 0.");
  expect_invalid([&] { kc::copy_rows(no_device, 2, 4, spans, x, nullptr); },
                 "cuda::copy_rows: spans, from and to must not be null when count > 0.");
  expect_invalid([&] { kc::sum_rows(no_device, 1, 4, plan, nullptr, x); },
                 "cuda::sum_rows: plan, sources and out must not be null when rows > 0.");
  expect_invalid([&] { kc::sum_rows(no_device, 1, 4, nullptr, sources, x); },
                 "cuda::sum_rows: plan, sources and out must not be null when rows > 0.");
  expect_invalid([&] { kc::sgd_rows(no_device, 2, 4, nullptr, x, x, nullptr, {.lr = 0.1}); },
                 "cuda::sgd_rows: spans must not be null when count > 0.");
  expect_invalid([&] { kc::sgd_rows(no_device, 2, 4, spans, x, x, nullptr, {.lr = 0.1, .momentum = 0.9}); },
                 "cuda::sgd_rows: momentum_buffer must not be null when momentum != 0.");
  expect_invalid([&] { kc::sgd_rows(no_device, 2, 4, spans, x, nullptr, x, {.lr = 0.1}); },
                 "cuda::sgd_rows: param and grad must not be null.");
  expect_invalid([&] { kc::adam_rows(no_device, 2, 4, spans, x, x, x, x, 0, {}); },
                 "cuda::adam_rows: step must be at least 1 (steps count from 1).");
  expect_invalid([&] { kc::adam_rows(no_device, 2, 4, nullptr, x, x, x, x, 1, {}); },
                 "cuda::adam_rows: spans must not be null when count > 0.");
  expect_invalid([&] { kc::adam_rows(no_device, 2, 4, spans, x, x, nullptr, x, 1, {}); },
                 "cuda::adam_rows: param, grad, exp_avg and exp_avg_sq must not be null.");
  // Nothing to do: no device needed.
  kc::copy_rows(no_device, 0, 4, nullptr, static_cast<const float*>(nullptr), nullptr);
  kc::copy_rows(no_device, 2, 0, spans, x, x);
  kc::sum_rows(no_device, 0, 4, nullptr, nullptr, nullptr);
  kc::sum_rows(no_device, 1, 0, plan, sources, x);
  kc::sgd_rows(no_device, 0, 4, nullptr, nullptr, nullptr, nullptr, {.lr = 0.1, .momentum = 0.9});
  kc::adam_rows(no_device, 0, 4, nullptr, nullptr, nullptr, nullptr, nullptr, 1, {});
}

BOOST_AUTO_TEST_CASE(cuda_argument_checks_give_the_cpu_messages_prefixed_with_cuda) {
  namespace cpu = sk::cpu;
  alignas(16) float x[64] = {};
  const std::int32_t ids[3] = {0, 1, 2};

  expect_same_rejection([&] { cpu::gemm(transpose::no, transpose::no, 2, 3, 4, 1.0f, x, 4, x, 3, 0.0f, x, 2); },
                        [&] { kc::gemm(no_device, transpose::no, transpose::no, 2, 3, 4, 1.0f, x, 4, x, 3, 0.0f, x, 2); });
  expect_same_rejection([&] { cpu::gemm(transpose::no, transpose::yes, 2, 3, 4, 1.0f, x, 4, x, 3, 0.0f, x, 3); },
                        [&] { kc::gemm(no_device, transpose::no, transpose::yes, 2, 3, 4, 1.0f, x, 4, x, 3, 0.0f, x, 3); });
  expect_same_rejection(
      [&] { cpu::gemm_strided_batched(transpose::no, transpose::no, 2, 3, 4, 1.0f, x, 4, 8, x, 3, 12, 0.0f, x, 3, 5, 2); },
      [&] {
        kc::gemm_strided_batched(no_device, transpose::no, transpose::no, 2, 3, 4, 1.0f, x, 4, 8, x, 3, 12, 0.0f, x,
                                 3, 5, 2);
      });

  const sk::lstm_weights w{.w_ih = x, .w_hh = x};
  const sk::lstm_dims d{.steps = 2, .batch = 1, .input = 3, .hidden = 4};
  expect_same_rejection([&] { cpu::lstm_forward({.steps = 2, .batch = 1, .input = 3, .hidden = 0}, w, {}); },
                        [&] { kc::lstm_forward(no_device, {.steps = 2, .batch = 1, .input = 3, .hidden = 0}, w, {}); });
  expect_same_rejection([&] { cpu::lstm_forward(d, {.w_ih = x}, {.x = x, .y = x, .reserve = x}); },
                        [&] { kc::lstm_forward(no_device, d, {.w_ih = x}, {.x = x, .y = x, .reserve = x}); });
  expect_same_rejection([&] { cpu::lstm_forward(d, w, {.x = x, .reserve = x}); },
                        [&] { kc::lstm_forward(no_device, d, w, {.x = x, .reserve = x}); });
  expect_same_rejection([&] { cpu::lstm_backward(d, w, {.reserve = x, .workspace = x}, {.dw_ih = x}); },
                        [&] { kc::lstm_backward(no_device, d, w, {.reserve = x, .workspace = x}, {.dw_ih = x}); });
  expect_same_rejection([&] { cpu::lstm_backward(d, w, {.x = x, .workspace = x}, {}); },
                        [&] { kc::lstm_backward(no_device, d, w, {.x = x, .workspace = x}, {}); });

  expect_same_rejection([&] { cpu::embedding_forward(4, 0, x, 3, ids, x); },
                        [&] { kc::embedding_forward(no_device, 4, 0, x, 3, ids, x); });
  expect_same_rejection([&] { cpu::embedding_backward(4, 4, 3, ids, nullptr, x); },
                        [&] { kc::embedding_backward(no_device, 4, 4, 3, ids, nullptr, x); });

  const sk::linear_cross_entropy_dims xd{.rows = 3, .hidden = 4, .classes = 5};
  const sk::linear_cross_entropy_inputs in{.h = x, .w = x, .targets = ids};
  double loss = 0.0;
  expect_same_rejection([&] { (void)cpu::linear_cross_entropy_forward({.rows = 3, .hidden = 4}, in, x, 64); },
                        [&] { kc::linear_cross_entropy_forward(no_device, {.rows = 3, .hidden = 4}, in, x, 64, &loss); });
  expect_same_rejection([&] { cpu::linear_cross_entropy_forward_backward(xd, {.h = x, .targets = ids}, {}, x, 64); },
                        [&] { kc::linear_cross_entropy_forward_backward(no_device, xd, {.h = x, .targets = ids}, {}, x, 64, &loss); });

  expect_same_rejection([&] { cpu::sgd_step(4, x, nullptr, nullptr, {}); },
                        [&] { kc::sgd_step(no_device, 4, x, nullptr, nullptr, {}); });
  expect_same_rejection([&] { cpu::sgd_step(4, x, x, nullptr, {.momentum = 0.9}); },
                        [&] { kc::sgd_step(no_device, 4, x, x, nullptr, {.momentum = 0.9}); });
  expect_same_rejection([&] { cpu::adam_step(0, nullptr, nullptr, nullptr, nullptr, 0, {}); },
                        [&] { kc::adam_step(no_device, 0, nullptr, nullptr, nullptr, nullptr, 0, {}); });
  expect_same_rejection([&] { cpu::adam_step(4, x, x, nullptr, x, 1, {}); },
                        [&] { kc::adam_step(no_device, 4, x, x, nullptr, x, 1, {}); });

  expect_same_rejection([&] { cpu::fill(4, 1.0f, nullptr); }, [&] { kc::fill(no_device, 4, 1.0f, nullptr); });
  expect_same_rejection([&] { cpu::scale(4, 2.0f, nullptr); }, [&] { kc::scale(no_device, 4, 2.0f, nullptr); });
  expect_same_rejection([&] { cpu::axpy(4, 2.0f, x, nullptr); }, [&] { kc::axpy(no_device, 4, 2.0f, x, nullptr); });
  const float* with_null[2] = {x, nullptr};
  expect_same_rejection([&] { cpu::sum_arrays(with_null, 4, x); }, [&] { kc::sum_arrays(no_device, with_null, 4, x); });
  expect_same_rejection([&] { cpu::sum_arrays({}, 4, nullptr); }, [&] { kc::sum_arrays(no_device, {}, 4, nullptr); });

  const std::span<float> g[1] = {{x, 16}};
  expect_same_rejection([&] { (void)cpu::clip_grad_norm(g, -1.0); },
                        [&] { kc::clip_grad_norm(no_device, g, -1.0, x, 64, nullptr); });
}

BOOST_AUTO_TEST_CASE(failed_cuda_and_cublas_calls_become_cuda_errors_naming_the_call) {
  namespace detail = strata::kernels::cuda::detail;
  try {
    detail::check(cudaErrorInvalidValue, "cudaMemcpyAsync");
    BOOST_ERROR("expected cuda_error");
  } catch (const kc::cuda_error& e) {
    BOOST_TEST(e.call() == "cudaMemcpyAsync");
    BOOST_TEST(e.status() == static_cast<int>(cudaErrorInvalidValue));
    BOOST_TEST(std::string(e.what()).starts_with(
        "strata::kernels::cuda: cudaMemcpyAsync failed: cudaErrorInvalidValue ("));
  }
  try {
    detail::check(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGemmEx");
    BOOST_ERROR("expected cuda_error");
  } catch (const kc::cuda_error& e) {
    BOOST_TEST(e.call() == "cublasGemmEx");
    BOOST_TEST(std::string(e.what()).starts_with(
        "strata::kernels::cuda: cublasGemmEx failed: CUBLAS_STATUS_NOT_INITIALIZED ("));
  }
  BOOST_CHECK_NO_THROW(detail::check(cudaSuccess, "cudaMemsetAsync"));
  BOOST_CHECK_NO_THROW(detail::check(CUBLAS_STATUS_SUCCESS, "cublasSetStream"));
}

BOOST_AUTO_TEST_CASE(strata_cuda_sync_turns_on_synchronised_launches_and_names_a_bad_value) {
  namespace detail = strata::kernels::cuda::detail;
  BOOST_TEST(detail::parse_launch_sync("1"));
  BOOST_TEST(!detail::parse_launch_sync("0"));
  BOOST_TEST(!detail::parse_launch_sync(""));
  BOOST_TEST(!detail::parse_launch_sync(nullptr));
  expect_invalid([] { detail::parse_launch_sync("on"); },
                 "strata::kernels::cuda: STRATA_CUDA_SYNC is \"on\"; expected 1 (synchronise after every kernel "
                 "launch) or 0");
}

BOOST_AUTO_TEST_CASE(the_16_bit_calls_refuse_null_pointers_before_anything_is_enqueued) {
  float x[4] = {};
  std::uint16_t h[4] = {};
  const auto f16 = kc::half_format::float16;
  expect_invalid([&] { kc::widen(no_device, f16, 4, nullptr, x); }, "cuda::widen: in and out must not be null when n > 0.");
  expect_invalid([&] { kc::widen(no_device, kc::half_format::bfloat16, 4, h, nullptr); },
                 "cuda::widen: in and out must not be null when n > 0.");
  expect_invalid([&] { kc::narrow(no_device, f16, 4, x, nullptr); }, "cuda::narrow: in and out must not be null when n > 0.");
  expect_invalid([&] { kc::narrow(no_device, f16, 4, nullptr, h); }, "cuda::narrow: in and out must not be null when n > 0.");
  const std::uint16_t* inputs[] = {h, nullptr};
  expect_invalid([&] { kc::sum_widened(no_device, f16, x, std::span(inputs, 1), 4, nullptr); },
                 "cuda::sum_widened: out must not be null when n > 0.");
  expect_invalid([&] { kc::sum_widened(no_device, f16, nullptr, std::span(inputs), 4, x); },
                 "cuda::sum_widened: no input may be null when n > 0.");
  expect_invalid([&] { kc::copy(no_device, 4, h, static_cast<std::uint16_t*>(nullptr)); },
                 "cuda::copy: src and dst must not be null when n > 0.");
  // n = 0 (and a copy onto itself): nothing to do, nothing checked
  kc::widen(no_device, f16, 0, nullptr, nullptr);
  kc::narrow(no_device, f16, 0, nullptr, nullptr);
  kc::sum_widened(no_device, f16, nullptr, std::span(inputs), 0, nullptr);
  kc::copy(no_device, 4, h, h);
}

// The 16-bit row calls of a row-sparse update and pull on a 16-bit key (sparse_rows.cu) check
// their pointers as the float32 ones do; no rows enqueue nothing.
BOOST_AUTO_TEST_CASE(the_16_bit_row_calls_refuse_null_arrays_before_enqueueing) {
  float x[8] = {};
  std::uint16_t h[8] = {};
  const kc::row_span spans[2] = {{0, 0, 4}, {4, 4, 4}};
  const auto f16 = kc::half_format::float16;
  expect_invalid([&] { kc::copy_rows(no_device, 2, 4, spans, h, static_cast<std::uint16_t*>(nullptr)); },
                 "cuda::copy_rows: spans, from and to must not be null when count > 0.");
  expect_invalid([&] { kc::copy_rows(no_device, 2, 4, nullptr, h, h); },
                 "cuda::copy_rows: spans, from and to must not be null when count > 0.");
  expect_invalid([&] { kc::narrow_rows(no_device, f16, 2, 4, spans, nullptr, h); },
                 "cuda::narrow_rows: spans, from and to must not be null when count > 0.");
  expect_invalid([&] { kc::narrow_rows(no_device, kc::half_format::bfloat16, 2, 4, nullptr, x, h); },
                 "cuda::narrow_rows: spans, from and to must not be null when count > 0.");
  kc::copy_rows(no_device, 0, 4, nullptr, static_cast<const std::uint16_t*>(nullptr), nullptr);
  kc::copy_rows(no_device, 2, 0, spans, h, h);
  kc::narrow_rows(no_device, f16, 0, 4, nullptr, nullptr, nullptr);
  kc::narrow_rows(no_device, f16, 2, 0, spans, x, h);
}

// The element conversions of kernels/cuda/half.cu (half_bits.hpp, host and device code alike)
// against the CPU's (strata/kernels/half.hpp), run here on the host: every 16-bit pattern widened,
// and every float32 whose low 16 bits are one of a set that holds ties, one above and below
// them (with an even and an odd last kept bit), and random ones. (All 2^32 floats were checked
// once by hand: 15 minutes, too long for a test.)
BOOST_AUTO_TEST_CASE(the_device_conversions_give_the_cpu_bits_for_every_16_bit_pattern_and_tie) {
  namespace kd = strata::kernels::cuda::detail;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    BOOST_TEST_REQUIRE(std::bit_cast<std::uint32_t>(kd::float16_value_of(bits)) ==
                       std::bit_cast<std::uint32_t>(sk::float16_value(bits)));
    BOOST_TEST_REQUIRE(std::bit_cast<std::uint32_t>(kd::bfloat16_value_of(bits)) ==
                       std::bit_cast<std::uint32_t>(sk::bfloat16_value(bits)));
  }
  std::vector<std::uint32_t> lows = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2fff, 0x3000,
                                     0x3001, 0x7fff, 0x8000, 0x8001, 0xe000, 0xefff, 0xf000, 0xf001, 0xffff};
  std::mt19937 rng(5);
  for (int i = 0; i < 14; ++i) lows.push_back(rng() & 0xffffu);
  for (std::uint32_t high = 0; high < 0x10000; ++high) {
    for (const std::uint32_t low : lows) {
      const float x = std::bit_cast<float>(high << 16 | low);
      BOOST_TEST_REQUIRE(kd::float16_bits_of(x) == sk::float16_bits(x), "float16 of bits " << std::hex << (high << 16 | low));
      BOOST_TEST_REQUIRE(kd::bfloat16_bits_of(x) == sk::bfloat16_bits(x), "bfloat16 of bits " << std::hex << (high << 16 | low));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace host_logic_test
