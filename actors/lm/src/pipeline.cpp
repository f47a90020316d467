#include "strata/lm/pipeline.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <variant>

#include "stage.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/device/event.hpp"
#include "strata/device/stream.hpp"
#include "strata/pipeline/stage_actor.hpp"
#include "strata/trace.hpp"

namespace strata::lm {

namespace {

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
  void end_compute(stream& s) { stage_->enqueue_norm(s); }
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

}  // namespace

struct lm_pipeline::state {
  actor_system* system = nullptr;
  lm_config config;
  pipeline::plan plan;
  std::vector<device> devices;
  std::vector<std::shared_ptr<lm_stage>> models;
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
    actors = pipeline::spawn_pipeline(*system, plan, contexts, stage_models, std::move(o));
    generations.clear();
    for (auto& c : contexts) generations.push_back(c->instances());
  }

  /// Stops the stage actors and the driver, waits until they have terminated (no more
  /// submissions; a request to a stopped actor is answered once it has) and their streams have
  /// drained (a failed stream skips what is left), so that no work item refers to the models.
  void halt() {
    system->stop(actors.supervisor);  // stops the stages
    system->stop(actors.driver);
    for (auto& s : actors.stages) {
      auto gone = system->request<void>(s, std::chrono::seconds(30), unit_t{});
      (void)gone.wait_for(std::chrono::seconds(30));
    }
    for (auto& c : contexts) {
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
    } else if (devices.front().kind() != device_kind::cpu) {  // sim, cuda: merge on the first stage's device
      opts.kind = kvstore::kind::device;
      opts.merge_device = devices.front();
    }
    store = kvstore::spawn(*system, opts);
    kvstore::client client(*system, store);
    if (auto r = set_rule(client); !r) return r.error();
    auto [keys, values] = parameter_tensors();
    if (auto r = client.init(std::move(keys), std::move(values)).get(); !r) return r.error();
    for (auto& c : contexts) c->set_store(store);
    store_stale = false;
    return {};
  }

