// Helper of the checkpoint drill (fault_test.cpp): loads the kvstore checkpoint PATH, then saves
// it again and again with every value of key "a" = v and of key "b" = -v for v = last + 1, ...,
// until it is killed. Not a user program: no flags, no help.
//
//   reliability_checkpoint_writer PATH N
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "strata/kvstore/kvstore.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/strata.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: reliability_checkpoint_writer PATH N\n");
    return 2;
  }
  const std::string path = argv[1];
  const std::size_t n = std::strtoull(argv[2], nullptr, 10);
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
  auto host = strata::make_devices("cpu:1");
  auto s = host[0].create_stream();
  if (auto r = kv.load(path).get(); !r) {
    std::fprintf(stderr, "writer: %s\n", r.error().message().c_str());
    return 1;
  }
  std::vector<float> a(n), b(n);
  auto out = kv.pull("a", strata::tensor::from_host<float>(std::span<const float>(a), host[0], s)).get();
  if (!out) return 1;
  float v = (*out)[0].to_host<float>(s)[0];
  for (;;) {
    v += 1;
    std::fill(a.begin(), a.end(), v);
    std::fill(b.begin(), b.end(), -v);
    auto pushed = kv.push({"a", "b"}, {strata::tensor::from_host<float>(std::span<const float>(a), host[0], s),
                                       strata::tensor::from_host<float>(std::span<const float>(b), host[0], s)})
                      .get();
    if (!pushed) return 1;
    if (auto r = kv.save(path).get(); !r) {
      std::fprintf(stderr, "writer: %s\n", r.error().message().c_str());
      return 1;
    }
  }
}
