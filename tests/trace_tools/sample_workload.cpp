#include "sample_workload.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>

#include "strata/strata.hpp"

namespace strata::trace_tools::test {

namespace {

using namespace std::chrono_literals;
using strata::trace::event_kind;

struct ping { int left; };
struct pong { int left; };
struct square { int value; };
struct reading { int producer; int value; };
struct start_producing {};
struct forward_pass { int micro_batch; };
struct backward_pass { int micro_batch; };
struct batch_done { int micro_batch; };

/// Keeps a scheduler thread busy for `d` (stands in for compute).
void spin(std::chrono::microseconds d) {
  auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

void tag(std::uint64_t actor, const char* name, std::uint32_t value) {
  trace::emit(event_kind::tag, actor, 0, trace::intern(name), 0, value);
}

/// One pipeline stage: forward work, then the backward work of the same micro-batch later.
/// Its "device" is a stream on device `stage` whose work is recorded as device_begin/end.
behavior stage_behavior(actor& self, int stage, int stages, std::shared_ptr<actor_ref> prev,
                        std::shared_ptr<actor_ref> next, actor_ref sink) {
  tag(self.id(), "pipeline.stage", static_cast<std::uint32_t>(stage));
  auto work_id = std::make_shared<std::uint64_t>(0);
  auto device_work = [stage, work_id](const char* name, std::chrono::microseconds d) {
    std::uint32_t n = trace::intern(name);
    std::uint64_t w = ++*work_id;
    trace::emit(event_kind::device_begin, static_cast<std::uint64_t>(stage), 0, w, 0, n);
    spin(d);
    trace::emit(event_kind::device_end, static_cast<std::uint64_t>(stage), 0, w, 0, n);
  };
  return {
      [&self, stage, stages, next, device_work](const forward_pass& f) {
        tag(self.id(), "pipeline.forward", static_cast<std::uint32_t>(f.micro_batch));
        device_work("lstm_forward", 300us);
        if (stage + 1 < stages) self.send(*next, forward_pass{f.micro_batch});
        else self.send(self.self(), backward_pass{f.micro_batch});
      },
      [&self, stage, prev, sink, device_work](const backward_pass& b) {
        tag(self.id(), "pipeline.backward", static_cast<std::uint32_t>(b.micro_batch));
        device_work("lstm_backward", 500us);
        if (stage > 0) self.send(*prev, backward_pass{b.micro_batch});
        else self.send(sink, batch_done{b.micro_batch});
      },
  };
}

}  // namespace

std::string write_sample_trace(const std::string& path, const sample_counts& n) {
  actor_system sys(system_config{.worker_threads = 2, .trace_file = path});
  auto patience = 20s;

  // Ping-pong.
  auto pp_done = std::make_shared<std::promise<void>>();
  auto pp_future = pp_done->get_future();
  auto ponger = sys.spawn_fn_with({.name = "ponger"}, [](actor& self) -> behavior {
    return {[&self](const ping& p) { self.send(self.current_sender(), pong{p.left}); }};
  });
  sys.spawn_fn_with({.name = "pinger"}, [ponger, pp_done, trips = n.round_trips](actor& self) -> behavior {
    self.send(ponger, ping{trips});
    return {[&self, ponger, pp_done](const pong& p) {
      if (p.left <= 1) {
        pp_done->set_value();
        self.quit();
        return;
      }
      self.send(ponger, ping{p.left - 1});
    }};
  });

  // Request/response.
  auto rr_done = std::make_shared<std::promise<void>>();
  auto rr_future = rr_done->get_future();
  auto squarer = sys.spawn_fn_with({.name = "squarer"}, [](actor&) -> behavior {
    return {[](const square& s) { return s.value * s.value; }};
  });
  sys.spawn_fn_with({.name = "client"}, [squarer, rr_done, total = n.requests](actor& self) -> behavior {
    auto left = std::make_shared<int>(total);
    auto step = std::make_shared<std::function<void()>>();
    *step = [&self, squarer, rr_done, left, step] {
      self.request<int>(squarer, 5s, square{*left}).then([&self, rr_done, left, step](int) {
        if (--*left == 0) {
          *step = nullptr;  // break the step -> lambda -> step cycle (LeakSanitizer)
          rr_done->set_value();
          self.quit();
        } else {
          (*step)();
        }
      });
    };
    (*step)();
    return {[](int) {}};
  });

  // Fan-in: producers started from outside, one collector.
  auto fan_done = std::make_shared<std::promise<void>>();
  auto fan_future = fan_done->get_future();
  const int expected_readings = n.producers * n.readings_per_producer;
  auto collector = sys.spawn_fn_with({.name = "collector"}, [fan_done, expected_readings](actor&) -> behavior {
    auto seen = std::make_shared<int>(0);
    return {[fan_done, seen, expected_readings](const reading&) {
      spin(2us);
      if (++*seen == expected_readings) fan_done->set_value();
    }};
  });
  for (int p = 0; p < n.producers; ++p) {
    auto producer = sys.spawn_fn_with({.name = "producer-" + std::to_string(p)},
                                      [collector, p, count = n.readings_per_producer](actor& self) -> behavior {
                                        return {[&self, collector, p, count](const start_producing&) {
                                          for (int i = 0; i < count; ++i) self.send(collector, reading{p, i});
                                        }};
                                      });
    sys.send(producer, start_producing{});
  }

  // Pipeline: stages wired through shared handles, micro-batches injected from outside.
  auto pipe_done = std::make_shared<std::promise<void>>();
  auto pipe_future = pipe_done->get_future();
  auto finished = std::make_shared<int>(0);
  auto sink = sys.spawn_fn_with({.name = "trainer"}, [pipe_done, finished, mbs = n.micro_batches](actor&) -> behavior {
    return {[pipe_done, finished, mbs](const batch_done&) {
      if (++*finished == mbs) pipe_done->set_value();
    }};
  });
  std::vector<std::shared_ptr<actor_ref>> handles;
  for (int s = 0; s < n.stages; ++s) handles.push_back(std::make_shared<actor_ref>());
  for (int s = 0; s < n.stages; ++s) {
    auto prev = s > 0 ? handles[static_cast<std::size_t>(s - 1)] : std::make_shared<actor_ref>();
    auto next = s + 1 < n.stages ? handles[static_cast<std::size_t>(s + 1)] : std::make_shared<actor_ref>();
    *handles[static_cast<std::size_t>(s)] =
        sys.spawn_fn_with({.name = "stage-" + std::to_string(s)}, stage_behavior, s, n.stages, prev, next, sink);
  }
  // GPipe's ideal bubble for S stages and M micro-batches: (S-1)/(M+S-1).
  trace::emit(event_kind::tag, 0, 0, trace::intern("pipeline.ideal_bubble_ppm"), 0,
              static_cast<std::uint32_t>(1e6 * (n.stages - 1) / (n.micro_batches + n.stages - 1)));
  for (int mb = 0; mb < n.micro_batches; ++mb) sys.send(*handles[0], forward_pass{mb});

  for (auto* f : {&pp_future, &rr_future, &fan_future, &pipe_future})
    if (f->wait_for(patience) != std::future_status::ready) return "the sample workload did not finish in time";

  // An unhandled message, and a message to a terminated actor.
  sys.send(collector, std::string("not a reading"));
  auto short_lived = sys.spawn_fn_with({.name = "short-lived"}, [](actor& self) -> behavior {
    self.quit();
    return {[](int) {}};
  });
  sys.await_all_for(10ms);
  sys.send(short_lived, 42);

  auto report = sys.shutdown();
  if (!report.trace_error.empty()) return report.trace_error;
  if (report.trace_file != path) return "tracing was not on (was strata built with -DSTRATA_TRACING=OFF?)";
  return {};
}

}  // namespace strata::trace_tools::test
