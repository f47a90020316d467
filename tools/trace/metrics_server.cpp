#include "strata/metrics_server.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>
#include <asio/io_context.hpp>

namespace strata {

namespace {

using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }
bool label_start(char c) { return name_start(c) && c != ':'; }
bool label_char(char c) { return label_start(c) || (c >= '0' && c <= '9'); }

/// Splits `name{labels}` into the base name; empty when the whole does not follow the
/// Prometheus grammar (metric name, optional label set with quoted, escaped values).
std::string_view checked_base_name(std::string_view name) {
  std::size_t i = 0;
  if (name.empty() || !name_start(name[0])) return {};
  while (i < name.size() && name_char(name[i])) ++i;
  const std::string_view base = name.substr(0, i);
  if (i == name.size()) return base;
  if (name[i] != '{' || name.back() != '}') return {};
  ++i;
  const std::size_t close = name.size() - 1;
  while (i < close) {
    if (!label_start(name[i])) return {};
    while (i < close && label_char(name[i])) ++i;
    if (i + 1 >= close || name[i] != '=' || name[i + 1] != '"') return {};
    i += 2;
    bool closed = false;
    while (i < close) {
      char c = name[i];
      if (c == '\n') return {};
      if (c == '\\') {
        if (i + 1 >= close || (name[i + 1] != '\\' && name[i + 1] != '"' && name[i + 1] != 'n')) return {};
        i += 2;
        continue;
      }
      ++i;
      if (c == '"') {
        closed = true;
        break;
      }
    }
    if (!closed) return {};
    if (i < close) {
      if (name[i] != ',') return {};
      ++i;
      if (i == close) return {};  // no trailing comma
    }
  }
  return base;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

/// HELP text escaping: backslash and newline.
std::string escape_help(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

struct builtin {
  const char* name;
  const char* type;
  const char* help;
};

// The system's own series; user gauges may not reuse these names.
constexpr builtin builtins[] = {
    {"strata_actors_live", "gauge", "Actors alive now."},
    {"strata_actors_spawned_total", "counter", "Actors spawned since the system started."},
    {"strata_actors_terminated_total", "counter", "Actors terminated since the system started."},
    {"strata_actors_failed_total", "counter", "Terminations by an exception or a linked failure."},
    {"strata_messages_handled_total", "counter", "Messages taken from mailboxes (handled or not), all actors."},
    {"strata_messages_per_second", "gauge", "Handled messages per second over the last sample interval."},
    {"strata_undeliverable_total", "counter", "Messages sent to a terminated actor or an empty handle."},
    {"strata_unhandled_total", "counter", "Messages whose receiver had no handler for their type."},
    {"strata_mailbox_dropped_total", "counter", "Messages dropped by a bounded mailbox (overflow policy drop)."},
    {"strata_mailbox_refused_total", "counter", "Messages refused by a full bounded mailbox (overflow policy fail)."},
    {"strata_messages_discarded_total", "counter", "Messages still queued when their actor terminated."},
    {"strata_late_responses_total", "counter", "Responses that arrived after their request timed out."},
    {"strata_restarts_total", "counter", "Supervisor restarts."},
    {"strata_worker_threads", "gauge", "Scheduler threads of the actor system."},
};

bool is_builtin(std::string_view base) {
  return std::any_of(std::begin(builtins), std::end(builtins), [&](const builtin& b) { return base == b.name; });
}

struct gauge_family {
  std::string help;
  std::map<std::string, double, std::less<>> series;  // full name (with labels) -> value
};

}  // namespace

struct detail::metrics_state {
  actor_system* system = nullptr;
  metrics_options options;
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
  connection(tcp::socket socket, detail::metrics_state& owner)
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
  detail::metrics_state& owner_;
  asio::streambuf buffer_;
  asio::steady_timer deadline_;
  std::string response_;
};

}  // namespace

std::string detail::metrics_state::render() const {
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
                           static_cast<double>(s.restarts),      static_cast<double>(system->worker_count())};
  static_assert(std::size(values) == std::size(builtins));
  std::string out;
  out.reserve(4096);
  for (std::size_t i = 0; i < std::size(builtins); ++i) {
    const auto& b = builtins[i];
    out += "# HELP ";
    out += b.name;
    out += ' ';
    out += b.help;
    out += "\n# TYPE ";
    out += b.name;
    out += ' ';
    out += b.type;
    out += '\n';
    out += b.name;
    out += ' ';
    out += format_value(values[i]);
    out += '\n';
  }
  std::lock_guard lock(gauges_m);
  for (const auto& [base, family] : gauges) {
    if (family.series.empty()) continue;
    out += "# HELP " + base + " " + escape_help(family.help.empty() ? "Set by the application." : family.help) + "\n";
    out += "# TYPE " + base + " gauge\n";
    for (const auto& [name, value] : family.series) out += name + " " + format_value(value) + "\n";
  }
  return out;
}

