// An lm_pipeline with its stages on several MPI ranks (lm_pipeline_options::ranks): every rank
// builds and spawns only its own stage, the rank group wires them with the driver on rank 0, and
// the calls that need every stage (a step, the parameters, the optimizer state) are collective,
// made by every rank in the same order with the same arguments.

#include <fstream>
#include <sstream>

#include "pipeline_state.hpp"
#include "rank_bytes.hpp"
#include "strata/kvstore/checkpoint.hpp"

namespace strata::lm {

namespace {

/// A scratch file name in the temporary directory, removed with the object.
struct scratch_file {
  std::filesystem::path path;
  explicit scratch_file(const std::string& tag) {
    static std::atomic<std::uint64_t> count{0};
    std::error_code ec;
    path = std::filesystem::temp_directory_path(ec) /
           ("strata-lm-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(count.fetch_add(1)) + ".kvstore");
  }
  ~scratch_file() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;
};

expected<void> write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return error(errc::runtime_failure, "cannot write the scratch file '" + path.string() + "'");
  return {};
}

expected<std::string> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in) return error(errc::runtime_failure, "cannot read the scratch file '" + path.string() + "'");
  return bytes.str();
}

}  // namespace

int lm_pipeline::state::driver_rank() const { return static_cast<int>(replica * models.size()); }

void lm_pipeline::state::spawn_actors_across_ranks(pipeline::pipeline_options o) {
  const int rank = ranks->rank();
  if (replicas > 1) {
    auto joined = ranks->join_replicas(models.size());
    if (!joined) throw std::runtime_error("cannot prepare the replicas' gradient sums: " + joined.error().message());
    replicas_by_group = *joined;
  }
  std::vector<int> placement(models.size());  // stage k of replica j on rank j P + k
  for (std::size_t s = 0; s < placement.size(); ++s) placement[s] = driver_rank() + static_cast<int>(s);
  if (replicas > 1) {  // each replica's pipeline publishes its own names
    o.stage_name += "-r" + std::to_string(replica);
    o.driver_name += "-r" + std::to_string(replica);
  }
  std::vector<actor_ref> local_stages(models.size());
  actor_ref supervisor;
  for (std::size_t s = 0; s < models.size(); ++s) {
    if (!local(s)) continue;
    if (!supervisor)
      supervisor = system->spawn_supervisor(
          o.restarts, spawn_options{.name = o.stage_name + "-supervisor (rank " + std::to_string(rank) + ")"});
    local_stages[s] = system->spawn_child<pipeline::stage_actor<lstm_stage_model>>(
        supervisor,
        spawn_options{.name = o.stage_name + "-" + std::to_string(s) + " (" + devices[s].name() + ", rank " +
                              std::to_string(rank) + ")"},
        contexts[s], stage_models[s]);
  }
  actors = ranks->connect(*system, plan, placement, contexts, std::move(local_stages), std::move(supervisor), o,
                          driver_rank());
}

std::map<std::string, std::pair<std::size_t, std::size_t>> lm_pipeline::state::parameter_offsets(std::size_t& total) const {
  std::map<std::string, std::pair<std::size_t, std::size_t>> out;  // name -> (offset, count), PyTorch's order
  total = 0;
  for (const auto& name : parameter_names(config)) {
    std::size_t n = 1;
    for (auto d : parameter_shape(config, name)) n *= d;
    out[name] = {total, n};
    total += n;
  }
  return out;
}

void lm_pipeline::state::sum_gradients_over_replicas(std::size_t, lm_stage& m, stream& s) {
  if (replicas_by_group) {  // through a store spanning this stage's replicas (strata::lm_net)
    s.synchronize();
    std::vector<tensor> grads;
    for (std::size_t i = 0; i < m.names().size(); ++i) grads.push_back(m.grad(i));
    if (auto r = ranks->sum_over_replicas(m.names(), grads); !r)
      throw std::runtime_error("cannot sum the gradients over the replicas: " + r.error().message());
    std::lock_guard lock(reduce_mutex);
    ++reduced_steps;
    reduce_done.notify_all();
    return;
  }
  // One float sum over every rank: each fills its stage's gradients in the slots of their names,
  // so each slot ends as the sum over that stage's replicas (the zeros of the other stages' ranks
  // add nothing). Runs on the stage actor once its backward work is done.
  s.synchronize();
  std::size_t total = 0;
  const auto offsets = parameter_offsets(total);
  std::vector<float> all(total, 0.0f);
  for (std::size_t i = 0; i < m.names().size(); ++i) {
    const auto [at, n] = offsets.at(m.names()[i]);
    const float* g = m.grad(i).device_data<float>();
    std::copy(g, g + n, all.begin() + static_cast<std::ptrdiff_t>(at));
  }
  if (auto r = ranks->sum(all); !r)
    throw std::runtime_error("cannot sum the gradients over the replicas: " + r.error().message());
  for (std::size_t i = 0; i < m.names().size(); ++i) {
    const auto [at, n] = offsets.at(m.names()[i]);
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + n),
              m.grad(i).device_data<float>());
  }
  std::lock_guard lock(reduce_mutex);
  ++reduced_steps;
  reduce_done.notify_all();
}

