#pragma once
/// \file
/// `strata::metrics::server`: a live view of a running actor system over HTTP, in the Prometheus
/// text exposition format (version 0.0.4), for `strata-top`, Prometheus or `curl`. Target
/// `strata::metrics` (the exposition is prometheus-cpp's; docs/trace-tools.md says why the HTTP
/// endpoint is strata's own).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "strata/actor_system.hpp"
#include "strata/error.hpp"

namespace strata::metrics {

namespace detail {
struct server_state;
}  // namespace detail

/// Settings of a `server` beyond the port and address.
struct server_options {
  /// How often the rate gauge `strata_messages_per_second` is sampled (the rate is over the
  /// last complete interval; before the first one, since the server started).
  std::chrono::milliseconds sample_interval{1000};
  /// Largest request head (request line + headers) accepted; larger requests get 431.
  std::size_t max_request_bytes = 8192;
  /// A connection that has not sent a complete request head by then is closed.
  std::chrono::milliseconds request_timeout{5000};
  /// Connections served at once; further ones are closed at accept.
  std::size_t max_connections = 32;
};

/// Serves `GET /metrics` for one `actor_system` over HTTP/1.1 on a TCP port.
///
/// Exposes the system's counters (`system_stats`) and gauges the application sets by name:
///
/// | metric | type | meaning |
/// |---|---|---|
/// | `strata_actors_live` | gauge | actors alive now |
/// | `strata_actors_spawned_total` | counter | actors spawned |
/// | `strata_actors_terminated_total`, `strata_actors_failed_total` | counter | terminations, failures among them |
/// | `strata_messages_handled_total` | counter | messages taken from mailboxes |
/// | `strata_messages_per_second` | gauge | handled messages per second over the last sample interval |
/// | `strata_undeliverable_total` | counter | sent to a terminated actor or an empty handle |
/// | `strata_unhandled_total` | counter | no handler for the message type |
/// | `strata_mailbox_dropped_total` | counter | dropped by a bounded mailbox (policy drop) |
/// | `strata_mailbox_refused_total` | counter | refused by a full bounded mailbox (policy fail) |
/// | `strata_messages_discarded_total` | counter | still queued when their actor terminated |
/// | `strata_late_responses_total` | counter | responses after their request timed out |
/// | `strata_restarts_total` | counter | supervisor restarts |
/// | `strata_unanswered_results_total` | counter | handler results dropped: the message was a plain send |
/// | `strata_worker_threads` | gauge | scheduler threads |
///
/// One Asio thread serves every connection (one request per connection, then `Connection:
/// close`); other paths get 404, other methods 405, oversized requests 431. The destructor
/// stops the thread and closes every connection.
///
/// Thread-safety: every member may be called from any thread. The actor system must outlive
/// the server.
///
/// Example (a training loop publishing its progress):
/// \code
///   strata::actor_system sys;
///   strata::metrics::server metrics(sys, 9464);   // or port 0: any free port, see port()
///   for (int step = 0; step < steps; ++step) {
///     auto r = pipeline.train_step(tokens, targets);
///     metrics.set_gauge("strata_training_step", step);
///     metrics.set_gauge("strata_training_loss", r->loss);
///     metrics.set_gauge("strata_device_busy_seconds{device=\"cpu:0\"}", busy_s);
///   }
/// \endcode
class server {
public:
  /// Listens on `bind`:`port` (port 0: a free port the system picks; see `port()`).
  /// Throws `error_exception` with one sentence naming the address when it cannot listen
  /// (`errc::invalid_argument` for an address that does not parse, else `runtime_failure`).
  server(actor_system& system, std::uint16_t port, std::string bind = "127.0.0.1", server_options options = {});
  /// The same without exceptions: the server, or why it could not listen.
  static expected<std::unique_ptr<server>> start(actor_system& system, std::uint16_t port,
                                                 std::string bind = "127.0.0.1", server_options options = {});
  /// Stops serving: closes the listening socket and every connection, joins the thread.
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The port it listens on (the chosen one when constructed with port 0).
  std::uint16_t port() const noexcept;
  /// The address it listens on, as given.
  const std::string& bind_address() const noexcept;

  /// Sets (creates on first use) a gauge. `name` is a Prometheus metric name, optionally with
  /// labels: `strata_training_loss`, `strata_device_busy_seconds{device="cpu:0"}` (label values
  /// escaped as in the exposition: `\\`, `\"`, `\n`). A bad name, a name of the system's own
  /// series, or one starting with `__` (reserved by Prometheus) is refused with
  /// `errc::invalid_argument` and nothing changes.
  expected<void> set_gauge(std::string_view name, double value);
  /// Sets the `# HELP` text of the gauges named `base_name` (without labels).
  expected<void> describe_gauge(std::string_view base_name, std::string_view help);
  /// Removes one gauge series (exact name, labels included); false if there was none.
  bool remove_gauge(std::string_view name);

  /// The exposition text a scrape would get now.
  std::string render() const;

private:
  std::unique_ptr<detail::server_state> state_;
};

}  // namespace strata::metrics
