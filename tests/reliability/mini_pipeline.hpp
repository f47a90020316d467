#pragma once
// A small model-parallel pipeline built only from strata's public actor and device API, for fault
// drills that lm_pipeline has no hook for: an actor that throws inside a step (with a one-for-one
// supervisor), and a kvstore that dies while the stages push to it.
//
// Stage s (a cpu device and stream of its own) receives a micro-batch, adds s + 1 to every value on
// its device (a kernel_work), optionally pushes the result to the kvstore (key "stage-<s>"), and
// forwards it to stage s + 1; the last stage forwards to the driver. A step of M micro-batches is
// answered with the sum of every value that came out, which is exact (small integers in float).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/kvstore/kvstore.hpp"
#include "strata/device/all.hpp"
#include "strata/device_messages.hpp"
#include "strata/strata.hpp"

namespace strata::reliability {

/// Faults to inject, shared by every instance of a stage (a restarted instance sees the same plan).
struct fault_plan {
  /// Throw from the micro-batch handler on the N-th micro-batch this stage handles (0: never).
  std::atomic<std::uint64_t> throw_on_message{0};
  /// Every micro-batch from the N-th on throws (restart-limit drills) when set.
  std::atomic<bool> keep_throwing{false};
  /// The device kernel of the N-th micro-batch throws (0: never).
  std::atomic<std::uint64_t> fail_kernel{0};
  std::atomic<std::uint64_t> messages{0}, kernels{0};
  std::atomic<int> instances{0};  // instances started (1 + restarts)
};

struct micro_batch {
  std::uint64_t step;
  std::uint64_t attempt;
  int index;
  std::shared_ptr<std::vector<float>> values;
};
struct stage_output {
  std::uint64_t step;
  std::uint64_t attempt;
  int index;
  std::shared_ptr<std::vector<float>> values;
};
struct kernel_done {
  micro_batch mb;
};
struct stage_restarted {
  int stage;
};
struct run_mini_step {
  std::uint64_t micro_batches;
  std::size_t width;
};
struct wire_driver {
  std::vector<actor_ref> stages;
  actor_ref watch;  // supervisor (supervised) or empty
};
struct step_timeout {
  std::uint64_t step;
};

/// One pipeline stage: device work, an optional kvstore push, then forward.
class mini_stage final : public actor {
public:
  mini_stage(int index, actor_ref next, actor_ref driver, device dev, actor_ref store,
             std::shared_ptr<fault_plan> faults)
      : index_(index), next_(std::move(next)), driver_(std::move(driver)), dev_(std::move(dev)),
        stream_(dev_.create_stream()), store_(std::move(store)), faults_(std::move(faults)) {}

  behavior make_behavior() override {
    if (faults_->instances.fetch_add(1) > 0) send(driver_, stage_restarted{index_});
    return {
        [this](micro_batch& mb) {
          const auto n = faults_->messages.fetch_add(1) + 1;
          const auto when = faults_->throw_on_message.load();
          if (when != 0 && (n == when || (faults_->keep_throwing && n > when)))
            throw std::runtime_error("injected actor fault in micro-batch " + std::to_string(mb.index) +
                                     " of step " + std::to_string(mb.step));
          auto values = mb.values;
          const float add = static_cast<float>(index_ + 1);
          auto faults = faults_;
          const auto fail = faults_->fail_kernel.load();
          stream_.launch({.name = "stage-add",
                          .flops = static_cast<double>(values->size()),
                          .cpu = [values, add, faults, fail] {
                            const auto k = faults->kernels.fetch_add(1) + 1;
                            if (fail != 0 && k == fail)
                              throw std::runtime_error("injected device fault in kernel " + std::to_string(k));
                            for (auto& v : *values) v += add;
                          }});
          send_on_complete(stream_, self(), kernel_done{std::move(mb)});
        },
        [this](kernel_done& d) {
          if (!store_) {
            forward(std::move(d.mb));
            return;
          }
          auto t = tensor::from_host<float>(std::span<const float>(*d.mb.values), dev_, stream_);
          const auto step = d.mb.step;
          request<void>(store_, std::chrono::seconds(5),
                        kvstore::push{{kvstore::key("stage-" + std::to_string(index_))}, {t}})
              .then([this, mb = std::move(d.mb)]() mutable { forward(std::move(mb)); },
                    [this, step](const error& e) {
                      throw std::runtime_error("stage " + std::to_string(index_) +
                                               " could not push to the kvstore during step " +
                                               std::to_string(step) + ": " + e.message());
                    });
        },
        [this](const device_failure& f) {
          throw std::runtime_error("stage " + std::to_string(index_) + " device work failed: " + f.what);
        },
    };
  }

private:
  void forward(micro_batch mb) {
    if (next_) send(next_, std::move(mb));
    else send(driver_, stage_output{mb.step, mb.attempt, mb.index, std::move(mb.values)});
  }

