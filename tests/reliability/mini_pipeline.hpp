#pragma once
// A small model-parallel pipeline on strata's public stage actor (strata/pipeline/stage_actor.hpp),
// for fault drills that lm_pipeline has no hook for: a stage model that throws inside a step, a
// kernel that fails on a stage's device, and a kvstore that dies while the stages push to it.
//
// Stage s (a cpu device of its own) runs a GPipe plan of M micro-batches. Its forward adds s + 1 to
// every value of the micro-batch (stage 0 starts from the value i for micro-batch i); backward has
// nothing to do. The last stage reports the sum of every value that came out, which is exact
// (small integers in float). With a kvstore, each stage pushes the sum of its outputs (key
// "stage-<s>") and pulls it back at the step's update.
//
// The stages run under one all-for-one supervisor (the generic pipeline's). Supervised, a stage
// that fails makes the supervisor restart every stage, and the step is run again from its start on
// the fresh instances (at-least-once: no micro-batch is lost or counted twice, since the retry
// recomputes all of them), until it completes or the supervisor gives up. Unsupervised, the
// supervisor gives up at the first failure: that step and every later one fail.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strata/device/all.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/pipeline/stage_actor.hpp"
#include "strata/strata.hpp"

namespace strata::reliability {

/// Faults to inject into one stage's model (shared by every instance of its actor).
struct fault_plan {
  /// Throw from forward (in the stage actor) on the N-th micro-batch this stage handles (0: never).
  std::atomic<std::uint64_t> throw_on_message{0};
  /// Every micro-batch from the N-th on throws (restart-limit drills) when set.
  std::atomic<bool> keep_throwing{false};
  /// The device kernel of the N-th micro-batch throws (0: never).
  std::atomic<std::uint64_t> fail_kernel{0};
  std::atomic<std::uint64_t> messages{0}, kernels{0};
};

/// The stage model (pipeline::stage_model). `Pushes`: exchange with the kvstore at each update.
template <bool Pushes>
class mini_stage {
public:
  using exchange_reply = std::vector<tensor>;

  mini_stage(int index, bool last, device dev, stream& s, std::size_t micro_batches, std::size_t width,
             std::shared_ptr<fault_plan> faults)
      : index_(index), last_(last), dev_(std::move(dev)), width_(width), faults_(std::move(faults)) {
    const auto w = static_cast<std::int64_t>(width);
    for (std::size_t mb = 0; mb < micro_batches; ++mb)
      y_.push_back(tensor::empty({w}, dtype::float32, dev_, s));
    x_.resize(micro_batches);
    grad_ = tensor::empty({1}, dtype::float32, dev_, s);
    sum_ = tensor::empty({w}, dtype::float32, dev_, s);
    pulled_ = tensor::empty({w}, dtype::float32, dev_, s);
  }

  void forward(std::size_t mb, std::size_t, stream& s) {
    const auto n = faults_->messages.fetch_add(1) + 1;
    const auto when = faults_->throw_on_message.load();
    if (when != 0 && (n == when || (faults_->keep_throwing && n > when)))
      throw std::runtime_error("injected actor fault in micro-batch " + std::to_string(mb) + " on stage " +
                               std::to_string(index_));
    const float add = static_cast<float>(index_ + 1);
    const bool first = index_ == 0;
    const auto fail = faults_->fail_kernel.load();
    s.launch({.name = "stage-add",
              .flops = static_cast<double>(width_),
              .cpu = [this, mb, add, first, fail] {
                const auto k = faults_->kernels.fetch_add(1) + 1;
                if (fail != 0 && k == fail)
                  throw std::runtime_error("injected device fault in kernel " + std::to_string(k) + " on " + dev_.name());
                float* y = y_[mb].data<float>();
                const float* x = first ? nullptr : x_[mb].data<float>();
                for (std::size_t i = 0; i < width_; ++i) y[i] = (first ? static_cast<float>(mb) : x[i]) + add;
              }});
  }
  void backward(std::size_t, std::size_t, stream&) {}
  tensor output(std::size_t mb, std::size_t) const { return y_[mb]; }
  tensor input_grad(std::size_t, std::size_t) const { return grad_; }
  void accept_input(std::size_t mb, std::size_t, const tensor& t, stream&) { x_[mb] = t; }
  void accept_output_grad(std::size_t, std::size_t, const tensor&, stream&) {}

  /// The elementwise sum of the step's outputs (pushed) and, on the last stage, its total.
  void end_compute(stream& s) {
    s.launch({.name = "stage-sum", .cpu = [this] {
                float* acc = sum_.data<float>();
                double total = 0;
                for (std::size_t i = 0; i < width_; ++i) acc[i] = 0;
                for (const auto& y : y_)
                  for (std::size_t i = 0; i < width_; ++i) {
                    acc[i] += y.data<float>()[i];
                    total += y.data<float>()[i];
                  }
                total_ = last_ ? total : 0;
              }});
  }
  std::vector<double> report() const { return {total_}; }

