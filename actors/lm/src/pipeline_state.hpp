#pragma once
// What an lm_pipeline holds: the LSTM stage as a pipeline::stage_model, per-stage clocks, and
// lm_pipeline::state (the stages, the store, restarts). Shared by pipeline.cpp (one process) and
// pipeline_ranks.cpp (stages on several MPI ranks). Private to strata::lm.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <condition_variable>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "stage.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/device/event.hpp"
#include "strata/device/stream.hpp"
#include "strata/lm/pipeline.hpp"
#include "strata/lm/ranks.hpp"
#include "strata/pipeline/stage_actor.hpp"

namespace strata::lm {

namespace pipeline_detail {

/// Device time spent per kind of work, filled by the device's work observer.
struct stage_clock {
  std::atomic<std::int64_t> forward_ns{0}, backward_ns{0}, other_ns{0};
  std::atomic<std::int64_t> forward_items{0}, backward_items{0};
  std::atomic<std::uint64_t> copy_stream{0};  // its transfers are not compute: not busy time
  void reset() {
    forward_ns = backward_ns = other_ns = 0;
    forward_items = backward_items = 0;
  }
  double busy_ms() const { return static_cast<double>(forward_ns + backward_ns + other_ns) / 1e6; }
};

/// The LSTM LM's stage as a pipeline::stage_model: lm_stage's math on the stage's stream; the step
/// boundary reports (sum of squared gradients, summed loss) for the global clip, then scales the
/// gradients and pushpulls them through the kvstore, which applies the optimizer and holds the master copy.
class lstm_stage_model {
public:
  using exchange_reply = std::vector<tensor>;

  explicit lstm_stage_model(std::shared_ptr<lm_stage> stage) : stage_(std::move(stage)) {}

  /// Data parallel replicas: sums the stage's gradients over the replicas (a blocking collective)
  /// once its backward work is done, before the norm. Empty: nothing.
  std::function<void(lm_stage&, stream&)> before_norm;

  /// The next step's tokens (first stage) and targets (last stage), one [T, Bm] per micro-batch,
  /// and its index (dropout's masks); set by the owner before it runs the step, copied to the
  /// device when the step begins.
  void set_step_data(std::vector<std::vector<std::int32_t>> tokens, std::vector<std::vector<std::int32_t>> targets,
                     std::uint64_t step) {
    tokens_ = std::move(tokens);
    targets_ = std::move(targets);
    step_ = step;
  }

  void begin_step(std::uint64_t, stream& s) {
    stage_->set_step(step_);
    for (std::size_t mb = 0; mb < tokens_.size(); ++mb) stage_->set_tokens(mb, tokens_[mb], s);
    for (std::size_t mb = 0; mb < targets_.size(); ++mb) stage_->set_targets(mb, targets_[mb], s);
  }
  /// After a failed step (every stage restarted on fresh streams): the gradients the step had
  /// accumulated go, so the next update is that of a run without the failed step. (The weights come
  /// back from the store in lm_pipeline::state::restart.)
  void abandon_step(std::uint64_t, stream& s) { s.launch(stage_->zero_grad_work()); }
  void forward(std::size_t mb, std::size_t ch, stream& s) { s.launch(stage_->forward_work(mb, ch)); }
  void backward(std::size_t mb, std::size_t ch, stream& s) { s.launch(stage_->backward_work(mb, ch)); }
  tensor output(std::size_t mb, std::size_t ch) const { return stage_->output(mb, ch); }
  tensor input_grad(std::size_t mb, std::size_t ch) const { return stage_->input_grad(mb, ch); }
  // lm_stage reads its inputs through float pointers; the transport made them readable on `s`.
  void accept_input(std::size_t mb, std::size_t ch, const tensor& t, stream&) {
    stage_->set_input(mb, ch, t.device_data<float>());
  }
  void accept_output_grad(std::size_t mb, std::size_t ch, const tensor& t, stream&) {
    stage_->set_output_grad(mb, ch, t.device_data<float>());
  }
  void end_compute(stream& s) {
    if (before_norm) before_norm(*stage_, s);
    stage_->enqueue_norm(s);
  }
  std::vector<double> report() const { return {stage_->sq_norm(), stage_->loss_sum()}; }

