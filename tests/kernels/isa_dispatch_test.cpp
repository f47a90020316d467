// The run-time ISA paths of the CPU kernels' vector loops (strata/kernels/isa.hpp): every path
// this CPU supports gives bitwise the baseline path's results, and STRATA_CPU_ISA is obeyed or
// rejected with one sentence (the last two cases run as their own ctest entries with the
// variable set, see CMakeLists.txt).
#include "strata/kernels/isa.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "reference.hpp"
#include "strata/kernels/cpu.hpp"

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;
using sk::cpu::cpu_isa;

namespace isa_dispatch_test {

constexpr cpu_isa all_isas[] = {cpu_isa::baseline, cpu_isa::avx2, cpu_isa::avx512};

std::string name_of(cpu_isa isa) { return sk::cpu::isa_name(isa); }

/// Restores the path that was active before the test changed it.
struct isa_restorer {
  cpu_isa saved = sk::cpu::active_isa();
  ~isa_restorer() { sk::cpu::set_isa(saved); }
};

/// Every output of one run, named, in a fixed order: float arrays and double results.
struct outputs {
  std::vector<std::string> names;
  std::vector<ref::fvec> arrays;
  std::vector<std::string> scalar_names;
  std::vector<double> scalars;

  void add(std::string name, ref::fvec v) {
    names.push_back(std::move(name));
    arrays.push_back(std::move(v));
  }
  void add(std::string name, double v) {
    scalar_names.push_back(std::move(name));
    scalars.push_back(v);
  }
};

ref::fvec random_floats(ref::random_source& rng, std::size_t n, double lo = -1.0, double hi = 1.0) {
  return ref::to_float(rng.values(n, lo, hi));
}

// LSTM forward + backward with every optional input and output set, so that both backward_row
// variants (with and without dy) run.
void run_lstm(outputs& out, std::uint64_t seed, const sk::lstm_dims& d, bool with_dy) {
  ref::random_source rng(seed);
  const std::size_t g4 = 4 * d.hidden;
  const std::size_t bh = d.batch * d.hidden;
  // Weights in [-0.5, 0.5) and inputs in [-2, 2): pre-activations cover the activations'
  // saturated ends as well as their middle.
  const ref::fvec w_ih = random_floats(rng, g4 * d.input, -0.5, 0.5);
  const ref::fvec w_hh = random_floats(rng, g4 * d.hidden, -0.5, 0.5);
  const ref::fvec b_ih = random_floats(rng, g4), b_hh = random_floats(rng, g4);
  const ref::fvec x = random_floats(rng, d.steps * d.batch * d.input, -2.0, 2.0);
  const ref::fvec h0 = random_floats(rng, bh), c0 = random_floats(rng, bh);
  const ref::fvec dy = random_floats(rng, d.steps * bh), dh_out = random_floats(rng, bh);
  const ref::fvec dc_out = random_floats(rng, bh);
  ref::fvec y(d.steps * bh), h_out(bh), c_out(bh), reserve(sk::lstm_reserve_size(d));
  ref::fvec work(sk::lstm_backward_workspace_size(d)), dx(d.steps * d.batch * d.input);
  ref::fvec dh_in(bh), dc_in(bh);
  ref::fvec dw_ih = random_floats(rng, g4 * d.input), dw_hh = random_floats(rng, g4 * d.hidden);
  ref::fvec db_ih = random_floats(rng, g4), db_hh = random_floats(rng, g4);
  const sk::lstm_weights w{w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data()};
  sk::cpu::lstm_forward(d, w, {.x = x.data(), .h_in = h0.data(), .c_in = c0.data(), .y = y.data(),
                               .h_out = h_out.data(), .c_out = c_out.data(), .reserve = reserve.data()});
  sk::cpu::lstm_backward(d, w,
                         {.x = x.data(), .reserve = reserve.data(), .dy = with_dy ? dy.data() : nullptr,
                          .dh_out = dh_out.data(), .dc_out = dc_out.data(), .dx = dx.data(),
                          .dh_in = dh_in.data(), .dc_in = dc_in.data(), .workspace = work.data()},
                         {dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data()});
  const std::string p = "lstm H=" + std::to_string(d.hidden) + (with_dy ? " " : " no-dy ");
  out.add(p + "y", y);
  out.add(p + "h_out", h_out);
  out.add(p + "c_out", c_out);
  out.add(p + "reserve", reserve);
  out.add(p + "dx", dx);
  out.add(p + "dh_in", dh_in);
  out.add(p + "dc_in", dc_in);
  out.add(p + "dw_ih", dw_ih);
  out.add(p + "dw_hh", dw_hh);
  out.add(p + "db_ih", db_ih);
  out.add(p + "db_hh", db_hh);
}

void run_linear_cross_entropy(outputs& out, std::uint64_t seed, const sk::linear_cross_entropy_dims& d,
                              sk::loss_reduction reduction) {
  ref::random_source rng(seed);
  // h in [-3, 3): logits spread over tens of units, so exp's range reduction matters.
  const ref::fvec h = random_floats(rng, d.rows * d.hidden, -3.0, 3.0);
  const ref::fvec w = random_floats(rng, d.classes * d.hidden), b = random_floats(rng, d.classes);
  const std::vector<std::int32_t> targets = rng.ids(d.rows, d.classes);
  ref::fvec ws(sk::linear_cross_entropy_workspace_size(d, d.rows));
  ref::fvec dh(d.rows * d.hidden), dw = random_floats(rng, d.classes * d.hidden);
  ref::fvec db = random_floats(rng, d.classes);
  const sk::linear_cross_entropy_inputs in{h.data(), w.data(), b.data(), targets.data(), reduction};
  const std::string p = "linear_cross_entropy V=" + std::to_string(d.classes) + " ";
  out.add(p + "forward loss", sk::cpu::linear_cross_entropy_forward(d, in, ws.data(), ws.size()));
  out.add(p + "forward_backward loss",
          sk::cpu::linear_cross_entropy_forward_backward(d, in, {dh.data(), dw.data(), db.data()},
                                                         ws.data(), ws.size()));
  out.add(p + "dh", dh);
  out.add(p + "dw", dw);
  out.add(p + "db", db);
}

void run_optimizers(outputs& out, std::uint64_t seed, std::size_t n) {
  ref::random_source rng(seed);
  const std::string p = "n=" + std::to_string(n) + " ";
  struct sgd_case { const char* name; sk::sgd_options o; };
  for (const sgd_case& c : {sgd_case{"sgd", {.lr = 0.1, .weight_decay = 1e-2}},
                            sgd_case{"sgd momentum", {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2}},
                            sgd_case{"sgd nesterov", {.lr = 0.2, .momentum = 0.5, .nesterov = true}}}) {
    ref::fvec param = random_floats(rng, n), buf = random_floats(rng, n);
    for (int step = 0; step < 3; ++step) {
      const ref::fvec grad = random_floats(rng, n);
      sk::cpu::sgd_step(n, param.data(), grad.data(), buf.data(), c.o);
    }
    out.add(p + c.name + " param", param);
    out.add(p + c.name + " momentum_buffer", buf);
  }
  for (const bool decoupled : {false, true}) {
    ref::fvec param = random_floats(rng, n), m = random_floats(rng, n), v = random_floats(rng, n, 0.0, 1.0);
    for (std::int64_t step = 1; step <= 3; ++step) {
      const ref::fvec grad = random_floats(rng, n);
      sk::cpu::adam_step(n, param.data(), grad.data(), m.data(), v.data(), step,
                         {.lr = 1e-2, .weight_decay = 0.1, .decoupled_weight_decay = decoupled});
    }
    const std::string name = decoupled ? "adamw " : "adam ";
    out.add(p + name + "param", param);
    out.add(p + name + "exp_avg", m);
    out.add(p + name + "exp_avg_sq", v);
  }
}

void run_elementwise_and_norms(outputs& out, std::uint64_t seed, std::size_t n) {
  ref::random_source rng(seed);
  const std::string p = "n=" + std::to_string(n) + " ";
  ref::fvec a = random_floats(rng, n), b = random_floats(rng, n), c = random_floats(rng, n);
  sk::cpu::scale(n, 0.37f, a.data());
  sk::cpu::axpy(n, -1.3f, c.data(), b.data());
  ref::fvec sum(n);
  const float* inputs[] = {a.data(), b.data(), c.data()};
  sk::cpu::sum_arrays(inputs, n, sum.data());
  const std::span<const float> tensors[] = {a, b, sum};
  out.add(p + "global_norm", sk::cpu::global_norm(tensors));
  const std::span<float> grads[] = {a, sum};
  out.add(p + "clip_grad_norm", sk::cpu::clip_grad_norm(grads, 0.5));
  out.add(p + "scale then clipped", a);
  out.add(p + "axpy", b);
  out.add(p + "sum_arrays then clipped", sum);
}

outputs run_everything() {
  outputs out;
  // Odd sizes leave tails after the 16-lane loops; H = 400 and V = 10000 are the seed model's.
  run_lstm(out, 11, {.steps = 4, .batch = 3, .input = 13, .hidden = 37}, true);
  run_lstm(out, 12, {.steps = 3, .batch = 5, .input = 64, .hidden = 400}, true);
  run_lstm(out, 13, {.steps = 3, .batch = 2, .input = 9, .hidden = 21}, false);
  run_linear_cross_entropy(out, 21, {.rows = 9, .hidden = 24, .classes = 1037}, sk::loss_reduction::mean);
  run_linear_cross_entropy(out, 22, {.rows = 4, .hidden = 16, .classes = 10000}, sk::loss_reduction::sum);
  run_optimizers(out, 31, 13);
  run_optimizers(out, 32, 100003);  // above the parallel grain: several blocks
  run_elementwise_and_norms(out, 41, 29);
  run_elementwise_and_norms(out, 42, 70001);
  return out;
}

/// Index of the first element whose bits differ, or a.size() when all agree.
std::size_t first_bit_difference(const ref::fvec& a, const ref::fvec& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  }
  return a.size();
}