  int index_;
  actor_ref next_, driver_;
  device dev_;
  stream stream_;
  actor_ref store_;
  std::shared_ptr<fault_plan> faults_;
};

/// Runs steps: sends M micro-batches into stage 0 and answers with the sum of what comes out.
/// A restarted stage makes the driver resend the micro-batches still missing (at-least-once; the
/// outputs are deduplicated by micro-batch). A stage or supervisor that terminates fails the step
/// (and every later one) with "mini pipeline stage S failed during step N: ...".
class mini_driver final : public actor {
public:
  behavior make_behavior() override {
    return {
        [this](wire_driver& w) {
          stages_ = std::move(w.stages);
          if (w.watch) {
            watch_ = w.watch;
            monitor(w.watch);
          } else {
            for (auto& s : stages_) monitor(s);
          }
        },
        [this](const run_mini_step& r) {
          promise_ = make_response_promise<double>();
          if (failure_) {
            promise_.deliver(failure_);
            return;
          }
          ++step_;
          attempt_ = 0;
          width_ = r.width;
          pending_.clear();
          for (std::uint64_t i = 0; i < r.micro_batches; ++i) pending_.insert(static_cast<int>(i));
          sum_ = 0;
          send_pending();
          delayed_send(self(), std::chrono::seconds(60), step_timeout{step_});
        },
        [this](stage_output& o) {
          if (o.step != step_ || !pending_.count(o.index)) return;  // a duplicate after a resend
          pending_.erase(o.index);
          for (float v : *o.values) sum_ += v;
          if (pending_.empty() && promise_.pending()) promise_.deliver(sum_);
        },
        [this](const stage_restarted& r) {
          ++restarts_seen_;
          last_restarted_ = r.stage;
          if (promise_.pending() && !pending_.empty()) {
            ++attempt_;
            send_pending();
          }
        },
        [this](const down_msg& d) {
          if (failure_) return;
          std::string who = "supervisor";
          for (std::size_t i = 0; i < stages_.size(); ++i)
            if (stages_[i] == d.source) who = "stage " + std::to_string(i);
          failure_ = error(errc::runtime_failure, "mini pipeline " + who + " failed during step " +
                                                      std::to_string(step_) + ": " + d.reason.message());
          if (promise_.pending()) promise_.deliver(failure_);
        },
        [this](const step_timeout& t) {
          if (t.step == step_ && promise_.pending())
            promise_.deliver(error(errc::request_timeout, "mini pipeline step " + std::to_string(step_) + " timed out"));
        },
        [this](const std::string& q) -> std::uint64_t { return q == "restarts" ? restarts_seen_ : 0; },
    };
  }

private:
  void send_pending() {
    for (int i : pending_) {
      auto v = std::make_shared<std::vector<float>>(width_, static_cast<float>(i));
      send(stages_.front(), micro_batch{step_, attempt_, i, std::move(v)});
    }
  }

  std::vector<actor_ref> stages_;
  actor_ref watch_;
  response_promise<double> promise_;
  error failure_;
  std::uint64_t step_ = 0, attempt_ = 0, restarts_seen_ = 0;
  int last_restarted_ = -1;
  std::size_t width_ = 0;
  std::set<int> pending_;
  double sum_ = 0;
};

/// The exact answer of a step: sum over micro-batches i and elements of (i + sum_s (s + 1)).
inline double expected_sum(std::uint64_t micro_batches, std::size_t width, int stages) {
  double add = 0;
  for (int s = 0; s < stages; ++s) add += s + 1;
  double total = 0;
  for (std::uint64_t i = 0; i < micro_batches; ++i) total += (static_cast<double>(i) + add) * static_cast<double>(width);
  return total;
}

/// Builds the pipeline: a driver, `stages` stage actors (last first, so each knows its next).
struct mini_pipeline {
  actor_system& sys;
  actor_ref driver;
  actor_ref supervisor;  // empty unless supervised
  std::vector<actor_ref> stages;
  std::vector<std::shared_ptr<fault_plan>> faults;

  mini_pipeline(actor_system& system, std::vector<device> devices, bool supervised, actor_ref store = {},
                restart_policy policy = {})
      : sys(system) {
    driver = sys.spawn_with<mini_driver>(spawn_options{.name = "mini-driver"});
    if (supervised) supervisor = sys.spawn_supervisor(policy, spawn_options{.name = "mini-supervisor"});
    const int n = static_cast<int>(devices.size());
    stages.resize(devices.size());
    for (int s = 0; s < n; ++s) faults.push_back(std::make_shared<fault_plan>());
    actor_ref next;
    for (int s = n - 1; s >= 0; --s) {
      spawn_options o{.name = "mini-stage-" + std::to_string(s)};
      if (supervised)
        stages[s] = sys.spawn_child<mini_stage>(supervisor, o, s, next, driver, devices[s], store, faults[s]);
      else
        stages[s] = sys.spawn_with<mini_stage>(o, s, next, driver, devices[s], store, faults[s]);
      next = stages[s];
    }
    sys.send(driver, wire_driver{stages, supervisor});
  }
  ~mini_pipeline() {
    for (auto& s : stages) sys.stop(s);
    if (supervisor) sys.stop(supervisor);
    sys.stop(driver);
  }

  expected<double> step(std::uint64_t micro_batches, std::size_t width,
                        std::chrono::seconds timeout = std::chrono::seconds(90)) {
    auto f = sys.request<double>(driver, timeout, run_mini_step{micro_batches, width});
    return f.get();
  }
};

}  // namespace strata::reliability