  kvstore::pushpull exchange(const std::vector<double>&, stream& s)
    requires Pushes
  {
    tensor pushed = sum_;
    pushed.set_ready_event(s.record());
    const kvstore::key k("stage-" + std::to_string(index_));
    kvstore::pushpull m;
    m.push.keys = {k};
    m.push.values = {std::move(pushed)};
    m.pull.keys = {k};
    m.pull.outs = {pulled_};
    return m;
  }
  void exchanged(std::vector<tensor>& pulled, stream& s)
    requires Pushes
  {
    for (auto& t : pulled) s.wait(t.ready_event());
  }
  std::string exchange_name() const { return "push to the kvstore"; }

private:
  int index_;
  bool last_;
  device dev_;
  std::size_t width_;
  std::shared_ptr<fault_plan> faults_;
  std::vector<tensor> y_, x_;
  tensor grad_, sum_, pulled_;
  double total_ = 0;
};
static_assert(pipeline::stage_model<mini_stage<false>> && pipeline::stage_model<mini_stage<true>>);

/// The exact answer of a step: sum over micro-batches i and elements of (i + sum_s (s + 1)).
inline double expected_sum(std::uint64_t micro_batches, std::size_t width, int stages) {
  double add = 0;
  for (int s = 0; s < stages; ++s) add += s + 1;
  double total = 0;
  for (std::uint64_t i = 0; i < micro_batches; ++i) total += (static_cast<double>(i) + add) * static_cast<double>(width);
  return total;
}

/// Watches the stages' supervisor: records why it terminated.
class supervisor_watch final : public actor {
public:
  struct state {
    std::mutex mu;
    bool down = false;
    std::string reason;
  };
  supervisor_watch(actor_ref supervisor, std::shared_ptr<state> st) : supervisor_(std::move(supervisor)), st_(std::move(st)) {}
  behavior make_behavior() override {
    monitor(supervisor_);
    return {[this](const down_msg& d) {
      std::lock_guard lock(st_->mu);
      st_->down = true;
      st_->reason = d.reason.message();
    }};
  }

private:
  actor_ref supervisor_;
  std::shared_ptr<state> st_;
};

/// The pipeline: built at the first step (which fixes M and the width), one stage per device.
class mini_pipeline {
public:
  std::vector<std::shared_ptr<fault_plan>> faults;

  mini_pipeline(actor_system& system, std::vector<device> devices, bool supervised, actor_ref store = {},
                restart_policy policy = {})
      : sys_(system), devices_(std::move(devices)), supervised_(supervised), store_(std::move(store)), policy_(policy) {
    for (std::size_t s = 0; s < devices_.size(); ++s) faults.push_back(std::make_shared<fault_plan>());
  }
  mini_pipeline(const mini_pipeline&) = delete;
  mini_pipeline& operator=(const mini_pipeline&) = delete;

  /// Stops the actors, waits for them to terminate and drains every stream the models' work is on.
  ~mini_pipeline() {
    if (!built_) return;
    sys_.stop(actors_.supervisor);
    sys_.stop(actors_.driver);
    sys_.stop(watch_);
    for (auto& s : actors_.stages) (void)sys_.request<void>(s, std::chrono::seconds(30), unit_t{}).wait_for(std::chrono::seconds(30));
    for (auto& c : contexts_) {
      auto list = c->take_retired();
      list.push_back(c->compute());
      list.push_back(c->copies());
      drain(list);
    }
  }

  /// One step of M micro-batches of `width` values: the sum of what came out, or the error.
  expected<double> step(std::uint64_t micro_batches, std::size_t width,
                        std::chrono::seconds timeout = std::chrono::seconds(90)) {
    ++step_;
    if (failure_) return failure_;
    if (!built_) build(micro_batches, width);
    if (micro_batches != micro_batches_ || width != width_)
      return error(errc::invalid_argument, "a mini pipeline runs every step with the shape of its first");
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (must_restart_)
        if (auto r = await_restart(until); !r) return keep(r.error());
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      auto r = sys_.request<pipeline::step_outcome>(actors_.driver, left, pipeline::run_step{}).get();
      if (r) return r->reports.back().at(0);
      if (r.error().code() == errc::request_timeout) {
        if (supervised_) {
          sys_.send(actors_.stages.front(), pipeline::restart_stage{});  // abandon the step's work
          must_restart_ = true;
        }
        break;
      }
      if (!supervised_) return keep(error(errc::runtime_failure, "mini " + r.error().message()));
      must_restart_ = true;  // all for one: every stage restarts, then the step runs again
    }
    return error(errc::request_timeout, "mini pipeline step " + std::to_string(step_) + " timed out");
  }
  std::future<expected<double>> step_async(std::uint64_t micro_batches, std::size_t width,
                                           std::chrono::seconds timeout = std::chrono::seconds(90)) {
    return std::async(std::launch::async, [this, micro_batches, width, timeout] { return step(micro_batches, width, timeout); });
  }

