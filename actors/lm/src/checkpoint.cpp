#include "strata/lm/checkpoint.hpp"

#include "strata/checksum.hpp"
#include "strata/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace strata::lm {

namespace fs = std::filesystem;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr const char* format_name = "strata-lstm-lm";
constexpr int format_version = 1;

std::size_t product(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

error fail(const std::string& what) { return error(errc::invalid_argument, what); }

/// Writes `bytes` to dir/.tmp-<name> and fsyncs it.
error write_temporary(const fs::path& dir, const std::string& name, const std::string& bytes) {
  auto written = write_file_synced(dir / (".tmp-" + name), bytes);
  return written ? error{} : fail(written.error().message());
}

/// Renames dir/.tmp-<name> (see write_temporary) over dir/<name>.
error commit_temporary(const fs::path& dir, const std::string& name) {
  const fs::path tmp = dir / (".tmp-" + name), final_path = dir / name;
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    return fail("cannot rename '" + tmp.string() + "' to '" + final_path.string() + "': " + std::strerror(errno));
  return {};
}

/// Writes `bytes` to dir/.tmp-<name>, fsyncs it and renames it to dir/<name>.
error write_atomically(const fs::path& dir, const std::string& name, const std::string& bytes) {
  auto written = write_file_atomically(dir / name, bytes, dir / (".tmp-" + name));
  return written ? error{} : fail(written.error().message());
}

expected<std::string> read_file(const fs::path& path, const std::string& dir) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("checkpoint '" + dir + "' has no readable " + path.filename().string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// The files config.json commits, with their size and checksum; each has a previous generation
/// DIR/.prev-<name> while a save replaces it (see save_checkpoint).
constexpr const char* data_files[] = {"model.safetensors", "vocab.json", "optimizer.json"};
/// The store's optimizer state (a kvstore::save file), present when the optimizer keeps state.
constexpr const char* state_file = "optimizer.kvstore";
/// The LSTM state carried into the next step (safetensors), present when the run carries it.
constexpr const char* carry_file = "state.safetensors";
constexpr const char* all_files[] = {"model.safetensors", "vocab.json", "optimizer.json", "optimizer.kvstore",
                                     "state.safetensors"};

/// True if `bytes` are the size and FNV-1a hash that config.json records for the file `name`.
bool matches_record(const json& cfg, const std::string& name, const std::string& bytes) {
  if (!cfg.is_object() || !cfg.contains("files") || !cfg["files"].is_object() || !cfg["files"].contains(name)) return false;
  const json& rec = cfg["files"][name];
  if (!rec.is_object() || !rec.contains("bytes") || !rec.contains("fnv1a64")) return false;
  const json &size = rec["bytes"], &hash = rec["fnv1a64"];
  return size.is_number_unsigned() && size.get<std::size_t>() == bytes.size() && hash.is_string() &&
         hash.get<std::string>() == hex64(strata::fnv1a64(bytes));
}

/// The keys config.json may hold; any other is refused on load rather than ignored.
constexpr const char* config_keys[] = {"format", "version", "layers", "hidden", "embed", "vocab", "tokens",
                                       "seq", "batch", "micro_batches", "chunks", "lr", "clip", "seed",
                                       "step", "epoch", "windows_per_epoch", "corpus", "files",
                                       // optional (absent from checkpoints older than the optimizers)
                                       "optimizer", "momentum", "beta1", "beta2", "eps", "weight_decay",
                                       "residual", "lr_schedule", "warmup_steps", "lr_scale", "best_val_loss",
                                       "stale_validations", "dropout"};

/// Strict reads of config.json fields: a missing key, a negative, fractional or non-numeric count,
/// or a string of the wrong type throws std::invalid_argument with a short phrase.
const json& config_field(const json& cfg, const char* key) {
  if (!cfg.contains(key)) throw std::invalid_argument(std::string("'") + key + "' is missing");
  return cfg[key];
}
std::size_t config_count(const json& cfg, const char* key) {
  const json& v = config_field(cfg, key);
  if (!v.is_number_unsigned()) throw std::invalid_argument(std::string("'") + key + "' is " + v.dump() + ", not a whole number");
  return v.get<std::size_t>();
}
double config_number(const json& cfg, const char* key) {
  const json& v = config_field(cfg, key);
  if (!v.is_number()) throw std::invalid_argument(std::string("'") + key + "' is " + v.dump() + ", not a number");
  return v.get<double>();
}
std::string config_text(const json& cfg, const char* key) {
  const json& v = config_field(cfg, key);
  if (!v.is_string()) throw std::invalid_argument(std::string("'") + key + "' is " + v.dump() + ", not a string");
  return v.get<std::string>();
}

}  // namespace

std::string encode_safetensors(const std::vector<safetensor>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    if (product(t.shape) != t.values.size())
      throw std::invalid_argument("tensor '" + t.name + "' has " + std::to_string(t.values.size()) +
                                  " values, not the product of its shape");
    const std::size_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  const std::uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out += h;
  out.reserve(out.size() + offset);
  for (const auto& t : tensors)
    out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  return out;
}

expected<std::vector<safetensor>> decode_safetensors(const std::string& bytes) {
  if (bytes.size() < 8) return fail("the safetensors file is truncated (shorter than its 8-byte header length)");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) return fail("the safetensors header length " + std::to_string(n) + " exceeds the file");
  json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr, false);
  if (header.is_discarded() || !header.is_object()) return fail("the safetensors header is not a JSON object");
  const std::size_t data_begin = 8 + n, data_size = bytes.size() - data_begin;
  struct entry {
    std::size_t begin, end;
    safetensor t;
  };
  std::vector<entry> entries;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    if (!info.is_object() || info.value("dtype", "") != "F32" || !info.contains("shape") || !info["shape"].is_array() ||
        !info.contains("data_offsets") || !info["data_offsets"].is_array() || info["data_offsets"].size() != 2)
      return fail("the safetensors entry '" + name + "' is not an F32 tensor with shape and data_offsets");
    safetensor t;
    t.name = name;
    for (auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) return fail("the safetensors entry '" + name + "' has a bad shape");
      t.shape.push_back(d.get<std::size_t>());
    }
    auto& off = info["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return fail("the safetensors entry '" + name + "' has bad data_offsets");
    std::size_t b = off[0].get<std::size_t>(), e = off[1].get<std::size_t>();
    if (b > e || e > data_size)
      return fail("the safetensors entry '" + name + "' points outside the data (the file is truncated?)");
    std::size_t elements = 1;  // checked: a crafted shape's product must not wrap around
    for (auto d : t.shape) {
      if (d != 0 && elements > data_size / sizeof(float) / d)
        return fail("the safetensors entry '" + name + "' has a shape larger than the file");
      elements *= d;
    }
    if (e - b != elements * sizeof(float))
      return fail("the safetensors entry '" + name + "' has " + std::to_string(e - b) + " bytes for its shape");
    t.values.resize(elements);
    if (!t.values.empty()) std::memcpy(t.values.data(), bytes.data() + data_begin + b, e - b);
    entries.push_back({b, e, std::move(t)});
  }
  std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  std::size_t expect = 0;
  for (auto& e : entries) {
    if (e.begin != expect) return fail("the safetensors data offsets overlap or leave gaps at '" + e.t.name + "'");
    expect = e.end;
  }
  if (expect != data_size) return fail("the safetensors file has " + std::to_string(data_size - expect) +
                                       " bytes after its last tensor (or is truncated)");
  std::vector<safetensor> out;
  for (auto& e : entries) out.push_back(std::move(e.t));
  return out;
}

