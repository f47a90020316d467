// strata-bench-net: remote actors (strata::net) against raw MPI, same sizes, same run.
//
//   mpirun -np 2 strata-bench-net [--rounds N] [--tensor-repeats K] [--ping-bytes B] [--json]
//
// Rank 0 drives, rank 1 serves. Raw MPI first (blocking MPI_Send/MPI_Recv from the main thread),
// then strata: an actor on rank 0 and one on rank 1, through the endpoint's communication thread
// (the round trip twice: remote_ping_pong_pool_us with the actors on scheduler threads,
// remote_ping_pong_us with actors spawned with handle_remote_inline).
//
// It also prints the link in the form the pipeline cost model takes (strata::pipeline::link_model,
// a message of b bytes taking latency + b / bandwidth), from strata's own figures, since pipeline
// stages on two ranks talk through strata::net, and as lstm_lm measures it
// (strata::lm_net::estimate_link): link_latency_us is half the median round trip of actors on
// scheduler threads (as stages are), and link_gbps the tensor bytes over the best transfer's
// time less that round trip (a transfer is a request carrying the tensor and a small reply, so
// it takes 2 x latency + bytes / bandwidth). Medians and best times, so that a TCP
// retransmission on a lossy link does not move them.
//
// Then the LSTM LM (strata::lm::train, the loop of `lstm_lm train`) with one stage per rank on
// cpu:1 each, and, as its anchor, the same model in one process on rank 0 with cpu:2 while rank 1
// sleeps: lm_2ranks_tokens_per_s and lm_1process_tokens_per_s, medians over the steps. Both runs
// give each device one thread. --lm-steps 0 skips them.

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "strata/actor_system.hpp"
#include "strata/device/all.hpp"
#include "strata/lm/trainer.hpp"
#include "strata/lm_net/link_estimate.hpp"
#include "strata/lm_net/ranks.hpp"
#include "strata/net/endpoint.hpp"
#include "strata/kernels/blas.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct ping {
  std::vector<std::uint8_t> payload;
};
template <class A>
void serialize(A& a, ping& m) {
  a(m.payload);
}
struct tensor_msg {
  strata::tensor data;
};
template <class A>
void serialize(A& a, tensor_msg& m) {
  a(m.data);
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct raw_result {
  double ping_pong_us = 0;
  double gbps = 0;
};

/// Blocking ping-pong and 64 MiB transfers (each acknowledged by one byte), as MPI users write them.
raw_result raw_mpi(int rank, int rounds, int repeats, std::size_t ping_bytes, std::size_t tensor_bytes) {
  raw_result r;
  std::vector<std::uint8_t> small(ping_bytes, 1), big(tensor_bytes, 2);
  const int peer = 1 - rank;
  const int n = static_cast<int>(ping_bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = clock_type::now();
  for (int i = -100; i < rounds; ++i) {  // 100 warm-up rounds
    if (i == 0) t0 = clock_type::now();
    if (rank == 0) {
      MPI_Send(small.data(), n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(small.data(), n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(small.data(), n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(small.data(), n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    }
  }
  r.ping_pong_us = seconds_since(t0) * 1e6 / rounds;
  std::uint8_t ack = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = -1; i < repeats; ++i) {  // one warm-up transfer
    if (i == 0) t0 = clock_type::now();
    if (rank == 0) {
      MPI_Send(big.data(), static_cast<int>(tensor_bytes), MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(big.data(), static_cast<int>(tensor_bytes), MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
    }
  }
  r.gbps = static_cast<double>(tensor_bytes) * repeats / seconds_since(t0) / 1e9;
  return r;
}

}  // namespace

STRATA_NET_DECLARE(ping, tensor_msg);

int main(int argc, char** argv) {
  CLI::App app{"strata-bench-net: remote actor round trips and tensor transfers against raw MPI (mpirun -np 2)"};
  int rounds = 5000;
  int repeats = 10;
  std::size_t ping_bytes = 64;
  std::size_t tensor_mib = 64;
  bool json = false;
  app.add_option("--rounds", rounds, "ping-pong round trips (after 100 warm-up rounds)")->check(CLI::Range(1, 100'000'000));
  app.add_option("--tensor-repeats", repeats, "64 MiB transfers (after one warm-up)")->check(CLI::Range(1, 10'000));
  app.add_option("--ping-bytes", ping_bytes, "payload bytes of a ping")->check(CLI::Range(1, 1 << 20));
  app.add_option("--tensor-mib", tensor_mib, "MiB per tensor transfer")->check(CLI::Range(1, 1024));
  app.add_flag("--json", json, "print one JSON object on one line (rank 0)");
  std::size_t lm_steps = 20, lm_layers = 4, lm_hidden = 256;
  app.add_option("--lm-steps", lm_steps, "LSTM LM steps of each run (0: no LM runs)")->check(CLI::Range(0, 100'000));
  app.add_option("--lm-layers", lm_layers, "LSTM LM layers")->check(CLI::Range(2, 64));
  app.add_option("--lm-hidden", lm_hidden, "LSTM LM width (embed: half)")->check(CLI::Range(2, 8192));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One sentence and status 2, as the other tools give bad input (CLI11's own codes are 100+).
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string what = e.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    for (auto& c : what)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "strata-bench-net: %s (run strata-bench-net --help for usage)\n", what.c_str());
    return 2;
  }
  const std::size_t tensor_bytes = tensor_mib << 20;

  if (auto env = strata::net::check_environment(); !env) {  // before MPI starts, on every rank
    std::fprintf(stderr, "strata-bench-net: %s\n", env.error().message().c_str());
    return 2;
  }
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr &&
      std::getenv("PMI_SIZE") == nullptr) {
    std::fprintf(stderr, "strata-bench-net: run it under mpirun -np 2 (it was started without a launcher)\n");
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || provided < MPI_THREAD_SERIALIZED) {
    if (rank == 0)
      std::fprintf(stderr, "strata-bench-net: run it under mpirun -np 2 (this job has %d rank%s)\n", size,
                   size == 1 ? "" : "s");
    MPI_Finalize();
    return 2;
  }
  const raw_result raw = raw_mpi(rank, rounds, repeats, ping_bytes, tensor_bytes);

  double remote_us = 0, pool_us = 0, tensor_gbps = 0;
  strata::lm_net::link_samples link;  // rank 0's timings of the pool actors and the transfers
  link.bytes = tensor_bytes;
  {
    strata::actor_system sys(strata::system_config{.worker_threads = 1});
    auto cpu = strata::make_devices("cpu:1").front();
    strata::net::endpoint net(sys, strata::net::endpoint_config{.receive_device = cpu});
    // Each ping-pong twice: actors on the scheduler thread (every message crosses from the
    // communication thread to it and back), and actors spawned with handle_remote_inline (their
    // handlers run on the communication thread as messages arrive).
    const strata::spawn_options pool_actor{}, inline_actor{.handle_remote_inline = true};
    if (rank == 1) {
      for (const auto* o : {&pool_actor, &inline_actor})
        (void)net.publish(sys.spawn_fn_with(*o,
                                            [](strata::actor& self) -> strata::behavior {
                                              return {[&self](const ping& p) { self.send(self.current_sender(), p); }};
                                            }),
                          o->handle_remote_inline ? "echo-inline" : "echo");
      // Answers once the tensor's data is here (its ready event), from the completing thread.
      (void)net.publish(sys.spawn([](strata::actor& self) -> strata::behavior {
                          return {[&self](const tensor_msg& m) {
                            auto promise = self.make_response_promise<bool>();
                            m.data.ready_event().then([promise](std::exception_ptr e) mutable { promise.deliver(!e); });
                            return false;
                          }};
                        }),
                        "sink");
      std::promise<void> gone;
      auto done = gone.get_future();
      auto driver = net.remote(0, "driver").value();
      sys.spawn([driver, &gone](strata::actor& self) -> strata::behavior {
        self.monitor(driver);
        return {[&gone](const strata::down_msg&) { gone.set_value(); }};
      });
      done.wait();
    } else {
      (void)net.publish(sys.spawn([](strata::actor&) -> strata::behavior { return {[](const ping&) {}}; }), "driver");
      // The mean round trip (raw MPI's figure), and each round trip for the link's median.
      auto ping_pong = [&](const strata::spawn_options& options, std::vector<double>& each_s) {
        auto echo = net.remote(1, options.handle_remote_inline ? "echo-inline" : "echo").value();
        std::promise<double> result;
        auto us = result.get_future();
        each_s.reserve(static_cast<std::size_t>(rounds));
        sys.spawn_fn_with(options, [echo, rounds, ping_bytes, &result, &each_s](strata::actor& self) -> strata::behavior {
          auto count = std::make_shared<int>(-100);
          auto t0 = std::make_shared<clock_type::time_point>(clock_type::now());
          auto sent = std::make_shared<clock_type::time_point>(clock_type::now());
          self.send(echo, ping{std::vector<std::uint8_t>(ping_bytes, 1)});
          return {[&self, echo, rounds, count, t0, sent, &result, &each_s](ping& p) {
            if (++*count == 0) *t0 = clock_type::now();
            if (*count > 0) each_s.push_back(seconds_since(*sent));
            if (*count == rounds) {
              result.set_value(seconds_since(*t0) * 1e6 / rounds);
              self.quit();
              return;
            }
            *sent = clock_type::now();
            self.send(echo, std::move(p));
          }};
        });
        return us.get();
      };
      std::vector<double> inline_trips;
      pool_us = ping_pong(pool_actor, link.round_trip_s);
      remote_us = ping_pong(inline_actor, inline_trips);

      auto sink = net.remote(1, "sink").value();
      auto s = cpu.create_stream();
      std::vector<std::uint8_t> bytes(tensor_bytes, 3);
      tensor_msg m{strata::tensor::from_host<std::uint8_t>(bytes, cpu, s)};
      m.data.ready_event().synchronize();
      clock_type::time_point t0 = clock_type::now();
      for (int i = -1; i < repeats; ++i) {
        if (i == 0) t0 = clock_type::now();
        const auto sent = clock_type::now();
        auto ok = sys.request<bool>(sink, 60s, m).get();
        if (!ok || !*ok) {
          std::fprintf(stderr, "strata-bench-net: a tensor transfer failed: %s\n",
                       ok ? "the data arrived with an error" : ok.error().to_string().c_str());
          return 1;
        }
        if (i >= 0) link.transfer_s.push_back(seconds_since(sent));
      }
      tensor_gbps = static_cast<double>(tensor_bytes) * repeats / seconds_since(t0) / 1e9;
    }
    net.shutdown();
    sys.shutdown();
  }
  double lm_2ranks = 0, lm_1process = 0;
  if (lm_steps > 0) {
    strata::kernels::cpu::set_blas_threads(1);  // as lstm_lm: the devices' threads do the work
    strata::lm::trainer_options o;
    o.layers = lm_layers, o.hidden = lm_hidden, o.embed = lm_hidden / 2, o.steps = lm_steps;
    o.cpu_threads = 1, o.val_tokens = 1000, o.program = "strata-bench-net";
    try {
      o.devices = "cpu:1";
      o.ranks = strata::lm_net::make_rank_group();
      lm_2ranks = strata::lm::train(o).tokens_per_s;
      o.ranks.reset();
      // The anchor: one process, both stages, while rank 1 sleeps (a blocking barrier would spin).
      if (rank == 0) {
        o.devices = "cpu:2";
        lm_1process = strata::lm::train(o).tokens_per_s;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-bench-net: the LM run failed: %s\n", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Request done;
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    for (int finished = 0; !finished;) {
      MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
      if (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  MPI_Finalize();
  if (rank != 0) return 0;
  // Pipeline stages run on scheduler threads: their link is the pool actors' round trip, as
  // lstm_lm measures it (strata::lm_net::estimate_link: the median round trip, the best
  // transfer less that round trip), so that a few slow samples on a lossy link do not move it.
  const auto model = strata::lm_net::estimate_link(link);
  const double link_latency_us = model.latency_s * 1e6;
  const double link_gbps = model.bytes_per_s / 1e9;
  if (json) {
    nlohmann::json out = {{"remote_ping_pong_us", remote_us}, {"mpi_ping_pong_us", raw.ping_pong_us},
                          {"remote_ping_pong_pool_us", pool_us},
                          {"tensor_64mib_gbps", tensor_gbps},  {"mpi_64mib_gbps", raw.gbps},
                          {"ping_bytes", ping_bytes},          {"tensor_mib", tensor_mib},
                          {"rounds", rounds},                  {"tensor_repeats", repeats},
                          {"link_latency_us", link_latency_us}, {"link_gbps", link_gbps},
                          {"lm_2ranks_tokens_per_s", lm_2ranks}, {"lm_1process_tokens_per_s", lm_1process},
                          {"lm_steps", lm_steps},              {"lm_layers", lm_layers},
                          {"lm_hidden", lm_hidden}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("round trip (%zu B payload): strata %.2f us (handlers on the scheduler thread: %.2f us), raw MPI "
                "%.2f us (%.2fx; %.2fx)\n",
                ping_bytes, remote_us, pool_us, raw.ping_pong_us, remote_us / raw.ping_pong_us,
                pool_us / raw.ping_pong_us);
    std::printf("%zu MiB tensor: strata %.2f GB/s, raw MPI %.2f GB/s (%.0f%%)\n", tensor_mib, tensor_gbps, raw.gbps,
                100 * tensor_gbps / raw.gbps);
    std::printf("link for the pipeline cost model: latency %.2f us, %.2f GB/s "
                "(strata-bench-pipeline --link-latency-us %.2f --link-gbps %.2f)\n",
                link_latency_us, link_gbps, link_latency_us, link_gbps);
    if (lm_steps > 0)
      std::printf("LSTM LM (%zu x LSTM(%zu), %zu steps): 2 ranks cpu:1 each %.0f tokens/s, one process cpu:2 %.0f "
                  "tokens/s (%.0f%%)\n",
                  lm_layers, lm_hidden, lm_steps, lm_2ranks, lm_1process, 100 * lm_2ranks / lm_1process);
  }
  return 0;
}
