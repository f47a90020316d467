#include "trainer_setup.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "rank_bytes.hpp"
#include "strata/files.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/lm/costs.hpp"

namespace strata::lm::detail {

namespace {

namespace fs = std::filesystem;
namespace pl = strata::pipeline;

/// Hardware threads each cpu stage device may use: `flag`, or (0) all of them.
std::size_t cpu_threads_of(std::size_t flag) {
  return flag > 0 ? flag : std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

/// The devices to train on: an explicit spec, else the CUDA GPUs when present (one stage per GPU;
/// a single GPU is shared by two stages, cuda:0x2, so that the default is a pipeline as cpu:2 is),
/// else cpu:2; cpu devices get `cpu_threads` threads each.
std::vector<device> choose_devices(const std::string& spec_flag, std::size_t cpu_threads, std::string& spec_used) {
  std::string spec = spec_flag;
  if (spec.empty()) {
    const int gpus = cuda_gpu_count();
    spec = "cpu:2";
    if (gpus == 1) {
      spec = "cuda:0x2";
    } else if (gpus > 1) {
      spec = "cuda:0";
      for (int g = 1; g < gpus; ++g) spec += "," + std::to_string(g);
    }
  } else if (spec.rfind("sim", 0) == 0) {
    throw input_error("--devices '" + spec + "' names sim devices, which model time but compute nothing, so they cannot train; use cpu:N");
  }
  std::vector<device> devs;
  try {
    devs = make_devices(spec, {.cpu_threads_per_device = static_cast<int>(cpu_threads_of(cpu_threads))});
  } catch (const std::exception& e) {
    throw input_error("--devices '" + spec + "' cannot be met: " + e.what());
  }
  if (devs.empty()) throw input_error("--devices '" + spec + "' names no devices");
  spec_used = spec;
  return devs;
}

/// One micro-batch by default: on CPU stages an LSTM step at batch <= 20 is bound by streaming
/// its weights, so splitting the batch multiplies that traffic and costs more than the pipeline
/// bubble it removes (docs/lstm_lm.md has the measurements). Pass --micro-batches to pipeline.
std::size_t default_micro_batches() { return 1; }

/// Wavefront's time chunks when --chunks is not given: the largest divisor of the window up to 8
/// (seq 35: 7 chunks of 5 timesteps). More chunks fill the pipeline sooner but each costs a
/// message and a smaller input-projection GEMM; on cpu:2 with a core per stage and the seed model
/// 7 chunks gave a 280 ms step, 5 gave 286 ms and 35 gave 347 ms (docs/lstm_lm.md).
std::size_t default_chunks(std::size_t seq) {
  std::size_t best = 1;
  for (std::size_t c = 1; c <= std::min<std::size_t>(seq, 8); ++c)
    if (seq % c == 0) best = c;
  return best;
}

/// Fails before the run, not after it, when `file` (the value of `flag`) cannot be written: a
/// directory, or a place where no file can be created (checked with a probe file beside it).
void check_output_file(const std::string& flag, const std::string& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw input_error(flag + " '" + file + "' is a directory; expected a file name");
  if (auto creatable = check_file_creatable_in(fs::path(file).parent_path()); !creatable)
    throw input_error(flag + " '" + file + "' cannot be written (" + creatable.error().message() + ")");
}

/// As check_output_file for a directory flag: `dir` is created when missing and must be writable.
void check_output_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw input_error(flag + " '" + dir + "' is a file; expected a directory");
  fs::create_directories(dir, ec);
  if (ec) throw input_error(flag + " '" + dir + "' cannot be created (" + ec.message() + ")");
  check_output_file(flag, (fs::path(dir) / ".lstm_lm").string());
}

/// The option checks that need nothing read yet.
void check_options(const trainer_options& o) {
  for (auto [name, v] : {std::pair{"--layers", o.layers}, {"--hidden", o.hidden}, {"--embed", o.embed},
                         {"--batch", o.batch}, {"--seq", o.seq}, {"--chunks", o.chunks_given ? o.chunks : 1}})
    if (v == 0) throw input_error(std::string(name) + " must be at least 1");
  if (o.micro_batches > 0 && o.batch % o.micro_batches != 0)
    throw input_error("--micro-batches " + std::to_string(o.micro_batches) + " does not divide --batch " + std::to_string(o.batch));
  if (o.chunks_given && o.seq % o.chunks != 0)
    throw input_error("--seq " + std::to_string(o.seq) + " is not divisible by --chunks " + std::to_string(o.chunks));
  if (o.lr && (!(*o.lr > 0) || !std::isfinite(*o.lr))) throw input_error("--lr must be a positive number");
  try {
    (void)parse_optimizer(o.optimizer);
  } catch (const std::exception&) {
    throw input_error("--optimizer '" + o.optimizer + "' is not one of sgd, momentum, nesterov, adam, adamw");
  }
  try {
    (void)parse_precision(o.precision);
  } catch (const std::exception&) {
    throw input_error("--precision '" + o.precision + "' is not one of fp32, tf32, bf16");
  }
  for (auto [name, v] : {std::pair{"--momentum", o.momentum}, {"--weight-decay", o.weight_decay}})
    if (!(v >= 0) || !std::isfinite(v)) throw input_error(std::string(name) + " must be a number >= 0");
  for (auto [name, v] : {std::pair{"--beta1", o.beta1}, {"--beta2", o.beta2}})
    if (!(v >= 0 && v < 1)) throw input_error(std::string(name) + " must be a number in [0, 1)");
  if (!(o.eps > 0) || !std::isfinite(o.eps)) throw input_error("--eps must be a positive number");
  if (o.lr_schedule != "constant" && o.lr_schedule != "step" && o.lr_schedule != "cosine" && o.lr_schedule != "plateau")
    throw input_error("--lr-schedule '" + o.lr_schedule + "' is not one of constant, step, cosine, plateau");
  if (!(o.lr_decay > 0 && o.lr_decay < 1)) throw input_error("--lr-decay must be a number in (0, 1)");
  if (o.lr_step_size == 0) throw input_error("--lr-step-size must be at least 1");
  if (o.accumulate == 0) throw input_error("--accumulate must be at least 1");
  if (o.accumulate > 1 && o.carry_state.value_or(false))
    throw input_error("--carry-state needs --accumulate 1 (an accumulated step's windows are consecutive, not parallel column streams)");
  if (!(o.clip > 0) || !std::isfinite(o.clip)) throw input_error("--clip must be a positive number");
  if (!(o.dropout >= 0 && o.dropout < 1)) throw input_error("--dropout must be a number in [0, 1)");
  if (!(o.val_fraction > 0 && o.val_fraction < 0.5)) throw input_error("--val-fraction must lie in (0, 0.5)");
  if (!(o.sample_temperature >= 0) || !std::isfinite(o.sample_temperature))
    throw input_error("--sample-temperature must be a number >= 0");
  const auto shortest = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (o.link_latency_us && !(*o.link_latency_us >= 0 && std::isfinite(*o.link_latency_us)))
    throw input_error("--link-latency-us must be a finite number of microseconds >= 0, not " + shortest(*o.link_latency_us));
  if (o.link_gbps && !(*o.link_gbps > 0))
    throw input_error("--link-gbps must be a positive number of GB/s, not " + shortest(*o.link_gbps));
}

/// The code point of the one-character UTF-8 string `s`, as 4 or more hex digits.
std::string code_point_hex(const std::string& s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  char32_t cp = b(0);
  if (s.size() == 2) cp = ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
  if (s.size() == 3) cp = ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
  if (s.size() == 4) cp = ((b(0) & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04X", static_cast<unsigned>(cp));
  return buf;
}

/// The link's measurement at the start under mpirun: round trips for the latency, and one transfer
/// of a micro-batch's activation for the bandwidth, at least 4 MiB (a smaller one would time
/// mostly the latency) and at most 64 MiB.
constexpr int link_round_trips = 300;
std::uint64_t link_transfer_bytes(const lm::config& cfg) {
  return std::clamp<std::uint64_t>(layer_memory_costs(cfg).lstm.front().output_bytes, 4ull << 20, 64ull << 20);
}

/// The link between ranks: the --link-* flags, and what ranks 0 and 1 measure for a figure not
/// given (collective then; only rank 0's figures are the measured ones). `note` says which.
rank_link link_between_ranks(const trainer_options& o, const lm::config& cfg, std::string& note) {
  rank_link link;
  std::string measured;
  if (!o.link_latency_us || !o.link_gbps) {
    const std::uint64_t bytes = link_transfer_bytes(cfg);
    auto m = o.ranks->measure_link(bytes, link_round_trips);
    if (!m) throw std::runtime_error("cannot measure the link between ranks 0 and 1: " + m.error().message());
    link = {m->latency_s * 1e6, m->bytes_per_s / 1e9};
    measured = "measured between ranks 0 and 1 (" + std::to_string(link_round_trips) + " round trips, one " +
               std::to_string(bytes >> 20) + " MiB transfer)";
  }
  if (o.link_latency_us) link.latency_us = *o.link_latency_us;
  if (o.link_gbps) link.gbps = *o.link_gbps;
  if (o.link_latency_us && o.link_gbps) note = "given by --link-latency-us and --link-gbps";
  else if (o.link_latency_us) note = "latency given by --link-latency-us, bandwidth " + measured;
  else if (o.link_gbps) note = "bandwidth given by --link-gbps, latency " + measured;
  else note = measured;
  return link;
}

using json = nlohmann::json;

json layer_json(const pl::layer_cost& c) {
  return json::array({c.forward_s, c.backward_s, c.memory_bytes, c.activation_bytes, c.output_bytes});
}
pl::layer_cost layer_of(const json& j) {
  return {j.at(0).get<double>(), j.at(1).get<double>(), j.at(2).get<std::uint64_t>(), j.at(3).get<std::uint64_t>(),
          j.at(4).get<std::uint64_t>()};
}

/// Collective: `costs` and `costs_note` (when `with_costs`) and `link` (when set) become rank 0's
/// on every rank. Doubles travel as JSON numbers, which read back exactly.
void take_rank0s(rank_group& ranks, bool with_costs, pl::model_costs& costs, std::string& costs_note,
                 std::optional<rank_link>& link) {
  json mine = json::object();
  if (ranks.rank() == 0) {
    if (with_costs) {
      json lstm = json::array();
      for (const auto& l : costs.lstm) lstm.push_back(layer_json(l));
      mine["costs"] = {{"embedding", layer_json(costs.embedding)}, {"lstm", lstm}, {"decoder", layer_json(costs.decoder)}};
      mine["costs_note"] = costs_note;
    }
    if (link) mine["link"] = {link->latency_us, std::isinf(link->gbps) ? json(nullptr) : json(link->gbps)};
  }
  auto text = rank0_bytes(ranks, mine.dump());
  if (!text) throw std::runtime_error("cannot receive rank 0's layer costs and link: " + text.error().message());
  const json got = json::parse(*text);
  if (with_costs) {
    const json& c = got.at("costs");
    costs.embedding = layer_of(c.at("embedding"));
    costs.decoder = layer_of(c.at("decoder"));
    costs.lstm.clear();
    for (const auto& l : c.at("lstm")) costs.lstm.push_back(layer_of(l));
    costs_note = got.at("costs_note").get<std::string>();
  }
  if (link) {
    const json& l = got.at("link");
    link->latency_us = l.at(0).get<double>();
    link->gbps = l.at(1).is_null() ? std::numeric_limits<double>::infinity() : l.at(1).get<double>();
  }
}

/// Collective: fails unless every rank placed the LSTM layers as rank 0 did.
void check_same_placement(rank_group& ranks, const pl::placement& placed) {
  std::string ranges;
  for (const auto& st : placed.stages)
    ranges += (ranges.empty() ? "" : ",") + std::to_string(st.lstm.first) + "-" + std::to_string(st.lstm.last);
  auto all = gather_bytes(ranks, ranges);
  if (!all) throw std::runtime_error("cannot compare the ranks' placements: " + all.error().message());
  for (std::size_t r = 1; r < all->size(); ++r)
    if ((*all)[r] != all->front())
      throw std::runtime_error("rank " + std::to_string(r) + " placed the LSTM layers as " + (*all)[r] + ", rank 0 as " +
                               all->front() + "; every rank must run the same placement");
}

}  // namespace

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::vector<std::int32_t> held_out_ids(const char* flag, const std::string& path, const vocabulary& vocab) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const std::exception& e) {
    throw input_error(std::string(flag) + ": " + e.what());
  }
  // Characters: a held-out text must use the training text's characters (an unseen one would
  // only measure <unk>). Words: unseen words are <unk>, as in PTB.
  std::vector<std::string> tokens;
  try {
    tokens = tokenize(vocab.kind(), text);
  } catch (const std::exception& e) {
    throw input_error(std::string(flag) + " '" + path + "': " + e.what());
  }
  std::vector<std::int32_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) {
    const std::int32_t id = vocab.id(t);
    if (id < 0 && vocab.kind() == token_kind::chars)
      throw input_error(std::string(flag) + " '" + path + "' holds the character '" + t + "' (U+" + code_point_hex(t) +
                        "), which the training text does not");
    ids.push_back(id < 0 ? vocab.unknown_id() : id);
  }
  if (ids.size() < 2) throw input_error(std::string(flag) + " '" + path + "' holds fewer than two tokens");
  return ids;
}