BOOST_AUTO_TEST_SUITE(isa_dispatch)

BOOST_AUTO_TEST_CASE(every_supported_isa_path_gives_bitwise_the_baseline_results) {
  const isa_restorer restore;
  sk::cpu::set_isa(cpu_isa::baseline);
  const outputs base = run_everything();
  int compared = 0;
  for (const cpu_isa isa : all_isas) {
    if (isa == cpu_isa::baseline || !sk::cpu::isa_supported(isa)) continue;
    sk::cpu::set_isa(isa);
    BOOST_TEST(name_of(sk::cpu::active_isa()) == name_of(isa));
    const outputs wide = run_everything();
    ++compared;
    BOOST_TEST_REQUIRE(wide.arrays.size() == base.arrays.size());
    for (std::size_t k = 0; k < base.arrays.size(); ++k) {
      BOOST_TEST_REQUIRE(wide.arrays[k].size() == base.arrays[k].size());
      const std::size_t i = first_bit_difference(wide.arrays[k], base.arrays[k]);
      BOOST_TEST_INFO(sk::cpu::isa_name(isa) << ": " << base.names[k] << "[" << i << "]");
      BOOST_TEST(i == base.arrays[k].size());
    }
    for (std::size_t k = 0; k < base.scalars.size(); ++k) {
      BOOST_TEST_INFO(sk::cpu::isa_name(isa) << ": " << base.scalar_names[k]);
      BOOST_TEST(std::memcmp(&wide.scalars[k], &base.scalars[k], sizeof(double)) == 0);
    }
  }
  BOOST_TEST_MESSAGE("isa_dispatch: compared " << compared << " wide path(s) with baseline; widest here: "
                                               << sk::cpu::isa_name(sk::cpu::widest_isa()));
}

