// The stage actor on a model of the test's own: plans followed as written, failures named, and
// every stage restarted (all for one) so that the next step runs.

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strata/device/all.hpp"
#include "strata/pipeline/stage_actor.hpp"
#include "strata/strata.hpp"

namespace sp = strata::pipeline;
using namespace std::chrono_literals;

namespace stage_actor_test {

constexpr std::size_t rows = 4;

/// y = w * x elementwise; the last stage's loss is the sum of its outputs. Forward throws on the
/// host (in the actor) at its `throw_at`-th call when set.
class scale_stage {
public:
  scale_stage(float w, bool first, bool last, strata::device dev, strata::stream& s, std::size_t micro_batches)
      : w_(w), first_(first), last_(last) {
    for (std::size_t mb = 0; mb < micro_batches; ++mb) {
      y_.push_back(strata::tensor::empty({rows}, strata::dtype::float32, dev, s));
      dx_.push_back(strata::tensor::empty({rows}, strata::dtype::float32, dev, s));
    }
    x_.resize(micro_batches);
  }
  std::atomic<int> throw_at{0};

  void forward(std::size_t mb, std::size_t, strata::stream& s) {
    if (++forwards_ == throw_at.load()) throw std::runtime_error("scale_stage forward " + std::to_string(forwards_) + " failed on purpose");
    s.launch({.name = "forward", .cpu = [this, mb] {
                for (std::size_t i = 0; i < rows; ++i) {
                  const float x = first_ ? static_cast<float>(mb + 1 + i) : x_[mb].data<float>()[i];
                  y_[mb].data<float>()[i] = w_ * x;
                }
              }});
  }
  void backward(std::size_t mb, std::size_t, strata::stream& s) {
    s.launch({.name = "backward", .cpu = [this, mb] {
                for (std::size_t i = 0; i < rows; ++i) dx_[mb].data<float>()[i] = w_;  // d(sum)/dx, chained
              }});
  }
  strata::tensor output(std::size_t mb, std::size_t) const { return y_[mb]; }
  strata::tensor input_grad(std::size_t mb, std::size_t) const { return dx_[mb]; }
  void accept_input(std::size_t mb, std::size_t, const strata::tensor& t, strata::stream&) { x_[mb] = t; }
  void accept_output_grad(std::size_t, std::size_t, const strata::tensor&, strata::stream&) {}
  void end_compute(strata::stream& s) {
    s.launch({.name = "loss", .cpu = [this] {
                loss_ = 0;
                if (last_)
                  for (const auto& y : y_)
                    for (std::size_t i = 0; i < rows; ++i) loss_ += y.data<float>()[i];
              }});
  }
  std::vector<double> report() const { return {loss_}; }

private:
  float w_;
  bool first_, last_;
  int forwards_ = 0;
  std::vector<strata::tensor> y_, dx_, x_;
  double loss_ = 0;
};

/// scale_stage that exchanges with a store at each update, under a name of its own.
struct swap_request {};
class exchanging_stage : public scale_stage {
public:
  using scale_stage::scale_stage;
  using exchange_reply = int;
  swap_request exchange(const std::vector<double>&, strata::stream&) { return {}; }
  void exchanged(int&, strata::stream&) {}
  std::string exchange_name() const { return "swap weights with the store"; }
};
static_assert(sp::stage_model<exchanging_stage>);

struct fixture {
  strata::actor_system sys{strata::system_config{.worker_threads = 2}};
  std::vector<strata::device> devices = strata::make_devices("cpu:3");
  std::vector<std::shared_ptr<sp::stage_context>> contexts;
  std::vector<std::shared_ptr<scale_stage>> models;