void place_stages(prepared_run& run, const trainer_options& o, const trainer_events& events) {
  training_setup& su = run.setup;
  const lm::config& cfg = su.model;
  const std::size_t S = run.stages;
  const bool automatic = run.partition.kind == pl::partition_spec::kind_t::automatic;
  const bool rank0 = !o.ranks || o.ranks->rank() == 0;
  const bool across = o.ranks && S > 1;  // cuts between ranks, which pay the link
  // Across ranks each rank knows only its own device: the plan names rank 0's (lstm_lm's ranks
  // are given the same --devices).
  std::vector<pl::device_slot> slots;
  for (std::size_t s = 0; s < S; ++s)
    slots.push_back({!o.ranks ? run.devices[s].name() : across ? run.devices.front().name() : "rank " + std::to_string(s)});
  std::optional<rank_link> link;
  if (across) link = link_between_ranks(o, cfg, su.link_note);
  // auto: per-layer costs measured on the first device (the kernels on one micro-batch, in its
  // arena), across ranks on rank 0's, which every rank then places with; the fixed splits only
  // print a prediction, from FLOPs and bytes.
  const nominal_rates rates;
  su.costs_note = "costs estimated from FLOPs and bytes at nominal rates of " + fixed(rates.flops_per_s / 1e9, 0) +
                  " GFLOP/s and " + fixed(rates.bytes_per_s / 1e9, 0) +
                  " GB/s per device, so the predicted step is a rough guide; --partition auto measures the costs";
  pl::model_costs costs;
  if (automatic && rank0) {
    const auto t0 = std::chrono::steady_clock::now();
    costs = measure_layer_costs(cfg, run.devices.front());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    su.costs_note = std::string("costs measured on ") + (o.ranks ? "rank 0's " : "") + run.devices.front().name() + " in " +
                    fixed(ms, 0) + " ms";
  } else if (!automatic) {
    costs = estimate_layer_costs(cfg, rates);
  }
  if (o.ranks && (automatic || link)) take_rank0s(*o.ranks, automatic, costs, su.costs_note, link);
  if (automatic && events.on_costs_measured) events.on_costs_measured(costs, su.costs_note);
  pl::cross_rank_links links;
  if (link) {
    for (std::size_t s = 0; s < S; ++s) links.placement.ranks.push_back(static_cast<int>(s));  // replica 0's ranks
    links.placement.num_ranks = static_cast<int>(S);
    links.link = pl::link_model::measured(link->latency_us, link->gbps);
  }
  try {
    su.placement = pl::place_layers(costs, slots, run.partition,
                                    {su.schedule, static_cast<int>(cfg.micro_batches), static_cast<int>(cfg.chunks)}, links);
  } catch (const std::exception& e) {
    throw input_error(std::string("--partition: ") + e.what());
  }
  su.layer_counts.clear();
  for (auto& st : su.placement.stages) su.layer_counts.push_back(static_cast<std::size_t>(st.lstm.last - st.lstm.first + 1));
  su.link = link;
  if (o.ranks) check_same_placement(*o.ranks, su.placement);
}

