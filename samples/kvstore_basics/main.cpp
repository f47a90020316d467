// kvstore_basics: MXNet's KVStore tutorial session, replayed with strata's kvstore actor.
//
//   init a key, push, pull; push values from several devices (summed); pull into several
//   devices; several keys at once. Every pulled array is printed as a bracketed list.
//
// Each step waits for its reply with .get() to keep the sample linear; a real trainer would not
// wait: calls through one client reach the store in order, so a pull sees the pushes before it.

#include <cstdio>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "strata/kvstore/kvstore.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"

namespace {

const std::vector<std::int64_t> shape{2, 3};

/// A {2, 3} tensor filled with `value` on `dev`.
strata::tensor filled(float value, strata::device& dev, const strata::stream& s) {
  std::vector<float> v(6, value);
  return strata::tensor::from_host<float>(std::span<const float>(v), shape, dev, s);
}

/// "[[a, b, c], [d, e, f]]".
std::string show(const strata::tensor& t, const strata::stream& s) {
  auto v = t.to_host<float>(s);
  std::ostringstream os;
  os << '[';
  for (std::int64_t r = 0; r < t.dim(0); ++r) {
    os << (r ? ", [" : "[");
    for (std::int64_t c = 0; c < t.dim(1); ++c) os << (c ? ", " : "") << v[static_cast<std::size_t>(r * t.dim(1) + c)];
    os << ']';
  }
  os << ']';
  return os.str();
}

std::string show_all(const std::vector<strata::tensor>& ts, const strata::stream& s) {
  std::string out;
  for (const auto& t : ts) out += (out.empty() ? "" : " ") + show(t, s);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::fprintf(stderr, "kvstore_basics: takes no arguments (got '%s')\n", argv[1]);
    return 2;
  }
  strata::actor_system sys;
  {  // the client and the devices go before the shutdown, as they would at the end of main
    strata::device_manager manager;
    auto devs = manager.create("cpu:3");
    auto s = devs[0].create_stream();
    auto s1 = devs[1].create_stream();
    auto s2 = devs[2].create_stream();

    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));  // kv = mx.kv.create('local')
    try {
      // kv.init(3, ones*2); kv.pull(3, out=a)
      kv.init("3", filled(2, devs[0], s)).get().value();
      auto a = kv.pull("3", filled(0, devs[0], s)).get().value();
      std::printf("init 3 -> %s\n", show_all(a, s).c_str());

      // kv.push(3, ones*8); kv.pull(3, out=a)
      kv.push("3", filled(8, devs[0], s)).get().value();
      a = kv.pull("3", filled(0, devs[0], s)).get().value();
      std::printf("push 8 -> %s\n", show_all(a, s).c_str());

      // kv.push(3, [ones on each of three devices]): summed, then assigned
      kv.push("3", {filled(1, devs[0], s), filled(1, devs[1], s1), filled(1, devs[2], s2)}).get().value();
      a = kv.pull("3", filled(0, devs[0], s)).get().value();
      std::printf("push 3 devices -> %s\n", show_all(a, s).c_str());

      // kv.pull(3, out=[b on one device, b on another])
      auto b = kv.pull("3", {filled(0, devs[1], s1), filled(0, devs[2], s2)}).get().value();
      std::printf("pull 2 devices -> %s %s\n", show(b[0], s1).c_str(), show(b[1], s2).c_str());

      // kv.init(keys, [ones]*3); kv.push(keys, [ones]*3); kv.pull(keys, out=[zeros]*3)
      std::vector<strata::kvstore::key> keys{"5", "7", "9"};
      kv.init(keys, {filled(1, devs[0], s), filled(1, devs[0], s), filled(1, devs[0], s)}).get().value();
      kv.push(keys, {filled(1, devs[0], s), filled(1, devs[1], s1), filled(1, devs[2], s2)}).get().value();
      auto c = kv.pull(keys, {filled(0, devs[0], s), filled(0, devs[0], s), filled(0, devs[0], s)}).get().value();
      std::printf("keys 5 7 9 -> %s\n", show_all(c, s).c_str());
    } catch (const strata::error_exception& e) {
      std::fprintf(stderr, "kvstore_basics: %s\n", e.what());
      return 1;
    }
  }
  // Shut down explicitly: the report says whether the trace (STRATA_TRACE) was written.
  auto report = sys.shutdown();
  if (!report.trace_error.empty()) {
    std::fprintf(stderr, "kvstore_basics: %s\n", report.trace_error.c_str());
    return 1;
  }
  if (!report.trace_file.empty())
    std::printf("trace: %zu events written to %s\n", report.trace_events, report.trace_file.c_str());
  return 0;
}