  template <class M = scale_stage>
  sp::pipeline_actors build(const sp::plan& p, sp::pipeline_options options = {}) {
    const auto n = p.stages.size();
    std::vector<std::shared_ptr<M>> built;
    for (std::size_t s = 0; s < n; ++s) {
      contexts.push_back(std::make_shared<sp::stage_context>(static_cast<int>(s), devices[s]));
      auto compute = contexts.back()->compute();
      built.push_back(std::make_shared<M>(static_cast<float>(s + 2), s == 0, s + 1 == n, devices[s], compute,
                                          static_cast<std::size_t>(p.micro_batches)));
      models.push_back(built.back());
    }
    return sp::spawn_pipeline(sys, p, contexts, built, std::move(options));
  }
  /// The models' work items capture the models: the stages stop, then every stream (current and
  /// retired) is drained before the models go, even after a failed step left work queued.
  ~fixture() {
    (void)sys.shutdown();  // no stage launches work after this
    auto drain = [](strata::stream s) {
      try {
        s.synchronize();
      } catch (...) {
      }
    };
    for (auto& c : contexts) {
      drain(c->compute());
      drain(c->copies());
      for (auto& s : c->take_retired()) drain(s);
    }
  }
  strata::expected<sp::step_outcome> step(const sp::pipeline_actors& a) {
    return sys.request<sp::step_outcome>(a.driver, 30s, sp::run_step{}).get();
  }
};

/// The loss of the chain 2 * 3 * 4 * x over micro-batches of x = mb + 1 + i.
double expected_loss(int stages, int micro_batches) {
  double w = 1;
  for (int s = 0; s < stages; ++s) w *= s + 2;
  double sum = 0;
  for (int mb = 0; mb < micro_batches; ++mb)
    for (std::size_t i = 0; i < rows; ++i) sum += static_cast<double>(mb + 1) + static_cast<double>(i);
  return w * sum;
}

BOOST_AUTO_TEST_SUITE(stage_actor)

BOOST_AUTO_TEST_CASE(every_schedule_carries_activations_through_every_stage) {
  for (auto kind : {sp::schedule_kind::gpipe, sp::schedule_kind::one_f_one_b}) {
    fixture f;
    auto actors = f.build(sp::make_plan(kind, 3, 4));
    for (int k = 0; k < 2; ++k) {
      auto r = f.step(actors);
      BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
      BOOST_TEST(r->reports.size() == 3u);
      BOOST_TEST(r->reports[2].at(0) == expected_loss(3, 4));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_stage_that_throws_fails_the_step_and_every_stage_restarts_for_the_next) {
  fixture f;
  auto actors = f.build(sp::make_plan(sp::schedule_kind::gpipe, 3, 4));
  BOOST_REQUIRE(f.step(actors).has_value());
  f.models[1]->throw_at = 4 + 2;  // the second forward of step 2
  auto failed = f.step(actors);
  BOOST_REQUIRE(!failed.has_value());
  const auto& m = failed.error().message();
  BOOST_TEST(m.find("pipeline stage 1 failed during step 2") != std::string::npos, m);
  BOOST_TEST(m.find("failed on purpose") != std::string::npos, m);
  // All for one: every stage comes back, each on fresh streams.
  const auto until = std::chrono::steady_clock::now() + 20s;
  for (auto& c : f.contexts)
    while (c->instances() < 2 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);  // a poll's period: no event says a stage is back
  for (auto& c : f.contexts) {
    BOOST_TEST(c->instances() == 2u);
    for (auto& s : c->take_retired()) {
      try {
        s.synchronize();
      } catch (...) {
      }
    }
  }
  auto again = f.step(actors);
  BOOST_REQUIRE_MESSAGE(again.has_value(), again.error().message());
  BOOST_TEST(again->reports[2].at(0) == expected_loss(3, 4));
}

BOOST_AUTO_TEST_CASE(a_plan_that_sends_past_the_last_stage_fails_with_one_sentence) {
  fixture f;
  auto p = sp::make_plan(sp::schedule_kind::gpipe, 2, 1);
  p.stages[1].insert(p.stages[1].begin() + 2, sp::action{sp::action_kind::send_activation, 0, 0});
  auto actors = f.build(p);
  auto r = f.step(actors);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message().find("stage 1's plan sends (send_activation mb 0") != std::string::npos,
             r.error().message());
}

BOOST_AUTO_TEST_CASE(a_refused_exchange_fails_the_step_under_the_models_name_for_it) {
  fixture f;
  sp::pipeline_options o;
  o.store = f.sys.spawn([](strata::actor&) -> strata::behavior { return {[](int) {}}; });
  f.sys.stop(o.store);  // every exchange is refused: the store has terminated
  auto actors = f.build<exchanging_stage>(sp::make_plan(sp::schedule_kind::gpipe, 2, 2), o);
  auto r = f.step(actors);
  BOOST_REQUIRE(!r.has_value());
  const auto& m = r.error().message();
  BOOST_TEST(m.find("pipeline stage ") != std::string::npos, m);
  BOOST_TEST(m.find(" could not swap weights with the store during step 1: ") != std::string::npos, m);
}

/// Pushes a gradient that its exchange's own device work writes, without setting its ready event
/// (a mistake users make): the store must still read it complete.
struct late_push {
  strata::tensor g;
};
class late_writer_stage : public scale_stage {
public:
  using exchange_reply = float;
  late_writer_stage(float w, bool first, bool last, strata::device dev, strata::stream& s, std::size_t micro_batches)
      : scale_stage(w, first, last, dev, s, micro_batches), g_(strata::tensor::empty({1}, strata::dtype::float32, dev, s)) {
    s.launch({.name = "zero", .cpu = [g = g_] { g.data<float>()[0] = 0.0f; }});
  }
  late_push exchange(const std::vector<double>&, strata::stream& s) {
    s.launch({.name = "slow gradient", .cpu = [g = g_] {
                volatile double acc = 0;  // long enough that a store reading at once would see 0
                for (int i = 0; i < 20'000'000; ++i) acc = acc + 1e-9;
                g.data<float>()[0] = 42.0f;
              }});
    return late_push{g_};  // no ready event set
  }
  void exchanged(float& v, strata::stream&) { seen = v; }
  float seen = -1;

private:
  strata::tensor g_;
};

BOOST_AUTO_TEST_CASE(an_exchange_leaves_only_once_the_work_it_submitted_is_done_even_without_a_ready_event) {
  fixture f;
  sp::pipeline_options o;
  o.store = f.sys.spawn([](strata::actor&) -> strata::behavior {
    return {[](const late_push& p) -> float { return p.g.data<float>()[0]; }};  // reads at once
  });
  auto actors = f.build<late_writer_stage>(sp::make_plan(sp::schedule_kind::gpipe, 2, 2), o);
  auto r = f.step(actors);
  BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message()));
  for (auto& m : f.models) BOOST_TEST(static_cast<late_writer_stage*>(m.get())->seen == 42.0f);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace stage_actor_test
