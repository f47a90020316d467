// The model-parallel LSTM LM: one device against PyTorch, every pipeline against one device.

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/lm_test_support.hpp"
#include "strata/lm/inference.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"

namespace lm_pipeline_test {

using strata::lm::lm_pipeline;
using strata::lm::named_parameter;
using strata::pipeline::schedule_kind;

using rel_diff_fn = double (*)(const std::vector<float>&, const std::vector<float>&);
constexpr rel_diff_fn rel_diff = strata::lm::test::max_rel_diff;

std::vector<float> floats(const nlohmann::json& t) { return t.at("data").get<std::vector<float>>(); }

std::vector<std::size_t> even_counts(std::size_t layers, std::size_t stages) {
  std::vector<std::size_t> c(stages, layers / stages);
  for (std::size_t i = 0; i < layers % stages; ++i) ++c[i];
  return c;
}

BOOST_AUTO_TEST_SUITE(lm_pipeline_training)

BOOST_AUTO_TEST_CASE(one_device_step_matches_the_step_recorded_with_pytorch) {
  std::ifstream in(STRATA_TEST_FIXTURES_DIR "/torch/lm_step.json");
  BOOST_REQUIRE(in.good());
  auto fx = nlohmann::json::parse(in);
  const auto& cfg = fx.at("config");
  strata::lm::config c;
  c.vocab = cfg.at("vocab_size");
  c.embed = cfg.at("embed_size");
  c.hidden = cfg.at("hidden_size");
  c.layers = cfg.at("num_layers");
  c.seq = cfg.at("seq_len");
  c.batch = cfg.at("batch");
  c.clip = cfg.at("max_norm");
  c.lr = fx.at("sgd").at("optimizer").at("lr");
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  lm_pipeline p(sys, strata::make_devices("cpu:1"), c, schedule_kind::gpipe, {c.layers});
  std::vector<named_parameter> params;
  for (auto& [name, t] : fx.at("params").items()) params.push_back({name, floats(t)});
  BOOST_REQUIRE(p.set_parameters(params).has_value());
  auto tokens = fx.at("tokens").at("data").get<std::vector<std::int32_t>>();
  auto targets = fx.at("targets").at("data").get<std::vector<std::int32_t>>();
  auto r = p.train_step(tokens, targets);
  BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
  BOOST_TEST(r->loss == fx.at("sgd").at("loss").get<double>(), boost::test_tools::tolerance(1e-5));
  BOOST_TEST(r->grad_norm == fx.at("sgd").at("grad_norm").get<double>(), boost::test_tools::tolerance(1e-4));
  auto after = p.parameters();
  BOOST_REQUIRE(after.has_value());
  BOOST_REQUIRE(after->size() == fx.at("sgd").at("params_after").size());
  for (const auto& np : *after) {
    auto expected = floats(fx.at("sgd").at("params_after").at(np.name));
    BOOST_TEST_CONTEXT(np.name) { BOOST_TEST(rel_diff(np.values, expected) <= 1e-4); }
  }
}

BOOST_AUTO_TEST_CASE(every_schedule_device_count_and_micro_batch_count_trains_like_one_device) {
  strata::lm::config c = strata::lm::test::config_of(17, 6, 7, 4, 6, 4);
  c.lr = 0.7;
  c.clip = 0.5;  // clipping is active: the global norm crosses stages
  c.seed = 11;
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab) - 1);
  std::vector<std::vector<std::int32_t>> tokens(2), targets(2);
  for (int s = 0; s < 2; ++s)
    for (std::size_t i = 0; i < c.seq * c.batch; ++i) {
      tokens[s].push_back(id(rng));
      targets[s].push_back(id(rng));
    }
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto train = [&](const char* devices, std::size_t stages, schedule_kind kind, std::size_t mb, std::size_t chunks,
                   bool copy = false) {
    strata::lm::config cc = c;
    cc.micro_batches = mb;
    cc.chunks = chunks;
    lm_pipeline p(sys, strata::make_devices(devices), cc, kind, even_counts(c.layers, stages),
                  strata::lm::lm_pipeline_options{.copy_activations = copy});
    std::vector<double> losses;
    for (int s = 0; s < 2; ++s) {
      auto r = p.train_step(tokens[s], targets[s]);
      BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
      losses.push_back(r->loss);
    }
    auto params = p.parameters();
    BOOST_REQUIRE(params.has_value());
    return std::pair{losses, *params};
  };
  auto [ref_losses, ref] = train("cpu:1", 1, schedule_kind::gpipe, 1, 1);
  struct variant {
    const char* devices;
    std::size_t stages;
    schedule_kind kind;
    std::size_t mb, chunks;
    bool copy = false;  // activations and gradients copied between stages, as between GPUs
  };
  const variant variants[] = {
      {"cpu:2", 2, schedule_kind::gpipe, 1, 1},     {"cpu:2", 2, schedule_kind::gpipe, 4, 1},
      {"cpu:2", 2, schedule_kind::one_f_one_b, 2, 1}, {"cpu:4", 4, schedule_kind::one_f_one_b, 4, 1},
      {"cpu:3", 3, schedule_kind::one_f_one_b, 2, 1}, {"cpu:2", 2, schedule_kind::wavefront, 2, 3},
      {"cpu:4", 4, schedule_kind::wavefront, 1, 2},   {"cpu:1", 1, schedule_kind::wavefront, 4, 6},
      {"cpu:3", 3, schedule_kind::gpipe, 2, 1, true}, {"cpu:3", 3, schedule_kind::one_f_one_b, 4, 1, true},
      {"cpu:2", 2, schedule_kind::wavefront, 2, 3, true},
  };
  for (const auto& v : variants) {
    auto [losses, params] = train(v.devices, v.stages, v.kind, v.mb, v.chunks, v.copy);
    BOOST_TEST_CONTEXT(v.devices << " " << strata::pipeline::to_string(v.kind) << " M=" << v.mb << " C=" << v.chunks
                                 << (v.copy ? " (copies)" : "")) {
      for (int s = 0; s < 2; ++s) BOOST_TEST(std::abs(losses[s] - ref_losses[s]) <= 1e-5 * std::abs(ref_losses[s]));
      BOOST_REQUIRE(params.size() == ref.size());
      for (std::size_t i = 0; i < params.size(); ++i) {
        BOOST_TEST(params[i].name == ref[i].name);
        BOOST_TEST(rel_diff(params[i].values, ref[i].values) <= 1e-5);
      }
    }
  }
}

