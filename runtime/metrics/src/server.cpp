#include "strata/metrics/server.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>
#include <prometheus/check_names.h>
#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

namespace strata::metrics {

namespace {

using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using label_list = std::vector<prometheus::ClientMetric::Label>;

/// A metric name as the application writes it, `name` or `name{label="value",...}`, split into
/// its base name and labels (values unescaped). False when it does not follow the exposition's
/// grammar; names and label names are checked by prometheus-cpp's rules.
bool parse_series_name(std::string_view text, std::string& base, label_list& labels) {
  const auto brace = text.find('{');
  base = std::string(text.substr(0, brace));
  labels.clear();
  if (!prometheus::CheckMetricName(base)) return false;
  if (brace == std::string_view::npos) return true;
  if (text.back() != '}') return false;
  std::size_t i = brace + 1;
  const std::size_t close = text.size() - 1;
  while (i < close) {
    const auto eq = text.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= close || text[eq + 1] != '"') return false;
    prometheus::ClientMetric::Label label{std::string(text.substr(i, eq - i)), {}};
    if (!prometheus::CheckLabelName(label.name)) return false;
    i = eq + 2;
    bool closed = false;
    while (i < close && !closed) {
      const char c = text[i++];
      if (c == '\\') {
        if (i >= close) return false;
        const char e = text[i++];
        if (e == 'n') label.value += '\n';
        else if (e == '\\' || e == '"') label.value += e;
        else return false;
      } else if (c == '"') {
        closed = true;
      } else if (c == '\n') {
        return false;
      } else {
        label.value += c;
      }
    }
    if (!closed) return false;
    labels.push_back(std::move(label));
    if (i < close) {
      if (text[i] != ',' || i + 1 == close) return false;  // labels are separated, no trailing comma
      ++i;
    }
  }
  return true;
}

struct builtin {
  const char* name;
  bool counter;  // else a gauge
  const char* help;
};

// The system's own series; user gauges may not reuse these names.
constexpr builtin builtins[] = {
    {"strata_actors_live", false, "Actors alive now."},
    {"strata_actors_spawned_total", true, "Actors spawned since the system started."},
    {"strata_actors_terminated_total", true, "Actors terminated since the system started."},
    {"strata_actors_failed_total", true, "Terminations by an exception or a linked failure."},
    {"strata_messages_handled_total", true, "Messages taken from mailboxes (handled or not), all actors."},
    {"strata_messages_per_second", false, "Handled messages per second over the last sample interval."},
    {"strata_undeliverable_total", true, "Messages sent to a terminated actor or an empty handle."},
    {"strata_unhandled_total", true, "Messages whose receiver had no handler for their type."},
    {"strata_mailbox_dropped_total", true, "Messages dropped by a bounded mailbox (overflow policy drop)."},
    {"strata_mailbox_refused_total", true, "Messages refused by a full bounded mailbox (overflow policy fail)."},
    {"strata_messages_discarded_total", true, "Messages still queued when their actor terminated."},
    {"strata_late_responses_total", true, "Responses that arrived after their request timed out."},
    {"strata_restarts_total", true, "Supervisor restarts."},
    {"strata_unanswered_results_total", true, "Handler results dropped because the message was a plain send, not a request."},
    {"strata_worker_threads", false, "Scheduler threads of the actor system."},
};

bool is_builtin(std::string_view base) {
  return std::any_of(std::begin(builtins), std::end(builtins), [&](const builtin& b) { return base == b.name; });
}

struct gauge_series {
  label_list labels;
  double value = 0;
};

struct gauge_family {
  std::string help;
  std::map<std::string, gauge_series, std::less<>> series;  // full name (with labels) -> series
};

}  // namespace

struct detail::server_state {
  actor_system* system = nullptr;
  server_options options;
  std::string bind;
  std::uint16_t port = 0;

  // Rate sampling (written by the io thread's sampler, read by renders on the same thread and
  // by render() from any thread).
  mutable std::mutex rate_m;
  clock_type::time_point sample_ts;
  std::uint64_t sample_count = 0;
  double rate = 0;
  bool have_rate = false;

  mutable std::mutex gauges_m;
  std::map<std::string, gauge_family, std::less<>> gauges;  // base name -> family

  std::size_t connections = 0;  // io thread only; declared before `io`, which outlives no connection
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer sampler{io};
  asio::steady_timer accept_retry{io};
  std::thread thread;

  std::string render() const;
  void sample();
  void accept();
};

