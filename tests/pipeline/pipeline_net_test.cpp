// strata::pipeline_net under mpirun -np 2: a two-stage pipeline with stage k on rank k trains
// exactly like the same plan in one process (rank 0 runs that reference itself), a stage that
// fails on rank 1 fails the step on rank 0 by name, and bad placements are refused.
#define BOOST_TEST_MODULE strata_pipeline_net
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/net/endpoint.hpp"
#include "strata/pipeline_net/spawn.hpp"

namespace sp = strata::pipeline;
namespace spn = strata::pipeline_net;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t width = 6, rows = 6, micro_batches = 4, stages = 2;
constexpr float lr = 0.05f;

/// One dense layer per stage (tanh except on the last, which adds half the squared error to the
/// targets). A unit (micro-batch, chunk) is rows / chunks rows of its micro-batch, so that
/// wavefront plans send several messages per micro-batch. Reports {loss, squared gradient norm};
/// the update scales its step by the driver's args[0] (a clip coefficient from every stage's
/// norm, so the scalars cross ranks both ways). Forward throws on the host at its `throw_at`-th
/// call when set.
class dense_stage {
public:
  dense_stage(std::size_t index, strata::device dev, strata::stream& s, std::size_t chunks = 1)
      : index_(index), chunks_(chunks), unit_rows_(rows / chunks) {
    std::mt19937 rng(100 + static_cast<unsigned>(index));
    std::normal_distribution<float> init(0.0f, 0.6f);
    w_.resize(width * width);
    for (auto& v : w_) v = init(rng);
    gw_.assign(w_.size(), 0.0f);
    std::mt19937 data_rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    data_.resize(micro_batches * rows * width);
    targets_.resize(data_.size());
    for (auto& v : data_) v = u(data_rng);
    for (auto& v : targets_) v = u(data_rng);
    const auto units = micro_batches * chunks_;
    const auto n = static_cast<std::int64_t>(unit_rows_);
    for (std::size_t k = 0; k < units; ++k) {
      y_.push_back(strata::tensor::empty({n, static_cast<std::int64_t>(width)}, strata::dtype::float32, dev, s));
      dx_.push_back(strata::tensor::empty({n, static_cast<std::int64_t>(width)}, strata::dtype::float32, dev, s));
    }
    x_.resize(units);
    dy_.resize(units);
    in_.resize(units);
  }
  std::atomic<int> throw_at{0};
  /// The `device_fault_at`-th forward (backward when `fault_in_backward`) kernel throws (0: never).
  std::atomic<int> device_fault_at{0};
  std::atomic<bool> fault_in_backward{false};
  /// The `update_throw_at`-th update throws on the host (0: never).
  std::atomic<int> update_throw_at{0};
  bool last() const { return index_ + 1 == stages; }

  /// After a failed step: the gradients it had accumulated go.
  void abandon_step(std::uint64_t, strata::stream& s) {
    s.launch({.name = "zero-grad", .cpu = [this] { std::fill(gw_.begin(), gw_.end(), 0.0f); }});
  }
  std::size_t chunks() const { return chunks_; }

