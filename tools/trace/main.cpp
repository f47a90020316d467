// strata-trace: summaries, Perfetto/Chrome export, SVG timelines and message graphs from a
// strata trace file (docs/trace-tools.md).

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

#include "strata/files.hpp"
#include "trace_merge.hpp"
#include "trace_model.hpp"
#include "trace_reader.hpp"
#include "trace_views.hpp"

namespace tt = strata::trace_tools;

namespace {

/// Prints one sentence to stderr and returns the exit code for bad input.
int complain(const std::string& sentence) {
  std::cerr << "strata-trace: " << sentence << '\n';
  return 1;
}

/// Writes `text` to `path`; an error sentence when it cannot.
std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return "cannot open " + path + " for writing (" + std::strerror(errno) + ")";
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return "cannot write " + path + " (" + std::strerror(errno) + ")";
  return {};
}

std::string dump(const nlohmann::json& j, int indent) {
  // Names come from the file: replace invalid UTF-8 instead of throwing.
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// `strata-trace merge OUT FILE...`: one sentence and exit 1 on any bad input.
int merge_ranks(const std::string& out, const std::vector<std::string>& files) {
  std::vector<tt::trace_file> traces;
  for (const auto& file : files) {
    // Replacing an input with the merge would lose that rank's recording.
    if (std::error_code ec; std::filesystem::equivalent(file, out, ec))
      return complain("the output " + out + " is one of the input traces; choose another OUT");
    auto read = tt::read_trace(file);
    if (!read.ok()) return complain(read.error);
    traces.push_back(std::move(read.trace));
  }
  try {
    auto merged = tt::merge_traces(traces);
    if (!merged.ok()) return complain(merged.error);
    const std::string bytes = tt::serialize_trace(merged.trace);
    // The merge must read back under the strict reader, as every trace the runtime writes does.
    if (auto check = tt::parse_trace(bytes, out); !check.ok())
      return complain("the merged trace does not read back (" + check.error + "); this is a bug in strata-trace");
    if (auto written = strata::write_file_atomically(out, bytes, out + ".tmp." + std::to_string(::getpid())); !written)
      return complain(written.error().message());
    const auto& n = merged.counts;
    std::cerr << "strata-trace: merged " << n.ranks << " rank" << (n.ranks == 1 ? "" : "s") << " of a world of "
              << merged.trace.world_size << " into " << out << " (" << n.events << " events; " << n.linked
              << " messages between ranks linked, " << n.unmatched_sends << " sends and " << n.unmatched_receipts
              << " receipts without their other end)\n";
    if (n.handled_before_sent > 0)
      std::cerr << "strata-trace: note: " << n.handled_before_sent
                << " linked messages arrive before they were sent on the aligned clock: the ranks' clock offsets "
                   "(measured to +/- "
                << merged.trace.clock_uncertainty_ns << " ns) are off by more than those messages took\n";
    if (n.unknown_events > 0)
      std::cerr << "strata-trace: note: copied " << n.unknown_events
                << " events of kinds this version does not know with only their time shifted\n";
  } catch (const std::bad_alloc&) {
    return complain("not enough memory to merge the traces");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata-trace: read a strata trace file (docs/trace-format.md) and summarise, export or draw it"};
  app.require_subcommand(1);
  std::string file, out;
  bool json = false;
  int width = 1600;

  auto* summary = app.add_subcommand("summary", "Per-actor, per-message-type, per-stream and pipeline figures");
  summary->add_option("FILE", file, "Trace file")->required();
  summary->add_flag("--json", json, "Machine-readable JSON instead of tables");

  auto* exp = app.add_subcommand("export", "Chrome Trace Event JSON for Perfetto (ui.perfetto.dev) and chrome://tracing");
  exp->add_option("FILE", file, "Trace file")->required();
  exp->add_option("-o,--output", out, "Output .json file")->required();

  auto* timeline = app.add_subcommand("timeline", "SVG timeline: a row per actor and device stream");
  timeline->add_option("FILE", file, "Trace file")->required();
  timeline->add_option("-o,--output", out, "Output .svg file")->required();
  timeline->add_option("--width", width, "Picture width in pixels")->check(CLI::Range(400, 20000));

  auto* dot = app.add_subcommand("dot", "Graphviz message graph: actors as nodes, edges weighted by message count");
  dot->add_option("FILE", file, "Trace file")->required();
  dot->add_option("-o,--output", out, "Output .dot file")->required();

  std::vector<std::string> rank_files;
  auto* merge = app.add_subcommand("merge", "Join the per-rank traces of one mpirun job (FILE.rank<r>) into one trace");
  merge->add_option("OUT", out, "Merged trace file to write")->required();
  merge->add_option("FILES", rank_files, "Per-rank trace files (FILE.rank0 FILE.rank1 ...)")->required();

  // CLI11 would call an unknown word "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    if (word != "summary" && word != "export" && word != "timeline" && word != "dot" && word != "merge")
      return complain("unknown subcommand '" + word + "' (expected summary, export, timeline, dot or merge)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return app.exit(CLI::CallForHelp());
  } catch (const CLI::CallForAllHelp&) {
    return app.exit(CLI::CallForAllHelp());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help of a subcommand, --version
    std::string what = e.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    for (auto& c : what)
      if (c == '\n') c = ' ';
    return complain(what + " (run strata-trace --help for usage)");
  }

  if (*merge) return merge_ranks(out, rank_files);
  // -o naming the trace itself would replace the recording with its own export.
  if (std::error_code ec; !out.empty() && std::filesystem::equivalent(file, out, ec))
    return complain("the output " + out + " is the input trace; choose another -o");
  auto read = tt::read_trace(file);
  if (!read.ok()) return complain(read.error);
  try {
    const auto model = tt::build_model(read.trace);
    if (*summary) {
      auto s = tt::summary_json(model);
      if (json) std::cout << dump(s, 2) << '\n';
      else tt::print_summary(s, std::cout);
      return 0;
    }
    std::string text;
    if (*exp) text = dump(tt::chrome_trace(model), -1);
    else if (*timeline) text = tt::timeline_svg(model, {.width = width});
    else text = tt::message_graph_dot(model);
    if (auto err = write_file(out, text); !err.empty()) return complain(err);
    // The format asks readers to skip kinds they do not know; say so rather than drop them
    // unseen (summary prints the count in its header line). Not an error: the exit stays 0.
    if (model.unknown_events > 0)
      std::cerr << "strata-trace: note: " << file << ": skipped " << model.unknown_events
                << (model.unknown_events == 1 ? " event of a kind" : " events of kinds")
                << " this version does not know (written by a newer strata?)\n";
    std::cerr << "strata-trace: wrote " << out << " (" << text.size() << " bytes)\n";
  } catch (const std::bad_alloc&) {
    return complain(file + ": not enough memory to process the trace");
  } catch (const std::exception& e) {
    return complain(file + ": " + e.what());
  }
  return 0;
}