  /// Scales by the clip coefficient / count (args[0]), then pushes the gradients to the kvstore
  /// (which applies the optimizer) and pulls the updated weights into this stage's parameters.
  kvstore::pushpull exchange(const std::vector<double>& args, stream& s) {
    s.launch(stage_->scale_work(args.at(0)));
    event ready = s.record();
    kvstore::pushpull m;
    for (std::size_t i = 0; i < stage_->names().size(); ++i) {
      tensor g = stage_->grad(i);
      g.set_ready_event(ready);
      m.push.keys.emplace_back(stage_->names()[i]);
      m.push.values.push_back(std::move(g));
      m.pull.keys.emplace_back(stage_->names()[i]);
      m.pull.outs.push_back(stage_->value(i));
    }
    return m;
  }
  /// The pulled weights are ready: zero the gradients after them.
  void exchanged(std::vector<tensor>& pulled, stream& s) {
    for (auto& t : pulled) s.wait(t.ready_event());
    s.launch(stage_->zero_grad_work());
  }

private:
  std::shared_ptr<lm_stage> stage_;
  std::vector<std::vector<std::int32_t>> tokens_, targets_;
  std::uint64_t step_ = 0;
};
static_assert(pipeline::stage_model<lstm_stage_model>);

}  // namespace pipeline_detail

using pipeline_detail::lstm_stage_model;
using pipeline_detail::stage_clock;

struct lm_pipeline::state {
  actor_system* system = nullptr;
  lm::config config;
  pipeline::plan plan;
  std::vector<device> devices;  // per stage; across ranks, empty for other ranks' stages
  std::vector<std::shared_ptr<lm_stage>> models;  // per stage; across ranks, null for other ranks' stages
  std::vector<std::shared_ptr<lstm_stage_model>> stage_models;
  std::vector<std::shared_ptr<pipeline::stage_context>> contexts;
  std::vector<std::size_t> generations;  // per stage: actor instances when it last (re)started
  std::vector<std::shared_ptr<stage_clock>> clocks;
  pipeline::pipeline_actors actors;
  actor_ref store;         // holds the master weights and applies the optimizer
  device store_device;     // where it merges (empty: default)
  std::shared_ptr<stage_clock> store_clock;
  bool store_stale = true; // (re)build the store before the next step
  double lr = 0;           // the rate the store applies (a schedule changes it)
  bool copy_activations = false;
  bool failed = false;     // the last step failed: restart the stages before the next one
  errc failure = errc::runtime_failure;
  std::size_t restarts = 0;
  std::uint64_t step_index = 0;  // the next step's, for dropout's masks
  std::shared_ptr<rank_group> ranks;  // stages on several MPI ranks (empty: one process)
  std::size_t replicas = 1, replica = 0;  // across ranks: data parallel replicas, and this rank's
  bool replicas_by_group = false;         // ranks->sum_over_replicas sums a stage's gradients
  std::size_t steps_run = 0;              // steps begun across ranks
  std::mutex reduce_mutex;                // guards reduced_steps
  std::condition_variable reduce_done;
  std::size_t reduced_steps = 0;          // steps whose gradients this rank's stage summed over the replicas
  std::optional<pipeline::link_model> link;  // lm_pipeline_options::link, for ideal()
  std::vector<double> cut_bytes;             // per cut between stages: one micro-batch's activation

  /// Whether stage s runs in this process.
  bool local(std::size_t s) const { return models[s] != nullptr; }
  /// This process's first device (where a store merges by default).
  const device& first_device() const {
    for (const auto& d : devices)
      if (d.valid()) return d;
    return devices.front();
  }

  /// Stage s's device context, model and clock (pipeline.cpp); across ranks, empty ones for
  /// another rank's stage.
  void add_stage(std::size_t s, const stage_span& span, const lm::config& stage_config, const lm_pipeline_options& options);

  // pipeline_ranks.cpp: the collective parts of a pipeline across ranks.
  void spawn_actors_across_ranks(pipeline::pipeline_options o);
  int driver_rank() const;
  void sum_gradients_over_replicas(std::size_t stage, lm_stage& m, stream& s);
  std::map<std::string, std::pair<std::size_t, std::size_t>> parameter_offsets(std::size_t& total) const;
  expected<step_result> step_across_ranks(std::chrono::milliseconds timeout);
  // step_across_ranks's parts: what rank 0 and the drivers share after the step (fills `r`'s
  // driver figures and `loss_sum`), this rank's stages' device times, and every rank's taken.
  std::vector<float> outcome_to_share(const expected<pipeline::step_outcome>& outcome, bool driver, step_result& r,
                                      double& loss_sum) const;
  std::vector<float> local_stage_times() const;
  void take_stage_times(step_result& r, const std::vector<float>& times);
  expected<std::vector<named_parameter>> gather_parameters(std::map<std::string, std::vector<float>> local_values);
  expected<std::string> gather_optimizer_state(std::string local_bytes);
  expected<std::string> local_part_of_optimizer_state(const std::string& bytes);

