// strata-top: a live view of a running strata program's metrics_server (GET /metrics).
//
//   strata-top --port PORT [--host 127.0.0.1] [--interval-ms 1000] [--once] [--timeout-ms 2000]
//
// On a terminal the screen is cleared and redrawn every interval; otherwise one table is
// printed per refresh. Counters get a per-second column from the change since the last fetch.

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <array>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "metrics_text.hpp"

namespace {

using asio::ip::tcp;
using strata::trace_tools::exposition;

constexpr std::size_t max_response_bytes = 16u << 20;

struct fetch_result {
  std::optional<exposition> metrics;
  std::string error;  // one sentence when metrics is empty
};

/// GET http://host:port/metrics, bounded by `timeout` as a whole.
fetch_result fetch(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  asio::io_context io;
  tcp::resolver resolver(io);
  tcp::socket socket(io);
  std::string request = "GET /metrics HTTP/1.1\r\nHost: " + where + "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n";
  std::string response;
  asio::error_code failure;
  const char* stage = "resolve";
  std::array<char, 16384> chunk{};
  std::function<void()> read_more = [&] {
    socket.async_read_some(asio::buffer(chunk), [&](const asio::error_code& ec, std::size_t n) {
      response.append(chunk.data(), n);
      if (ec == asio::error::eof) return;
      if (ec) return void(failure = ec);
      if (response.size() > max_response_bytes) return void(failure = asio::error::message_size);
      read_more();
    });
  };
  resolver.async_resolve(host, std::to_string(port), [&](const asio::error_code& ec, tcp::resolver::results_type results) {
    if (ec) return void(failure = ec);
    stage = "connect";
    asio::async_connect(socket, results, [&](const asio::error_code& ec2, const tcp::endpoint&) {
      if (ec2) return void(failure = ec2);
      stage = "send";
      asio::async_write(socket, asio::buffer(request), [&](const asio::error_code& ec3, std::size_t) {
        if (ec3) return void(failure = ec3);
        stage = "read";
        read_more();
      });
    });
  });
  io.run_for(timeout);
  fetch_result r;
  if (!io.stopped()) {
    r.error = "no answer from " + where + " within " + std::to_string(timeout.count()) + " ms (stuck at " + stage + ")";
    return r;
  }
  if (failure) {
    if (std::string(stage) == "connect" || std::string(stage) == "resolve")
      r.error = "cannot connect to " + where + ": " + failure.message() +
                " (is a strata program serving metrics there, e.g. with --metrics-port?)";
    else
      r.error = "reading from " + where + " failed: " + failure.message();
    return r;
  }
  // Status line, headers, body.
  const auto head_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) {
    r.error = where + " did not answer with HTTP (got " + std::to_string(response.size()) + " bytes)";
    return r;
  }
  const auto sp = response.find(' ');
  const int status = std::atoi(response.c_str() + sp + 1);
  if (status != 200) {
    const auto eol = response.find("\r\n");
    r.error = where + "/metrics answered '" + response.substr(sp + 1, eol - sp - 1) + "', expected 200 OK";
    return r;
  }
  std::string body = response.substr(head_end + 4);
  exposition e;
  std::string why;
  if (!strata::trace_tools::parse_exposition(body, e, why)) {
    r.error = where + "/metrics is not Prometheus text: " + why;
    return r;
  }
  if (e.samples.empty()) {
    r.error = where + "/metrics answered with no metrics";
    return r;
  }
  r.metrics = std::move(e);
  return r;
}

