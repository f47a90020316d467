// The training options of issue 15: optimizers applied by the KVStore (and resumed exactly from a
// checkpoint), residual connections (gradient against float64 finite differences of an independent
// reference, pipeline against one device) and learning-rate schedules.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/lm/checkpoint.hpp"
#include "strata/lm/data.hpp"
#include "strata/lm/inference.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/lm/trainer.hpp"
#include "lm_reference_model.hpp"
#include "support/lm_test_support.hpp"

namespace lm_training_options_test {

namespace fs = std::filesystem;
namespace lm = strata::lm;

using lm::test::fresh_dir;

/// lm::test::tiny with a third layer (it has a residual connection) and no warmup.
lm::trainer_options tiny(const fs::path& dir, std::size_t steps) {
  lm::trainer_options o = lm::test::tiny(dir, steps);
  o.layers = 3;
  o.warmup_steps = 0;  // the rates these tests expect start at the base rate (a test sets its warmup)
  return o;
}

BOOST_AUTO_TEST_SUITE(lm_training_options)

BOOST_AUTO_TEST_CASE(the_residual_gradient_matches_float64_finite_differences_of_an_independent_model) {
  lm::config c = lm::test::config_of(7, 3, 4, 4, 3, 2);
  c.residual = true;
  c.lr = 1.0;      // plain SGD at rate 1: the update is the gradient
  c.clip = 1e9;    // never clips
  c.seed = 3;
  std::mt19937 rng(17);
  std::vector<std::int32_t> tokens, targets;
  lm::test::random_tokens(c, rng, tokens, targets);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  for (std::vector<std::size_t> counts : {std::vector<std::size_t>{4}, std::vector<std::size_t>{2, 2}}) {
    lm::lm_pipeline pipe(sys, strata::make_devices("cpu:" + std::to_string(counts.size())), c,
                         strata::pipeline::schedule_kind::one_f_one_b, counts);
    auto before = pipe.parameters();
    BOOST_REQUIRE(before.has_value());
    auto step = pipe.train_step(tokens, targets);
    BOOST_REQUIRE_MESSAGE(step.has_value(), (step ? "" : step.error().to_string()));
    auto after = pipe.parameters();
    BOOST_REQUIRE(after.has_value());

    lm::test::reference_model ref{c, {}};
    for (const auto& np : *before) ref.p[np.name] = std::vector<double>(np.values.begin(), np.values.end());
    BOOST_TEST(std::abs(ref.loss(tokens, targets) - step->loss) <= 1e-5 * ref.loss(tokens, targets));
    // The host model (evaluation, generation) computes the same residual forward.
    lm::model host(c, *before);
    auto state = host.zero_state(c.batch);
    BOOST_TEST(std::abs(host.loss_sum(tokens.data(), targets.data(), c.seq, state) / static_cast<double>(c.seq * c.batch) -
                        step->loss) <= 1e-5 * step->loss);
    const auto [worst, largest] = lm::test::check_gradient(ref, *before, *after, tokens, targets);
    BOOST_TEST_CONTEXT(counts.size() << " stage(s)") {
      BOOST_TEST(largest > 1e-3);
      BOOST_TEST(worst <= 2e-4 * largest);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_residual_pipeline_with_adam_trains_like_one_device) {
  lm::config c = lm::test::config_of(13, 5, 6, 5, 6, 4);
  c.residual = true;
  c.optimizer = lm::optimizer_kind::adamw;
  c.lr = 0.01;
  c.weight_decay = 0.01;
  c.clip = 0.5;
  c.seed = 5;
  std::mt19937 rng(9);
  std::vector<std::vector<std::int32_t>> tokens(3), targets(3);
  for (int s = 0; s < 3; ++s) lm::test::random_tokens(c, rng, tokens[s], targets[s]);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto train = [&](const char* devices, std::vector<std::size_t> counts, strata::pipeline::schedule_kind kind,
                   std::size_t mb, std::size_t chunks) {
    lm::config cc = c;
    cc.micro_batches = mb;
    cc.chunks = chunks;
    lm::lm_pipeline p(sys, strata::make_devices(devices), cc, kind, counts);
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) {
      if (s == 2) BOOST_REQUIRE(p.set_learning_rate(0.004).has_value());  // keeps Adam's state
      auto r = p.train_step(tokens[s], targets[s]);
      BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
      losses.push_back(r->loss);
    }
    auto params = p.parameters();
    BOOST_REQUIRE(params.has_value());
    return std::pair{losses, *params};
  };
  using strata::pipeline::schedule_kind;
  auto [ref_losses, ref] = train("cpu:1", {5}, schedule_kind::gpipe, 1, 1);
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
    auto [losses, params] = train(v.devices, v.counts, v.kind, v.mb, v.chunks);
    BOOST_TEST_CONTEXT(v.devices << " " << strata::pipeline::to_string(v.kind) << " M=" << v.mb << " C=" << v.chunks) {
      for (int s = 0; s < 3; ++s) BOOST_TEST(std::abs(losses[s] - ref_losses[s]) <= 1e-5 * std::abs(ref_losses[s]));
      BOOST_REQUIRE(params.size() == ref.size());
      for (std::size_t i = 0; i < params.size(); ++i) BOOST_TEST(lm::test::max_rel_diff(params[i].values, ref[i].values) <= 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_schedules_give_the_rates_their_formulas_define) {
  lm::lr_schedule s{"constant", 0.1, 0, 0.5, 10, 100};
  BOOST_TEST(lm::scheduled_lr(s, 0) == 0.1);
  BOOST_TEST(lm::scheduled_lr(s, 99) == 0.1);
  s.warmup_steps = 4;  // steps 0..3 ramp to the base rate linearly
  BOOST_TEST(lm::scheduled_lr(s, 0) == 0.025, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lm::scheduled_lr(s, 2) == 0.075, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lm::scheduled_lr(s, 4) == 0.1);
  s.kind = "step";  // halves every 10 steps after the warmup
  BOOST_TEST(lm::scheduled_lr(s, 13) == 0.1);
  BOOST_TEST(lm::scheduled_lr(s, 14) == 0.05, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lm::scheduled_lr(s, 34) == 0.0125, boost::test_tools::tolerance(1e-12));
  s.kind = "cosine";  // from the base rate after warmup to 0 at the end
  BOOST_TEST(lm::scheduled_lr(s, 4) == 0.1, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lm::scheduled_lr(s, 52) == 0.05, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lm::scheduled_lr(s, 28) == 0.1 * 0.5 * (1 + std::cos(std::acos(-1.0) * 0.25)), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lm::scheduled_lr(s, 100) == 0.0, boost::test_tools::tolerance(1e-12));
  s.kind = "plateau";  // the factor its decays reached
  BOOST_TEST(lm::scheduled_lr(s, 50, 0.25) == 0.025, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(lm::scheduled_lr(s, 1, 0.25) == 0.1 * 0.25 * 2 / 4, boost::test_tools::tolerance(1e-12));
  s.kind = "zigzag";
  BOOST_CHECK_THROW(lm::scheduled_lr(s, 5), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_plateau_schedule_decays_the_rate_after_each_validation_that_does_not_improve) {
  const auto dir = fresh_dir("strata_plateau_");
  auto o = tiny(dir, 12);
  o.lr = 0.05;  // large enough for the validation loss to stall now and then
  o.lr_schedule = "plateau";
  o.lr_decay = 0.5;
  o.patience = 0;
  o.val_every = 1;
  std::vector<double> rates, vals;
  lm::trainer_events ev;
  ev.on_step = [&](const lm::step_progress& p) { rates.push_back(p.lr); };
  ev.on_validation = [&](std::size_t, bool, const lm::eval_result& v) { vals.push_back(v.loss); };
  lm::train(o, ev);
  BOOST_REQUIRE_EQUAL(rates.size(), 12u);
  BOOST_REQUIRE_GE(vals.size(), 11u);
  // The reference: ReduceLROnPlateau(mode min, factor 0.5, patience 0, threshold 1e-4 rel).
  double best = INFINITY, scale = 1;
  for (std::size_t k = 0; k < 12; ++k) {
    BOOST_TEST(rates[k] == 0.05 * scale, boost::test_tools::tolerance(1e-12));
    if (k < 11) {
      if (vals[k] < best * (1 - 1e-4)) best = vals[k];
      else scale *= 0.5;
    }
  }
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(every_optimizer_stopped_and_resumed_equals_an_uninterrupted_run_bit_for_bit) {
  const auto dir = fresh_dir("strata_optimizer_resume_");
  for (const char* name : {"sgd", "momentum", "nesterov", "adam", "adamw"}) {
    BOOST_TEST_CONTEXT(name) {
      auto o = tiny(dir, 8);
      o.optimizer = name;
      o.weight_decay = 0.01;
      o.lr_schedule = "cosine";  // a new rate every step: the state survives each change
      o.warmup_steps = 2;
      o.checkpoint = (dir / (std::string(name) + "-whole")).string();
      std::vector<double> whole, parts;
      lm::trainer_events ev;
      ev.on_step = [&](const lm::step_progress& p) { whole.push_back(p.loss); };
      lm::train(o, ev);

      o.checkpoint = (dir / (std::string(name) + "-parts")).string();
      std::atomic<bool> stop{false};
      o.stop = &stop;
      lm::trainer_events ev2;
      ev2.on_step = [&](const lm::step_progress& p) {
        parts.push_back(p.loss);
        if (p.step == 3) stop = true;
      };
      const auto first = lm::train(o, ev2);
      BOOST_TEST(first.interrupted);
      stop = false;
      const auto second = lm::train(o, ev2);
      BOOST_TEST(second.setup.first_step == 3u);
      BOOST_REQUIRE_EQUAL(parts.size(), whole.size());
      for (std::size_t i = 0; i < whole.size(); ++i) BOOST_TEST(parts[i] == whole[i]);
      auto a = lm::load_checkpoint((dir / (std::string(name) + "-whole")).string());
      auto b = lm::load_checkpoint((dir / (std::string(name) + "-parts")).string());
      BOOST_REQUIRE(a.has_value() && b.has_value());
      BOOST_TEST(std::string(lm::to_string(a->config.optimizer)) == name);
      BOOST_TEST(a->config.residual);
      BOOST_TEST(a->optimizer_state.empty() == (std::string(name) == "sgd"));
      BOOST_TEST(a->optimizer_state == b->optimizer_state);  // weights, versions, moments, steps
      BOOST_REQUIRE_EQUAL(a->parameters.size(), b->parameters.size());
      for (std::size_t i = 0; i < a->parameters.size(); ++i) BOOST_TEST(a->parameters[i].values == b->parameters[i].values);
    }
  }
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(an_accumulated_step_applies_the_mean_gradient_of_its_consecutive_windows) {
  const auto dir = fresh_dir("strata_accumulate_");
  auto o = tiny(dir, 1);
  o.optimizer = "sgd";
  o.lr = 0.5;
  o.clip = 1e9;  // never clips: the update is lr times the mean gradient
  o.accumulate = 3;
  o.checkpoint = (dir / "ck").string();
  const auto r = lm::train(o);
  BOOST_TEST(r.setup.accumulate == 3u);
  auto ck = lm::load_checkpoint(o.checkpoint);
  BOOST_REQUIRE(ck.has_value());

  // The reference: one plain step per window from the same start, gradients averaged by hand.
  const auto split = lm::split_text(lm::read_text_file(o.corpus), o.val_fraction);
  const auto vocab = lm::vocabulary::build(lm::token_kind::chars, split.train);
  const auto ids = vocab.encode(split.train);
  BOOST_REQUIRE(ids.has_value());
  lm::token_batches batches(*ids, o.batch, o.seq);
  BOOST_TEST(r.setup.windows == batches.windows() / 3);
  lm::config c = lm::test::config_of(vocab.size(), o.embed, o.hidden, o.layers, o.seq, o.batch);
  c.residual = true;
  c.lr = 1.0;
  c.clip = 1e9;
  c.seed = o.seed;
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  lm::lm_pipeline pipe(sys, strata::make_devices("cpu:1"), c, strata::pipeline::schedule_kind::gpipe, {o.layers});
  auto start = pipe.parameters();
  BOOST_REQUIRE(start.has_value());
  std::vector<std::vector<float>> expect;
  for (const auto& p : *start) expect.push_back(p.values);
  std::vector<std::int32_t> x, y;
  for (std::size_t w = 0; w < 3; ++w) {
    BOOST_REQUIRE(pipe.set_parameters(*start).has_value());
    batches.window(w, x, y);
    BOOST_REQUIRE(pipe.train_step(x, y).has_value());
    auto after = pipe.parameters();
    BOOST_REQUIRE(after.has_value());
    for (std::size_t i = 0; i < expect.size(); ++i)
      for (std::size_t k = 0; k < expect[i].size(); ++k)
        expect[i][k] -= static_cast<float>(0.5 / 3 * (static_cast<double>((*start)[i].values[k]) - (*after)[i].values[k]));
  }
  BOOST_REQUIRE_EQUAL(ck->parameters.size(), expect.size());
  for (std::size_t i = 0; i < expect.size(); ++i)
    BOOST_TEST_CONTEXT(ck->parameters[i].name) { BOOST_TEST(lm::test::max_rel_diff(ck->parameters[i].values, expect[i]) <= 1e-5); }
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(bad_optimizer_and_schedule_settings_get_one_sentence_each) {
  const auto dir = fresh_dir("strata_optimizer_bad_");
  auto expect = [&](lm::trainer_options o, const std::string& words) {
    try {
      lm::train(o);
      BOOST_ERROR("expected input_error containing '" << words << "'");
    } catch (const lm::input_error& e) {
      const std::string what = e.what();
      BOOST_CHECK_MESSAGE(what.find(words) != std::string::npos, what);
      BOOST_CHECK_MESSAGE(what.find('\n') == std::string::npos, what);
    }
  };
  auto o = tiny(dir, 2);
  o.optimizer = "adagrad";
  expect(o, "--optimizer 'adagrad' is not one of");
  o = tiny(dir, 2);
  o.momentum = std::nan("");
  expect(o, "--momentum must be a number >= 0");
  o = tiny(dir, 2);
  o.weight_decay = -1;
  expect(o, "--weight-decay must be a number >= 0");
  o = tiny(dir, 2);
  o.beta2 = 1.0;
  expect(o, "--beta2 must be a number in [0, 1)");
  o = tiny(dir, 2);
  o.eps = 0;
  expect(o, "--eps must be a positive number");
  o = tiny(dir, 2);
  o.lr_schedule = "linear";
  expect(o, "--lr-schedule 'linear' is not one of");
  o = tiny(dir, 2);
  o.accumulate = 2;
  o.carry_state = true;
  expect(o, "--carry-state needs --accumulate 1");
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_training_options_test