namespace {

/// The parameters as safetensors (model.safetensors) and, when the run carries LSTM state, that
/// state (state.safetensors; empty when it does not).
expected<std::pair<std::string, std::string>> encode_tensors(const checkpoint& ck) {
  std::vector<safetensor> tensors;
  try {
    for (const auto& p : ck.parameters) tensors.push_back({p.name, parameter_shape(ck.config, p.name), p.values});
  } catch (const std::exception& e) {
    return fail(std::string("cannot save the checkpoint: ") + e.what());
  }
  std::string model;
  try {
    model = encode_safetensors(tensors, {{"format", "pt"}, {"producer", "strata lstm_lm"}});
  } catch (const std::exception& e) {
    return fail(std::string("cannot save the checkpoint: ") + e.what());
  }
  std::string carried;
  if (!ck.carried_state.empty()) {
    std::vector<safetensor> state;
    for (const auto& t : ck.carried_state) state.push_back({t.name, {ck.config.batch, ck.config.hidden}, t.values});
    try {
      carried = encode_safetensors(state, {{"format", "pt"}, {"producer", "strata lstm_lm"}});
    } catch (const std::exception& e) {
      return fail(std::string("cannot save the checkpoint's carried state: ") + e.what());
    }
  }
  return std::pair{std::move(model), std::move(carried)};
}

/// optimizer.json: the optimizer's settings for people and other tools.
std::string optimizer_json(const checkpoint& ck) {
  const auto& c = ck.config;
  const bool sgd_family = c.optimizer != optimizer_kind::adam && c.optimizer != optimizer_kind::adamw;
  nlohmann::ordered_json opt = {{"optimizer", to_string(c.optimizer)}, {"lr", c.lr},
                                {"momentum", c.optimizer == optimizer_kind::sgd || !sgd_family ? 0.0 : c.momentum}};
  if (!sgd_family) opt.update({{"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps}});
  opt.update({{"weight_decay", c.weight_decay}, {"clip", c.clip}, {"step", ck.step}, {"lr_schedule", ck.schedule.kind},
              {"lr_scale", ck.schedule.lr_scale}});
  opt["note"] = ck.optimizer_state.empty() ? "plain SGD keeps no per-parameter state"
                                           : "per-parameter state in optimizer.kvstore (a strata kvstore checkpoint)";
  return opt.dump(1) + "\n";
}

/// config.json: the model, the position in the run and the schedule, and the size and checksum
/// of each data file (`bytes_of`, by name).
nlohmann::ordered_json config_json(const checkpoint& ck, const std::map<std::string, const std::string*>& bytes_of) {
  const auto& c = ck.config;
  nlohmann::ordered_json cfg = {
      {"format", format_name}, {"version", format_version},
      {"layers", c.layers}, {"hidden", c.hidden}, {"embed", c.embed}, {"vocab", c.vocab},
      {"tokens", to_string(ck.tokens)}, {"seq", c.seq}, {"batch", c.batch},
      {"micro_batches", c.micro_batches}, {"chunks", c.chunks}, {"lr", c.lr}, {"clip", c.clip}, {"seed", c.seed},
      {"step", ck.step}, {"epoch", ck.epoch}, {"windows_per_epoch", ck.windows_per_epoch}, {"corpus", ck.corpus},
      {"optimizer", to_string(c.optimizer)}, {"momentum", c.momentum}, {"beta1", c.beta1}, {"beta2", c.beta2},
      {"eps", c.eps}, {"weight_decay", c.weight_decay}, {"residual", c.residual},
      {"dropout", c.dropout}, {"lr_schedule", ck.schedule.kind}, {"warmup_steps", ck.schedule.warmup_steps}, {"lr_scale", ck.schedule.lr_scale},
      {"best_val_loss", std::isfinite(ck.schedule.best_val_loss) ? nlohmann::ordered_json(ck.schedule.best_val_loss) : nlohmann::ordered_json(nullptr)},
      {"stale_validations", ck.schedule.stale_validations}};
  // model.safetensors, vocab.json and optimizer.json in that order, then the optional files.
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const char* name : {"model.safetensors", "vocab.json", "optimizer.json", state_file, carry_file})
    if (auto it = bytes_of.find(name); it != bytes_of.end())
      files[name] = {{"bytes", it->second->size()}, {"fnv1a64", hex64(strata::fnv1a64(*it->second))}};
  cfg["files"] = std::move(files);
  return cfg;
}

/// Until the new config.json lands, the committed one must stay loadable: each file it records
/// keeps a copy of that generation as .prev-<name> (a hard link, or a copy where links fail),
/// which load_checkpoint falls back to. A file that no longer matches it was replaced by an
/// earlier interrupted save, and its .prev- copy is the committed one already.
error keep_committed_generation(const fs::path& dir, const std::string& dir_name) {
  auto committed = read_file(dir / "config.json", dir_name);
  if (!committed) return {};
  const json old_cfg = json::parse(*committed, nullptr, false);
  for (const char* name : all_files) {
    auto current = read_file(dir / name, dir_name);
    if (!current || !matches_record(old_cfg, name, *current)) continue;
    const fs::path staged = dir / (".tmp-prev-" + std::string(name)), prev = dir / (".prev-" + std::string(name));
    ::unlink(staged.c_str());
    if (::link((dir / name).c_str(), staged.c_str()) != 0) {
      if (auto e = write_temporary(dir, "prev-" + std::string(name), *current); e) return e;
    }
    if (::rename(staged.c_str(), prev.c_str()) != 0)
      return fail("cannot rename '" + staged.string() + "' to '" + prev.string() + "': " + std::strerror(errno));
  }
  sync_directory(dir);
  return {};
}

}  // namespace

error save_checkpoint(const std::string& dir_name, const checkpoint& ck) {
  const fs::path dir(dir_name);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) return fail("cannot create checkpoint directory '" + dir_name + "'");
  auto encoded = encode_tensors(ck);
  if (!encoded) return encoded.error();
  const auto& [model, carried] = *encoded;
  const std::string vocab = ck.vocab.to_json();
  const std::string optimizer = optimizer_json(ck);
  std::map<std::string, const std::string*> bytes_of = {
      {"model.safetensors", &model}, {"vocab.json", &vocab}, {"optimizer.json", &optimizer}};
  if (!ck.optimizer_state.empty()) bytes_of[state_file] = &ck.optimizer_state;
  if (!carried.empty()) bytes_of[carry_file] = &carried;
  const auto cfg = config_json(ck, bytes_of);
  for (const auto& [name, bytes] : bytes_of)
    if (auto e = write_temporary(dir, name, *bytes); e) return e;
  if (auto e = keep_committed_generation(dir, dir_name); e) return e;
  for (const auto& [name, bytes] : bytes_of)
    if (auto e = commit_temporary(dir, name); e) return e;
  sync_directory(dir);
  if (auto e = write_atomically(dir, "config.json", cfg.dump(1) + "\n"); e) return e;  // the commit marker
  sync_directory(dir);
  for (const char* name : all_files) ::unlink((dir / (".prev-" + std::string(name))).c_str());
  if (ck.optimizer_state.empty()) ::unlink((dir / state_file).c_str());  // of an earlier optimizer
  if (carried.empty()) ::unlink((dir / carry_file).c_str());  // of an earlier run that carried state
  return {};
}

bool checkpoint_exists(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

namespace {

/// config.json of the checkpoint in `dir`: a JSON object of this format and version.
expected<json> read_config_json(const fs::path& dir, const std::string& dir_name, const std::string& where) {
  if (!checkpoint_exists(dir_name)) return fail(where + " has no config.json (not a checkpoint directory)");
  auto cfg_text = read_file(dir / "config.json", dir_name);
  if (!cfg_text) return cfg_text.error();
  json cfg = json::parse(*cfg_text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) return fail(where + " has a config.json that is not valid JSON");
  if (!cfg.contains("format") || cfg["format"] != format_name || !cfg.contains("version") || cfg["version"] != format_version)
    return fail(where + " is not a strata lstm_lm checkpoint (config.json format/version)");
  return cfg;
}

/// The model's configuration, the position in the run and the schedule from config.json into
/// `ck`: every key known, every field of its type, the configuration valid.
error read_config_fields(const json& cfg, checkpoint& ck, const std::string& where) {
  try {
    for (auto& [key, value] : cfg.items())
      if (std::find_if(std::begin(config_keys), std::end(config_keys), [&](const char* k) { return key == k; }) ==
          std::end(config_keys))
        throw std::invalid_argument("unknown key '" + key + "'");
    auto& c = ck.config;
    c.layers = config_count(cfg, "layers");
    c.hidden = config_count(cfg, "hidden");
    c.embed = config_count(cfg, "embed");
    c.vocab = config_count(cfg, "vocab");
    c.seq = config_count(cfg, "seq");
    c.batch = config_count(cfg, "batch");
    c.micro_batches = config_count(cfg, "micro_batches");
    c.chunks = config_count(cfg, "chunks");
    c.lr = config_number(cfg, "lr");
    c.clip = config_number(cfg, "clip");
    c.seed = config_count(cfg, "seed");
    ck.tokens = parse_token_kind(config_text(cfg, "tokens"));
    ck.step = config_count(cfg, "step");
    ck.epoch = config_count(cfg, "epoch");
    ck.windows_per_epoch = config_count(cfg, "windows_per_epoch");
    ck.corpus = cfg.contains("corpus") ? config_text(cfg, "corpus") : std::string();
    if (cfg.contains("optimizer")) c.optimizer = parse_optimizer(config_text(cfg, "optimizer"));
    if (cfg.contains("momentum")) c.momentum = config_number(cfg, "momentum");
    if (cfg.contains("beta1")) c.beta1 = config_number(cfg, "beta1");
    if (cfg.contains("beta2")) c.beta2 = config_number(cfg, "beta2");
    if (cfg.contains("eps")) c.eps = config_number(cfg, "eps");
    if (cfg.contains("weight_decay")) c.weight_decay = config_number(cfg, "weight_decay");
    if (cfg.contains("residual")) {
      if (!cfg["residual"].is_boolean()) throw std::invalid_argument("'residual' is not true or false");
      c.residual = cfg["residual"].get<bool>();
    }
    if (cfg.contains("dropout")) c.dropout = config_number(cfg, "dropout");
    if (cfg.contains("lr_schedule")) ck.schedule.kind = config_text(cfg, "lr_schedule");
    if (cfg.contains("warmup_steps")) ck.schedule.warmup_steps = config_count(cfg, "warmup_steps");
    if (cfg.contains("lr_scale")) ck.schedule.lr_scale = config_number(cfg, "lr_scale");
    if (cfg.contains("best_val_loss") && !cfg["best_val_loss"].is_null())
      ck.schedule.best_val_loss = config_number(cfg, "best_val_loss");
    if (cfg.contains("stale_validations")) ck.schedule.stale_validations = config_count(cfg, "stale_validations");
    c.validate();
  } catch (const std::exception& e) {
    return fail(where + " has a config.json with a missing or bad field (" + e.what() + ")");
  }
  return {};
}

/// The data files config.json records, by name: each matching its size and checksum there, or
/// else its previous generation (.prev-<name>, left by a save interrupted before its config.json
/// landed).
expected<std::map<std::string, std::string>> read_data_files(json& cfg, const fs::path& dir, const std::string& dir_name,
                                                             const std::string& where) {
  std::map<std::string, std::string> files;
  std::vector<std::string> names(std::begin(data_files), std::end(data_files));
  if (cfg["files"].is_object() && cfg["files"].contains(state_file)) names.emplace_back(state_file);
  if (cfg["files"].is_object() && cfg["files"].contains(carry_file)) names.emplace_back(carry_file);
  for (const auto& name : names) {
    auto bytes = read_file(dir / name, dir_name);
    if (!bytes) return bytes.error();
    if (!matches_record(cfg, name, *bytes)) {
      auto prev = read_file(dir / (".prev-" + std::string(name)), dir_name);
      if (!prev || !matches_record(cfg, name, *prev))
        return fail(where + " is corrupt or from an interrupted save: " + name +
                    " does not match the size and checksum in config.json");
      bytes = std::move(prev);
    }
    files[name] = std::move(*bytes);
  }
  return files;
}

/// The parameters from model.safetensors into `ck`: exactly the tensors of its configuration,
/// each of its shape.
error read_parameters(const std::string& bytes, checkpoint& ck, const std::string& where) {
  auto tensors = decode_safetensors(bytes);
  if (!tensors) return fail(where + ": " + tensors.error().message());
  // 4 tensors per layer + 3, checked before listing the names (a huge layer count would not end).
  if (ck.config.layers > tensors->size() || tensors->size() != 4 * ck.config.layers + 3)
    return fail(where + " has " + std::to_string(tensors->size()) + " tensors in model.safetensors, which does not fit " +
                std::to_string(ck.config.layers) + " layers in config.json (4 per layer + 3)");
  std::map<std::string, safetensor*> by_name;
  for (auto& t : *tensors) by_name[t.name] = &t;
  for (const auto& name : parameter_names(ck.config)) {
    auto it = by_name.find(name);
    if (it == by_name.end()) return fail(where + " lacks the parameter '" + name + "' in model.safetensors");
    if (it->second->shape != parameter_shape(ck.config, name))
      return fail(where + " has parameter '" + name + "' with a shape other than config.json implies");
    ck.parameters.push_back({name, std::move(it->second->values)});
    by_name.erase(it);
  }
  if (!by_name.empty()) return fail(where + " has an unexpected tensor '" + by_name.begin()->first + "' in model.safetensors");
  return {};
}

/// The carried LSTM state from state.safetensors into `ck`: h_l<k> and c_l<k> of every layer,
/// each [batch, hidden].
error read_carried_state(const std::string& bytes, checkpoint& ck, const std::string& where) {
  auto state = decode_safetensors(bytes);
  if (!state) return fail(where + ": " + state.error().message());
  const std::vector<std::size_t> shape{ck.config.batch, ck.config.hidden};
  if (state->size() != 2 * ck.config.layers)
    return fail(where + " has " + std::to_string(state->size()) + " tensors in state.safetensors; " +
                std::to_string(ck.config.layers) + " layers carry " + std::to_string(2 * ck.config.layers) + " (h_l<k>, c_l<k>)");
  for (std::size_t l = 0; l < ck.config.layers; ++l)
    for (const char* part : {"h_l", "c_l"}) {
      const std::string name = part + std::to_string(l);
      auto it = std::find_if(state->begin(), state->end(), [&](const safetensor& t) { return t.name == name; });
      if (it == state->end()) return fail(where + " lacks '" + name + "' in state.safetensors");
      if (it->shape != shape)
        return fail(where + " has carried state '" + name + "' with a shape other than [batch, hidden] of config.json");
      ck.carried_state.push_back({name, std::move(it->values)});
    }
  return {};
}

}  // namespace

expected<checkpoint> load_checkpoint(const std::string& dir_name) {
  const fs::path dir(dir_name);
  const std::string where = "checkpoint '" + dir_name + "'";
  auto cfg = read_config_json(dir, dir_name, where);
  if (!cfg) return cfg.error();
  checkpoint ck;
  if (auto e = read_config_fields(*cfg, ck, where); e) return e;
  auto files = read_data_files(*cfg, dir, dir_name, where);
  if (!files) return files.error();
  if (files->count(state_file)) ck.optimizer_state = std::move((*files)[state_file]);
  auto vocab = vocabulary::from_json(ck.tokens, (*files)["vocab.json"]);
  if (!vocab) return fail(where + ": " + vocab.error().message());
  ck.vocab = std::move(*vocab);
  if (ck.vocab.size() != ck.config.vocab)
    return fail(where + " has " + std::to_string(ck.vocab.size()) + " tokens in vocab.json but vocab " +
                std::to_string(ck.config.vocab) + " in config.json");
  if (auto e = read_parameters((*files)["model.safetensors"], ck, where); e) return e;
  if (files->count(carry_file))
    if (auto e = read_carried_state((*files)[carry_file], ck, where); e) return e;
  return ck;
}

error check_compatible(const checkpoint& ck, const config& c, token_kind tokens) {
  auto differ = [&](const char* what, auto saved, auto now) {
    std::ostringstream ss;
    ss << "the checkpoint was written for another configuration (" << what << " " << saved << ", this run " << now << ")";
    return fail(ss.str());
  };
  if (ck.tokens != tokens) return differ("tokens", to_string(ck.tokens), to_string(tokens));
  if (ck.config.layers != c.layers) return differ("layers", ck.config.layers, c.layers);
  if (ck.config.hidden != c.hidden) return differ("hidden", ck.config.hidden, c.hidden);
  if (ck.config.embed != c.embed) return differ("embed", ck.config.embed, c.embed);
  if (ck.config.vocab != c.vocab) return differ("vocabulary size", ck.config.vocab, c.vocab);
  if (ck.config.batch != c.batch) return differ("batch", ck.config.batch, c.batch);
  if (ck.config.seq != c.seq) return differ("seq", ck.config.seq, c.seq);
  if (ck.config.residual != c.residual)
    return differ("residual", ck.config.residual ? "on" : "off", c.residual ? "on" : "off");
  return {};
}

}  // namespace strata::lm
