// metrics_server and strata-top's reader: a real actor system under load, scraped over HTTP by a
// plain Asio client; every line of the exposition checked against the Prometheus text format.
#include "strata/metrics/server.hpp"  // first: the public header compiles on its own

#define BOOST_TEST_MODULE metrics_server
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "metrics_text.hpp"
#include "strata/strata.hpp"
#include "support/eventually.hpp"

namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;

struct http_response {
  int status = 0;
  std::string head;
  std::string body;
};

/// Sends `request` as is to 127.0.0.1:port and reads until the server closes.
http_response http_exchange(std::uint16_t port, const std::string& request) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  asio::write(socket, asio::buffer(request));
  std::string data;
  asio::error_code ec;
  std::array<char, 4096> chunk{};
  for (;;) {
    std::size_t n = socket.read_some(asio::buffer(chunk), ec);
    data.append(chunk.data(), n);
    if (ec) break;
  }
  BOOST_REQUIRE_MESSAGE(ec == asio::error::eof || ec == asio::error::connection_reset, ec.message());
  http_response r;
  auto end = data.find("\r\n\r\n");
  BOOST_REQUIRE(end != std::string::npos);
  r.head = data.substr(0, end);
  r.body = data.substr(end + 4);
  BOOST_REQUIRE(r.head.rfind("HTTP/1.1 ", 0) == 0);
  r.status = std::stoi(r.head.substr(9, 3));
  return r;
}

http_response get(std::uint16_t port, const std::string& path = "/metrics", const std::string& method = "GET") {
  return http_exchange(port, method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

/// Checks every line of an exposition against the text format (0.0.4) and returns its samples
/// by name. Every family has one HELP and one TYPE line before its samples; counters end in
/// _total; values are numbers.
std::map<std::string, double> check_exposition(const std::string& body) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) [^\n]*)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? ([-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?|NaN|[-+]Inf))");
  std::map<std::string, double> out;
  std::set<std::string> helped, typed;
  std::map<std::string, std::string> types;
  BOOST_REQUIRE(!body.empty());
  BOOST_REQUIRE(body.back() == '\n');
  std::size_t pos = 0;
  while (pos < body.size()) {
    auto nl = body.find('\n', pos);
    std::string line = body.substr(pos, nl - pos);
    pos = nl + 1;
    std::smatch m;
    BOOST_TEST_CONTEXT("line: " << line) {
      if (std::regex_match(line, m, help)) {
        BOOST_TEST(helped.insert(m[1]).second);  // once per family
      } else if (std::regex_match(line, m, type)) {
        BOOST_TEST(typed.insert(m[1]).second);
        BOOST_TEST(helped.count(m[1]) == 1u);  // HELP first
        types[m[1]] = m[2];
      } else if (std::regex_match(line, m, sample)) {
        const std::string base = m[1];
        BOOST_TEST(types.count(base) == 1u);  // TYPE before the samples
        if (types[base] == "counter") BOOST_TEST((base.size() > 6 && base.substr(base.size() - 6) == "_total"));
        std::string name = line.substr(0, line.rfind(' '));
        BOOST_TEST(out.count(name) == 0u);
        out[name] = std::stod(line.substr(line.rfind(' ') + 1));
      } else {
        BOOST_ERROR("not a HELP, TYPE or sample line");
      }
    }
  }
  return out;
}

struct ping { std::uint64_t n; };
struct pong { std::uint64_t n; };

/// A ping-pong pair that bounces until `stop` is set.
void spawn_ping_pong(strata::actor_system& sys, std::shared_ptr<std::atomic<bool>> stop) {
  auto ponger = sys.spawn_fn_with({.name = "ponger"}, [](strata::actor& self) -> strata::behavior {
    return {[&self](const ping& p) { self.send(self.current_sender(), pong{p.n}); }};
  });
  sys.spawn_fn_with({.name = "pinger"}, [ponger, stop](strata::actor& self) -> strata::behavior {
    self.send(ponger, ping{0});
    return {[&self, ponger, stop](const pong& p) {
      if (stop->load(std::memory_order_relaxed)) return self.quit();
      self.send(ponger, ping{p.n + 1});
    }};
  });
}