void detail::metrics_state::sample() {
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

void detail::metrics_state::accept() {
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

expected<std::unique_ptr<metrics_server>> metrics_server::start(actor_system& system, std::uint16_t port,
                                                               std::string bind, metrics_options options) {
  try {
    return std::make_unique<metrics_server>(system, port, std::move(bind), options);
  } catch (const error_exception& e) {
    return e.error();
  }
}

metrics_server::metrics_server(actor_system& system, std::uint16_t port, std::string bind, metrics_options options)
    : state_(std::make_unique<detail::metrics_state>()) {
  auto& st = *state_;
  st.system = &system;
  st.options = options;
  if (st.options.sample_interval <= std::chrono::milliseconds::zero()) st.options.sample_interval = std::chrono::milliseconds(1000);
  if (st.options.max_request_bytes < 64) st.options.max_request_bytes = 64;
  st.bind = std::move(bind);
  asio::error_code ec;
  const auto address = asio::ip::make_address(st.bind, ec);
  if (ec)
    throw error_exception(error(errc::invalid_argument, "metrics_server: '" + st.bind + "' is not an IP address (expected e.g. 127.0.0.1 or ::1)"));
  const tcp::endpoint endpoint(address, port);
  const std::string where = st.bind + ":" + std::to_string(port);
  st.acceptor.open(endpoint.protocol(), ec);
  if (!ec) st.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) st.acceptor.bind(endpoint, ec);
  if (!ec) st.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw error_exception(error(errc::runtime_failure, "metrics_server: cannot listen on " + where + ": " + ec.message()));
  st.port = st.acceptor.local_endpoint().port();
  st.sample_ts = clock_type::now();
  st.sample_count = system.stats().messages_handled;
  st.accept();
  st.sample();
  st.thread = std::thread([&st] { st.io.run(); });
}

metrics_server::~metrics_server() {
  auto& st = *state_;
  st.io.stop();
  if (st.thread.joinable()) st.thread.join();
  // The thread is gone: close the listener here. Connections in flight are owned by their
  // pending handlers; destroying the io_context (with the state) destroys them, closing them.
  asio::error_code ignored;
  st.acceptor.close(ignored);
}

std::uint16_t metrics_server::port() const noexcept { return state_->port; }
const std::string& metrics_server::bind_address() const noexcept { return state_->bind; }

expected<void> metrics_server::set_gauge(std::string_view name, double value) {
  const std::string_view base = checked_base_name(name);
  if (base.empty())
    return error(errc::invalid_argument, "metrics_server: '" + std::string(name) +
                                             "' is not a Prometheus metric name (expected name or name{label=\"value\",...})");
  if (is_builtin(base))
    return error(errc::invalid_argument, "metrics_server: '" + std::string(base) + "' is one of the system's own metrics");
  std::lock_guard lock(state_->gauges_m);
  auto family = state_->gauges.find(base);
  if (family == state_->gauges.end()) family = state_->gauges.emplace(std::string(base), gauge_family{}).first;
  auto series = family->second.series.find(name);
  if (series == family->second.series.end()) family->second.series.emplace(std::string(name), value);
  else series->second = value;
  return {};
}

expected<void> metrics_server::describe_gauge(std::string_view base_name, std::string_view help) {
  if (checked_base_name(base_name) != base_name || base_name.empty())
    return error(errc::invalid_argument, "metrics_server: '" + std::string(base_name) + "' is not a metric name without labels");
  if (is_builtin(base_name))
    return error(errc::invalid_argument, "metrics_server: '" + std::string(base_name) + "' is one of the system's own metrics");
  std::lock_guard lock(state_->gauges_m);
  auto family = state_->gauges.find(base_name);
  if (family == state_->gauges.end()) family = state_->gauges.emplace(std::string(base_name), gauge_family{}).first;
  family->second.help = std::string(help);
  return {};
}

bool metrics_server::remove_gauge(std::string_view name) {
  const std::string_view base = checked_base_name(name);
  if (base.empty()) return false;
  std::lock_guard lock(state_->gauges_m);
  auto family = state_->gauges.find(base);
  if (family == state_->gauges.end()) return false;
  auto series = family->second.series.find(name);
  if (series == family->second.series.end()) return false;
  family->second.series.erase(series);
  return true;
}

std::string metrics_server::render() const { return state_->render(); }

}  // namespace strata