// Truncated BPTT across steps: the state each step ends with starts the next one.
BOOST_AUTO_TEST_CASE(a_carried_state_continues_each_column_stream_like_the_host_model) {
  strata::lm::config c = strata::lm::test::config_of(13, 5, 6, 3, 5, 4);
  c.lr = 0.5;
  c.seed = 21;
  std::mt19937 rng(17);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab) - 1);
  const std::size_t n = c.seq * c.batch, steps = 3;
  std::vector<std::vector<std::int32_t>> tokens(steps, std::vector<std::int32_t>(n)), targets = tokens;
  for (std::size_t s = 0; s < steps; ++s)
    for (std::size_t i = 0; i < n; ++i) tokens[s][i] = id(rng), targets[s][i] = id(rng);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});

  // The reference: the host model (lm_inference, no pipeline code) with the pipeline's own
  // parameters before each step, its state advanced over the previous steps' tokens.
  struct trained {
    std::vector<double> losses;
    std::vector<std::vector<named_parameter>> params_before;  // per step
    std::vector<named_parameter> final_params;
  };
  auto train = [&](const char* devices, std::size_t stages, schedule_kind kind, std::size_t mb, std::size_t chunks,
                   bool reset_before_last) {
    strata::lm::config cc = c;
    cc.micro_batches = mb;
    cc.chunks = chunks;
    lm_pipeline p(sys, strata::make_devices(devices), cc, kind, even_counts(c.layers, stages),
                  strata::lm::lm_pipeline_options{.carry_state = true});
    trained t;
    for (std::size_t s = 0; s < steps; ++s) {
      if (reset_before_last && s + 1 == steps) BOOST_REQUIRE(p.reset_state().has_value());
      t.params_before.push_back(p.parameters().value());
      auto r = p.train_step(tokens[s], targets[s]);
      BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
      t.losses.push_back(r->loss);
    }
    t.final_params = p.parameters().value();
    return t;
  };
  auto host_losses = [&](const trained& t, bool reset_before_last) {
    std::vector<double> out;
    strata::lm::model first(c, t.params_before[0]);
    auto state = first.zero_state(c.batch);
    for (std::size_t s = 0; s < steps; ++s) {
      if (reset_before_last && s + 1 == steps) state = first.zero_state(c.batch);
      strata::lm::model m(c, t.params_before[s]);
      out.push_back(m.loss_sum(tokens[s].data(), targets[s].data(), c.seq, state) / static_cast<double>(n));
    }
    return out;
  };
  const auto one = train("cpu:1", 1, schedule_kind::gpipe, 1, 1, false);
  const auto expected = host_losses(one, false);
  for (std::size_t s = 0; s < steps; ++s) BOOST_TEST(std::abs(one.losses[s] - expected[s]) <= 1e-5 * expected[s]);
  // Not by construction: from a zero state the later steps' losses differ.
  strata::lm::model m(c, one.params_before[1]);
  auto zero = m.zero_state(c.batch);
  const double from_zero = m.loss_sum(tokens[1].data(), targets[1].data(), c.seq, zero) / static_cast<double>(n);
  BOOST_TEST(std::abs(from_zero - expected[1]) > 1e-4);

  // Pipelines with micro-batches (each carries its own columns) and time chunks agree.
  for (auto [devices, stages, kind, mb, chunks] :
       {std::tuple{"cpu:3", 3, schedule_kind::one_f_one_b, 2, 1}, std::tuple{"cpu:2", 2, schedule_kind::wavefront, 2, 5},
        std::tuple{"cpu:2", 2, schedule_kind::gpipe, 4, 1}}) {
    BOOST_TEST_CONTEXT(devices << " " << strata::pipeline::to_string(kind) << " M=" << mb << " C=" << chunks) {
      auto t = train(devices, static_cast<std::size_t>(stages), kind, static_cast<std::size_t>(mb),
                     static_cast<std::size_t>(chunks), false);
      for (std::size_t s = 0; s < steps; ++s) BOOST_TEST(std::abs(t.losses[s] - one.losses[s]) <= 1e-5 * one.losses[s]);
      for (std::size_t i = 0; i < t.final_params.size(); ++i)
        BOOST_TEST(rel_diff(t.final_params[i].values, one.final_params[i].values) <= 1e-5, t.final_params[i].name);
    }
  }
  // reset_state: the last step starts from zeros again.
  const auto reset = train("cpu:2", 2, schedule_kind::one_f_one_b, 2, 1, true);
  const auto reset_expected = host_losses(reset, true);
  for (std::size_t s = 0; s < steps; ++s) BOOST_TEST(std::abs(reset.losses[s] - reset_expected[s]) <= 1e-5 * reset_expected[s]);
}