BOOST_AUTO_TEST_CASE(set_isa_accepts_exactly_the_supported_paths) {
  const isa_restorer restore;
  BOOST_TEST(sk::cpu::isa_supported(cpu_isa::baseline));
  BOOST_TEST(sk::cpu::isa_supported(sk::cpu::widest_isa()));
  for (const cpu_isa isa : all_isas) {
    BOOST_TEST_INFO(sk::cpu::isa_name(isa));
    if (sk::cpu::isa_supported(isa)) {
      sk::cpu::set_isa(isa);
      BOOST_TEST(name_of(sk::cpu::active_isa()) == name_of(isa));
    } else {
      const std::string expected = "set_isa: " + name_of(isa) + " is not supported by this CPU or build";
      BOOST_CHECK_EXCEPTION(sk::cpu::set_isa(isa), std::invalid_argument,
                            [&](const std::invalid_argument& e) { return std::string(e.what()).starts_with(expected); });
    }
  }
}

// The default run: STRATA_CPU_ISA unset gives the widest path. Run again by ctest with
// STRATA_CPU_ISA=baseline (the path it names) and with an unknown name (the error).
BOOST_AUTO_TEST_CASE(strata_cpu_isa_picks_the_path_or_is_rejected_with_one_sentence) {
  const char* env = std::getenv("STRATA_CPU_ISA");
  const std::string value = env != nullptr ? env : "";
  if (value.empty() || value == "auto") {
    BOOST_TEST(name_of(sk::cpu::active_isa()) == name_of(sk::cpu::widest_isa()));
    return;
  }
  for (const cpu_isa isa : all_isas) {
    if (value == sk::cpu::isa_name(isa) && sk::cpu::isa_supported(isa)) {
      BOOST_TEST(name_of(sk::cpu::active_isa()) == name_of(isa));
      return;
    }
  }
  // Neither active_isa() nor a kernel call may fall back silently: both throw the sentence.
  const bool unknown = value != "avx2" && value != "avx512";
  const std::string expected =
      unknown ? "STRATA_CPU_ISA: \"" + value + "\" is not one of baseline, avx2, avx512 or auto."
              : "STRATA_CPU_ISA: " + value + " is not supported by this CPU or build (supported: ";
  auto says_it = [&](const std::invalid_argument& e) {
    BOOST_TEST_MESSAGE("error: " << e.what());
    return std::string_view(e.what()).starts_with(expected);
  };
  BOOST_CHECK_EXCEPTION(static_cast<void>(sk::cpu::active_isa()), std::invalid_argument, says_it);
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  BOOST_CHECK_EXCEPTION(sk::cpu::scale(4, 2.0f, x), std::invalid_argument, says_it);
  BOOST_TEST(x[0] == 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace isa_dispatch_test
