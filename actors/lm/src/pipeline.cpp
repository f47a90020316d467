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

#include "pipeline_state.hpp"
#include "strata/lm/costs.hpp"

namespace strata::lm {

namespace {

/// A pipeline's devices: at least one, valid, all of one kind.
void check_devices(const std::vector<device>& devices) {
  if (devices.empty()) throw std::invalid_argument("a pipeline needs at least one device");
  for (const auto& d : devices) {
    if (!d.valid()) throw std::invalid_argument("a pipeline device is an empty handle");
    if (d.kind() != devices.front().kind())
      throw std::invalid_argument("a pipeline's devices must all be of one kind (cpu, sim or cuda); got " +
                                  devices.front().name() + " and " + d.name());
  }
}

/// Across ranks, one stage per rank: this rank's device serves its stage, the others stay
/// empty in `devices`. Returns the stages' configuration: with replicas, each trains on its share
/// of the batch's columns.
lm::config spread_over_ranks(const lm::config& config, std::vector<device>& devices, const std::vector<std::size_t>& layer_counts,
                            const lm_pipeline_options& options) {
  lm::config stage_config = config;
  const auto rank = static_cast<std::size_t>(options.ranks->rank()), world = static_cast<std::size_t>(options.ranks->size());
  const std::size_t R = options.replicas;
  if (devices.size() != 1)
    throw std::invalid_argument("a pipeline across ranks runs one stage per rank on one device of its own; got " +
                                std::to_string(devices.size()) + " devices on rank " + std::to_string(rank));
  if (R < 1 || layer_counts.size() * R != world)
    throw std::invalid_argument("a job of " + std::to_string(world) + " ranks cannot hold " + std::to_string(R) +
                                " replicas of " + std::to_string(layer_counts.size()) + " stages (one stage per rank)");
  if (R > 1 && (config.batch % (R * config.micro_batches) != 0 || devices.front().kind() != device_kind::cpu))
    throw std::invalid_argument("replicas need cpu stages and a batch (" + std::to_string(config.batch) +
                                ") that splits into " + std::to_string(R) + " replicas x " +
                                std::to_string(config.micro_batches) + " micro-batches");
  stage_config.batch = config.batch / R;
  std::vector<device> per_stage(layer_counts.size());
  per_stage[rank % layer_counts.size()] = devices.front();
  devices = std::move(per_stage);
  return stage_config;
}

/// Busy time per kind of work of a stage's device, for the log; the trace's stage device tracks
/// are written by the stage actor (one slice per micro-batch and chunk,
/// strata/pipeline/stage_actor.hpp).
void observe_stage_work(device& dev, const std::shared_ptr<stage_clock>& clock) {
  dev.set_work_observer([clock](const work_record& r) {
    const auto ns = (r.end - r.start).count();
    const std::string& name = *r.name;
    if (r.stream_id == clock->copy_stream.load(std::memory_order_relaxed)) {
      // an incoming activation or gradient: not busy time
    } else if (name == "forward") {
      clock->forward_ns += ns;
      ++clock->forward_items;
    } else if (name == "backward") {
      clock->backward_ns += ns;
      ++clock->backward_items;
    } else {
      clock->other_ns += ns;
    }
  });
}

}  // namespace

void lm_pipeline::state::add_stage(std::size_t s, const stage_span& span, const lm::config& stage_config,
                                   const lm_pipeline_options& options) {
  if (!devices[s].valid()) {  // another rank's stage
    contexts.emplace_back();
    models.emplace_back();
    stage_models.emplace_back();
    clocks.push_back(std::make_shared<stage_clock>());
    return;
  }
  contexts.push_back(std::make_shared<pipeline::stage_context>(static_cast<int>(s), devices[s]));
  models.push_back(std::make_shared<lm_stage>(stage_config, span, devices[s], contexts[s]->compute(), options.carry_state));
  stage_models.push_back(std::make_shared<lstm_stage_model>(models.back()));
  if (options.ranks && options.replicas > 1)
    stage_models.back()->before_norm = [this, s](lm_stage& m, stream& on) { sum_gradients_over_replicas(s, m, on); };
  auto clock = std::make_shared<stage_clock>();
  clock->copy_stream = contexts[s]->copies().id();
  clocks.push_back(clock);
  observe_stage_work(devices[s], clock);
}

lm_pipeline::lm_pipeline(actor_system& system, std::vector<device> devices, lm::config config,
                         pipeline::schedule_kind schedule, std::vector<std::size_t> layer_counts,
                         lm_pipeline_options options)
    : state_(std::make_unique<state>()) {
  config.validate();
  check_devices(devices);
  device store_device = std::move(options.store_device);
  const lm::config stage_config = options.ranks ? spread_over_ranks(config, devices, layer_counts, options) : config;
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
  if (options.link) {
    if (auto bad = pipeline::check_link(*options.link)) throw std::invalid_argument(bad.message());
    st.link = options.link;
    const auto outputs = layer_memory_costs(stage_config).lstm;  // what a cut after each layer carries (last: exclusive)
    for (std::size_t s = 0; s + 1 < spans.size(); ++s)
      st.cut_bytes.push_back(static_cast<double>(outputs[spans[s].last - 1].output_bytes));
  }
  st.ranks = options.ranks;
  if (st.ranks) {
    st.replicas = options.replicas;
    st.replica = static_cast<std::size_t>(st.ranks->rank()) / spans.size();
  }
  for (std::size_t s = 0; s < spans.size(); ++s) st.add_stage(s, spans[s], stage_config, options);
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
  for (auto& d : state_->devices)
    if (d.valid()) d.set_work_observer({});
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
  // Replica j (across ranks) takes columns [j B / R, (j+1) B / R).
  const std::size_t T = c.seq, B = c.batch, M = c.micro_batches, Bm = B / (M * st.replicas);
  const std::size_t first = st.replica * (B / st.replicas);
  std::vector<std::vector<std::int32_t>> tok(M), tgt(M);
  for (std::size_t mb = 0; mb < M; ++mb) {
    tok[mb].resize(T * Bm);
    tgt[mb].resize(T * Bm);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t b = 0; b < Bm; ++b) {
        tok[mb][t * Bm + b] = tokens[t * B + first + mb * Bm + b];
        tgt[mb][t * Bm + b] = targets[t * B + first + mb * Bm + b];
      }
  }
  const std::size_t S = st.stage_models.size();
  for (std::size_t s = 0; s < S; ++s)
    if (st.local(s))
      st.stage_models[s]->set_step_data(s == 0 ? tok : std::vector<std::vector<std::int32_t>>{},
                                        s + 1 == S ? tgt : std::vector<std::vector<std::int32_t>>{}, st.step_index);
  for (auto& clock : st.clocks) clock->reset();
  if (st.store_clock) st.store_clock->reset();
  if (st.ranks) {
    auto across = st.step_across_ranks(timeout);
    if (across) ++st.step_index;
    return across;
  }
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
  // A stateful optimizer keeps its moments: only the rate changes (set_optimizer would reset them).
  if (auto r = client.set_learning_rate(lr).get(); !r) return r.error();
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
  if (state_->ranks) return state_->gather_optimizer_state(bytes.str());
  return bytes.str();
}

