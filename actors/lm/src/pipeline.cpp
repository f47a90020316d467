#include "strata/lm/pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include "stage.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/device/event.hpp"
#include "strata/device/stream.hpp"
#include "strata/device_messages.hpp"
#include "strata/trace.hpp"

namespace strata::lm {

namespace {

// ---- messages between the driver and the stages ------------------------------------------------

struct wire_stage {
  actor_ref prev, next, driver;
};
struct begin_step {
  std::uint64_t step;
  std::vector<std::vector<std::int32_t>> tokens;   // per micro-batch [T, Bm] (first stage)
  std::vector<std::vector<std::int32_t>> targets;  // per micro-batch [T, Bm] (last stage)
};
/// An activation (forward) or a gradient (backward) of one (micro-batch, chunk) unit: the
/// producer's buffer, valid for the whole step, with the event after which it is ready.
struct unit_tensor {
  std::uint64_t step;
  int micro_batch;
  int chunk;
  tensor data;  // invalid on sim devices (no data)
};
struct activation_msg {
  unit_tensor t;
};
struct gradient_msg {
  unit_tensor t;
};
struct norm_done {
  std::uint64_t step;
};
struct stage_norm {
  int stage;
  double sq_norm;
  double loss_sum;
};
struct apply_update {
  std::uint64_t step;
  double scale;
};
struct update_done {
  std::uint64_t step;
};
struct stage_updated {
  int stage;
};
struct use_store {
  actor_ref store;
};
struct get_parameters {};
struct reset_state {};
struct put_parameters {
  std::vector<named_parameter> params;
};
struct run_step {
  std::vector<std::int32_t> tokens, targets;
};

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

// ---- the stage actor ---------------------------------------------------------------------------

class stage_actor final : public actor {
public:
  stage_actor(int index, std::shared_ptr<lm_stage> model, device dev, stream s, stream copies,
              std::vector<pipeline::action> actions, std::size_t chunks, bool copy_always)
      : index_(index), model_(std::move(model)), dev_(std::move(dev)), stream_(std::move(s)),
        copy_stream_(std::move(copies)), chunks_(chunks), copy_always_(copy_always) {
    for (const auto& a : actions)
      if (pipeline::is_compute(a.kind)) actions_.push_back(a);
  }

