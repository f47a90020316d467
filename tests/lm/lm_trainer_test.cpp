// strata::lm::train as a library: a run stopped and resumed from its checkpoint equals an
// uninterrupted one, events report every step, and bad options get one sentence.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/lm/checkpoint.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/lm/trainer.hpp"
#include "support/lm_test_support.hpp"

namespace lm_trainer_test {

namespace fs = std::filesystem;
namespace lm = strata::lm;

using strata::lm::test::fresh_dir;
using strata::lm::test::tiny;

/// Stops the run once `after` steps are done.
struct stop_after {
  std::atomic<bool> flag{false};
  std::size_t after;
  explicit stop_after(std::size_t n) : after(n) {}
};

BOOST_AUTO_TEST_SUITE(lm_trainer)

BOOST_AUTO_TEST_CASE(a_run_stopped_and_resumed_from_its_checkpoint_equals_an_uninterrupted_run) {
  const auto dir = fresh_dir("strata_trainer_resume_");
  const std::size_t steps = 8;
  std::vector<double> whole;
  lm::trainer_events ev;
  ev.on_step = [&](const lm::step_progress& p) { whole.push_back(p.loss); };
  const auto full = lm::train(tiny(dir, steps), ev);
  BOOST_REQUIRE_EQUAL(whole.size(), steps);
  BOOST_CHECK(!full.interrupted);
  BOOST_CHECK_EQUAL(full.steps, steps);
  BOOST_CHECK(std::isfinite(full.validation.loss) && full.validation.tokens > 0);

  auto o = tiny(dir, steps);
  o.checkpoint = (dir / "ck").string();
  stop_after stop(3);
  o.stop = &stop.flag;
  std::vector<double> parts;
  lm::trainer_events ev2;
  ev2.on_step = [&](const lm::step_progress& p) {
    parts.push_back(p.loss);
    if (p.step == stop.after) stop.flag = true;
  };
  const auto first = lm::train(o, ev2);
  BOOST_CHECK(first.interrupted);
  BOOST_CHECK_EQUAL(first.steps, 3u);
  stop.flag = false;
  stop.after = 0;
  const auto second = lm::train(o, ev2);
  BOOST_CHECK(second.setup.resumed);
  BOOST_CHECK_EQUAL(second.setup.first_step, 3u);
  BOOST_CHECK_EQUAL(second.steps_this_run, steps - 3);
  BOOST_REQUIRE_EQUAL(parts.size(), steps);
  for (std::size_t i = 0; i < steps; ++i) BOOST_CHECK_CLOSE(parts[i], whole[i], 1e-4);
  BOOST_CHECK_CLOSE(second.validation.loss, full.validation.loss, 1e-4);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(the_carried_state_is_on_by_default_and_a_resume_needs_it_to_continue_exactly) {
  const auto dir = fresh_dir("strata_trainer_carry_");
  const std::size_t steps = 8;
  std::vector<double> whole;
  lm::trainer_events ev;
  ev.on_step = [&](const lm::step_progress& p) { whole.push_back(p.loss); };
  const auto full = lm::train(tiny(dir, steps), ev);
  BOOST_TEST(full.setup.carry_state);
  // Off by default where it cannot apply: accumulated windows are not column streams.
  auto acc = tiny(dir, 2);
  acc.accumulate = 2;
  BOOST_TEST(!lm::train(acc, {}).setup.carry_state);

  // Stopped after 3 steps: the checkpoint holds the state each layer carries into step 4.
  auto o = tiny(dir, steps);
  o.checkpoint = (dir / "ck").string();
  stop_after stop(3);
  o.stop = &stop.flag;
  lm::trainer_events ev2;
  ev2.on_step = [&](const lm::step_progress& p) {
    if (p.step == stop.after) stop.flag = true;
  };
  lm::train(o, ev2);
  auto ck = lm::load_checkpoint(o.checkpoint);
  BOOST_REQUIRE(ck.has_value());
  BOOST_REQUIRE_EQUAL(ck->carried_state.size(), 2 * o.layers);
  double sum = 0;
  for (const auto& t : ck->carried_state) {
    BOOST_TEST(t.values.size() == o.batch * o.hidden);
    for (float v : t.values) sum += std::abs(v);
  }
  BOOST_TEST(sum > 0.0);
  // The same checkpoint without its state resumes from zeros: step 4 leaves the uninterrupted
  // run (with it, the resume test above equals it), so the state is what makes the resume exact.
  ck->carried_state.clear();
  BOOST_REQUIRE(!lm::save_checkpoint(o.checkpoint, *ck));
  stop.flag = false;
  stop.after = 4;
  std::vector<double> resumed;
  ev2.on_step = [&](const lm::step_progress& p) {
    resumed.push_back(p.loss);
    if (p.step == stop.after) stop.flag = true;
  };
  lm::train(o, ev2);
  BOOST_REQUIRE_EQUAL(resumed.size(), 1u);
  BOOST_TEST(std::abs(resumed[0] - whole[3]) > 1e-6, "step 4 from zeros " << resumed[0] << ", carried " << whole[3]);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(the_result_reports_the_plan_its_ideal_step_and_a_log_line_per_step) {
  const auto dir = fresh_dir("strata_trainer_log_");
  auto o = tiny(dir, 3);
  o.log = (dir / "log.jsonl").string();
  std::size_t starts = 0;
  lm::trainer_events ev;
  ev.on_start = [&](const lm::training_setup& s) {
    ++starts;
    BOOST_CHECK_EQUAL(s.layer_counts.size(), 2u);
    BOOST_CHECK_EQUAL(s.total_steps, 3u);
  };
  const auto r = lm::train(o, ev);
  BOOST_CHECK_EQUAL(starts, 1u);
  BOOST_CHECK_EQUAL(r.losses.size(), 3u);
  BOOST_CHECK_EQUAL(r.stage_forward_ms.size(), 2u);
  BOOST_CHECK_GT(r.ideal_step_ms, 0.0);
  BOOST_CHECK(r.ideal_bubble >= 0.0 && r.ideal_bubble < 1.0);
  BOOST_CHECK(!r.plan_text.empty());
  std::ifstream log(o.log);
  std::size_t lines = 0;
  for (std::string line; std::getline(log, line);) ++lines;
  BOOST_CHECK_EQUAL(lines, 3u + 1u + 1u + 1u);  // steps, the final validation, the closing sample, the summary
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_bad_option_gets_one_sentence_naming_it) {
  const auto dir = fresh_dir("strata_trainer_bad_");
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
  o.lr = std::nan("");
  expect(o, "--lr must be a positive number");
  o = tiny(dir, 2);
  o.schedule = "zigzag";
  expect(o, "--schedule");
  o = tiny(dir, 2);
  o.devices = "sim:2";
  expect(o, "compute nothing");
  o = tiny(dir, 2);
  o.corpus = (dir / "missing.txt").string();
  expect(o, "missing.txt");
  o = tiny(dir, 2);
  o.log = dir.string();
  expect(o, "is a directory");
  fs::remove_all(dir);
}

// The ideal step of the --log summary (lm_pipeline::ideal) across ranks: each cut pays the link's
// latency and one micro-batch's activation over its bandwidth, forward and back, the link's
// direction being busy while a message crosses. Two stages, two micro-batches of 1F1B, stage
// times (ms) forward {2, 3}, backward {4, 5}; a cut carries 4 B x seq 8 x 2 columns x hidden 16
// = 1024 B, which a 2.048 MB/s link takes 0.5 ms to pass, plus 1 ms of latency. By hand:
//   free:   stage 0 F0 0-2 F1 2-4; stage 1 F0 2-5 B0 5-10 F1 10-13 B1 13-18; stage 0 B0 10-14
//           B1 18-22: 22 ms.
//   linked: act0 leaves at 2, arrives 3.5; act1 4 -> 5.5; stage 1 F0 3.5-6.5 B0 6.5-11.5 F1
//           11.5-14.5 B1 14.5-19.5; grad0 11.5 -> 13, grad1 19.5 -> 21; stage 0 B0 13-17
//           B1 21-25: 25 ms.
BOOST_AUTO_TEST_CASE(the_ideal_step_with_a_slow_link_between_ranks_pays_it_on_each_cut) {
  const auto c = lm::test::config_of(20, 4, 16, 2, 8, 4, 2);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  const auto kind = strata::pipeline::schedule_kind::one_f_one_b;
  lm::lm_pipeline free(sys, strata::make_devices("cpu:2"), c, kind, {1, 1});
  lm::lm_pipeline linked(sys, strata::make_devices("cpu:2"), c, kind, {1, 1},
                         lm::lm_pipeline_options{.link = strata::pipeline::link_model::measured(1000, 0.002048)});
  lm::step_result r;
  r.stage_forward_ms = {2, 3};
  r.stage_backward_ms = {4, 5};
  const auto without = free.ideal(r);
  const auto with = linked.ideal(r);
  BOOST_REQUIRE(without.has_value());
  BOOST_REQUIRE(with.has_value());
  BOOST_TEST(without->step_ms == 22.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(with->step_ms == 25.0, boost::test_tools::tolerance(1e-9));
  // The bubble is over the longer step: the same 28 ms of work in 2 x 25 ms.
  BOOST_TEST(with->bubble == 1.0 - 28.0 / 50.0, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(a_pipeline_refuses_a_link_of_no_bandwidth) {
  const auto c = lm::test::config_of(20, 4, 16, 2, 8, 4, 2);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  BOOST_CHECK_THROW(lm::lm_pipeline(sys, strata::make_devices("cpu:2"), c, strata::pipeline::schedule_kind::gpipe, {1, 1},
                                    lm::lm_pipeline_options{.link = strata::pipeline::link_model{0, 0}}),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_trainer_test
