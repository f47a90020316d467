// The critical path section of strata-trace's summary: the chain of handlers, mailbox waits and
// device work that ends the trace (strata/trace_tools/critical_path.hpp), as JSON and as text.
#include <algorithm>
#include <string>
#include <vector>

#include "summary_sections.hpp"
#include "text_table.hpp"
#include "trace_views.hpp"

namespace strata::trace_tools {

using nlohmann::json;

namespace {

/// How many of the longest segments the summary lists, and how many segments the JSON carries.
constexpr std::size_t top_path_segments = 5;
constexpr std::size_t max_json_path_segments = 1000;

json path_segment_json(const trace_model& m, const path_segment& seg) {
  const trace_file& f = *m.file;
  json j;
  j["kind"] = path_kind_name(seg.kind);
  j["begin_ns"] = seg.begin;
  j["end_ns"] = seg.end;
  j["duration_ns"] = seg.duration();
  j["actor_id"] = seg.actor;
  j["actor"] = seg.actor != 0 ? json(m.actor_name(seg.actor)) : json(nullptr);
  if (seg.kind == path_kind::device) {
    j["type"] = f.string_at(seg.work_name);
    j["work"] = seg.msg;
    j["device"] = seg.device;
    j["stream"] = seg.stream;
  } else if (seg.kind == path_kind::other) {
    j["type"] = nullptr;
  } else {
    j["type"] = f.type_name(seg.type);
    j["msg"] = seg.msg;
  }
  return j;
}

}  // namespace

json critical_path_json(const trace_model& m) {
  const critical_path p = compute_critical_path(m);
  if (p.empty()) return nullptr;
  json j;
  j["begin_ns"] = p.begin;
  j["end_ns"] = p.end;
  j["total_ns"] = p.total();
  j["span_percent"] = 100.0 * ratio(static_cast<double>(p.total()), static_cast<double>(m.span()));
  j["handler_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::handler)];
  j["wait_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::wait)];
  j["device_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::device)];
  j["other_ns"] = p.by_kind[static_cast<std::size_t>(path_kind::other)];
  j["last_handled"] = path_segment_json(m, p.segments.back());
  j["segment_count"] = p.segments.size();
  // The segments nearest the end when there are very many (a long ping-pong chain).
  const std::size_t skip = p.segments.size() > max_json_path_segments ? p.segments.size() - max_json_path_segments : 0;
  j["segments_omitted"] = skip;
  json segs = json::array();
  for (std::size_t i = skip; i < p.segments.size(); ++i) segs.push_back(path_segment_json(m, p.segments[i]));
  j["segments"] = std::move(segs);
  std::vector<const path_segment*> order;
  for (const auto& seg : p.segments) order.push_back(&seg);
  const std::size_t top = std::min(top_path_segments, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [](const path_segment* a, const path_segment* b) {
                      return a->duration() != b->duration() ? a->duration() > b->duration() : a->begin < b->begin;
                    });
  json tops = json::array();
  for (std::size_t i = 0; i < top; ++i) tops.push_back(path_segment_json(m, *order[i]));
  j["top_segments"] = std::move(tops);
  return j;
}

void print_critical_path(const json& cp, std::ostream& out) {
  const double total = cp["total_ns"].get<double>();
  auto share = [&](const char* key) {
    return format_ns(cp[key]) + " (" + format_fixed(100.0 * ratio(cp[key].get<double>(), total), 1) + " %)";
  };
  const auto& last = cp["last_handled"];
  out << "\ncritical path: " << format_ns(cp["total_ns"]) << " (" << format_fixed(cp["span_percent"].get<double>(), 1)
      << " % of the span), " << cp["segment_count"] << " segments, ending with "
      << (last["actor"].is_null() ? std::string("-") : last["actor"].get<std::string>()) << " handling "
      << (last["type"].is_null() ? std::string("-") : short_type_name(last["type"].get<std::string>())) << " at "
      << format_ns(cp["end_ns"]) << "\n";
  out << "  handler " << share("handler_ns") << ", mailbox wait " << share("wait_ns") << ", device "
      << share("device_ns") << ", other " << share("other_ns") << "\n";
  out << "  longest segments:\n";
  text_table t({"kind", "actor", "message / work", "start", "duration"});
  for (const auto& seg : cp["top_segments"])
    t.add({seg["kind"].get<std::string>(), seg["actor"].is_null() ? "-" : seg["actor"].get<std::string>(),
           seg["type"].is_null() ? "-" : short_type_name(seg["type"].get<std::string>()), format_ns(seg["begin_ns"]),
           format_ns(seg["duration_ns"])});
  t.print(out);
}

}  // namespace strata::trace_tools
