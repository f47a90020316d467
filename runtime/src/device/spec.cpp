#include "strata/device/spec.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "strata/device/sim_profile.hpp"

namespace strata {

// ---- sim profiles -------------------------------------------------------------------------------

const std::vector<sim_profile>& builtin_sim_profiles() {
  // h200: NVIDIA H200 datasheet (H200 SXM column): FP32 67 TFLOPS; TF32 Tensor Core 989 TFLOPS
  // "with sparsity", i.e. 494 TFLOPS dense; GPU memory 141 GB; memory bandwidth 4.8 TB/s;
  // NVLink 900 GB/s; PCIe Gen5 128 GB/s (both directions together, so 64 GB/s each way).
  // Launch latency is not a datasheet figure: ~5 us is a typical kernel launch + dependency cost.
  // cpu: illustrative figures for a multi-core server socket (AVX-512, DDR5), not measured.
  static const std::vector<sim_profile> profiles = {
      {.name = "h200",
       .matmul_flops = 494e12,
       .vector_flops = 67e12,
       .memory_bandwidth = 4.8e12,
       .host_bandwidth = 64e9,
       .peer_bandwidth = 450e9,
       .launch_latency = 5e-6,
       .memory_bytes = 141'000'000'000ULL},
      {.name = "cpu",
       .matmul_flops = 2e12,
       .vector_flops = 0.5e12,
       .memory_bandwidth = 200e9,
       .host_bandwidth = 200e9,
       .peer_bandwidth = 50e9,
       .launch_latency = 1e-6,
       .memory_bytes = 256ULL << 30},
  };
  return profiles;
}

std::optional<sim_profile> find_builtin_sim_profile(std::string_view name) {
  for (const auto& p : builtin_sim_profiles())
    if (p.name == name) return p;
  return std::nullopt;
}

// ---- specs --------------------------------------------------------------------------------------

namespace {

constexpr int max_devices = 4096;

std::optional<int> parse_count(std::string_view s, int min) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v < min || v > max_devices) return std::nullopt;
  return v;
}

std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '"';
  q += s;
  q += '"';
  return q;
}

struct parser {
  std::string_view text;
  std::span<const std::string> extra_profiles;
  std::string error;

  std::optional<device_spec> fail(const std::string& what) {
    error = "invalid device spec " + quoted(text) + ": " + what;
    return std::nullopt;
  }

  std::optional<device_spec> run() {
    if (text.empty())
      return fail(R"(expected "cpu:N", "cuda:0,1", "cuda:0x4" or "sim:N[:PROFILE]", got an empty string)");
    auto colon = text.find(':');
    auto kind = text.substr(0, colon);
    auto rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
    bool has_rest = colon != std::string_view::npos;
    device_spec spec;
    spec.text = std::string(text);
    if (kind == "cpu") {
      spec.kind = device_kind::cpu;
      if (!has_rest) return spec;
      auto n = parse_count(rest, 1);
      if (!n) return fail(R"(expected "cpu:N" with N >= 1 devices (at most 4096))");
      spec.count = *n;
      return spec;
    }
    if (kind == "sim") {
      spec.kind = device_kind::sim;
      spec.profile = "h200";
      if (!has_rest) return spec;
      auto c2 = rest.find(':');
      auto n = parse_count(rest.substr(0, c2), 1);
      if (!n) return fail(R"(expected "sim:N" or "sim:N:PROFILE" with N >= 1 devices (at most 4096))");
      spec.count = *n;
      if (c2 == std::string_view::npos) return spec;
      auto name = rest.substr(c2 + 1);
      bool known = find_builtin_sim_profile(name).has_value() ||
                   std::find(extra_profiles.begin(), extra_profiles.end(), name) != extra_profiles.end();
      if (!known) {
        std::string names;
        for (const auto& p : builtin_sim_profiles()) names += (names.empty() ? "" : ", ") + p.name;
        for (const auto& p : extra_profiles) names += ", " + p;
        return fail("unknown sim profile " + quoted(name) + "; expected one of " + names);
      }
      spec.profile = std::string(name);
      return spec;
    }
    if (kind == "cuda") {
      spec.kind = device_kind::cuda;
      if (!has_rest) {
        spec.gpus = {{0, 1}};
        return spec;
      }
      const char* expected = R"(expected "cuda:" followed by GPU ordinals, each optionally shared by K >= 1 devices, e.g. "cuda:0", "cuda:0,1" or "cuda:0x4")";
      if (rest.empty()) return fail(expected);
      std::size_t pos = 0;
      while (pos <= rest.size()) {
        auto comma = rest.find(',', pos);
        auto item = rest.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
        auto x = item.find('x');
        auto ordinal = parse_count(item.substr(0, x), 0);
        auto share = x == std::string_view::npos ? std::optional<int>(1) : parse_count(item.substr(x + 1), 1);
        if (!ordinal || !share) return fail(std::string(expected) + "; " + quoted(item) + " is not of that form");
        for (const auto& g : spec.gpus)
          if (g.ordinal == *ordinal)
            return fail("GPU " + std::to_string(*ordinal) + " is listed twice; expected each GPU once, e.g. \"cuda:" +
                        std::to_string(*ordinal) + "x2\" for two devices sharing it");
        spec.gpus.push_back({*ordinal, *share});
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
      }
      if (spec.device_count() > max_devices) return fail("expected at most 4096 devices in all");
      spec.count = spec.device_count();
      return spec;
    }
    return fail("unknown device kind " + quoted(kind) +
                R"(; expected cpu, cuda or sim (e.g. "cpu:2", "cuda:0,1", "cuda:0x4", "sim:4:h200"))");
  }
};

}  // namespace

int device_spec::device_count() const noexcept {
  if (kind != device_kind::cuda) return count;
  int n = 0;
  for (const auto& g : gpus) n += g.devices;
  return n;
}

std::string device_spec::to_string() const {
  switch (kind) {
    case device_kind::cpu: return "cpu:" + std::to_string(count);
    case device_kind::sim: return "sim:" + std::to_string(count) + ":" + profile;
    case device_kind::cuda: {
      std::string s = "cuda:";
      for (std::size_t i = 0; i < gpus.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(gpus[i].ordinal);
        if (gpus[i].devices != 1) {
          s += 'x';
          s += std::to_string(gpus[i].devices);
        }
      }
      return s;
    }
  }
  return {};
}

std::optional<device_spec> try_parse_device_spec(std::string_view text, std::string* error,
                                                 std::span<const std::string> sim_profiles) {
  parser p{text, sim_profiles, {}};
  auto r = p.run();
  if (!r && error) *error = std::move(p.error);
  return r;
}

device_spec parse_device_spec(std::string_view text, std::span<const std::string> sim_profiles) {
  std::string error;
  auto r = try_parse_device_spec(text, &error, sim_profiles);
  if (!r) throw std::invalid_argument(error);
  return *std::move(r);
}

}  // namespace strata