expected<void> lm_pipeline::set_optimizer_state(const std::string& all_bytes, std::chrono::milliseconds timeout) {
  std::string own;
  if (state_->ranks) {  // the keys of this rank's stages only
    auto part = state_->local_part_of_optimizer_state(all_bytes);
    if (!part) return part.error();
    own = std::move(*part);
  }
  const std::string& bytes = state_->ranks ? own : all_bytes;
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

namespace {

/// Where stage layer kl's h (part 0) or c (part 1) of a stage's read_state goes in the whole
/// state (per layer: h [B, H], then c [B, H]): the stage holds `columns` of the B columns from
/// `first_column` on.
std::size_t state_offset(const lm::config& c, std::size_t layer, std::size_t part, std::size_t first_column) {
  return ((2 * layer + part) * c.batch + first_column) * c.hidden;
}

}  // namespace

expected<std::vector<named_parameter>> lm_pipeline::carried_state(std::chrono::milliseconds timeout) {
  if (state_->failed)
    if (auto r = state_->restart(); !r) return r.error();
  auto& st = *state_;
  const lm::config& c = st.config;
  const std::size_t columns = c.batch / st.replicas, first_column = st.replica * columns, n = columns * c.hidden;
  std::vector<float> all(2 * c.layers * c.batch * c.hidden, 0.0f);
  bool carried = false;
  auto got = st.on_every_stage(timeout, [&](std::size_t s, stream& on) -> expected<void> {
    const auto& m = st.models[s];
    auto mine = m->read_state(on);
    if (mine.empty()) return {};
    carried = true;
    for (std::size_t kl = 0; kl < m->span().last - m->span().first; ++kl)
      for (std::size_t part = 0; part < 2; ++part)
        std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>((2 * kl + part) * n), n,
                    all.begin() + static_cast<std::ptrdiff_t>(state_offset(c, m->span().first + kl, part, first_column)));
    return {};
  });
  if (!got) return got.error();
  if (st.ranks) {  // each rank fills its layers and columns; the sum with zeros keeps them exactly
    std::vector<float> flag{carried ? 1.0f : 0.0f};
    if (auto r = st.ranks->sum(flag); !r) return r.error();
    carried = flag.front() > 0;
    if (auto r = st.ranks->sum(all); !r) return r.error();
  }
  std::vector<named_parameter> out;
  if (!carried) return out;
  const std::size_t per = c.batch * c.hidden;
  for (std::size_t l = 0; l < c.layers; ++l)
    for (std::size_t part = 0; part < 2; ++part) {
      const auto at = all.begin() + static_cast<std::ptrdiff_t>(state_offset(c, l, part, 0));
      out.push_back({(part == 0 ? "h_l" : "c_l") + std::to_string(l), std::vector<float>(at, at + static_cast<std::ptrdiff_t>(per))});
    }
  return out;
}