  void forward(std::size_t mb, std::size_t ch, strata::stream& s) {
    if (++forwards_ == throw_at.load()) throw std::runtime_error("dense_stage forward " + std::to_string(forwards_) + " failed on purpose");
    const bool fault = !fault_in_backward && forwards_ == device_fault_at.load();
    s.launch({.name = "forward", .cpu = [this, u = unit(mb, ch), fault] {
                if (fault) throw std::runtime_error("dense_stage " + std::to_string(index_) + " forward kernel failed on purpose");
                const float* x = index_ == 0 ? data_.data() + offset(u) : x_[u].data<float>();
                in_[u].assign(x, x + unit_rows_ * width);
                float* y = y_[u].data<float>();
                for (std::size_t r = 0; r < unit_rows_; ++r)
                  for (std::size_t j = 0; j < width; ++j) {
                    float acc = 0;
                    for (std::size_t i = 0; i < width; ++i) acc += x[r * width + i] * w_[i * width + j];
                    y[r * width + j] = last() ? acc : std::tanh(acc);
                  }
              }});
  }
  void backward(std::size_t mb, std::size_t ch, strata::stream& s) {
    const bool fault = fault_in_backward && ++backwards_ == device_fault_at.load();
    s.launch({.name = "backward", .cpu = [this, u = unit(mb, ch), fault] {
                if (fault) throw std::runtime_error("dense_stage " + std::to_string(index_) + " backward kernel failed on purpose");
                const float* y = y_[u].data<float>();
                std::vector<float> d(unit_rows_ * width);
                for (std::size_t k = 0; k < d.size(); ++k)
                  d[k] = last() ? y[k] - targets_[offset(u) + k] : dy_[u].data<float>()[k] * (1 - y[k] * y[k]);
                float* dx = dx_[u].data<float>();
                for (std::size_t r = 0; r < unit_rows_; ++r)
                  for (std::size_t i = 0; i < width; ++i) {
                    float acc = 0;
                    for (std::size_t j = 0; j < width; ++j) {
                      gw_[i * width + j] += in_[u][r * width + i] * d[r * width + j];
                      acc += w_[i * width + j] * d[r * width + j];
                    }
                    dx[r * width + i] = acc;
                  }
              }});
  }
  strata::tensor output(std::size_t mb, std::size_t ch) const { return y_[unit(mb, ch)]; }
  strata::tensor input_grad(std::size_t mb, std::size_t ch) const { return dx_[unit(mb, ch)]; }
  void accept_input(std::size_t mb, std::size_t ch, const strata::tensor& t, strata::stream&) { x_[unit(mb, ch)] = t; }
  void accept_output_grad(std::size_t mb, std::size_t ch, const strata::tensor& t, strata::stream&) {
    dy_[unit(mb, ch)] = t;
  }
  void end_compute(strata::stream& s) {
    s.launch({.name = "report", .cpu = [this] {
                loss_ = 0;
                norm_ = 0;
                if (last())
                  for (std::size_t u = 0; u < y_.size(); ++u)
                    for (std::size_t k = 0; k < unit_rows_ * width; ++k) {
                      const double e = y_[u].data<float>()[k] - targets_[offset(u) + k];
                      loss_ += 0.5 * e * e;
                    }
                for (float g : gw_) norm_ += static_cast<double>(g) * g;
              }});
  }
  std::vector<double> report() const { return {loss_, norm_}; }
  void update(const std::vector<double>& args, strata::stream& s) {
    if (++updates_ == update_throw_at.load()) throw std::runtime_error("dense_stage update failed on purpose");
    s.launch({.name = "sgd", .cpu = [this, scale = static_cast<float>(args.at(0))] {
                for (std::size_t i = 0; i < w_.size(); ++i) w_[i] -= lr * scale * std::exchange(gw_[i], 0.0f);
              }});
  }
  const std::vector<float>& weights() const { return w_; }  // read once the stream has completed

private:
  std::size_t unit(std::size_t mb, std::size_t ch) const { return mb * chunks_ + ch; }
  std::size_t offset(std::size_t u) const { return u * unit_rows_ * width; }  // units tile the data in order

  std::size_t index_, chunks_, unit_rows_;
  int forwards_ = 0, backwards_ = 0, updates_ = 0;
  std::vector<float> w_, gw_, data_, targets_;
  std::vector<strata::tensor> y_, dx_, x_, dy_;
  std::vector<std::vector<float>> in_;
  double loss_ = 0, norm_ = 0;
};

/// The clip coefficient of every stage's squared gradient norm (like the LSTM LM's).
std::vector<double> clip_rule(const std::vector<std::vector<double>>& reports) {
  double sq = 0;
  for (const auto& r : reports) sq += r.at(1);
  return {std::min(1.0, 2.0 / (std::sqrt(sq) + 1e-6))};
}