namespace {

// After a step across ranks, rank 0 tells every rank how it went: `shared_head` floats ([failed,
// loss, norm, step ms]) and each driver its replica's summed loss (two floats: exact in float, the
// rest); then every stage's device times, `times_per_stage` floats each ([busy, forward,
// backward, other]).
constexpr std::size_t shared_head = 4, times_per_stage = 4;

}  // namespace

expected<step_result> lm_pipeline::state::step_across_ranks(std::chrono::milliseconds timeout) {
  // Every rank's stage holds its step data before rank 0's driver begins the step.
  std::vector<float> ready{1.0f};
  if (auto r = ranks->sum(ready); !r) return r.error();
  ++steps_run;
  const bool driver = ranks->rank() == driver_rank();
  expected<pipeline::step_outcome> outcome = error(errc::runtime_failure, "no outcome");
  if (driver) {
    outcome = system->request<pipeline::step_outcome>(actors.driver, timeout, pipeline::run_step{}).get();
    // With replicas the other ranks may wait in the gradient sum this step never reached: end
    // this process (the job with it) rather than join the sum below.
    if (!outcome && replicas > 1) return outcome.error();
  } else if (replicas > 1) {
    // Collectives go in one order on every rank: this step's gradient sum (on the stage actor)
    // before the sum below.
    std::unique_lock lock(reduce_mutex);
    if (!reduce_done.wait_for(lock, timeout, [&] { return reduced_steps >= steps_run; }))
      return error(errc::request_timeout, "the replicas did not sum their gradients within the step's timeout");
  }
  step_result r;
  double loss_sum = 0;
  std::vector<float> shared = outcome_to_share(outcome, driver, r, loss_sum);
  if (auto e = ranks->sum(shared); !e) return e.error();
  if (shared[0] != 0.0f) {
    failed = true;
    if (!outcome && ranks->rank() == 0) return outcome.error();
    return error(errc::runtime_failure, "the step failed on rank 0 (its output names the reason)");
  }
  // Each rank of replica 0 gives its stages' device times in a second sum: a rank that is no
  // driver joined the first one as soon as its step data was set, before its stages ran; the step
  // is through now (the driver heard every stage say its update was done), so their clocks are
  // whole.
  std::vector<float> times = local_stage_times();
  if (auto e = ranks->sum(times); !e) return e.error();
  const double count = static_cast<double>(config.seq * config.batch);
  if (ranks->rank() == 0) {  // the mean over the whole batch, summed in double in replica order
    double total = 0;
    for (std::size_t j = 0; j < replicas; ++j)
      total += static_cast<double>(shared[shared_head + 2 * j]) + static_cast<double>(shared[shared_head + 2 * j + 1]);
    r.loss = replicas == 1 ? loss_sum / count : total / count;
  } else {  // the others get the step's figures in float
    r.loss = shared[1];
    r.grad_norm = shared[2];
    r.step_ms = shared[3];
  }
  take_stage_times(r, times);
  return r;
}

std::vector<float> lm_pipeline::state::outcome_to_share(const expected<pipeline::step_outcome>& outcome, bool driver,
                                                        step_result& r, double& loss_sum) const {
  std::vector<float> shared(shared_head + 2 * replicas, 0.0f);
  const double count = static_cast<double>(config.seq * config.batch);
  if (driver) {
    if (outcome) {
      for (const auto& report : outcome->reports) loss_sum += report.at(1);
      r.grad_norm = outcome->args.at(1);
      r.step_ms = outcome->step_ms;
    }
    const auto hi = static_cast<float>(loss_sum);
    shared[shared_head + 2 * replica] = hi;
    shared[shared_head + 2 * replica + 1] = static_cast<float>(loss_sum - static_cast<double>(hi));
  }
  if (ranks->rank() == 0) {
    shared[0] = outcome ? 0.0f : 1.0f;
    shared[1] = static_cast<float>(loss_sum / count);
    shared[2] = static_cast<float>(r.grad_norm);
    shared[3] = static_cast<float>(r.step_ms);
  }
  return shared;
}