const char* const system_counters[] = {
    "strata_actors_spawned_total", "strata_actors_terminated_total", "strata_actors_failed_total",
    "strata_messages_handled_total", "strata_undeliverable_total", "strata_unhandled_total",
    "strata_mailbox_dropped_total", "strata_mailbox_refused_total", "strata_messages_discarded_total",
    "strata_late_responses_total", "strata_restarts_total", "strata_unanswered_results_total"};

}  // namespace

BOOST_AUTO_TEST_SUITE(metrics_server_contract)

BOOST_AUTO_TEST_CASE(scrapes_of_a_busy_system_are_valid_prometheus_text_and_counters_only_grow) {
  strata::actor_system sys(strata::system_config{.worker_threads = 2});
  strata::metrics::server metrics(sys, 0, "127.0.0.1", {.sample_interval = 200ms});
  BOOST_REQUIRE(metrics.port() != 0);
  auto stop = std::make_shared<std::atomic<bool>>(false);
  spawn_ping_pong(sys, stop);
  BOOST_REQUIRE(metrics.set_gauge("strata_training_step", 42).has_value());
  BOOST_REQUIRE(metrics.set_gauge("strata_training_loss", 2.3).has_value());
  BOOST_REQUIRE(metrics.set_gauge("strata_device_busy_seconds{device=\"cpu:0\"}", 0.125).has_value());
  BOOST_REQUIRE(metrics.set_gauge("strata_device_busy_seconds{device=\"cpu:1\"}", 0.5).has_value());
  BOOST_REQUIRE(metrics.describe_gauge("strata_training_loss", "Mean next-token cross-entropy of the last step.").has_value());

  // Scrapes until the ping-pong shows (every scrape is checked), then until the sampler has
  // measured a rate since the step gauge moved.
  auto first = get(metrics.port());
  std::map<std::string, double> a;
  BOOST_TEST(strata::test::eventually([&] {
    first = get(metrics.port());
    a = check_exposition(first.body);
    return a["strata_messages_handled_total"] > 0.0;
  }));
  BOOST_TEST(first.status == 200);
  BOOST_TEST(first.head.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  BOOST_TEST(first.head.find("Content-Length: " + std::to_string(first.body.size())) != std::string::npos);
  metrics.set_gauge("strata_training_step", 43).value();
  std::map<std::string, double> b;
  BOOST_TEST(strata::test::eventually([&] {
    b = check_exposition(get(metrics.port()).body);
    return b["strata_messages_per_second"] > 0.0 && b["strata_messages_handled_total"] > a["strata_messages_handled_total"];
  }));
  stop->store(true);

  for (const char* name : {"strata_actors_live", "strata_messages_per_second", "strata_worker_threads"}) {
    BOOST_TEST_CONTEXT(name) { BOOST_TEST(a.count(name) == 1u); BOOST_TEST(b.count(name) == 1u); }
  }
  for (const char* name : system_counters) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(a.count(name) == 1u);
      BOOST_REQUIRE(b.count(name) == 1u);
      BOOST_TEST(b[name] >= a[name]);
    }
  }
  BOOST_TEST(a["strata_actors_live"] >= 2.0);
  BOOST_TEST(a["strata_actors_spawned_total"] >= 2.0);
  BOOST_TEST(a["strata_messages_handled_total"] > 0.0);
  BOOST_TEST(b["strata_messages_handled_total"] > a["strata_messages_handled_total"]);
  BOOST_TEST(b["strata_messages_per_second"] > 0.0);
  BOOST_TEST(b["strata_worker_threads"] == 2.0);
  BOOST_TEST(a["strata_training_step"] == 42.0);
  BOOST_TEST(b["strata_training_step"] == 43.0);
  BOOST_TEST(b["strata_training_loss"] == 2.3);  // shortest round-trip formatting
  BOOST_TEST(b["strata_device_busy_seconds{device=\"cpu:0\"}"] == 0.125);
  BOOST_TEST(b["strata_device_busy_seconds{device=\"cpu:1\"}"] == 0.5);
  BOOST_TEST(first.body.find("# HELP strata_training_loss Mean next-token cross-entropy") != std::string::npos);

  // strata-top's reader sees the same samples.
  strata::trace_tools::exposition e;
  std::string why;
  BOOST_REQUIRE_MESSAGE(strata::trace_tools::parse_exposition(first.body, e, why), why);
  BOOST_TEST(e.samples.size() == a.size());
}