  behavior make_behavior() override {
    return {
        [this](wire_stage& w) {
          if (trace::enabled())
            trace::emit(trace::event_kind::tag, id(), 0, trace::intern("pipeline.stage"), 0, static_cast<std::uint32_t>(index_));
          prev_ = std::move(w.prev);
          next_ = std::move(w.next);
          driver_ = std::move(w.driver);
        },
        [this](begin_step& b) {
          step_ = b.step;
          for (std::size_t mb = 0; mb < b.tokens.size(); ++mb) model_->set_tokens(mb, b.tokens[mb], stream_);
          for (std::size_t mb = 0; mb < b.targets.size(); ++mb) model_->set_targets(mb, b.targets[mb], stream_);
          pos_ = 0;
          running_ = true;
          advance();
        },
        [this](activation_msg& m) {
          forward_ready_[unit(m.t)] = std::move(m.t);
          advance();
        },
        [this](gradient_msg& m) {
          backward_ready_[unit(m.t)] = std::move(m.t);
          advance();
        },
        [this](const norm_done&) { send(driver_, stage_norm{index_, model_->sq_norm(), model_->loss_sum()}); },
        [this](use_store& m) { store_ = std::move(m.store); },
        [this](const apply_update& u) {
          // Scale by the clip coefficient / count, push to the kvstore (which applies SGD), pull the
          // updated weights back into this stage's parameters, then zero the gradients.
          stream_.launch(model_->scale_work(u.scale));
          event ready = stream_.record();
          kvstore::pushpull m;
          for (std::size_t i = 0; i < model_->names().size(); ++i) {
            tensor g = model_->grad(i);
            g.set_ready_event(ready);
            m.push.keys.emplace_back(model_->names()[i]);
            m.push.values.push_back(std::move(g));
            m.pull.keys.emplace_back(model_->names()[i]);
            m.pull.outs.push_back(model_->value(i));
          }
          const auto step = u.step;
          request<std::vector<tensor>>(store_, std::chrono::minutes(5), std::move(m))
              .then(
                  [this, step](std::vector<tensor>& pulled) {
                    for (auto& t : pulled) stream_.wait(t.ready_event());
                    stream_.launch(model_->zero_grad_work());
                    send_on_complete(stream_, self(), update_done{step});
                  },
                  [this](const error& e) {
                    throw std::runtime_error("stage " + std::to_string(index_) + " could not update its weights: " +
                                             e.message());
                  });
        },
        [this](const update_done&) { send(driver_, stage_updated{index_}); },
        [this](const device_failure& f) {
          throw std::runtime_error("stage " + std::to_string(index_) + " device work failed: " + f.what);
        },
        [this](const reset_state&) { stream_.launch(model_->zero_state_work()); },
        [this](const get_parameters&) {
          std::vector<named_parameter> out;
          if (!model_->computes()) return out;
          for (std::size_t i = 0; i < model_->names().size(); ++i)
            out.push_back({model_->names()[i], model_->read_value(i, stream_)});
          return out;
        },
        [this](put_parameters& p) -> expected<void> {
          if (!model_->computes()) return {};
          for (auto& np : p.params) {
            for (std::size_t i = 0; i < model_->names().size(); ++i) {
              if (model_->names()[i] != np.name) continue;
              if (np.values.size() != model_->count(i))
                return error(errc::invalid_argument, "parameter '" + np.name + "' has " + std::to_string(np.values.size()) +
                                                         " values; the model expects " + std::to_string(model_->count(i)));
              model_->write_value(i, np.values, stream_);
            }
          }
          stream_.synchronize();  // the store (re)built before the next step reads these values
          return {};
        },
    };
  }

private:
  std::size_t unit(const unit_tensor& t) const {
    return static_cast<std::size_t>(t.micro_batch) * chunks_ + static_cast<std::size_t>(t.chunk);
  }

  /// Orders this stage's compute stream after `t` is ready and returns where the stage reads it:
  /// in place when its device can (host memory between cpu devices, one GPU's memory between its
  /// shares), else from `staging` after a copy (another GPU: a peer copy; host and GPU: over
  /// PCIe) on the stage's copy stream, so that transfers overlap the compute of earlier actions.
  /// Called when the plan reaches the action: the wait sits just before the work that needs it.
  template <class Staging>
  const float* receive(const tensor& t, Staging staging) {
    if (!t.valid() || (!copy_always_ && readable_in_place(t, dev_))) {
      stream_.wait(t.ready_event());
      return static_cast<const float*>(t.raw_data());
    }
    copy_stream_.wait(t.ready_event());
    const tensor& own = staging();  // allocated on first use, on the copy stream
    copy_stream_.copy(own.storage(), t.storage(), t.bytes());
    stream_.wait(copy_stream_.record());
    return static_cast<const float*>(own.raw_data());
  }

  /// The stage's output of a forward or backward action, tagged with the event that makes it ready.
  unit_tensor produced(const pipeline::action& a, const tensor& t) {
    tensor out = t;
    out.set_ready_event(stream_.record());
    return unit_tensor{step_, a.micro_batch, a.chunk, std::move(out)};
  }

  /// Submits the plan's actions in order as far as their inputs have arrived. Submission is
  /// asynchronous: the stream waits for each input's event, not this actor.
  void advance() {
    while (running_ && pos_ < actions_.size()) {
      const auto& a = actions_[pos_];
      const auto mb = static_cast<std::size_t>(a.micro_batch), ch = static_cast<std::size_t>(a.chunk);
      const std::size_t u = mb * chunks_ + ch;
      if (a.kind == pipeline::action_kind::forward) {
        if (prev_) {
          auto it = forward_ready_.find(u);
          if (it == forward_ready_.end()) return;
          model_->set_input(mb, ch, receive(it->second.data, [&]() -> const tensor& {
                              return model_->input_staging(mb, ch, copy_stream_);
                            }));
          forward_ready_.erase(it);
        }
        stream_.launch(model_->forward_work(mb, ch));
        if (next_) send(next_, activation_msg{produced(a, model_->output(mb, ch))});
      } else {
        if (next_) {
          auto it = backward_ready_.find(u);
          if (it == backward_ready_.end()) return;
          model_->set_output_grad(mb, ch, receive(it->second.data, [&]() -> const tensor& {
                                    return model_->output_grad_staging(mb, ch, copy_stream_);
                                  }));
          backward_ready_.erase(it);
        }
        stream_.launch(model_->backward_work(mb, ch));
        if (prev_) send(prev_, gradient_msg{produced(a, model_->input_grad(mb, ch))});
      }
      ++pos_;
    }
    if (running_ && pos_ == actions_.size()) {
      running_ = false;
      model_->enqueue_norm(stream_);
      send_on_complete(stream_, self(), norm_done{step_});
    }
  }