namespace {

/// One request: read the head (bounded, with a deadline), answer, close.
class connection : public std::enable_shared_from_this<connection> {
public:
  connection(tcp::socket socket, detail::server_state& owner)
      : socket_(std::move(socket)), owner_(owner), buffer_(owner.options.max_request_bytes),
        deadline_(socket_.get_executor()) {
    ++owner_.connections;
  }
  ~connection() { --owner_.connections; }

  void start() {
    auto self = shared_from_this();
    deadline_.expires_after(owner_.options.request_timeout);
    deadline_.async_wait([self](const asio::error_code& ec) {
      if (!ec) {
        asio::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    asio::async_read_until(socket_, buffer_, "\r\n\r\n", [self](const asio::error_code& ec, std::size_t) {
      if (ec == asio::error::not_found) return self->respond(431, "Request Header Fields Too Large", "request too large\n", false);
      if (ec) return self->finish();
      self->handle();
    });
  }

private:
  void handle() {
    const auto data = buffer_.data();
    std::string head(asio::buffers_begin(data), asio::buffers_end(data));
    const auto eol = head.find("\r\n");
    const std::string line = head.substr(0, eol);
    const auto sp1 = line.find(' ');
    const auto sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
    if (sp2 == std::string::npos || line.compare(sp2 + 1, 7, "HTTP/1.") != 0)
      return respond(400, "Bad Request", "bad request line\n", false);
    const std::string method = line.substr(0, sp1);
    std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
    if (path != "/metrics") return respond(404, "Not Found", "not found: the metrics are at /metrics\n", false);
    if (method != "GET" && method != "HEAD") return respond(405, "Method Not Allowed", "only GET and HEAD\n", false);
    respond(200, "OK", owner_.render(), method == "HEAD");
  }

  void respond(int status, const char* reason, const std::string& body, bool head_only) {
    response_ = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
    response_ += status == 200 ? "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                               : "Content-Type: text/plain; charset=utf-8\r\n";
    if (status == 405) response_ += "Allow: GET, HEAD\r\n";
    response_ += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    if (!head_only) response_ += body;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(response_), [self](const asio::error_code&, std::size_t) { self->finish(); });
  }

  void finish() {
    asio::error_code ignored;
    deadline_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  detail::server_state& owner_;
  asio::streambuf buffer_;
  asio::steady_timer deadline_;
  std::string response_;
};

}  // namespace

std::string detail::server_state::render() const {
  const system_stats s = system->stats();
  double per_second = 0;
  {
    std::lock_guard lock(rate_m);
    if (have_rate) {
      per_second = rate;
    } else {
      const double dt = std::chrono::duration<double>(clock_type::now() - sample_ts).count();
      per_second = dt > 0 ? static_cast<double>(s.messages_handled - std::min(s.messages_handled, sample_count)) / dt : 0.0;
    }
  }
  const double values[] = {static_cast<double>(s.live_actors),   static_cast<double>(s.spawned),
                           static_cast<double>(s.terminated),    static_cast<double>(s.failed),
                           static_cast<double>(s.messages_handled), per_second,
                           static_cast<double>(s.undeliverable), static_cast<double>(s.unhandled),
                           static_cast<double>(s.dropped),       static_cast<double>(s.mailbox_full),
                           static_cast<double>(s.discarded),     static_cast<double>(s.late_responses),
                           static_cast<double>(s.restarts),      static_cast<double>(s.unanswered_results),
                           static_cast<double>(system->worker_count())};
  static_assert(std::size(values) == std::size(builtins));
  std::vector<prometheus::MetricFamily> families;
  families.reserve(std::size(builtins) + 8);
  for (std::size_t i = 0; i < std::size(builtins); ++i) {
    const bool counter = builtins[i].counter;
    prometheus::ClientMetric sample;
    (counter ? sample.counter.value : sample.gauge.value) = values[i];
    families.push_back({builtins[i].name, builtins[i].help,
                        counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge, {std::move(sample)}});
  }
  {
    std::lock_guard lock(gauges_m);
    for (const auto& [base, family] : gauges) {
      if (family.series.empty()) continue;
      prometheus::MetricFamily f{base, family.help.empty() ? "Set by the application." : family.help,
                                 prometheus::MetricType::Gauge, {}};
      for (const auto& [name, series] : family.series) {
        prometheus::ClientMetric sample;
        sample.label = series.labels;
        sample.gauge.value = series.value;
        f.metric.push_back(std::move(sample));
      }
      families.push_back(std::move(f));
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

void detail::server_state::sample() {
  sampler.expires_after(options.sample_interval);
  sampler.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    const auto now = clock_type::now();
    const std::uint64_t count = system->stats().messages_handled;
    {
      std::lock_guard lock(rate_m);
      const double dt = std::chrono::duration<double>(now - sample_ts).count();
      if (dt > 0) {
        rate = static_cast<double>(count - std::min(count, sample_count)) / dt;
        have_rate = true;
      }
      sample_ts = now;
      sample_count = count;
    }
    sample();
  });
}

void detail::server_state::accept() {
  acceptor.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {  // e.g. out of file descriptors: try again shortly rather than spin
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](const asio::error_code& e) {
        if (!e) accept();
      });
      return;
    }
    if (connections < options.max_connections) {
      std::make_shared<connection>(std::move(socket), *this)->start();
    } else {
      asio::error_code ignored;
      socket.close(ignored);
    }
    accept();
  });
}

