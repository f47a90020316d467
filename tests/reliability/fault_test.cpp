// Fault drills: device faults during LM pipeline steps, actors that throw inside a step (with and
// without a supervisor), a kvstore that dies while stages push, and checkpoints written by a
// process that is SIGKILLed mid-save. Every drill is bounded in time: a hang fails the test.
//
// Counts scale with STRATA_TEST_SCALE (default 1; the sanitizer CI uses 0.1).

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mini_pipeline.hpp"
#include "support/lm_test_support.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"

using namespace std::chrono_literals;
using strata::reliability::expected_sum;
using strata::reliability::mini_pipeline;

namespace {

double test_scale() {
  const char* s = std::getenv("STRATA_TEST_SCALE");
  if (!s || !*s) return 1.0;
  const double v = std::strtod(s, nullptr);
  return v > 0 ? v : 1.0;
}
int scaled(int n, int at_least = 1) { return std::max(at_least, static_cast<int>(n * test_scale())); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <class F>
auto timed(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = f();
  return std::make_pair(std::move(r), std::chrono::steady_clock::now() - t0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fault_injection)

// (a) lm_pipeline: the n-th forward/backward work item of a stage fails, for every stage, every
// position in the step and every schedule; the step ends with an error naming stage and step, the
// pipeline stays failed (no hang) and a fresh pipeline on the same devices trains again.
BOOST_AUTO_TEST_CASE(a_device_fault_at_any_kernel_of_any_stage_ends_the_lm_step_with_a_named_error) {
  using strata::lm::lm_pipeline;
  using strata::pipeline::schedule_kind;
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::device_manager manager;
  auto devices = manager.create("cpu:3");
  int drills = 0;
  for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::wavefront}) {
    strata::lm::config c = strata::lm::test::config_of(11, 4, 6, 3, 4, 4, 2);
    c.chunks = kind == schedule_kind::wavefront ? 2 : 1;
    const std::size_t items = 2 * c.micro_batches * c.chunks;  // forward + backward per unit
    std::vector<std::int32_t> tokens(c.seq * c.batch), targets(c.seq * c.batch);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<std::int32_t>((i * 7) % c.vocab);
      targets[i] = static_cast<std::int32_t>((i * 5 + 1) % c.vocab);
    }
    const std::size_t step_n = (test_scale() < 1) ? 1 : 2;  // the step that fails (after step_n - 1 good ones)
    // What step_n good steps give: the failed step must change nothing, the restart lose nothing.
    std::vector<strata::lm::named_parameter> reference;
    {
      lm_pipeline ref(sys, devices, c, kind, {1, 1, 1});
      for (std::size_t s = 0; s < step_n; ++s) BOOST_REQUIRE(ref.train_step(tokens, targets, 60s).has_value());
      reference = ref.parameters().value();
    }
    for (std::size_t stage = 0; stage < 3; ++stage) {
      for (std::size_t n = 1; n <= items; n += (test_scale() < 1 ? 3 : 1)) {
        lm_pipeline p(sys, devices, c, kind, {1, 1, 1});
        for (std::size_t s = 1; s < step_n; ++s) BOOST_REQUIRE(p.train_step(tokens, targets, 60s).has_value());
        p.inject_device_fault(stage, n);
        auto [r, took] = timed([&] { return p.train_step(tokens, targets, 60s); });
        ++drills;
        BOOST_TEST_CONTEXT("schedule " << static_cast<int>(kind) << ", stage " << stage << ", item " << n) {
          BOOST_REQUIRE(!r.has_value());
          const auto& m = r.error().message();
          BOOST_TEST(contains(m, "failed during step " + std::to_string(step_n)), m);
          BOOST_TEST(contains(m, "pipeline stage "), m);
          BOOST_TEST(contains(m, "injected device fault in work item " + std::to_string(n) + " on " +
                                     devices[stage].name()),
                     m);
          BOOST_TEST(took < 30s);
          // The next step restarts the pipeline (all for one) and continues as if the failed
          // step had not been tried.
          auto again = p.train_step(tokens, targets, 60s);
          BOOST_REQUIRE_MESSAGE(again.has_value(), (again ? "" : again.error().to_string()));
          BOOST_TEST(p.restarts() == 1u);
          auto params = p.parameters().value();
          BOOST_REQUIRE(params.size() == reference.size());
          for (std::size_t i = 0; i < params.size(); ++i)
            for (std::size_t j = 0; j < params[i].values.size(); ++j)
              BOOST_TEST(std::abs(params[i].values[j] - reference[i].values[j]) <=
                             1e-5f * (1.0f + std::abs(reference[i].values[j])),
                         params[i].name << "[" << j << "]");
        }
      }
    }
    // The devices are fine after the drills: a new pipeline trains.
    lm_pipeline fresh(sys, devices, c, kind, {1, 1, 1});
    BOOST_TEST(fresh.train_step(tokens, targets, 60s).has_value());
  }
  BOOST_TEST_MESSAGE("lm device-fault drills: " << drills);
}