  int index_;
  std::shared_ptr<lm_stage> model_;
  device dev_;
  stream stream_;
  stream copy_stream_;  // activations and gradients this stage cannot read in place
  std::size_t chunks_;
  bool copy_always_;
  std::vector<pipeline::action> actions_;
  actor_ref store_;
  actor_ref prev_, next_, driver_;
  std::uint64_t step_ = 0;
  std::size_t pos_ = 0;
  bool running_ = false;
  std::map<std::size_t, unit_tensor> forward_ready_, backward_ready_;
};

// ---- the driver: splits the batch, runs the step boundary (global norm, clip, update) ----------

class driver_actor final : public actor {
public:
  driver_actor(lm_config config, std::vector<actor_ref> stages, std::vector<std::shared_ptr<stage_clock>> clocks,
               std::shared_ptr<stage_clock> store_clock)
      : config_(config), stages_(std::move(stages)), clocks_(std::move(clocks)), store_clock_(std::move(store_clock)) {}

  behavior make_behavior() override {
    for (auto& s : stages_) monitor(s);
    return {
        [this](const down_msg& d) {
          if (failure_) return;
          std::size_t index = 0;
          while (index < stages_.size() && stages_[index] != d.source) ++index;
          failure_ = error(errc::runtime_failure, "pipeline stage " + std::to_string(index) + " failed during step " +
                                                      std::to_string(step_) + ": " + d.reason.message());
          if (promise_.pending()) promise_.deliver(failure_);
        },
        [this](run_step& r) {
          promise_ = make_response_promise<step_result>();
          if (failure_) {
            promise_.deliver(failure_);
            return;
          }
          start_ = std::chrono::steady_clock::now();
          for (auto& c : clocks_) c->reset();
          if (store_clock_) store_clock_->reset();
          const std::size_t T = config_.seq, B = config_.batch, M = config_.micro_batches, Bm = B / M;
          begin_step first{++step_, {}, {}}, last{step_, {}, {}};
          for (std::size_t mb = 0; mb < M; ++mb) {
            std::vector<std::int32_t> tok(T * Bm), tgt(T * Bm);
            for (std::size_t t = 0; t < T; ++t)
              for (std::size_t b = 0; b < Bm; ++b) {
                tok[t * Bm + b] = r.tokens[t * B + mb * Bm + b];
                tgt[t * Bm + b] = r.targets[t * B + mb * Bm + b];
              }
            first.tokens.push_back(std::move(tok));
            last.targets.push_back(std::move(tgt));
          }
          if (stages_.size() == 1) {
            first.targets = std::move(last.targets);
            send(stages_[0], std::move(first));
          } else {
            send(stages_.front(), std::move(first));
            for (std::size_t s = 1; s + 1 < stages_.size(); ++s) send(stages_[s], begin_step{step_, {}, {}});
            send(stages_.back(), std::move(last));
          }
          sq_ = 0;
          loss_ = 0;
          norms_ = 0;
          updated_ = 0;
        },
        [this](const stage_norm& n) {
          sq_ += n.sq_norm;
          loss_ += n.loss_sum;
          if (++norms_ < stages_.size()) return;
          const double count = static_cast<double>(config_.seq * config_.batch);
          norm_ = std::sqrt(sq_) / count;
          const double coef = config_.clip / (norm_ + 1e-6);
          const double scale = (coef < 1.0 ? coef : 1.0) / count;
          for (auto& s : stages_) send(s, apply_update{step_, scale});
        },
        [this](const stage_updated&) {
          if (++updated_ < stages_.size()) return;
          step_result r;
          r.loss = loss_ / static_cast<double>(config_.seq * config_.batch);
          r.grad_norm = norm_;
          r.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
          const double units = static_cast<double>(config_.micro_batches);
          for (auto& c : clocks_) {
            r.stage_busy_ms.push_back(c->busy_ms());
            r.stage_forward_ms.push_back(static_cast<double>(c->forward_ns.load()) / 1e6 / units);
            r.stage_backward_ms.push_back(static_cast<double>(c->backward_ns.load()) / 1e6 / units);
            r.stage_other_ms.push_back(static_cast<double>(c->other_ns.load()) / 1e6);
          }
          if (store_clock_) r.store_busy_ms = store_clock_->busy_ms();
          promise_.deliver(std::move(r));
        },
    };
  }

private:
  lm_config config_;
  std::vector<actor_ref> stages_;
  std::vector<std::shared_ptr<stage_clock>> clocks_;
  std::shared_ptr<stage_clock> store_clock_;
  response_promise<step_result> promise_;
  error failure_;
  std::chrono::steady_clock::time_point start_;
  std::uint64_t step_ = 0;
  double sq_ = 0, loss_ = 0, norm_ = 0;
  std::size_t norms_ = 0, updated_ = 0;
};

}  // namespace

struct lm_pipeline::state {
  actor_system* system = nullptr;
  lm_config config;
  pipeline::plan plan;
  std::vector<device> devices;
  std::vector<std::shared_ptr<lm_stage>> models;
  std::vector<std::shared_ptr<stage_clock>> clocks;
  std::vector<stream> streams;       // per stage: compute
  std::vector<stream> copy_streams;  // per stage: incoming copies (GPUs that cannot read each other)
  std::vector<actor_ref> stages;
  actor_ref driver;
  actor_ref store;         // holds the master weights and applies SGD
  device store_device;     // where it merges (empty: default)
  std::shared_ptr<stage_clock> store_clock;
  bool store_stale = true; // (re)build the store before the next step
  bool copy_activations = false;
  bool carry_state = false;
  bool failed = false;     // the last step failed: restart the actors before the next one
  std::size_t restarts = 0;