expected<std::unique_ptr<server>> server::start(actor_system& system, std::uint16_t port,
                                                               std::string bind, server_options options) {
  try {
    return std::make_unique<server>(system, port, std::move(bind), options);
  } catch (const error_exception& e) {
    return e.error();
  }
}

server::server(actor_system& system, std::uint16_t port, std::string bind, server_options options)
    : state_(std::make_unique<detail::server_state>()) {
  auto& st = *state_;
  st.system = &system;
  st.options = options;
  if (st.options.sample_interval <= std::chrono::milliseconds::zero()) st.options.sample_interval = std::chrono::milliseconds(1000);
  if (st.options.max_request_bytes < 64) st.options.max_request_bytes = 64;
  st.bind = std::move(bind);
  asio::error_code ec;
  const auto address = asio::ip::make_address(st.bind, ec);
  if (ec)
    throw error_exception(error(errc::invalid_argument, "metrics::server: '" + st.bind + "' is not an IP address (expected e.g. 127.0.0.1 or ::1)"));
  const tcp::endpoint endpoint(address, port);
  const std::string where = st.bind + ":" + std::to_string(port);
  st.acceptor.open(endpoint.protocol(), ec);
  if (!ec) st.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) st.acceptor.bind(endpoint, ec);
  if (!ec) st.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw error_exception(error(errc::runtime_failure, "metrics::server: cannot listen on " + where + ": " + ec.message()));
  st.port = st.acceptor.local_endpoint().port();
  st.sample_ts = clock_type::now();
  st.sample_count = system.stats().messages_handled;
  st.accept();
  st.sample();
  st.thread = std::thread([&st] { st.io.run(); });
}

server::~server() {
  auto& st = *state_;
  st.io.stop();
  if (st.thread.joinable()) st.thread.join();
  // The thread is gone: close the listener here. Connections in flight are owned by their
  // pending handlers; destroying the io_context (with the state) destroys them, closing them.
  asio::error_code ignored;
  st.acceptor.close(ignored);
}

std::uint16_t server::port() const noexcept { return state_->port; }
const std::string& server::bind_address() const noexcept { return state_->bind; }

expected<void> server::set_gauge(std::string_view name, double value) {
  std::string base;
  label_list labels;
  if (!parse_series_name(name, base, labels))
    return error(errc::invalid_argument, "metrics::server: '" + std::string(name) +
                                             "' is not a Prometheus metric name (expected name or name{label=\"value\",...})");
  if (is_builtin(base))
    return error(errc::invalid_argument, "metrics::server: '" + base + "' is one of the system's own metrics");
  std::lock_guard lock(state_->gauges_m);
  auto& family = state_->gauges[base];
  auto series = family.series.find(name);
  if (series == family.series.end()) family.series.emplace(std::string(name), gauge_series{std::move(labels), value});
  else series->second.value = value;
  return {};
}

expected<void> server::describe_gauge(std::string_view base_name, std::string_view help) {
  if (!prometheus::CheckMetricName(std::string(base_name)))
    return error(errc::invalid_argument, "metrics::server: '" + std::string(base_name) + "' is not a metric name without labels");
  if (is_builtin(base_name))
    return error(errc::invalid_argument, "metrics::server: '" + std::string(base_name) + "' is one of the system's own metrics");
  std::lock_guard lock(state_->gauges_m);
  state_->gauges[std::string(base_name)].help = std::string(help);
  return {};
}

bool server::remove_gauge(std::string_view name) {
  std::lock_guard lock(state_->gauges_m);
  auto family = state_->gauges.find(name.substr(0, name.find('{')));
  if (family == state_->gauges.end()) return false;
  auto series = family->second.series.find(name);
  if (series == family->second.series.end()) return false;
  family->second.series.erase(series);
  return true;
}

std::string server::render() const { return state_->render(); }

}  // namespace strata::metrics