BOOST_AUTO_TEST_CASE(a_sim_pipeline_runs_its_plan_with_modelled_device_time) {
  strata::lm::config c = strata::lm::test::config_of(1000, 64, 128, 4, 8, 8, 4);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  lm_pipeline p(sys, strata::make_devices("sim:4:h200"), c, schedule_kind::one_f_one_b, {1, 1, 1, 1});
  std::vector<std::int32_t> tokens(c.seq * c.batch, 3), targets(c.seq * c.batch, 4);
  auto r = p.train_step(tokens, targets);
  BOOST_REQUIRE(r.has_value());
  BOOST_TEST(r->stage_busy_ms.size() == 4u);
  for (double b : r->stage_busy_ms) BOOST_TEST(b > 0.0);
}

BOOST_AUTO_TEST_CASE(a_device_fault_ends_the_step_with_an_error_naming_the_stage_and_step) {
  strata::lm::config c = strata::lm::test::config_of(9, 4, 5, 2, 4, 2, 2);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  lm_pipeline p(sys, strata::make_devices("cpu:2"), c, schedule_kind::one_f_one_b, {1, 1});
  std::vector<std::int32_t> tokens(8, 1), targets(8, 2);
  BOOST_REQUIRE(p.train_step(tokens, targets).has_value());
  p.inject_device_fault(1, 3);  // stage 1's third work item of step 2
  auto r = p.train_step(tokens, targets, std::chrono::seconds(30));
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST_MESSAGE(r.error().message());
  // Stage 1's device fails; stage 0's stream waits on stage 1's gradient event and adopts the
  // error, so either stage may report first — the text always carries the root cause's device.
  BOOST_TEST(r.error().message().find("failed during step 2") != std::string::npos);
  BOOST_TEST(r.error().message().find("injected device fault in work item 3 on cpu:1") != std::string::npos);
  // The next step restarts the pipeline (all for one) and trains.
  auto again = p.train_step(tokens, targets, std::chrono::seconds(30));
  BOOST_TEST(again.has_value(), (again ? "" : again.error().to_string()));
  BOOST_TEST(p.restarts() == 1u);
}