  /// Spawns the stage actors and the driver on the current streams and wires them.
  void spawn_actors() {
    stages.clear();
    for (std::size_t s = 0; s < models.size(); ++s) {
      stages.push_back(system->spawn_with<stage_actor>(
          spawn_options{.name = "stage-" + std::to_string(s) + " (" + devices[s].name() + ")"}, static_cast<int>(s),
          models[s], devices[s], streams[s], copy_streams[s], plan.stages[s], config.chunks, copy_activations));
    }
    driver = system->spawn_with<driver_actor>(spawn_options{.name = "pipeline-driver"}, config, stages, clocks,
                                              store_clock);
    for (std::size_t s = 0; s < stages.size(); ++s) {
      system->send(stages[s], wire_stage{s > 0 ? stages[s - 1] : actor_ref{},
                                         s + 1 < stages.size() ? stages[s + 1] : actor_ref{}, driver});
      if (store) system->send(stages[s], use_store{store});
    }
  }

  /// Stops the stage actors and the driver, waits until they have terminated (no more
  /// submissions; a request to a stopped actor is answered once it has) and their streams have
  /// drained (a failed stream skips what is left), so that no work item refers to the models.
  void halt() {
    for (auto& s : stages) system->stop(s);
    system->stop(driver);
    for (auto& s : stages) {
      auto gone = system->request<void>(s, std::chrono::seconds(30), unit_t{});
      (void)gone.wait_for(std::chrono::seconds(30));
    }
    for (auto* list : {&copy_streams, &streams})
      for (auto& s : *list) {
        try {
          s.synchronize();
        } catch (...) {
          // A failed step's error was reported by train_step.
        }
      }
  }