/// Asks a rank for its stage's weights (answered by that rank's probe).
struct weights_request {
  std::int32_t stage = 0;
};
template <class A>
void serialize(A& a, weights_request& m) {
  a(m.stage);
}

/// Asks a rank to stop its stages (its supervisor), as if they had gone down.
struct stop_stages {};
template <class A>
void serialize(A&, stop_stages&) {}

}  // namespace

STRATA_NET_DECLARE(weights_request, std::vector<float>, stop_stages, std::int32_t);

namespace {

/// Each rank: one scheduler thread, one cpu device of one thread, the endpoint.
struct world {
  strata::actor_system sys{strata::system_config{.worker_threads = 1}};
  strata::device cpu = strata::make_devices("cpu:1").front();
  strata::net::endpoint net{sys, strata::net::endpoint_config{.receive_device = cpu}};
  ~world() {
    net.shutdown();  // waits for every rank
    (void)sys.shutdown();
  }
};
world* the_world = nullptr;
struct world_fixture {
  world_fixture() { the_world = new world; }
  ~world_fixture() { delete the_world; }
};
BOOST_TEST_GLOBAL_FIXTURE(world_fixture);

/// Stops the actors, then drains every stream the stages ever used (their work captures the
/// models), so that the models may go.
void finish(strata::actor_system& sys, const sp::pipeline_actors& a,
            const std::vector<std::shared_ptr<sp::stage_context>>& contexts, bool owns_driver) {
  if (owns_driver) sys.stop(a.driver);
  if (a.supervisor) sys.stop(a.supervisor);
  auto drain = [](strata::stream s) {
    try {
      s.synchronize();
    } catch (...) {
    }
  };
  for (const auto& c : contexts) {
    if (!c) continue;
    drain(c->compute());
    drain(c->copies());
    for (auto& s : c->take_retired()) drain(s);
  }
}

/// This rank's part of a pipeline named `tag`: its stage, a probe answering weights requests.
struct rank_part {
  std::vector<std::shared_ptr<sp::stage_context>> contexts{stages};
  std::vector<std::shared_ptr<dense_stage>> models{stages};
  sp::pipeline_actors actors;
  strata::actor_ref probe, control;

