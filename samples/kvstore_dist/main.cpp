// MXNet's dist_sync check on strata: under `mpirun -np N`, every worker initialises key "3"
// (shape 2x3), then for 3 rounds pushes ones times (its rank + 1) and pulls. Without an
// optimizer the stored value is the merged sum, so every worker must see v = N(N+1)/2 in every
// element, every round. Prints one line per round and exits non-zero on any other value.
//
//   export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
//   mpirun -np 3 --oversubscribe --bind-to none --timeout 60 ./build/samples/kvstore_dist
//
// It takes no arguments but --help (the usage); any other is refused with exit status 2.

#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "strata/kvstore_dist/store.hpp"

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("usage: mpirun -np N [mpirun options] kvstore_dist\n"
                "MXNet's dist_sync check: every worker inits key \"3\" (2x3), then for 3 rounds pushes ones x (rank + 1)\n"
                "and pulls, printing one line per round; exits 1 unless every value is N(N+1)/2. Without mpirun: one\n"
                "worker. Takes no other arguments.\n");
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "kvstore_dist: unknown argument '%s'; this sample takes no arguments (see --help).\n", argv[1]);
    return 2;
  }
  try {
    strata::actor_system sys(strata::system_config{.worker_threads = 1});
    strata::device cpu = strata::make_devices("cpu:1").front();
    strata::stream s = cpu.create_stream();
    int exit_code = 0;
    {
      strata::net::endpoint net(sys, strata::net::endpoint_config{.receive_device = cpu});
      {
        strata::kvstore_dist::store kv(sys, net, strata::kvstore_dist::store_options{.value_device = cpu});
        const int n = kv.num_workers();
        const int w = kv.rank();
        const std::vector<std::int64_t> shape{2, 3};
        const float expected = static_cast<float>(n * (n + 1) / 2);

        std::vector<float> ones(6, 1.0f);
        auto init = kv.init("3", strata::tensor::from_host<float>(std::span<const float>(ones), shape, cpu, s));
        if (!init) {
          std::fprintf(stderr, "kvstore_dist: rank %d: init failed: %s\n", w, init.error().message().c_str());
          return 1;
        }
        for (int round = 0; round < 3; ++round) {
          std::vector<float> mine(6, static_cast<float>(w + 1));
          auto pushed = kv.push("3", {strata::tensor::from_host<float>(std::span<const float>(mine), shape, cpu, s)});
          if (!pushed) {
            std::fprintf(stderr, "kvstore_dist: rank %d: push failed: %s\n", w, pushed.error().message().c_str());
            return 1;
          }
          auto pulled = kv.pull("3");
          if (!pulled) {
            std::fprintf(stderr, "kvstore_dist: rank %d: pull failed: %s\n", w, pulled.error().message().c_str());
            return 1;
          }
          std::vector<float> v = pulled->to_host<float>(s);
          std::printf("rank %d round %d: [[%g, %g, %g], [%g, %g, %g]]\n", w, round, v[0], v[1], v[2], v[3], v[4], v[5]);
          std::fflush(stdout);
          for (float x : v)
            if (x != expected) {
              std::fprintf(stderr, "kvstore_dist: rank %d round %d: got %g, expected %g\n", w, round, x, expected);
              exit_code = 1;
            }
        }
        (void)kv.barrier();  // nobody stops its server shard while another still pulls from it
      }
      net.shutdown();
    }
    sys.shutdown();
    return exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvstore_dist: %s\n", e.what());
    return 1;
  }
}