std::vector<float> lm_pipeline::state::local_stage_times() const {
  const double units = static_cast<double>(config.micro_batches);
  std::vector<float> times(times_per_stage * models.size(), 0.0f);
  for (std::size_t s = 0; s < models.size(); ++s) {
    if (!local(s) || replica != 0) continue;
    float* out = &times[times_per_stage * s];
    out[0] = static_cast<float>(clocks[s]->busy_ms());
    out[1] = static_cast<float>(static_cast<double>(clocks[s]->forward_ns.load()) / 1e6 / units);
    out[2] = static_cast<float>(static_cast<double>(clocks[s]->backward_ns.load()) / 1e6 / units);
    out[3] = static_cast<float>(static_cast<double>(clocks[s]->other_ns.load()) / 1e6);
  }
  return times;
}

void lm_pipeline::state::take_stage_times(step_result& r, const std::vector<float>& times) {
  const double units = static_cast<double>(config.micro_batches);
  for (std::size_t s = 0; s < models.size(); ++s) {
    const float* in = &times[times_per_stage * s];
    r.stage_busy_ms.push_back(in[0]);
    r.stage_forward_ms.push_back(in[1]);
    r.stage_backward_ms.push_back(in[2]);
    r.stage_other_ms.push_back(in[3]);
    if (!local(s)) {  // measured_stage_times_ms reads the clocks: every rank's figures
      clocks[s]->forward_ns = static_cast<std::int64_t>(static_cast<double>(in[1]) * 1e6 * units);
      clocks[s]->backward_ns = static_cast<std::int64_t>(static_cast<double>(in[2]) * 1e6 * units);
    }
  }
}

expected<std::vector<named_parameter>> lm_pipeline::state::gather_parameters(
    std::map<std::string, std::vector<float>> local_values) {
  // One float sum over every parameter in PyTorch's order; each rank fills its own stage's (a sum
  // with zeros keeps the values exactly).
  // Replicas hold equal weights: replica 0's ranks give them.
  std::size_t total = 0;
  const auto offsets = parameter_offsets(total);
  std::vector<float> all(total, 0.0f);
  for (const auto& [name, values] : local_values)
    if (replica == 0) std::copy(values.begin(), values.end(), all.begin() + static_cast<std::ptrdiff_t>(offsets.at(name).first));
  if (auto r = ranks->sum(all); !r) return r.error();
  std::vector<named_parameter> out;
  for (const auto& name : parameter_names(config)) {
    const auto [at, n] = offsets.at(name);
    out.push_back({name, std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(at),
                                            all.begin() + static_cast<std::ptrdiff_t>(at + n))});
  }
  return out;
}

expected<std::string> lm_pipeline::state::gather_optimizer_state(std::string local_bytes) {
  auto parts = detail::gather_bytes(*ranks, replica == 0 ? local_bytes : std::string());  // replicas hold equal states
  if (!parts) return parts.error();
  // One kvstore checkpoint of every rank's keys, as one store of every stage would save it.
  std::vector<kvstore::checkpoint_entry> entries;
  for (const auto& part : *parts) {
    if (part.empty()) continue;
    scratch_file file("gather");
    if (auto w = write_bytes(file.path, part); !w) return w.error();
    auto ck = kvstore::read_checkpoint(file.path.string());
    if (!ck) return ck.error();
    for (auto& e : ck->entries) entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  scratch_file merged("merged");
  if (auto w = kvstore::write_checkpoint(merged.path.string(), entries); !w) return w.error();
  return read_bytes(merged.path);
}

expected<std::string> lm_pipeline::state::local_part_of_optimizer_state(const std::string& bytes) {
  scratch_file all("all");
  if (auto w = write_bytes(all.path, bytes); !w) return w.error();
  auto ck = kvstore::read_checkpoint(all.path.string());
  if (!ck) return ck.error();
  std::vector<kvstore::checkpoint_entry> own;
  for (auto& e : ck->entries)
    for (const auto& m : models)
      if (m && std::find(m->names().begin(), m->names().end(), e.key) != m->names().end()) own.push_back(std::move(e));
  scratch_file part("part");
  if (auto w = kvstore::write_checkpoint(part.path.string(), own); !w) return w.error();
  return read_bytes(part.path);
}

expected<bool> lm_pipeline::any_rank(bool flag) {
  if (!state_->ranks) return flag;
  std::vector<float> votes{flag ? 1.0f : 0.0f};
  if (auto r = state_->ranks->sum(votes); !r) return r.error();
  return votes[0] != 0.0f;
}

}  // namespace strata::lm