// (a') the same through the public device API alone: a kernel_work whose cpu function throws on
// its N-th call fails the stage that owns the device, and the step names stage and step. (The
// failure travels with the activations' events, so the stage that notices it first may be a later
// one: as in (a), the error names the device whose kernel failed.)
// (a'') the pipeline's KVStore stops between steps: the next step fails naming it, the one after
// rebuilds the store from the stages' weights and trains on.
BOOST_AUTO_TEST_CASE(an_lm_pipeline_whose_kvstore_stopped_fails_one_step_then_rebuilds_it) {
  using strata::lm::lm_pipeline;
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::lm::config c = strata::lm::test::config_of(11, 4, 6, 2, 4, 4, 2);
  std::vector<std::int32_t> tokens(c.seq * c.batch, 3), targets(c.seq * c.batch, 5);
  lm_pipeline p(sys, strata::make_devices("cpu:2"), c, strata::pipeline::schedule_kind::one_f_one_b, {1, 1});
  BOOST_REQUIRE(p.train_step(tokens, targets, 60s).has_value());
  auto before = p.parameters().value();
  auto store = p.store();
  BOOST_REQUIRE(store.has_value());
  sys.stop(*store);
  auto failed = p.train_step(tokens, targets, 60s);
  BOOST_REQUIRE(!failed.has_value());
  BOOST_TEST(contains(failed.error().message(), "could not update its weights"), failed.error().message());
  auto same = p.parameters().value();  // restarts: the weights are those before the failed step
  for (std::size_t i = 0; i < same.size(); ++i) BOOST_TEST(same[i].values == before[i].values, same[i].name);
  auto again = p.train_step(tokens, targets, 60s);
  BOOST_REQUIRE_MESSAGE(again.has_value(), (again ? "" : again.error().to_string()));
  BOOST_TEST(p.restarts() == 1u);
  auto rebuilt = p.store();
  BOOST_REQUIRE(rebuilt.has_value());
  BOOST_TEST((*rebuilt != *store));
}

BOOST_AUTO_TEST_CASE(a_throwing_kernel_fails_its_stage_and_the_step_names_it) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto devices = strata::make_devices("cpu:3");
  const int repeats = scaled(20);
  for (int k = 0; k < repeats; ++k) {
    mini_pipeline p(sys, devices, false);
    const int stage = k % 3;
    BOOST_REQUIRE(p.step(4, 64).has_value());  // step 1: 4 kernels per stage
    p.faults[stage]->fail_kernel = 4 + 1 + static_cast<std::uint64_t>(k % 4);  // a kernel of step 2
    auto r = p.step(4, 64, 60s);
    BOOST_REQUIRE(!r.has_value());
    const auto& m = r.error().message();
    BOOST_TEST(contains(m, "mini pipeline stage "), m);
    BOOST_TEST(contains(m, " failed during step 2"), m);
    BOOST_TEST(contains(m, "injected device fault in kernel"), m);
    BOOST_TEST(contains(m, " on " + devices[stage].name()), m);
  }
}