  /// Actor instances stage s has had (1 + restarts).
  std::size_t instances(std::size_t s) const { return contexts_.at(s)->instances(); }
  /// Restarts of the whole group of stages after which a step was run again.
  std::size_t restarts() const noexcept { return restarts_; }

private:
  template <bool Pushes>
  void spawn() {
    std::vector<std::shared_ptr<mini_stage<Pushes>>> models;
    for (std::size_t s = 0; s < devices_.size(); ++s) {
      auto compute = contexts_[s]->compute();
      models.push_back(std::make_shared<mini_stage<Pushes>>(static_cast<int>(s), s + 1 == devices_.size(), devices_[s],
                                                            compute, micro_batches_, width_, faults[s]));
      compute.synchronize();
    }
    pipeline::pipeline_options o;
    o.stage_name = "mini-stage";
    o.driver_name = "mini-driver";
    o.store = store_;
    o.update_timeout = std::chrono::seconds(5);
    o.restarts = supervised_ ? policy_ : restart_policy{.max_restarts = 0};
    o.restarts.strategy = restart_strategy::all_for_one;
    auto plan = pipeline::make_plan(pipeline::schedule_kind::gpipe, static_cast<int>(devices_.size()),
                                    static_cast<int>(micro_batches_));
    actors_ = pipeline::spawn_pipeline(sys_, plan, contexts_, models, o);
    models_ = std::make_shared<decltype(models)>(std::move(models));
  }

  void build(std::uint64_t micro_batches, std::size_t width) {
    micro_batches_ = micro_batches;
    width_ = width;
    for (std::size_t s = 0; s < devices_.size(); ++s)
      contexts_.push_back(std::make_shared<pipeline::stage_context>(static_cast<int>(s), devices_[s]));
    if (store_) spawn<true>();
    else spawn<false>();
    for (auto& c : contexts_) generations_.push_back(c->instances());
    watch_ = sys_.spawn_with<supervisor_watch>(spawn_options{.name = "mini-watch"}, actors_.supervisor, down_);
    built_ = true;
  }

  /// Waits until the supervisor has restarted every stage (then drains the old streams), or gave up.
  expected<void> await_restart(std::chrono::steady_clock::time_point until) {
    for (;;) {
      {
        std::lock_guard lock(down_->mu);
        if (down_->down)
          return error(errc::runtime_failure,
                       "mini pipeline supervisor failed during step " + std::to_string(step_) + ": " + down_->reason);
      }
      bool all = true;
      for (std::size_t s = 0; s < contexts_.size(); ++s) all = all && contexts_[s]->instances() > generations_[s];
      if (all) break;
      if (std::chrono::steady_clock::now() > until)
        return error(errc::request_timeout, "mini pipeline step " + std::to_string(step_) + " timed out");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll's period: no event says a stage is back
    }
    for (std::size_t s = 0; s < contexts_.size(); ++s) {
      generations_[s] = contexts_[s]->instances();
      auto old = contexts_[s]->take_retired();
      drain(old);
    }
    must_restart_ = false;
    ++restarts_;
    return {};
  }

  static void drain(std::vector<stream>& list) {
    for (auto& s : list) {
      try {
        s.synchronize();
      } catch (...) {
        // The failed step's error was reported.
      }
    }
  }

  error keep(error e) {
    if (!supervised_ || e.message().find("supervisor failed") != std::string::npos) failure_ = e;
    return e;
  }

  actor_system& sys_;
  std::vector<device> devices_;
  bool supervised_;
  actor_ref store_;
  restart_policy policy_;
  bool built_ = false;
  std::uint64_t micro_batches_ = 0;
  std::size_t width_ = 0;
  std::vector<std::shared_ptr<pipeline::stage_context>> contexts_;
  std::shared_ptr<void> models_;
  pipeline::pipeline_actors actors_;
  actor_ref watch_;
  std::shared_ptr<supervisor_watch::state> down_ = std::make_shared<supervisor_watch::state>();
  std::vector<std::size_t> generations_;
  std::uint64_t step_ = 0;
  std::size_t restarts_ = 0;
  bool must_restart_ = false;
  error failure_;
};

}  // namespace strata::reliability
