#include "strata/trace_tools/trace_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace strata::trace_tools {

using trace::event_kind;

std::string trace_model::actor_name(std::uint64_t id) const {
  if (id == 0) return "external";
  auto it = actors.find(id);
  if (it != actors.end()) return it->second.name;
  return "actor-" + std::to_string(id);
}

std::int64_t trace_model::device_rank(std::uint64_t device) const {
  return file != nullptr && file->merged() ? static_cast<std::int64_t>(device >> 32) : -1;
}

std::uint64_t trace_model::local_device(std::uint64_t device) const {
  return file != nullptr && file->merged() ? device & 0xffffffffu : device;
}

std::string transfer_name(trace::transfer what) {
  switch (what) {
    case trace::transfer::send: return "send";
    case trace::transfer::receive: return "receive";
    case trace::transfer::allreduce: return "allreduce";
  }
  return "transfer " + std::to_string(static_cast<unsigned>(what));
}

const char* work_phase_name(work_phase p) {
  switch (p) {
    case work_phase::forward: return "forward";
    case work_phase::backward: return "backward";
    case work_phase::weight: return "weight";
    case work_phase::update: return "update";
    case work_phase::other: break;
  }
  return "other";
}

namespace {

/// Takes `word` and one space (or the end) off the front of `s`.
bool take_word(std::string_view& s, std::string_view word) {
  if (s.substr(0, word.size()) != word) return false;
  if (s.size() > word.size() && s[word.size()] != ' ') return false;
  s.remove_prefix(std::min(s.size(), word.size() + 1));
  return true;
}

/// Takes a decimal number and one space (or the end) off the front of `s`.
bool take_number(std::string_view& s, std::int64_t& value) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end == s.data() || value < 0) return false;
  const auto used = static_cast<std::size_t>(end - s.data());
  if (used < s.size() && s[used] != ' ') return false;
  s.remove_prefix(std::min(s.size(), used + 1));
  return true;
}

}  // namespace

work_name_parts parse_work_name(std::string_view name) {
  work_name_parts parts;
  for (auto phase : {work_phase::forward, work_phase::backward, work_phase::weight, work_phase::update})
    if (take_word(name, work_phase_name(phase))) {
      parts.phase = phase;
      break;
    }
  if (parts.phase == work_phase::other) return {};
  std::int64_t mb = -1, chunk = -1;
  if (!name.empty()) {
    if (!take_word(name, "mb") || !take_number(name, mb)) return {};
    if (!name.empty() && (!take_word(name, "chunk") || !take_number(name, chunk))) return {};
    if (!name.empty()) return {};
  }
  parts.micro_batch = mb;
  parts.chunk = chunk;
  return parts;
}

std::string device_key_name(std::uint32_t key) {
  const std::uint32_t kind = key >> 16, ordinal = key & 0xffffu;
  static const char* const kinds[] = {"cpu", "cuda", "sim"};
  return (kind < 3 ? std::string(kinds[kind]) : "kind " + std::to_string(kind)) + ":" + std::to_string(ordinal);
}

std::uint64_t percentile(std::vector<std::uint64_t>& values, double p) {
  if (values.empty()) return 0;
  if (!std::is_sorted(values.begin(), values.end())) std::sort(values.begin(), values.end());
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size())));
  if (rank == 0) rank = 1;
  return values[std::min(rank, values.size()) - 1];
}

}  // namespace strata::trace_tools