  /// Spawns the stage actors (under one all-for-one supervisor) and the driver.
  void spawn_actors() {
    pipeline::pipeline_options o;
    o.store = store;
    o.copy_always = copy_activations;
    o.rule = [count = static_cast<double>(config.seq * config.batch), clip = config.clip](
                 const std::vector<std::vector<double>>& reports) {
      double sq = 0;
      for (const auto& r : reports) sq += r.at(0);
      const double norm = std::sqrt(sq) / count;
      const double coef = clip / (norm + 1e-6);
      return std::vector<double>{(coef < 1.0 ? coef : 1.0) / count, norm};
    };
    if (ranks) spawn_actors_across_ranks(std::move(o));
    else actors = pipeline::spawn_pipeline(*system, plan, contexts, stage_models, std::move(o));
    generations.clear();
    for (auto& c : contexts) generations.push_back(c ? c->instances() : 0);
  }

  /// Stops the stage actors and the driver, waits until they have terminated (no more
  /// submissions; a request to a stopped actor is answered once it has) and their streams have
  /// drained (a failed stream skips what is left), so that no work item refers to the models.
  void halt() {
    if (ranks) {
      (void)ranks->stop(*system, actors, std::chrono::minutes(1), driver_rank());  // the driver's rank stops it, the others wait
    } else {
      system->stop(actors.supervisor);  // stops the stages
      system->stop(actors.driver);
    }
    for (std::size_t s = 0; s < actors.stages.size(); ++s) {
      if (!local(s)) continue;
      auto gone = system->request<void>(actors.stages[s], std::chrono::seconds(30), unit_t{});
      (void)gone.wait_for(std::chrono::seconds(30));
    }
    for (auto& c : contexts) {
      if (!c) continue;
      auto list = c->take_retired();
      list.push_back(c->copies());
      list.push_back(c->compute());
      drain(list);
    }
  }

  static void drain(std::vector<stream>& list) {
    for (auto& s : list) {
      try {
        s.synchronize();
      } catch (...) {
        // A failed step's error was reported by train_step.
      }
    }
  }