  rank_part(const sp::plan& p, const std::string& tag, int throw_on_rank1_at = 0)
      : rank_part(p, tag, [throw_on_rank1_at](std::size_t s, dense_stage& m) {
          if (s == 1) m.throw_at = throw_on_rank1_at;
        }) {}
  /// `arm(stage, model)` sets this rank's model's faults.
  rank_part(const sp::plan& p, const std::string& tag, const std::function<void(std::size_t, dense_stage&)>& arm) {
    auto& w = *the_world;
    const auto s = static_cast<std::size_t>(w.net.rank());
    if (s < stages) {
      contexts[s] = std::make_shared<sp::stage_context>(static_cast<int>(s), w.cpu);
      auto compute = contexts[s]->compute();
      models[s] = std::make_shared<dense_stage>(s, w.cpu, compute, static_cast<std::size_t>(p.chunks));
      arm(s, *models[s]);
    }
    sp::pipeline_options o;
    o.stage_name = tag + "-stage";
    o.driver_name = tag + "-driver";
    o.rule = clip_rule;
    actors = spn::spawn_pipeline(w.sys, w.net, p, spn::one_stage_per_rank(stages, w.net.size()), contexts, models, o);
    auto model = s < stages ? models[s] : nullptr;
    probe = w.sys.spawn([model](strata::actor&) -> strata::behavior {
      return {[model](const weights_request&) { return model ? model->weights() : std::vector<float>{}; }};
    });
    BOOST_REQUIRE(w.net.publish(probe, tag + "-probe"));
    control = w.sys.spawn([supervisor = actors.supervisor](strata::actor& self) -> strata::behavior {
      return {[&self, supervisor](const stop_stages&) {
        self.system().stop(supervisor);
        return std::int32_t{1};
      }};
    });
    BOOST_REQUIRE(w.net.publish(control, tag + "-control"));
  }
  /// Rank 0: every stage's weights, from its rank.
  std::vector<std::vector<float>> gather_weights(const std::string& tag) {
    auto& w = *the_world;
    std::vector<std::vector<float>> out;
    for (std::size_t s = 0; s < stages; ++s) {
      auto probe_s = w.net.remote(static_cast<int>(s), tag + "-probe").value();
      auto r = w.sys.request<std::vector<float>>(probe_s, 30s, weights_request{static_cast<std::int32_t>(s)}).get();
      BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
      out.push_back(*r);
    }
    return out;
  }
  /// Rank 0 stops the driver when done; the others wait for that, then everyone cleans up.
  void end() {
    auto& w = *the_world;
    auto r = spn::stop_pipeline(w.sys, w.net, actors, 100s);
    BOOST_TEST(r.has_value(), (r ? std::string() : r.error().message()));
    finish(w.sys, actors, contexts, false);
    w.sys.stop(probe);
    w.sys.stop(control);
  }
};

struct one_process_run {
  std::vector<std::vector<double>> reports;  // per step: loss, then the clip coefficient
  std::vector<std::vector<float>> weights;   // per stage
};

/// The same plan in one process (the reference): both stages on this rank's cpu device.
one_process_run run_in_one_process(const sp::plan& p, int steps) {
  auto& w = *the_world;
  std::vector<std::shared_ptr<sp::stage_context>> contexts;
  std::vector<std::shared_ptr<dense_stage>> models;
  for (std::size_t s = 0; s < stages; ++s) {
    contexts.push_back(std::make_shared<sp::stage_context>(static_cast<int>(s), w.cpu));
    auto compute = contexts.back()->compute();
    models.push_back(std::make_shared<dense_stage>(s, w.cpu, compute, static_cast<std::size_t>(p.chunks)));
  }
  sp::pipeline_options o;
  o.stage_name = "reference-stage";
  o.driver_name = "reference-driver";
  o.rule = clip_rule;
  auto actors = sp::spawn_pipeline(w.sys, p, contexts, models, o);
  one_process_run out;
  for (int k = 0; k < steps; ++k) {
    auto r = w.sys.request<sp::step_outcome>(actors.driver, 30s, sp::run_step{}).get();
    BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
    out.reports.push_back({r->reports[1].at(0), r->args.at(0)});
  }
  finish(w.sys, actors, contexts, true);
  for (auto& m : models) out.weights.push_back(m->weights());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_job_has_two_ranks) { BOOST_REQUIRE(the_world->net.size() == 2); }

BOOST_AUTO_TEST_CASE(stages_on_two_ranks_train_bit_for_bit_like_one_process_with_gpipe_1f1b_and_wavefront) {
  auto& w = *the_world;
  constexpr int steps = 3;
  for (auto kind : {sp::schedule_kind::gpipe, sp::schedule_kind::one_f_one_b, sp::schedule_kind::wavefront}) {
    const auto p = sp::make_plan(kind, stages, micro_batches, kind == sp::schedule_kind::wavefront ? 3 : 1);
    const std::string tag = std::string("train-") + sp::to_string(kind);
    rank_part part(p, tag);
    if (w.net.rank() == 0) {
      std::vector<std::vector<double>> reports;
      for (int k = 0; k < steps; ++k) {
        auto r = w.sys.request<sp::step_outcome>(part.actors.driver, 60s, sp::run_step{}).get();
        BOOST_REQUIRE_MESSAGE(r.has_value(), r.error().message());
        BOOST_TEST(r->reports.size() == stages);
        reports.push_back({r->reports[1].at(0), r->args.at(0)});
      }
      const auto across = part.gather_weights(tag);
      const auto reference = run_in_one_process(p, steps);
      BOOST_TEST_CONTEXT(sp::to_string(kind)) {
        // Losses and clip coefficients that came over the wire, and every stage's trained weights.
        for (int k = 0; k < steps; ++k) {
          BOOST_TEST(reports[k][0] == reference.reports[k][0]);
          BOOST_TEST(reports[k][1] == reference.reports[k][1]);
        }
        BOOST_TEST(reports[0][0] > 0.0);
        BOOST_TEST(reports[steps - 1][0] < reports[0][0]);  // it trains
        for (std::size_t s = 0; s < stages; ++s) {
          BOOST_REQUIRE(across[s].size() == width * width);
          BOOST_TEST(across[s] == reference.weights[s], boost::test_tools::per_element());
        }
      }
    }
    part.end();
  }
}

BOOST_AUTO_TEST_CASE(a_stage_that_fails_on_rank_1_fails_the_step_on_rank_0_by_name_and_every_rank_restarts) {
  auto& w = *the_world;
  const auto p = sp::make_plan(sp::schedule_kind::one_f_one_b, stages, micro_batches);
  rank_part part(p, "failing", static_cast<int>(micro_batches) + 2);  // the second forward of step 2
  if (w.net.rank() == 0) {
    auto first = w.sys.request<sp::step_outcome>(part.actors.driver, 60s, sp::run_step{}).get();
    BOOST_REQUIRE_MESSAGE(first.has_value(), first.error().message());
    auto failed = w.sys.request<sp::step_outcome>(part.actors.driver, 60s, sp::run_step{}).get();
    BOOST_REQUIRE(!failed.has_value());
    const auto& m = failed.error().message();
    BOOST_TEST(m.find("pipeline stage 1 failed during step 2") != std::string::npos, m);
    BOOST_TEST(m.find("failed on purpose") != std::string::npos, m);
    // All for one across ranks: rank 0's stage restarts too, and the next step runs.
    auto again = w.sys.request<sp::step_outcome>(part.actors.driver, 60s, sp::run_step{}).get();
    BOOST_REQUIRE_MESSAGE(again.has_value(), again.error().message());
    BOOST_TEST(std::isfinite(again->reports[1].at(0)));
    BOOST_TEST(again->step == 3u);
    BOOST_TEST(part.contexts[0]->instances() == 2u);
  }
  part.end();
}

BOOST_AUTO_TEST_CASE(one_fault_on_either_rank_fails_exactly_its_step_by_its_stage_and_the_next_update_is_clean) {
  // Every schedule x stage x kind of fault (in the actor, a forward kernel, a backward kernel, the
  // update), in step 2 of 3: step 2 fails naming the stage where the fault was, step 3 runs, and
  // (for faults before the update) the weights are those of a run in one process without step 2
  // (the models drop the failed step's gradients in abandon_step), bit for bit. A fault in the
  // update comes after the other stage may have updated: only the failure and the next step count.
  auto& w = *the_world;
  enum class kind { actor, forward_kernel, backward_kernel, update };
  for (auto schedule : {sp::schedule_kind::gpipe, sp::schedule_kind::one_f_one_b, sp::schedule_kind::wavefront}) {
    const int chunks = schedule == sp::schedule_kind::wavefront ? 3 : 1;
    const auto p = sp::make_plan(schedule, stages, micro_batches, chunks);
    const int per_step = static_cast<int>(micro_batches) * chunks;
    one_process_run reference;
    if (w.net.rank() == 0) reference = run_in_one_process(p, 2);
    for (std::size_t stage = 0; stage < stages; ++stage)
      for (auto k : {kind::actor, kind::forward_kernel, kind::backward_kernel, kind::update}) {
        const std::string tag = std::string("fault-") + sp::to_string(schedule) + "-" + std::to_string(stage) + "-" +
                                std::to_string(static_cast<int>(k));
        rank_part part(p, tag, [&](std::size_t s, dense_stage& m) {
          if (s != stage) return;
          const int at = per_step + 2;  // the second unit of step 2
          if (k == kind::actor) m.throw_at = at;
          else if (k == kind::update) m.update_throw_at = 2;
          else m.device_fault_at = at;
          m.fault_in_backward = k == kind::backward_kernel;
        });
        if (w.net.rank() == 0) {
          BOOST_TEST_CONTEXT(tag) {
            auto step = [&] { return w.sys.request<sp::step_outcome>(part.actors.driver, 60s, sp::run_step{}).get(); };
            auto first = step();
            BOOST_REQUIRE_MESSAGE(first.has_value(), (first ? std::string() : first.error().message()));
            auto failed = step();
            BOOST_REQUIRE(!failed.has_value());
            const auto& m = failed.error().message();
            BOOST_TEST(m.find("pipeline stage " + std::to_string(stage) + " failed during step 2: ") == 0u, m);
            BOOST_TEST(m.find("failed on purpose") != std::string::npos, m);
            auto next = step();
            BOOST_REQUIRE_MESSAGE(next.has_value(), (next ? std::string() : next.error().message()));
            BOOST_TEST(next->step == 3u);
            if (k != kind::update) {
              const auto across = part.gather_weights(tag);
              for (std::size_t s = 0; s < stages; ++s)
                BOOST_TEST(across[s] == reference.weights[s], boost::test_tools::per_element());
            }
          }
        }
        part.end();
      }
  }
}

BOOST_AUTO_TEST_CASE(a_stage_that_goes_down_on_rank_1_fails_every_later_step_on_rank_0_by_name) {
  auto& w = *the_world;
  const auto p = sp::make_plan(sp::schedule_kind::gpipe, stages, micro_batches);
  rank_part part(p, "down");
  if (w.net.rank() == 0) {
    auto first = w.sys.request<sp::step_outcome>(part.actors.driver, 60s, sp::run_step{}).get();
    BOOST_REQUIRE_MESSAGE(first.has_value(), first.error().message());
    auto control = w.net.remote(1, "down-control").value();
    BOOST_REQUIRE(w.sys.request<std::int32_t>(control, 30s, stop_stages{}).get().has_value());
    for (int k = 0; k < 2; ++k) {  // no hang: the driver heard of it, and this and later steps fail
      auto r = w.sys.request<sp::step_outcome>(part.actors.driver, 60s, sp::run_step{}).get();
      BOOST_REQUIRE(!r.has_value());
      const auto& m = r.error().message();
      BOOST_TEST(m.find("pipeline stage 1 went down during step ") != std::string::npos, m);
      BOOST_TEST(r.error().code() != strata::errc::request_timeout, m);
    }
  }
  part.end();
}

BOOST_AUTO_TEST_CASE(bad_placements_are_refused_with_one_sentence_on_every_rank) {
  auto& w = *the_world;
  const auto p = sp::make_plan(sp::schedule_kind::gpipe, 2, 2);
  std::vector<std::shared_ptr<sp::stage_context>> contexts(2);
  std::vector<std::shared_ptr<dense_stage>> models(2);
  auto refused = [&](const std::vector<int>& ranks, const std::string& expected) {
    try {
      (void)spn::spawn_pipeline(w.sys, w.net, p, ranks, contexts, models);
      BOOST_ERROR("placement accepted; expected: " + expected);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(expected) != std::string::npos, e.what());
    }
  };
  refused({0, 5}, "the pipeline placement puts stage 1 on rank 5, but the job has 2 ranks (ranks 0-1)");
  refused({0, -1}, "puts stage 1 on rank -1");
  refused({0}, "a pipeline placement needs one rank per plan stage: got 1 ranks for 2 stages");
  refused({0, 1}, "pipeline stage " + std::to_string(w.net.rank()) + " is placed on this rank (" +
                      std::to_string(w.net.rank()) + ") but has no context or no model");
  try {
    (void)spn::one_stage_per_rank(3, w.net.size());
    BOOST_ERROR("3 stages on 2 ranks accepted");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("one stage per rank needs 3 ranks for 3 stages, but the job has 2") !=
                   std::string::npos,
               e.what());
  }
}