// (b) an actor throws in the middle of a step: the stages' all-for-one supervisor restarts every
// stage behind the same handles, once, the step runs again from its start (the micro-batches of the
// failed attempt are neither lost nor counted twice), and the step's result is exact.
BOOST_AUTO_TEST_CASE(a_stage_that_throws_mid_step_is_restarted_and_the_step_completes_exactly) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto devices = strata::make_devices("cpu:3");
  const int repeats = scaled(30);
  const std::uint64_t M = 8;
  const std::size_t W = 128;
  for (int k = 0; k < repeats; ++k) {
    mini_pipeline p(sys, devices, true);
    const auto restarts_before = sys.stats().restarts;
    const int stage = k % 3;
    BOOST_REQUIRE(p.step(M, W).value() == expected_sum(M, W, 3));
    p.faults[stage]->throw_on_message = M + 1 + static_cast<std::uint64_t>(k % M);  // inside step 2
    auto r = p.step(M, W, 60s);
    BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
    BOOST_TEST(*r == expected_sum(M, W, 3));
    BOOST_TEST(p.restarts() == 1u);  // one restart of the group
    for (std::size_t s = 0; s < 3; ++s) BOOST_TEST(p.instances(s) == 2u);  // the first and one restart each
    BOOST_TEST(sys.stats().restarts - restarts_before == 3u);  // that restart is one per stage
    // And it keeps working on the same handles afterwards.
    BOOST_TEST(p.step(M, W).value() == expected_sum(M, W, 3));
  }
}

// (b') past the restart limit the supervisor gives up: the step ends with an error, no hang.
BOOST_AUTO_TEST_CASE(a_stage_that_keeps_throwing_exhausts_the_restart_limit_and_fails_the_step) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto devices = strata::make_devices("cpu:2");
  mini_pipeline p(sys, devices, true, {}, strata::restart_policy{.max_restarts = 3, .within = 10s});
  BOOST_REQUIRE(p.step(4, 16).has_value());
  p.faults[1]->throw_on_message = 5;
  p.faults[1]->keep_throwing = true;
  auto [r, took] = timed([&] { return p.step(4, 16, 60s); });
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST_MESSAGE(r.error().message());
  BOOST_TEST(contains(r.error().message(), "mini pipeline supervisor failed during step 2"), r.error().message());
  BOOST_TEST(took < 30s);
  BOOST_TEST(p.instances(1) == 4u);  // the first + 3 restarts
}

// (c) the kvstore dies (system.stop) while stages push to it: the step ends with an error naming a
// stage, the step and the kvstore, within the push timeout, never a hang.
BOOST_AUTO_TEST_CASE(a_kvstore_stopped_while_stages_push_ends_the_step_with_an_error) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  auto devices = strata::make_devices("cpu:3");
  const int repeats = scaled(20);
  const std::uint64_t M = 64;
  const std::size_t W = 4096;
  std::mt19937 rng(7);
  int stopped_mid_step = 0;
  for (int k = 0; k < repeats; ++k) {
    auto store = strata::kvstore::spawn(sys);
    {
      strata::kvstore::client kv(sys, store);
      std::vector<float> zeros(W, 0.0f);
      auto host = strata::make_devices("cpu:1");
      auto s = host[0].create_stream();
      for (int st = 0; st < 3; ++st)
        BOOST_REQUIRE(kv.init("stage-" + std::to_string(st),
                              strata::tensor::from_host<float>(std::span<const float>(zeros), host[0], s))
                          .get()
                          .has_value());
    }
    mini_pipeline p(sys, devices, false, store);
    BOOST_REQUIRE(p.step(M, W).value() == expected_sum(M, W, 3));
    auto f = p.step_async(M, W, 90s);
    // A random moment in the step, under test: the store stops wherever the step has got to.
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng)));
    const auto t0 = std::chrono::steady_clock::now();
    sys.stop(store);
    BOOST_REQUIRE(f.wait_for(30s) == std::future_status::ready);
    const auto took = std::chrono::steady_clock::now() - t0;
    auto r = f.get();
    if (r.has_value()) {
      // The step had finished its pushes before the stop; the next one must fail.
      BOOST_TEST(*r == expected_sum(M, W, 3));
      r = p.step(M, W, 60s);
      BOOST_REQUIRE(!r.has_value());
    } else {
      ++stopped_mid_step;
    }
    const auto& m = r.error().message();
    BOOST_TEST(contains(m, "mini pipeline stage "), m);
    BOOST_TEST(contains(m, "could not push to the kvstore during step"), m);
    BOOST_TEST(took < 10s);  // well within the 5 s push timeout + scheduling
    BOOST_TEST_MESSAGE("kvstore stop " << k << ": " << m);
  }
  BOOST_TEST_MESSAGE("kvstore stopped mid-step in " << stopped_mid_step << " of " << repeats);
}