BOOST_AUTO_TEST_CASE(copied_activations_take_the_staging_buffers_and_mixed_devices_are_refused) {
  strata::lm::config c = strata::lm::test::config_of(9, 4, 5, 2, 4, 2, 2);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  std::vector<std::int32_t> tokens(8, 1), targets(8, 2);
  auto peak = [&](bool copy) {  // bytes in use on stage 1's device after a step
    auto devices = strata::make_devices("cpu:2");
    lm_pipeline p(sys, devices, c, schedule_kind::one_f_one_b, {1, 1}, strata::lm::lm_pipeline_options{.copy_activations = copy});
    BOOST_REQUIRE(p.train_step(tokens, targets).has_value());
    return devices[1].memory().bytes_in_use;
  };
  // Stage 1 receives M activations: with copies it holds a staging buffer for each (T x Bm x H floats).
  const std::size_t staging = c.micro_batches * c.seq * c.micro_batch_size() * c.hidden * sizeof(float);
  BOOST_TEST(peak(true) >= peak(false) + staging);

  strata::device_manager manager;
  auto cpu = manager.create("cpu:1");
  auto sim = manager.create("sim:1");
  try {
    lm_pipeline p(sys, {cpu[0], sim[0]}, c, schedule_kind::one_f_one_b, {1, 1});
    BOOST_FAIL("a cpu + sim pipeline was accepted");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "a pipeline's devices must all be of one kind (cpu, sim or cuda); got cpu:0 and sim:0");
  }
}

BOOST_AUTO_TEST_CASE(bad_steps_and_parameters_are_refused_with_one_sentence) {
  strata::lm::config c = strata::lm::test::config_of(5, 3, 4, 2, 3, 2);
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  lm_pipeline p(sys, strata::make_devices("cpu:2"), c, schedule_kind::one_f_one_b, {1, 1});
  auto short_batch = p.train_step({1, 2}, {1, 2});
  BOOST_TEST(short_batch.error().code() == strata::errc::invalid_argument);
  std::vector<std::int32_t> bad(6, 9), good(6, 1);
  BOOST_TEST(p.train_step(bad, good).error().message().find("outside the vocabulary") != std::string::npos);
  BOOST_TEST(p.set_parameters({{"lstm.weight_ih_l7", {}}}).error().message().find("not a parameter") != std::string::npos);
  BOOST_TEST(p.set_parameters({{"decoder.bias", {1.f}}}).error().message().find("expects 5") != std::string::npos);
  BOOST_CHECK_THROW(lm_pipeline(sys, strata::make_devices("cpu:2"), c, schedule_kind::one_f_one_b, {2, 0}),
                    std::invalid_argument);
  c.micro_batches = 3;
  BOOST_CHECK_THROW(lm_pipeline(sys, strata::make_devices("cpu:1"), c, schedule_kind::gpipe, {2}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_pipeline_test
