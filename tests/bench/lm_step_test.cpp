// The benchmark's LM training step (tools/bench/lm_step.hpp) on the tiny model of
// tests/fixtures/torch/lm_step.json: loss, gradients, clipping and the SGD update match
// PyTorch's recorded values (format in tests/fixtures/torch/README.md).
#define BOOST_TEST_MODULE strata_bench_lm_step
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lm_step.hpp"
#include "strata/kernels/blas.hpp"

using nlohmann::json;

namespace {

// Agreement with PyTorch's float32 results: max|a - b| <= 1e-4 * max|b| per tensor.
constexpr double k_torch_tol = 1e-4;

const std::filesystem::path fixture_path = std::filesystem::path(STRATA_TORCH_FIXTURES_DIR) / "lm_step.json";

struct blas_single_threaded {
  blas_single_threaded() { strata::kernels::cpu::set_blas_threads(1); }
};

json load_fixture() {
  std::ifstream in(fixture_path);
  BOOST_REQUIRE_MESSAGE(in.good(), "cannot open " << fixture_path);
  return json::parse(in);
}

std::vector<float> tensor(const json& t) {
  std::vector<float> v;
  for (const auto& x : t.at("data")) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

std::vector<std::int32_t> ids(const json& t) {
  std::vector<std::int32_t> v;
  for (const auto& x : t.at("data")) v.push_back(static_cast<std::int32_t>(x.get<std::int64_t>()));
  return v;
}

std::vector<std::size_t> shape(const json& t) { return t.at("shape").get<std::vector<std::size_t>>(); }

double relative_error(std::span<const float> got, const json& expected) {
  const std::vector<float> e = tensor(expected);
  BOOST_REQUIRE_EQUAL(got.size(), e.size());
  double max_ref = 0, max_diff = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(static_cast<double>(e[i])));
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(e[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

double worst_error = 0;

void check(std::span<const float> got, const json& expected, const std::string& what) {
  const double err = relative_error(got, expected);
  worst_error = std::max(worst_error, err);
  BOOST_TEST(err <= k_torch_tol, what << ": relative error " << err);
}

void check_number(double got, double expected, const std::string& what) {
  const double err = std::abs(got - expected) / std::abs(expected);
  worst_error = std::max(worst_error, err);
  BOOST_TEST(err <= k_torch_tol, what << ": " << got << " vs " << expected);
}

// The fixture's model as an lstm_lm, with the fixture's initial parameters copied in.
strata::lm::config fixture_config(const json& f) {
  const json& c = f.at("config");
  const json& o = f.at("sgd").at("optimizer");
  return {.vocab = c.at("vocab_size").get<std::size_t>(),
          .embed = c.at("embed_size").get<std::size_t>(),
          .layers = c.at("num_layers").get<std::size_t>(),
          .hidden = c.at("hidden_size").get<std::size_t>(),
          .batch = c.at("batch").get<std::size_t>(),
          .seq = c.at("seq_len").get<std::size_t>(),
          .lr = o.at("lr").get<double>(),
          .clip = c.at("max_norm").get<double>(),
          .seed = 1};
}

void load_parameters(strata::lm::lstm_lm& model, const json& f) {
  for (const auto& p : model.parameters()) {
    const json& t = f.at("params").at(p.name);
    BOOST_REQUIRE_MESSAGE(shape(t) == p.shape, p.name << " has the fixture's shape");
    const std::vector<float> v = tensor(t);
    std::copy(v.begin(), v.end(), p.value.begin());
  }
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(blas_single_threaded);

BOOST_AUTO_TEST_SUITE(lm_step)

BOOST_AUTO_TEST_CASE(parameters_are_named_and_ordered_as_pytorch_names_them) {
  if (!std::filesystem::exists(fixture_path)) return;
  const json f = load_fixture();
  strata::lm::lstm_lm model(fixture_config(f));
  std::vector<std::string> names;
  for (const auto& p : model.parameters()) names.push_back(p.name);
  BOOST_TEST(names == f.at("param_names").get<std::vector<std::string>>(), boost::test_tools::per_element());
  BOOST_TEST(model.parameter_count() == 632U);
}

BOOST_AUTO_TEST_CASE(one_clipped_sgd_step_matches_pytorch) {
  if (!std::filesystem::exists(fixture_path)) {
    BOOST_TEST_MESSAGE("no PyTorch fixture at " << fixture_path << "; skipped");
    return;
  }
  worst_error = 0;
  const json f = load_fixture();
  const json& v = f.at("sgd");
  const auto tokens = ids(f.at("tokens")), targets = ids(f.at("targets"));
  strata::lm::lstm_lm model(fixture_config(f));
  load_parameters(model, f);

  check_number(model.forward_backward(tokens.data(), targets.data()), v.at("loss").get<double>(), "loss");
  for (const auto& p : model.parameters()) check(p.grad, v.at("grads").at(p.name), "grad " + p.name);
  check_number(model.clip(), v.at("grad_norm").get<double>(), "grad_norm");
  for (const auto& p : model.parameters()) check(p.grad, v.at("clipped_grads").at(p.name), "clipped grad " + p.name);
  model.sgd();
  for (const auto& p : model.parameters()) check(p.value, v.at("params_after").at(p.name), "params_after " + p.name);

  // step() is exactly forward_backward + clip + sgd.
  strata::lm::lstm_lm stepped(fixture_config(f));
  load_parameters(stepped, f);
  const float loss = stepped.step(tokens.data(), targets.data());
  check_number(loss, v.at("loss").get<double>(), "step() loss");
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const auto& a = model.parameters()[i].value;
    const auto& b = stepped.parameters()[i].value;
    BOOST_TEST(std::equal(a.begin(), a.end(), b.begin()), "step() updates " << model.parameters()[i].name << " identically");
  }
  BOOST_TEST_MESSAGE("lm_step: largest relative error against PyTorch " << worst_error);
}

BOOST_AUTO_TEST_CASE(repeated_steps_lower_the_loss_on_a_fixed_batch) {
  strata::lm::lstm_lm model({.vocab = 13, .embed = 4, .layers = 2, .hidden = 16, .batch = 3, .seq = 5, .lr = 1.0, .clip = 5, .seed = 3});
  std::vector<std::int32_t> tokens(15), targets(15);
  for (std::size_t i = 0; i < 15; ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 5 + 1) % 13);
    targets[i] = static_cast<std::int32_t>((i * 7 + 2) % 13);
  }
  const float first = model.step(tokens.data(), targets.data());
  float last = first;
  for (int i = 0; i < 100; ++i) last = model.step(tokens.data(), targets.data());
  BOOST_TEST(std::isfinite(last));
  BOOST_TEST(last < 0.75f * first, "loss " << first << " -> " << last);
}

BOOST_AUTO_TEST_CASE(initialisation_is_pytorch_like_and_seeded) {
  const strata::lm::config c{.vocab = 50, .embed = 8, .layers = 2, .hidden = 16, .batch = 2, .seq = 3};
  strata::lm::lstm_lm a(c), b(c);
  auto d = c;
  d.seed = 99;
  strata::lm::lstm_lm other(d);
  const double bound = 1.0 / std::sqrt(16.0);
  for (std::size_t i = 0; i < a.parameters().size(); ++i) {
    const auto& p = a.parameters()[i];
    BOOST_TEST(std::equal(p.value.begin(), p.value.end(), b.parameters()[i].value.begin()), p.name << " is seeded");
    BOOST_TEST(!std::equal(p.value.begin(), p.value.end(), other.parameters()[i].value.begin()), p.name << " depends on the seed");
    if (p.name != "embedding.weight") {
      const auto [lo, hi] = std::minmax_element(p.value.begin(), p.value.end());
      BOOST_TEST((*lo >= -bound && *hi <= bound), p.name << " lies in U(-1/sqrt(H), 1/sqrt(H))");
    }
  }
  double sq = 0;
  for (float x : a.parameter("embedding.weight").value) sq += static_cast<double>(x) * x;
  BOOST_TEST(std::abs(sq / 400.0 - 1.0) < 0.25, "embedding ~ N(0, 1): mean square " << sq / 400.0);
}

BOOST_AUTO_TEST_CASE(a_token_outside_the_vocabulary_throws_and_changes_no_parameter) {
  strata::lm::lstm_lm model({.vocab = 11, .embed = 6, .layers = 2, .hidden = 5, .batch = 2, .seq = 6});
  std::vector<float> before(model.parameters().front().value.begin(), model.parameters().back().value.end());
  std::vector<std::int32_t> tokens(12, 1), targets(12, 2);
  targets[7] = 11;
  BOOST_CHECK_THROW(model.step(tokens.data(), targets.data()), std::invalid_argument);
  tokens[3] = -1;
  targets[7] = 2;
  BOOST_CHECK_THROW(model.step(tokens.data(), targets.data()), std::invalid_argument);
  const std::vector<float> after(model.parameters().front().value.begin(), model.parameters().back().value.end());
  BOOST_TEST(before == after);
}

BOOST_AUTO_TEST_CASE(a_zero_size_is_rejected_with_a_sentence) {
  BOOST_CHECK_EXCEPTION(strata::lm::lstm_lm({.layers = 0}), std::invalid_argument,
                        [](const std::invalid_argument& e) { return std::string(e.what()).find("layers") != std::string::npos; });
}

BOOST_AUTO_TEST_SUITE_END()