BOOST_AUTO_TEST_CASE(other_paths_methods_and_oversized_requests_get_http_errors) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::metrics::server metrics(sys, 0, "127.0.0.1", {.max_request_bytes = 1024});
  BOOST_TEST(get(metrics.port(), "/").status == 404);
  BOOST_TEST(get(metrics.port(), "/metrics/extra").status == 404);
  BOOST_TEST(get(metrics.port(), "/metrics?name=x").status == 200);
  BOOST_TEST(get(metrics.port(), "/metrics", "POST").status == 405);
  auto head = get(metrics.port(), "/metrics", "HEAD");
  BOOST_TEST(head.status == 200);
  BOOST_TEST(head.body.empty());
  BOOST_TEST(http_exchange(metrics.port(), "garbage\r\n\r\n").status == 400);
  auto big = http_exchange(metrics.port(), "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(4000, 'x') + "\r\n\r\n");
  BOOST_TEST(big.status == 431);
  BOOST_TEST(get(metrics.port()).status == 200);  // still serving
}

BOOST_AUTO_TEST_CASE(bad_gauge_names_are_refused_and_change_nothing) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::metrics::server metrics(sys, 0);
  for (const char* bad : {"", "1step", "step-count", "loss{device=cpu}", "loss{device=\"a\",}", "loss{=\"a\"}",
                          "loss{device=\"a\"", "strata_actors_live", "strata_messages_handled_total{x=\"1\"}"}) {
    BOOST_TEST_CONTEXT(bad) {
      auto r = metrics.set_gauge(bad, 1);
      BOOST_TEST(!r.has_value());
      BOOST_TEST(r.error().code() == strata::errc::invalid_argument);
    }
  }
  BOOST_TEST(metrics.set_gauge("ok:name_1{a=\"x\\\"y\",b=\"\"}", 1).has_value());
  auto samples = check_exposition(metrics.render());
  BOOST_TEST(samples.count("ok:name_1{a=\"x\\\"y\",b=\"\"}") == 1u);
  BOOST_TEST(metrics.remove_gauge("ok:name_1{a=\"x\\\"y\",b=\"\"}"));
  BOOST_TEST(metrics.render().find("ok:name_1") == std::string::npos);  // an empty family is not listed
}

BOOST_AUTO_TEST_CASE(the_destructor_stops_serving_even_with_an_idle_connection_open) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  std::uint16_t port = 0;
  asio::io_context io;
  tcp::socket idle(io);
  {
    strata::metrics::server metrics(sys, 0);
    port = metrics.port();
    idle.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));  // sends nothing
    // The one acceptor takes connections in the order they were made (the kernel's accept queue
    // is FIFO), one at a time: the answer on a later connection says the idle one was accepted
    // first and is open now, and that it does not hold up the others.
    BOOST_TEST(get(port).status == 200);
  }
  // The idle connection was closed and nothing listens any more.
  std::array<char, 16> buf{};
  asio::error_code ec;
  idle.read_some(asio::buffer(buf), ec);
  BOOST_TEST(!!ec);
  tcp::socket again(io);
  again.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  BOOST_TEST(ec == asio::error::connection_refused);
}

BOOST_AUTO_TEST_CASE(a_port_in_use_or_a_bad_address_is_refused_with_one_sentence) {
  strata::actor_system sys(strata::system_config{.worker_threads = 1});
  strata::metrics::server first(sys, 0);
  auto second = strata::metrics::server::start(sys, first.port());
  BOOST_REQUIRE(!second.has_value());
  BOOST_TEST(second.error().message().find("cannot listen on 127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
  auto bad = strata::metrics::server::start(sys, 0, "localhost:80");
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().code() == strata::errc::invalid_argument);
  BOOST_CHECK_THROW(strata::metrics::server(sys, first.port()), strata::error_exception);
}

BOOST_AUTO_TEST_SUITE_END()