expected<void> lm_pipeline::set_carried_state(const std::vector<named_parameter>& carried, std::chrono::milliseconds timeout) {
  auto& st = *state_;
  const lm::config& c = st.config;
  const std::size_t per = c.batch * c.hidden;
  std::vector<float> all(2 * c.layers * per, 0.0f);
  std::vector<bool> seen(2 * c.layers, false);
  for (const auto& t : carried) {
    std::size_t l = 0, part = 2;
    if (t.name.size() > 3 && (t.name.starts_with("h_l") || t.name.starts_with("c_l")) &&
        t.name.find_first_not_of("0123456789", 3) == std::string::npos && t.name.size() < 10) {
      l = std::stoul(t.name.substr(3));
      part = t.name[0] == 'h' ? 0 : 1;
    }
    if (part == 2 || l >= c.layers)
      return error(errc::invalid_argument, "'" + t.name + "' is not a carried state of this model (h_l<k>, c_l<k> for k < " +
                                               std::to_string(c.layers) + ")");
    if (t.values.size() != per)
      return error(errc::invalid_argument, "carried state '" + t.name + "' has " + std::to_string(t.values.size()) +
                                               " values; the model carries [" + std::to_string(c.batch) + ", " +
                                               std::to_string(c.hidden) + "]");
    seen[2 * l + part] = true;
    std::copy(t.values.begin(), t.values.end(), all.begin() + static_cast<std::ptrdiff_t>(state_offset(c, l, part, 0)));
  }
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (!seen[i])
      return error(errc::invalid_argument, "the carried state lacks '" + std::string(i % 2 == 0 ? "h_l" : "c_l") +
                                               std::to_string(i / 2) + "'");
  if (st.failed)
    if (auto r = st.restart(); !r) return r.error();
  const std::size_t columns = c.batch / st.replicas, first_column = st.replica * columns, n = columns * c.hidden;
  return st.on_every_stage(timeout, [&](std::size_t s, stream& on) -> expected<void> {
    const auto& m = st.models[s];
    std::vector<float> mine;
    for (std::size_t kl = 0; kl < m->span().last - m->span().first; ++kl)
      for (std::size_t part = 0; part < 2; ++part) {
        const auto at = all.begin() + static_cast<std::ptrdiff_t>(state_offset(c, m->span().first + kl, part, first_column));
        mine.insert(mine.end(), at, at + static_cast<std::ptrdiff_t>(n));
      }
    m->write_state(mine, on);
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
  if (state_->ranks) return state_->gather_parameters(std::move(all));
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
const lm::config& lm_pipeline::config() const noexcept { return state_->config; }
std::size_t lm_pipeline::stages() const noexcept { return state_->actors.stages.size(); }
std::string lm_pipeline::replica_sum() const {
  if (state_->replicas <= 1) return "none";
  return state_->replicas_by_group ? "dist_sync_allreduce" : "world_allreduce";
}

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
  if (!state_->local(stage)) return;  // another rank's stage: that rank injects it
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
  if (state_->link) {  // every stage on a rank of its own; with_links's link in this model's unit, ms
    pipeline::rank_placement own_ranks{{}, static_cast<int>(S)};
    for (std::size_t s = 0; s < S; ++s) own_ranks.ranks.push_back(static_cast<int>(s));
    const pipeline::link_model link_ms{state_->link->latency_s * 1e3, state_->link->bytes_per_s / 1e3};
    auto linked = pipeline::with_links(std::move(costs), own_ranks, state_->cut_bytes, link_ms);
    if (!linked) return linked.error();
    costs = std::move(*linked);
  }
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
