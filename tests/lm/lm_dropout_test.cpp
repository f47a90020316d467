// Dropout (issue 15): the gradient with a fixed mask against float64 finite differences of an
// independent model, pipelines of every schedule against one device with dropout on, masks that
// follow the step index, and bad probabilities refused.

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lm_reference_model.hpp"
#include "strata/actor_system.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/lm/inference.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/lm/trainer.hpp"
#include "support/lm_test_support.hpp"

namespace lm_dropout_test {

namespace lm = strata::lm;
using strata::pipeline::schedule_kind;

BOOST_AUTO_TEST_SUITE(lm_dropout)

BOOST_AUTO_TEST_CASE(the_dropout_gradient_matches_float64_finite_differences_with_the_same_mask) {
  lm::config c = lm::test::config_of(7, 3, 4, 4, 3, 2);
  c.residual = true;  // a residual layer adds its dropped input
  c.dropout = 0.4;
  c.lr = 1.0;    // plain SGD at rate 1: the update is the gradient
  c.clip = 1e9;  // never clips
  c.seed = 11;
  std::mt19937 rng(23);
  std::vector<std::int32_t> tokens, targets;
  lm::test::random_tokens(c, rng, tokens, targets);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  for (std::vector<std::size_t> counts : {std::vector<std::size_t>{4}, std::vector<std::size_t>{1, 3}, std::vector<std::size_t>{3, 1}}) {
    lm::lm_pipeline pipe(sys, strata::make_devices("cpu:" + std::to_string(counts.size())), c, schedule_kind::one_f_one_b,
                         counts);
    pipe.set_step_index(5);
    auto before = pipe.parameters();
    BOOST_REQUIRE(before.has_value());
    auto step = pipe.train_step(tokens, targets);
    BOOST_REQUIRE_MESSAGE(step.has_value(), (step ? "" : step.error().to_string()));
    BOOST_TEST(pipe.step_index() == 6u);
    auto after = pipe.parameters();
    BOOST_REQUIRE(after.has_value());

    lm::test::reference_model ref{c, {}, 5};
    for (const auto& np : *before) ref.p[np.name] = std::vector<double>(np.values.begin(), np.values.end());
    const double ref_loss = ref.loss(tokens, targets);
    BOOST_TEST_CONTEXT(counts.size() << " stage(s), first " << counts.front() << " layers") {
      BOOST_TEST(std::abs(ref_loss - step->loss) <= 1e-5 * ref_loss);
      // The masks matter: without them (evaluation) the loss is another.
      lm::model host(c, *before);
      auto state = host.zero_state(c.batch);
      const double eval = host.loss_sum(tokens.data(), targets.data(), c.seq, state) / static_cast<double>(c.seq * c.batch);
      BOOST_TEST(std::abs(eval - step->loss) > 1e-3);
      const auto [worst, largest] = lm::test::check_gradient(ref, *before, *after, tokens, targets);
      BOOST_TEST(largest > 1e-3);
      BOOST_TEST(worst <= 2e-4 * largest);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_pipeline_with_dropout_trains_like_one_device) {
  lm::config c = lm::test::config_of(13, 5, 6, 5, 6, 4);
  c.residual = true;
  c.dropout = 0.3;
  // Momentum: its update is linear in the gradient, so the splits' different summation orders stay
  // at rounding level (Adam's normalised step magnifies them where dropout leaves gradients ~0).
  c.optimizer = lm::optimizer_kind::momentum;
  c.lr = 0.05;
  c.clip = 0.5;
  c.seed = 4;
  std::mt19937 rng(31);
  std::vector<std::vector<std::int32_t>> tokens(3), targets(3);
  for (int s = 0; s < 3; ++s) lm::test::random_tokens(c, rng, tokens[s], targets[s]);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto train = [&](const char* devices, std::vector<std::size_t> counts, schedule_kind kind, std::size_t mb,
                   std::size_t chunks, double dropout) {
    lm::config cc = c;
    cc.micro_batches = mb;
    cc.chunks = chunks;
    cc.dropout = dropout;
    lm::lm_pipeline p(sys, strata::make_devices(devices), cc, kind, counts,
                      lm::lm_pipeline_options{.copy_activations = mb == 2});
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) {
      auto r = p.train_step(tokens[s], targets[s]);
      BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
      losses.push_back(r->loss);
    }
    auto params = p.parameters();
    BOOST_REQUIRE(params.has_value());
    return std::pair{losses, *params};
  };
  auto [ref_losses, ref] = train("cpu:1", {5}, schedule_kind::gpipe, 1, 1, c.dropout);
  auto [plain_losses, plain] = train("cpu:1", {5}, schedule_kind::gpipe, 1, 1, 0.0);
  BOOST_TEST(std::abs(plain_losses[0] - ref_losses[0]) > 1e-3);  // the masks change the loss
  struct variant {
    const char* devices;
    std::vector<std::size_t> counts;
    schedule_kind kind;
    std::size_t mb, chunks;
  };
  const variant variants[] = {{"cpu:2", {2, 3}, schedule_kind::one_f_one_b, 2, 1},
                              {"cpu:2", {3, 2}, schedule_kind::wavefront, 1, 3},
                              {"cpu:3", {1, 2, 2}, schedule_kind::gpipe, 4, 1}};
  for (const auto& v : variants) {
    auto [losses, params] = train(v.devices, v.counts, v.kind, v.mb, v.chunks, c.dropout);
    BOOST_TEST_CONTEXT(v.devices << " " << strata::pipeline::to_string(v.kind) << " M=" << v.mb << " C=" << v.chunks) {
      for (int s = 0; s < 3; ++s) BOOST_TEST(std::abs(losses[s] - ref_losses[s]) <= 1e-5 * std::abs(ref_losses[s]));
      BOOST_REQUIRE(params.size() == ref.size());
      for (std::size_t i = 0; i < params.size(); ++i) BOOST_TEST(lm::test::max_rel_diff(params[i].values, ref[i].values) <= 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_masks_follow_the_step_index_not_the_calls) {
  lm::config c = lm::test::config_of(9, 4, 5, 3, 4, 3);
  c.dropout = 0.5;
  c.lr = 0;  // the weights stay: only the masks can change the loss
  c.seed = 2;
  std::mt19937 rng(5);
  std::vector<std::int32_t> tokens, targets;
  lm::test::random_tokens(c, rng, tokens, targets);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  lm::lm_pipeline p(sys, strata::make_devices("cpu:1"), c, schedule_kind::gpipe, {3});
  auto loss_at = [&](std::uint64_t step) {
    p.set_step_index(step);
    auto r = p.train_step(tokens, targets);
    BOOST_REQUIRE(r.has_value());
    return r->loss;
  };
  const double first = loss_at(7), other = loss_at(8), again = loss_at(7);
  BOOST_TEST(first == again);
  BOOST_TEST(std::abs(first - other) > 1e-4);
}

BOOST_AUTO_TEST_CASE(a_dropout_outside_0_to_1_is_refused_in_one_sentence) {
  for (double p : {1.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    lm::config c;
    c.dropout = p;
    BOOST_CHECK_EXCEPTION(c.validate(), std::invalid_argument,
                          [](const std::invalid_argument& e) { return std::string(e.what()) == "dropout must lie in [0, 1)"; });
    lm::trainer_options o;
    o.dropout = p;
    BOOST_CHECK_EXCEPTION(lm::train(o), lm::input_error, [](const lm::input_error& e) {
      return std::string(e.what()) == "--dropout must be a number in [0, 1)";
    });
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_dropout_test