// (d) a process saving checkpoints in a loop is SIGKILLed at random moments; the checkpoint file
// always loads and is always one whole save (every value of every key from the same version), and
// versions never go back.
BOOST_AUTO_TEST_CASE(a_checkpoint_survives_sigkill_of_the_writer_at_any_moment) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata-reliability-ckpt-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "store.ckpt").string();
  const std::size_t n = 1 << 20;  // 4 MiB per key: a save takes long enough to be hit mid-write

  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto host = strata::make_devices("cpu:1");
  auto s = host[0].create_stream();
  {
    std::vector<float> a(n, 0.0f), b(n, -0.0f);
    BOOST_REQUIRE(kv.init({"a", "b"},
                          {strata::tensor::from_host<float>(std::span<const float>(a), host[0], s),
                           strata::tensor::from_host<float>(std::span<const float>(b), host[0], s)})
                      .get()
                      .has_value());
    BOOST_REQUIRE(kv.save(path).get().has_value());
  }

  // The kill window spans a few of the writer's saves: measured here with one writer that is
  // killed only after its first save has landed (fsync of 8 MiB can take seconds on a busy disk,
  // and a fixed window would then never let a save land).
  const auto first_save_ms = [&] {
    const auto before = fs::last_write_time(path);
    const pid_t child = ::fork();
    BOOST_REQUIRE(child >= 0);
    if (child == 0) {
      ::execl(STRATA_CHECKPOINT_WRITER, STRATA_CHECKPOINT_WRITER, path.c_str(), std::to_string(n).c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto start = std::chrono::steady_clock::now();
    while (fs::last_write_time(path) == before && std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a poll's period: the writer is another process
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    return static_cast<int>(ms);
  }();
  BOOST_TEST_MESSAGE("checkpoint drill: the writer's first save landed after " << first_save_ms << " ms");
  const int kills = scaled(100, 10);
  std::mt19937 rng(11);
  float last = 0;
  int tmp_left = 0, advanced = 0;
  for (int k = 0; k < kills; ++k) {
    const pid_t child = ::fork();
    BOOST_REQUIRE(child >= 0);
    if (child == 0) {
      ::execl(STRATA_CHECKPOINT_WRITER, STRATA_CHECKPOINT_WRITER, path.c_str(), std::to_string(n).c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Sanitized writers start slower (scale < 1): give them proportionally longer.
    const int max_delay = std::max(static_cast<int>(250 / std::min(1.0, test_scale())), 2 * first_save_ms);
    // A random moment of the save, under test: the kill lands wherever the writer has got to.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(20, max_delay)(rng)));
    BOOST_REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_REQUIRE_MESSAGE(WIFSIGNALED(status), "the writer exited by itself (status " << status << ")");
    if (fs::exists(path + ".tmp")) ++tmp_left;

    auto loaded = kv.load(path).get();
    BOOST_REQUIRE_MESSAGE(loaded.has_value(), "kill " << k << ": " << loaded.error().message());
    std::vector<float> a(n), b(n);
    auto ta = strata::tensor::from_host<float>(std::span<const float>(a), host[0], s);
    auto tb = strata::tensor::from_host<float>(std::span<const float>(b), host[0], s);
    auto pulled = kv.pull({"a", "b"}, {ta, tb}).get();
    BOOST_REQUIRE(pulled.has_value());
    a = (*pulled)[0].to_host<float>(s);
    b = (*pulled)[1].to_host<float>(s);
    const float v = a[0];
    bool whole = true;
    for (std::size_t i = 0; i < n; ++i) whole = whole && a[i] == v && b[i] == -v;
    BOOST_TEST(whole, "kill " << k << ": the checkpoint mixes versions");
    BOOST_TEST(v >= last, "kill " << k << ": version went back from " << last << " to " << v);
    if (v > last) ++advanced;
    last = v;
  }
  BOOST_TEST_MESSAGE("checkpoint kills: " << kills << ", saves landed before the kill in " << advanced
                                          << ", a .tmp was left (killed mid-save) after " << tmp_left);
  BOOST_TEST(advanced > 0);  // the writer did save: the drill exercised something
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