prepared_run prepare_run(const trainer_options& o) {
  check_options(o);
  prepared_run run;
  training_setup& su = run.setup;
  su.auto_schedule = o.schedule == "auto";
  pl::schedule_kind schedule = pl::schedule_kind::one_f_one_b;
  try {
    if (!su.auto_schedule) schedule = pl::parse_schedule(o.schedule);
  } catch (const std::exception& e) {
    throw input_error(std::string("--schedule: ") + e.what() + " (or auto)");
  }
  if (!su.auto_schedule && o.chunks_given && o.chunks > 1 && schedule != pl::schedule_kind::wavefront)
    throw input_error("--chunks " + std::to_string(o.chunks) + " needs --schedule wavefront");
  try {
    su.tokens = parse_token_kind(o.tokens);
  } catch (const std::exception& e) {
    throw input_error(std::string("--tokens: ") + e.what());
  }
  if (o.vocab_size < 2) throw input_error("--vocab-size must be at least 2");
  if (o.vocab_size_given && su.tokens != token_kind::words)
    throw input_error("--vocab-size applies to --tokens word only (char tokens keep every character)");
  if (o.epochs_given && o.epochs == 0) throw input_error("--epochs must be at least 1");
  if (!o.epochs_given && o.steps == 0) throw input_error("--steps must be at least 1");

  run.devices = choose_devices(o.devices, o.cpu_threads, su.devices);
  std::size_t S = run.devices.size();
  if (o.replicas == 0) throw input_error("--replicas must be at least 1");
  if (o.ranks) {  // under mpirun: one stage per rank, each on its rank's one device
    if (o.retries > 0)
      throw input_error("--retries " + std::to_string(o.retries) + " does not apply under mpirun: a failed step of a pipeline "
                        "across ranks ends the job instead of being retried (relaunch it from its checkpoint); leave "
                        "--retries at 0");
    if (run.devices.size() != 1)
      throw input_error(std::string(o.devices.empty() ? "the default " : "") + "--devices '" + su.devices + "' names " +
                        std::to_string(run.devices.size()) + " devices, but rank " + std::to_string(o.ranks->rank()) +
                        " runs one stage on one device of its own under mpirun (name one, e.g. --devices cpu:1)");
    const auto world = static_cast<std::size_t>(o.ranks->size());
    if (world % o.replicas != 0)
      throw input_error("--replicas " + std::to_string(o.replicas) + " does not divide the job's " + std::to_string(world) +
                        " ranks (each replica is a pipeline of ranks / replicas stages)");
    S = world / o.replicas;
    su.ranks = world;
    su.replicas = o.replicas;
    su.devices += " per rank, " + std::to_string(world) + " ranks" +
                  (o.replicas > 1 ? " (" + std::to_string(S) + " stages x " + std::to_string(o.replicas) + " replicas)" : "");
  } else if (o.replicas != 1) {
    throw input_error("--replicas " + std::to_string(o.replicas) + " needs a job of stages x replicas ranks under mpirun");
  } else if (o.link_latency_us || o.link_gbps) {
    throw input_error(std::string(o.link_latency_us ? "--link-latency-us" : "--link-gbps") +
                      " sets the link between MPI ranks, and this run is one process (start it under mpirun)");
  }
  if (o.precision != "fp32" &&
      std::none_of(run.devices.begin(), run.devices.end(), [](const device& d) { return d.kind() == device_kind::cuda; }))
    throw input_error("--precision " + o.precision + " sets the math of cuda stages, but the stages run on " +
                      run.devices.front().name() + ", which computes in fp32: use cuda devices or --precision fp32");
  // auto (docs/lstm_lm.md): 1F1B, except on cpu stages that own their cores (cpu_threads times
  // the stages fits the hardware threads), where wavefront's time chunks let the stages overlap;
  // where the stages share every core (the default), a stage that waits lends its cores to the
  // one that works and one micro-batch in order is fastest. chunks > 1 asks for wavefront.
  su.cpu_stages = run.devices.front().kind() == device_kind::cpu;
  su.cpu_threads = cpu_threads_of(o.cpu_threads);
  su.own_cores = su.cpu_stages && S > 1 && su.cpu_threads * S <= cpu_threads_of(0);
  if (su.auto_schedule)
    schedule = (o.chunks_given && o.chunks > 1) || su.own_cores ? pl::schedule_kind::wavefront : pl::schedule_kind::one_f_one_b;
  su.schedule = schedule;
  const std::size_t chunks = o.chunks_given ? o.chunks : schedule == pl::schedule_kind::wavefront ? default_chunks(o.seq) : 1;
  if (o.ranks && o.partition != "even" && o.partition != "auto") {
    const auto ranges = static_cast<std::size_t>(std::count(o.partition.begin(), o.partition.end(), ',') + 1);
    if (ranges != S)
      throw input_error("--partition '" + o.partition + "' names " + std::to_string(ranges) + " stages, but the job has " +
                        std::to_string(S * o.replicas) + " ranks for " + std::to_string(o.replicas) +
                        (o.replicas == 1 ? " replica" : " replicas") + " (one stage per rank: start stages x replicas ranks)");
  }
  run.stages = S;
  try {
    run.partition = pl::parse_partition(o.partition, static_cast<int>(o.layers), static_cast<int>(S));
  } catch (const std::exception& e) {
    throw input_error(std::string("--partition: ") + e.what());
  }

  // ---- corpus, vocabulary, batches --------------------------------------------------------
  std::string text;
  try {
    if (o.corpus.empty()) text = read_default_corpus(su.source);
    else text = read_text_file(o.corpus), su.source = o.corpus;
  } catch (const std::exception& e) {
    throw input_error(e.what());
  }
  // --valid: the whole corpus trains and the file validates (PTB's train/valid/test layout).
  auto split = o.valid.empty() ? split_text(text, o.val_fraction) : text_split{std::move(text), {}};
  text.clear();
  run.vocab = vocabulary::build(su.tokens, split.train, su.tokens == token_kind::words ? o.vocab_size : 0);
  auto train_ids = run.vocab.encode(split.train);
  if (!train_ids) throw input_error("the corpus cannot be tokenised");
  std::vector<std::int32_t> val_ids;
  if (o.valid.empty()) {
    auto ids = run.vocab.encode(split.validation);
    if (!ids) throw input_error("the corpus cannot be tokenised");
    val_ids = std::move(*ids);
  } else {
    val_ids = held_out_ids("--valid", o.valid, run.vocab);
  }
  if (!o.test.empty()) run.test_ids = held_out_ids("--test", o.test, run.vocab);
  try {
    run.batches.emplace(*train_ids, o.batch, o.seq);
  } catch (const std::exception& e) {
    throw input_error("the corpus is too small: " + std::string(e.what()));
  }
  if (val_ids.size() < 2) throw input_error("the corpus is too small to hold out a validation text");
  su.train_tokens = train_ids->size();
  su.validation_tokens = val_ids.size();
  run.validation_ids = std::move(val_ids);
  su.accumulate = o.accumulate;
  su.carry_state = o.carry_state.value_or(o.accumulate == 1);
  su.windows = run.batches->windows() / o.accumulate;
  if (su.windows == 0)
    throw input_error("the corpus is too small: --accumulate " + std::to_string(o.accumulate) + " needs that many windows and it has " +
                      std::to_string(run.batches->windows()));

  lm::config& cfg = su.model;
  cfg.vocab = run.vocab.size();
  cfg.embed = o.embed;
  cfg.layers = o.layers;
  cfg.hidden = o.hidden;
  cfg.batch = o.batch * o.accumulate;  // an accumulated step: one micro-batch (or more) per window
  cfg.seq = o.seq;
  cfg.micro_batches = (o.micro_batches ? o.micro_batches : default_micro_batches()) * o.accumulate;
  cfg.chunks = chunks;
  cfg.optimizer = parse_optimizer(o.optimizer);
  const bool adam_kind = cfg.optimizer == optimizer_kind::adam || cfg.optimizer == optimizer_kind::adamw;
  // Unset: Adam's 4e-3 (after a 20-step warmup by default; measured against 2e-3 in
  // docs/lstm_lm.md); SGD the seed's 1; with momentum 0.1, the same effective step as the seed's
  // SGD (lr / (1 - 0.9)).
  const bool momentum_kind = cfg.optimizer == optimizer_kind::momentum || cfg.optimizer == optimizer_kind::nesterov;
  cfg.lr = o.lr ? *o.lr : adam_kind ? 4e-3 : momentum_kind ? 0.1 : 1.0;
  cfg.momentum = o.momentum;
  cfg.beta1 = o.beta1;
  cfg.beta2 = o.beta2;
  cfg.eps = o.eps;
  cfg.weight_decay = o.weight_decay;
  cfg.residual = o.residual;
  cfg.dropout = o.dropout;
  cfg.precision = parse_precision(o.precision);
  cfg.clip = o.clip;
  cfg.seed = o.seed;
  try {
    cfg.validate();
  } catch (const std::exception& e) {
    throw input_error(e.what());
  }
  su.total_steps = o.epochs_given ? o.epochs * su.windows : o.steps;
  if (o.replicas > 1 && cfg.batch % (o.replicas * cfg.micro_batches) != 0)
    throw input_error("--batch " + std::to_string(cfg.batch) + " does not split into " + std::to_string(o.replicas) +
                      " replicas of " + std::to_string(cfg.micro_batches) +
                      (cfg.micro_batches == 1 ? " micro-batch" : " micro-batches") + " each");
  if (o.replicas > 1 && run.devices.front().kind() != device_kind::cpu)
    throw input_error("--replicas needs cpu devices (--devices cpu:1): replicas sum their gradients on the host");

  // ---- outputs: a path that cannot be written fails now, not after the run -----------------
  if (!o.checkpoint.empty()) check_output_dir("--checkpoint", o.checkpoint);
  if (!o.report.empty()) check_output_dir("--report", o.report);
  if (!o.trace.empty()) check_output_file("--trace", o.trace);
  if (!o.log.empty()) check_output_file("--log", o.log);

  // ---- resume? -----------------------------------------------------------------------------
  if (!o.checkpoint.empty() && checkpoint_exists(o.checkpoint)) {
    auto ck = load_checkpoint(o.checkpoint);
    if (!ck) throw input_error(ck.error().message());
    if (auto e = check_compatible(*ck, cfg, su.tokens); e) throw input_error("--checkpoint '" + o.checkpoint + "': " + e.message());
    if (!(ck->vocab == run.vocab))
      throw input_error("--checkpoint '" + o.checkpoint + "' was trained on another corpus (its vocab.json differs from this corpus's vocabulary)");
    if (ck->windows_per_epoch != su.windows)
      throw input_error("--checkpoint '" + o.checkpoint + "' was trained on another corpus (" + std::to_string(ck->windows_per_epoch) +
                        " steps per epoch, this corpus " + std::to_string(su.windows) + ")");
    run.resume = std::move(*ck);
  }
  su.resumed = run.resume.has_value();
  su.first_step = run.resume ? run.resume->step : 0;
  return run;
}

}  // namespace strata::lm::detail