struct row_spec {
  const char* metric;
  const char* label;
  bool counter;
};
constexpr row_spec system_rows[] = {
    {"strata_actors_live", "actors live", false},
    {"strata_actors_spawned_total", "actors spawned", true},
    {"strata_actors_terminated_total", "actors terminated", true},
    {"strata_actors_failed_total", "actors failed", true},
    {"strata_messages_handled_total", "messages handled", true},
    {"strata_messages_per_second", "messages per second", false},
    {"strata_undeliverable_total", "undeliverable", true},
    {"strata_unhandled_total", "unhandled", true},
    {"strata_mailbox_dropped_total", "mailbox dropped", true},
    {"strata_mailbox_refused_total", "mailbox refused", true},
    {"strata_messages_discarded_total", "discarded", true},
    {"strata_late_responses_total", "late responses", true},
    {"strata_restarts_total", "restarts", true},
    {"strata_unanswered_results_total", "unanswered results", true},
    {"strata_worker_threads", "worker threads", false},
};

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[48];
  if ((v == std::floor(v) || std::fabs(v) >= 1000) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string pad_left(const std::string& s, std::size_t w) { return s.size() >= w ? s : std::string(w - s.size(), ' ') + s; }
std::string pad_right(const std::string& s, std::size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

/// The table for one fetch; `previous` (with its time) gives the per-second column.
std::string render(const std::string& where, const exposition& now, const std::map<std::string, double>* previous,
                   double seconds_since_previous, int interval_ms) {
  std::map<std::string, double> values;
  for (const auto& s : now.samples) values[s.name] = s.value;
  std::vector<std::array<std::string, 3>> rows;
  std::set<std::string> shown;
  for (const auto& r : system_rows) {
    auto it = values.find(r.metric);
    if (it == values.end()) continue;
    shown.insert(r.metric);
    std::string rate = "-";
    if (r.counter && previous && seconds_since_previous > 0) {
      auto p = previous->find(r.metric);
      if (p != previous->end()) rate = number((it->second - p->second) / seconds_since_previous);
    }
    rows.push_back({r.label, number(it->second), rate});
  }
  std::vector<std::array<std::string, 3>> gauges;
  for (const auto& s : now.samples)
    if (!shown.count(s.name)) gauges.push_back({s.name, number(s.value), ""});
  std::size_t w0 = 20, w1 = 10, w2 = 10;
  for (const auto* list : {&rows, &gauges})
    for (const auto& r : *list) w0 = std::max(w0, r[0].size()), w1 = std::max(w1, r[1].size()), w2 = std::max(w2, r[2].size());
  std::ostringstream out;
  out << "strata-top " << where << "/metrics, every " << interval_ms << " ms\n\n";
  out << "  " << pad_right("actor system", w0) << "  " << pad_left("value", w1) << "  " << pad_left("per second", w2) << "\n";
  for (const auto& r : rows) out << "  " << pad_right(r[0], w0) << "  " << pad_left(r[1], w1) << "  " << pad_left(r[2], w2) << "\n";
  if (!gauges.empty()) {
    out << "\n  " << pad_right("application gauges", w0) << "  " << pad_left("value", w1) << "\n";
    for (const auto& r : gauges) out << "  " << pad_right(r[0], w0) << "  " << pad_left(r[1], w1) << "\n";
  }
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-top: live view of a strata program's metrics (its metrics_server, GET /metrics)"};
  int port = 0;
  std::string host = "127.0.0.1";
  int interval_ms = 1000;
  int timeout_ms = 2000;
  bool once = false;
  app.add_option("--port", port, "port of the program's metrics_server")->required()->check(CLI::Range(1, 65535));
  app.add_option("--host", host, "address of the program's metrics_server")->capture_default_str();
  app.add_option("--interval-ms", interval_ms, "refresh interval")->check(CLI::Range(50, 3'600'000))->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "how long one fetch may take")->check(CLI::Range(10, 600'000))->capture_default_str();
  app.add_flag("--once", once, "print one table and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "strata-top: " << e.what() << " (run strata-top --help for usage)\n";
    return 2;
  }
  const std::string where = host + ":" + std::to_string(port);
  const bool tty = isatty(STDOUT_FILENO) == 1;
  std::map<std::string, double> previous;
  std::chrono::steady_clock::time_point previous_ts;
  bool have_previous = false;
  for (;;) {
    const auto started = std::chrono::steady_clock::now();
    auto r = fetch(host, static_cast<std::uint16_t>(port), std::chrono::milliseconds(timeout_ms));
    if (!r.metrics) {
      if (tty && have_previous) std::cout << "\n";
      std::cerr << "strata-top: " << r.error << "\n";
      return 1;
    }
    const double dt = have_previous ? std::chrono::duration<double>(started - previous_ts).count() : 0.0;
    const std::string table = render(where, *r.metrics, have_previous ? &previous : nullptr, dt, interval_ms);
    if (tty && !once) std::cout << "\x1b[H\x1b[2J";
    std::cout << table << std::flush;
    if (once) return 0;
    if (!tty) std::cout << "\n";
    previous.clear();
    for (const auto& s : r.metrics->samples) previous[s.name] = s.value;
    previous_ts = started;
    have_previous = true;
    std::this_thread::sleep_until(started + std::chrono::milliseconds(interval_ms));
  }
}