  /// After a failed step, all for one: the stages' supervisor has restarted every stage actor
  /// (a step that timed out makes it restart them now), each on fresh streams since a failed
  /// stream stays failed; the old streams are drained, the gradients the step accumulated are
  /// zeroed and every stage takes its weights back from the store, which is the master copy (so a
  /// step that failed while some stages had already updated leaves no stage behind). A store that
  /// no longer answers is rebuilt from the stages' weights.
  expected<void> restart() {
    if (ranks)
      return error(errc::runtime_failure, "a failed step of a pipeline across ranks is not retried: relaunch the job "
                                          "from its checkpoint");
    if (failure == errc::request_timeout) system->send(actors.stages.front(), pipeline::restart_stage{});
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (std::size_t s = 0; s < contexts.size(); ++s)
      while (contexts[s]->instances() <= generations[s]) {
        if (std::chrono::steady_clock::now() > until)
          return error(errc::runtime_failure, "the pipeline could not restart after a failed step: stage " +
                                                  std::to_string(s) + " did not restart within 30 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    for (std::size_t s = 0; s < contexts.size(); ++s) {
      generations[s] = contexts[s]->instances();
      auto old = contexts[s]->take_retired();
      drain(old);
    }
    std::vector<stream> streams;
    for (std::size_t s = 0; s < models.size(); ++s) {
      streams.push_back(contexts[s]->compute());
      clocks[s]->copy_stream = contexts[s]->copies().id();
      models[s]->fail_after(0);
      streams[s].launch(models[s]->zero_state_work());  // the gradients: lstm_stage_model::abandon_step
    }
    if (store && !store_stale) {
      kvstore::client client(*system, store, std::chrono::seconds(30));
      auto [keys, outs] = parameter_tensors();
      auto pulled = client.pull(std::move(keys), std::move(outs)).get();
      if (pulled) {
        std::size_t next = 0;  // the pulled tensors come in the order of the keys: stage by stage
        for (std::size_t s = 0; s < models.size(); ++s)
          for (std::size_t i = 0; i < models[s]->names().size(); ++i) streams[s].wait((*pulled)[next++].ready_event());
      } else {
        store_stale = true;  // rebuilt from the stages' weights before the next step
      }
    }
    for (auto& s : streams) {
      try {
        s.synchronize();
      } catch (const std::exception& e) {
        return error(errc::runtime_failure, std::string("the pipeline could not restart after a failed step: ") + e.what());
      }
    }
    failed = false;
    ++restarts;
    return {};
  }

  /// Every stage's parameter names (the store's keys) and value tensors, stage by stage.
  std::pair<std::vector<kvstore::key>, std::vector<tensor>> parameter_tensors() const {
    std::pair<std::vector<kvstore::key>, std::vector<tensor>> out;
    for (const auto& m : models)
      for (std::size_t i = 0; m && i < m->names().size(); ++i) {
        out.first.emplace_back(m->names()[i]);
        out.second.push_back(m->value(i));
      }
    return out;
  }

  /// Whether the optimizer keeps per-parameter state in the store.
  bool stateful() const noexcept { return config.optimizer != optimizer_kind::sgd; }

  /// Installs config's optimizer with rate `lr` as the store's update rule.
  expected<void> set_rule(kvstore::client& client) const {
    const auto kind = config.optimizer;
    if (kind == optimizer_kind::adam || kind == optimizer_kind::adamw) {
      kernels::adam_options a;
      a.lr = lr;
      a.beta1 = config.beta1;
      a.beta2 = config.beta2;
      a.eps = config.eps;
      a.weight_decay = config.weight_decay;
      a.decoupled_weight_decay = kind == optimizer_kind::adamw;
      if (auto r = client.set_optimizer(a).get(); !r) return r.error();
      return {};
    }
    kernels::sgd_options o;
    o.lr = lr;
    o.weight_decay = config.weight_decay;
    o.momentum = kind == optimizer_kind::sgd ? 0.0 : config.momentum;
    o.nesterov = kind == optimizer_kind::nesterov;
    if (auto r = client.set_optimizer(o).get(); !r) return r.error();
    return {};
  }

  /// Saves the store's state (kvstore::save) to a scratch file and returns its name: in /dev/shm
  /// (memory) when it is there and has room, else in the temporary directory.
  static expected<std::filesystem::path> save_to_scratch(kvstore::client& client) {
    static std::atomic<std::uint64_t> count{0};
    const std::string name = "strata-lm-" + std::to_string(::getpid()) + "-" + std::to_string(count.fetch_add(1)) + ".kvstore";
    std::vector<std::filesystem::path> dirs;
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) dirs.emplace_back("/dev/shm");
    if (auto tmp = std::filesystem::temp_directory_path(ec); !ec) dirs.push_back(tmp);
    error last(errc::runtime_failure, "no directory for the optimizer state's scratch file");
    for (const auto& dir : dirs) {
      auto r = client.save((dir / name).string()).get();
      if (r) return dir / name;
      last = r.error();
      std::filesystem::remove(dir / name, ec);
    }
    return last;
  }

  /// Spawns a fresh kvstore holding the stages' current weights, with the optimizer at `lr`.
  expected<void> rebuild_store() {
    if (store) system->stop(store);
    kvstore::options opts;
    opts.name = "lm-kvstore";
    if (store_device.valid()) {
      opts.kind = kvstore::kind::device;
      opts.merge_device = store_device;
    } else if (first_device().kind() != device_kind::cpu) {  // sim, cuda: merge on the first stage's device
      opts.kind = kvstore::kind::device;
      opts.merge_device = first_device();
    }
    store = kvstore::spawn(*system, opts);
    kvstore::client client(*system, store);
    if (auto r = set_rule(client); !r) return r.error();
    auto [keys, values] = parameter_tensors();
    if (auto r = client.init(std::move(keys), std::move(values)).get(); !r) return r.error();
    for (auto& c : contexts)
      if (c) c->set_store(store);
    store_stale = false;
    return {};
  }

  /// Runs `task` on every stage's actor of this process, in stage order.
  expected<void> on_every_stage(std::chrono::milliseconds timeout,
                                const std::function<expected<void>(std::size_t, stream&)>& task) {
    for (std::size_t s = 0; s < actors.stages.size(); ++s) {
      if (!local(s)) continue;
      auto r = system->request<void>(actors.stages[s], timeout,
                                     pipeline::stage_task{[&task, s](stream& st) { return task(s, st); }})
                   .get();
      if (!r) return r.error();
    }
    return {};
  }
};

}  // namespace strata::lm