  /// After a failed step, all for one: every stage actor and the driver are stopped and spawned
  /// again on fresh streams (a failed stream stays failed), the gradients the step accumulated are
  /// zeroed and every stage takes its weights back from the store, which is the master copy (so a
  /// step that failed while some stages had already updated leaves no stage behind). A store that
  /// no longer answers is rebuilt from the stages' weights.
  expected<void> restart() {
    halt();
    for (std::size_t s = 0; s < models.size(); ++s) {
      streams[s] = devices[s].create_stream();
      copy_streams[s] = devices[s].create_stream();
      clocks[s]->copy_stream = copy_streams[s].id();
      models[s]->fail_after(0);
      streams[s].launch(models[s]->zero_grad_work());
      streams[s].launch(models[s]->zero_state_work());
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
    spawn_actors();
    failed = false;
    ++restarts;
    return {};
  }

  /// Every stage's parameter names (the store's keys) and value tensors, stage by stage.
  std::pair<std::vector<kvstore::key>, std::vector<tensor>> parameter_tensors() const {
    std::pair<std::vector<kvstore::key>, std::vector<tensor>> out;
    for (const auto& m : models)
      for (std::size_t i = 0; i < m->names().size(); ++i) {
        out.first.emplace_back(m->names()[i]);
        out.second.push_back(m->value(i));
      }
    return out;
  }

  /// Spawns a fresh kvstore holding the stages' current weights, with SGD(lr).
  expected<void> rebuild_store() {
    if (store) system->stop(store);
    kvstore::options opts;
    opts.name = "lm-kvstore";
    if (store_device.valid()) {
      opts.kind = kvstore::kind::device;
      opts.merge_device = store_device;
    } else if (devices.front().kind() != device_kind::cpu) {  // sim, cuda: merge on the first stage's device
      opts.kind = kvstore::kind::device;
      opts.merge_device = devices.front();
    }
    store = kvstore::spawn(*system, opts);
    kvstore::client client(*system, store);
    kernels::sgd_options sgd;
    sgd.lr = config.lr;
    if (auto r = client.set_optimizer(sgd).get(); !r) return r.error();
    auto [keys, values] = parameter_tensors();
    if (auto r = client.init(std::move(keys), std::move(values)).get(); !r) return r.error();
    for (auto& s : stages) system->send(s, use_store{store});
    store_stale = false;
    return {};
  }
};

lm_pipeline::lm_pipeline(actor_system& system, std::vector<device> devices, lm_config config,
                         pipeline::schedule_kind schedule, std::vector<std::size_t> layer_counts,
                         device store_device)
    : lm_pipeline(system, std::move(devices), std::move(config), schedule, std::move(layer_counts),
                  lm_pipeline_options{.store_device = std::move(store_device)}) {}

lm_pipeline::lm_pipeline(actor_system& system, std::vector<device> devices, lm_config config,
                         pipeline::schedule_kind schedule, std::vector<std::size_t> layer_counts,
                         lm_pipeline_options options)
    : state_(std::make_unique<state>()) {
  config.validate();
  if (devices.empty()) throw std::invalid_argument("a pipeline needs at least one device");
  for (const auto& d : devices) {
    if (!d.valid()) throw std::invalid_argument("a pipeline device is an empty handle");
    if (d.kind() != devices.front().kind())
      throw std::invalid_argument("a pipeline's devices must all be of one kind (cpu, sim or cuda); got " +
                                  devices.front().name() + " and " + d.name());
  }
  device store_device = std::move(options.store_device);
  if (layer_counts.size() != devices.size())
    throw std::invalid_argument("the partition names " + std::to_string(layer_counts.size()) + " stages for " +
                                std::to_string(devices.size()) + " devices");
  auto spans = make_spans(config.layers, layer_counts);
  auto& st = *state_;
  st.system = &system;
  st.config = config;
  st.devices = std::move(devices);
  st.plan = pipeline::make_plan(schedule, static_cast<int>(spans.size()), static_cast<int>(config.micro_batches),
                                static_cast<int>(config.chunks));
  for (std::size_t s = 0; s < spans.size(); ++s) {
    st.streams.push_back(st.devices[s].create_stream());
    st.copy_streams.push_back(st.devices[s].create_stream());
    st.models.push_back(std::make_shared<lm_stage>(config, spans[s], st.devices[s], st.streams[s], options.carry_state));
    auto clock = std::make_shared<stage_clock>();
    clock->copy_stream = st.copy_streams.back().id();
    st.clocks.push_back(clock);
    std::uint32_t fwd_name = 0, bwd_name = 0, other_name = 0;
    if (trace::enabled()) {
      fwd_name = trace::intern("forward");
      bwd_name = trace::intern("backward");
      other_name = trace::intern("update");
    }
    const std::uint64_t device_track = 1'000'000'000ull + s;  // trace id of the device track
    st.devices[s].set_work_observer([clock, fwd_name, bwd_name, other_name, device_track](const work_record& r) {
      const auto ns = (r.end - r.start).count();
      const std::string& name = *r.name;
      if (r.stream_id == clock->copy_stream.load(std::memory_order_relaxed)) {
        // an incoming activation or gradient (traced below, not busy time)
      } else if (name == "forward") {
        clock->forward_ns += ns;
        ++clock->forward_items;
      } else if (name == "backward") {
        clock->backward_ns += ns;
        ++clock->backward_items;
      } else {
        clock->other_ns += ns;
      }
      if (trace::enabled() && !r.modelled) {  // cpu: real steady-clock times; sim times are modelled
        static std::atomic<std::uint64_t> work_ids{1};
        const std::uint64_t work = work_ids.fetch_add(1, std::memory_order_relaxed);
        const std::uint32_t id = name == "forward" ? fwd_name : name == "backward" ? bwd_name : other_name;
        const std::chrono::steady_clock::time_point start{std::chrono::duration_cast<std::chrono::steady_clock::duration>(r.start)};
        const std::chrono::steady_clock::time_point end{std::chrono::duration_cast<std::chrono::steady_clock::duration>(r.end)};
        trace::emit_at(start, trace::event_kind::device_begin, device_track, r.stream_id, work, 0, id);
        trace::emit_at(end, trace::event_kind::device_end, device_track, r.stream_id, work, 0, id);
      }
    });
  }
  if (store_device.valid()) {
    st.store_device = store_device;
    st.store_clock = std::make_shared<stage_clock>();
    store_device.set_work_observer([clock = st.store_clock](const work_record& r) {
      clock->other_ns += (r.end - r.start).count();
    });
  }
  st.copy_activations = options.copy_activations;
  st.carry_state = options.carry_state;
  st.spawn_actors();
}

lm_pipeline::~lm_pipeline() {
  if (!state_) return;
  state_->halt();  // work items on the streams point into the stage models
  if (state_->store) state_->system->stop(state_->store);
  for (auto& d : state_->devices) d.set_work_observer({});
  if (state_->store_device.valid()) state_->store_device.set_work_observer({});
}

expected<step_result> lm_pipeline::train_step(const std::vector<std::int32_t>& tokens,
                                              const std::vector<std::int32_t>& targets,
                                              std::chrono::milliseconds timeout) {
  const auto& c = state_->config;
  const std::size_t n = c.seq * c.batch;
  if (tokens.size() != n || targets.size() != n)
    return error(errc::invalid_argument, "a step needs " + std::to_string(n) + " tokens and targets ([seq " +
                                             std::to_string(c.seq) + ", batch " + std::to_string(c.batch) + "])");
  for (auto v : tokens)
    if (v < 0 || static_cast<std::size_t>(v) >= c.vocab)
      return error(errc::invalid_argument, "token id " + std::to_string(v) + " is outside the vocabulary [0, " +
                                               std::to_string(c.vocab) + ")");
  for (auto v : targets)
    if (v < 0 || static_cast<std::size_t>(v) >= c.vocab)
      return error(errc::invalid_argument, "target id " + std::to_string(v) + " is outside the vocabulary [0, " +
                                               std::to_string(c.vocab) + ")");
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();
  if (state_->store_stale)
    if (auto r = state_->rebuild_store(); !r) return r.error();
  auto f = state_->system->request<step_result>(state_->driver, timeout, run_step{tokens, targets});
  auto r = f.get();
  if (!r) state_->failed = true;
  return r;
}

expected<actor_ref> lm_pipeline::store() {
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();
  if (state_->store_stale)
    if (auto r = state_->rebuild_store(); !r) return r.error();
  return state_->store;
}

std::size_t lm_pipeline::restarts() const noexcept { return state_->restarts; }

expected<void> lm_pipeline::reset_state(std::chrono::milliseconds timeout) {
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();  // zeroes the state too
  for (auto& s : state_->stages) {
    auto r = state_->system->request<void>(s, timeout, strata::lm::reset_state{}).get();
    if (!r) return r.error();
  }
  return {};
}

expected<std::vector<named_parameter>> lm_pipeline::parameters(std::chrono::milliseconds timeout) {
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();
  std::map<std::string, std::vector<float>> all;
  for (auto& s : state_->stages) {
    auto part = state_->system->request<std::vector<named_parameter>>(s, timeout, get_parameters{}).get();
    if (!part) return part.error();
    for (auto& p : *part) all[p.name] = std::move(p.values);
  }
  std::vector<named_parameter> out;
  for (const auto& name : parameter_names(state_->config)) {
    auto it = all.find(name);
    if (it != all.end()) out.push_back({name, std::move(it->second)});
  }
  return out;
}

expected<void> lm_pipeline::set_parameters(const std::vector<named_parameter>& params,
                                           std::chrono::milliseconds timeout) {
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();
  auto names = parameter_names(state_->config);
  for (const auto& p : params) {
    if (std::find(names.begin(), names.end(), p.name) == names.end())
      return error(errc::invalid_argument, "'" + p.name + "' is not a parameter of this model");
    std::size_t n = 1;
    for (auto d : parameter_shape(state_->config, p.name)) n *= d;
    if (p.values.size() != n)
      return error(errc::invalid_argument, "parameter '" + p.name + "' has " + std::to_string(p.values.size()) +
                                               " values; the model expects " + std::to_string(n));
  }
  for (auto& s : state_->stages) {
    auto r = state_->system->request<void>(s, timeout, put_parameters{params}).get();
    if (!r) return r.error();
  }
  state_->store_stale = true;  // the store's master weights must follow
  return {};
}

const pipeline::plan& lm_pipeline::plan() const noexcept { return state_->plan; }
const lm_config& lm_pipeline::config() const noexcept { return state_->config; }
std::size_t lm_pipeline::stages() const noexcept { return state_->stages.size(); }

std::vector<std::pair<double, double>> lm_pipeline::measured_stage_times_ms() const {
  std::vector<std::pair<double, double>> out;
  const double units = static_cast<double>(state_->config.micro_batches);
  for (auto& c : state_->clocks)
    out.emplace_back(static_cast<double>(c->forward_ns.load()) / 1e6 / units,
                     static_cast<double>(c->backward_ns.load()) / 1e6 / units);
  return out;
}

void lm_pipeline::inject_device_fault(std::size_t stage, std::size_t n) {
  if (stage >= state_->models.size())
    throw std::invalid_argument("stage " + std::to_string(stage) + " does not exist (the pipeline has " +
                                std::to_string(state_->models.size()) + ")");
  state_->models[stage]->fail_after(n);
}

double step_result::measured_bubble() const {
  if (stage_busy_ms.empty() || step_ms <= 0) return 0;
  double busy = 0;
  for (double b : stage_busy_ms) busy += b;
  return 1.0 - busy / (static_cast<double>(stage_busy_ms.size()) * step_ms);
}

expected<ideal_step> lm_pipeline::ideal(const step_result& r) const {
  const auto S = state_->stages.size();
  if (r.stage_forward_ms.size() != S) return error(errc::invalid_argument, "the step result has no stage times");
  pipeline::cost_model costs;
  costs.forward = r.stage_forward_ms;
  costs.backward = r.stage_backward_ms;
  costs.push_gradients = 0;
  for (double o : r.stage_other_ms) costs.push_gradients = std::max(costs.push_gradients, o);
  auto sim = pipeline::simulate(state_->plan, costs);
  if (!sim) return sim.error();
  ideal_step out;
  out.step_ms = sim->makespan + r.store_busy_ms;
  double busy = 0;
  for (double b : sim->busy) busy += b;
  out.bubble = 1.0 - busy / (static_cast<double>(S) * out.step_ms);
  out.simulation = std::move(*sim);
  return out;
}

}  // namespace strata::lm
