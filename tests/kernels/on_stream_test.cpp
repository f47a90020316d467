// kernels::on_stream, the adapter from the raw-pointer kernels to the runtime's streams: on a cpu
// device it runs the cpu kernel and gives exactly what calling that kernel directly gives.
#include "strata/kernels/on_stream.hpp"

#include <cstddef>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"
#include "strata/device/all.hpp"
#include "strata/kernels/elementwise.hpp"

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;

namespace on_stream_test {

/// y += alpha x, written once for both backends as a call site would write it.
auto axpy_call(std::size_t n, float alpha, const float* x, float* y) {
  return [=](auto target) {
    if constexpr (sk::is_cuda_target<decltype(target)>) sk::cuda::axpy(target.context, n, alpha, x, y);
    else sk::cpu::axpy(n, alpha, x, y);
  };
}

BOOST_AUTO_TEST_SUITE(on_stream)

BOOST_AUTO_TEST_CASE(on_a_cpu_stream_the_call_gives_what_the_kernel_gives_called_directly) {
  ref::random_source rng(4100);
  auto devs = strata::make_devices("cpu:1");
  auto s = devs[0].create_stream();
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 18}) {
    const ref::fvec x = ref::to_float(rng.values(n));
    const ref::fvec y0 = ref::to_float(rng.values(n));
    auto tx = strata::tensor::from_host<float>(std::span<const float>(x), devs[0], s);
    auto ty = strata::tensor::from_host<float>(std::span<const float>(y0), devs[0], s);
    sk::on_stream(s, {.name = "axpy", .flops = 2.0 * static_cast<double>(n)},
                  axpy_call(n, -0.625f, tx.device_data<const float>(), ty.device_data<float>()));
    const std::vector<float> got = ty.to_host<float>(s);

    ref::fvec direct = y0;
    sk::cpu::axpy(n, -0.625f, x.data(), direct.data());
    BOOST_TEST(got == direct, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(attach_gives_a_work_item_only_the_implementation_of_its_device_kind) {
  float x = 1.0f;
  float y = 2.0f;
  strata::kernel_work cpu_work;
  sk::attach(cpu_work, strata::device_kind::cpu, axpy_call(1, 1.0f, &x, &y));
  BOOST_TEST(static_cast<bool>(cpu_work.cpu));
  BOOST_TEST(!cpu_work.cuda);
  cpu_work.cpu();
  BOOST_TEST(y == 3.0f);

  strata::kernel_work sim_work;  // sim devices model the cost and run nothing
  sk::attach(sim_work, strata::device_kind::sim, axpy_call(1, 1.0f, &x, &y));
  BOOST_TEST(!sim_work.cpu);
  BOOST_TEST(!sim_work.cuda);

  strata::kernel_work cuda_work;
  sk::attach(cuda_work, strata::device_kind::cuda, axpy_call(1, 1.0f, &x, &y));
  BOOST_TEST(!cuda_work.cpu);
#if STRATA_HAS_CUDA
  BOOST_TEST(static_cast<bool>(cuda_work.cuda));
#else
  BOOST_TEST(!cuda_work.cuda);  // no CUDA kernels to call in this build
#endif
}

BOOST_AUTO_TEST_CASE(on_a_sim_stream_the_call_never_runs_and_the_item_is_modelled) {
  auto devs = strata::make_devices("sim:1");
  auto s = devs[0].create_stream();
  bool ran = false;
  sk::on_stream(s, {.name = "modelled", .flops = 1e6, .bytes = 1e6}, [&ran](auto) { ran = true; });
  s.synchronize();
  BOOST_TEST(!ran);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace on_stream_test