  /// Runs `task` on every stage's actor, in stage order.
  expected<void> on_every_stage(std::chrono::milliseconds timeout,
                                const std::function<expected<void>(std::size_t, stream&)>& task) {
    for (std::size_t s = 0; s < actors.stages.size(); ++s) {
      auto r = system->request<void>(actors.stages[s], timeout,
                                     pipeline::stage_task{[&task, s](stream& st) { return task(s, st); }})
                   .get();
      if (!r) return r.error();
    }
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
    st.contexts.push_back(std::make_shared<pipeline::stage_context>(static_cast<int>(s), st.devices[s]));
    st.models.push_back(
        std::make_shared<lm_stage>(config, spans[s], st.devices[s], st.contexts[s]->compute(), options.carry_state));
    st.stage_models.push_back(std::make_shared<lstm_stage_model>(st.models.back()));
    auto clock = std::make_shared<stage_clock>();
    clock->copy_stream = st.contexts[s]->copies().id();
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
  st.lr = config.lr;
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
  auto& st = *state_;
  // Split the batch into micro-batches of columns: stage 0 takes the tokens, the last the targets.
  const std::size_t T = c.seq, B = c.batch, M = c.micro_batches, Bm = B / M;
  std::vector<std::vector<std::int32_t>> tok(M), tgt(M);
  for (std::size_t mb = 0; mb < M; ++mb) {
    tok[mb].resize(T * Bm);
    tgt[mb].resize(T * Bm);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t b = 0; b < Bm; ++b) {
        tok[mb][t * Bm + b] = tokens[t * B + mb * Bm + b];
        tgt[mb][t * Bm + b] = targets[t * B + mb * Bm + b];
      }
  }
  const std::size_t S = st.stage_models.size();
  for (std::size_t s = 0; s < S; ++s)
    st.stage_models[s]->set_step_data(s == 0 ? tok : std::vector<std::vector<std::int32_t>>{},
                                      s + 1 == S ? tgt : std::vector<std::vector<std::int32_t>>{}, st.step_index);
  for (auto& clock : st.clocks) clock->reset();
  if (st.store_clock) st.store_clock->reset();
  auto outcome = st.system->request<pipeline::step_outcome>(st.actors.driver, timeout, pipeline::run_step{}).get();
  if (!outcome) {
    st.failed = true;
    st.failure = outcome.error().code();
    return outcome.error();
  }
  const double count = static_cast<double>(c.seq * c.batch);
  step_result r;
  for (const auto& report : outcome->reports) r.loss += report.at(1);
  r.loss /= count;
  r.grad_norm = outcome->args.at(1);
  r.step_ms = outcome->step_ms;
  const double units = static_cast<double>(c.micro_batches);
  for (auto& clock : st.clocks) {
    r.stage_busy_ms.push_back(clock->busy_ms());
    r.stage_forward_ms.push_back(static_cast<double>(clock->forward_ns.load()) / 1e6 / units);
    r.stage_backward_ms.push_back(static_cast<double>(clock->backward_ns.load()) / 1e6 / units);
    r.stage_other_ms.push_back(static_cast<double>(clock->other_ns.load()) / 1e6);
  }
  if (st.store_clock) r.store_busy_ms = st.store_clock->busy_ms();
  ++st.step_index;
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

double lm_pipeline::learning_rate() const noexcept { return state_->lr; }

void lm_pipeline::set_step_index(std::uint64_t step) noexcept { state_->step_index = step; }
std::uint64_t lm_pipeline::step_index() const noexcept { return state_->step_index; }

expected<void> lm_pipeline::set_learning_rate(double lr, std::chrono::milliseconds timeout) {
  if (!(lr >= 0) || !std::isfinite(lr)) return error(errc::invalid_argument, "a learning rate must be a number >= 0");
  auto& st = *state_;
  if (lr == st.lr) return {};
  if (st.failed)
    if (auto r = st.restart(); !r) return r.error();
  st.lr = lr;
  if (st.store_stale) return {};  // the store built before the next step takes the new rate
  kvstore::client client(*st.system, st.store, timeout);
  if (!st.stateful()) return st.set_rule(client);
  // set_optimizer starts the state afresh: keep it through a save and a load around it.
  auto file = state::save_to_scratch(client);
  if (!file) return file.error();
  struct remove_file {
    std::filesystem::path path;
    ~remove_file() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  } cleanup{*file};
  if (auto r = st.set_rule(client); !r) return r.error();
  if (auto r = client.load(file->string()).get(); !r) return r.error();
  return {};
}

expected<std::string> lm_pipeline::optimizer_state(std::chrono::milliseconds timeout) {
  auto ref = store();
  if (!ref) return ref.error();
  kvstore::client client(*state_->system, *ref, timeout);
  auto file = state::save_to_scratch(client);
  if (!file) return file.error();
  std::ifstream in(*file, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const bool read = static_cast<bool>(in);
  std::error_code ec;
  std::filesystem::remove(*file, ec);
  if (!read) return error(errc::runtime_failure, "cannot read the store's state back from '" + file->string() + "'");
  return bytes.str();
}

expected<void> lm_pipeline::set_optimizer_state(const std::string& bytes, std::chrono::milliseconds timeout) {
  auto ref = store();
  if (!ref) return ref.error();
  kvstore::client client(*state_->system, *ref, timeout);
  std::error_code ec;
  auto dir = std::filesystem::temp_directory_path(ec);  // room for a file as large as a checkpoint's
  if (ec) return error(errc::runtime_failure, "no temporary directory for the optimizer state: " + ec.message());
  static std::atomic<std::uint64_t> loads{0};
  const auto file = dir / ("strata-lm-" + std::to_string(::getpid()) + "-load-" + std::to_string(loads.fetch_add(1)) + ".kvstore");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return error(errc::runtime_failure, "cannot write the optimizer state to '" + file.string() + "'");
  }
  auto r = client.load(file.string()).get();
  std::filesystem::remove(file, ec);
  if (!r) return r.error();
  return {};
}

expected<void> lm_pipeline::reset_state(std::chrono::milliseconds timeout) {
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();  // zeroes the state too
  return state_->on_every_stage(timeout, [this](std::size_t s, stream& st) -> expected<void> {
    st.launch(state_->models[s]->zero_state_work());
    return {};
  });
}

expected<std::vector<named_parameter>> lm_pipeline::parameters(std::chrono::milliseconds timeout) {
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();
  std::map<std::string, std::vector<float>> all;
  auto got = state_->on_every_stage(timeout, [this, &all](std::size_t s, stream& st) -> expected<void> {
    const auto& m = state_->models[s];
    if (!m->computes()) return {};
    for (std::size_t i = 0; i < m->names().size(); ++i) all[m->names()[i]] = m->read_value(i, st);
    return {};
  });
  if (!got) return got.error();
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
  auto put = state_->on_every_stage(timeout, [this, &params](std::size_t s, stream& st) -> expected<void> {
    const auto& m = state_->models[s];
    if (!m->computes()) return {};
    for (const auto& np : params)
      for (std::size_t i = 0; i < m->names().size(); ++i)
        if (m->names()[i] == np.name) m->write_value(i, np.values, st);
    st.synchronize();  // the store (re)built before the next step reads these values
    return {};
  });
  if (!put) return put.error();
  state_->store_stale = true;  // the store's master weights must follow
  return {};
}

const pipeline::plan& lm_pipeline::plan() const noexcept { return state_->plan; }
const lm_config& lm_pipeline::config() const noexcept { return state_->config; }
std::size_t lm_pipeline::stages() const noexcept { return state_->actors.stages.size(); }

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
  const auto S = state_->actors.stages.size();
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
