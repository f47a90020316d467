// strata-trace: summaries, Perfetto/Chrome export, SVG timelines and message graphs from a
// strata trace file (docs/trace-tools.md).

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "strata/trace_tools/trace_merge.hpp"
#include "strata/trace_tools/trace_model.hpp"
#include "strata/trace_tools/trace_reader.hpp"
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
  const auto merged = tt::merge_trace_files(out, files);
  if (!merged.ok()) return complain(merged.error);
  std::cerr << tt::describe_merge("strata-trace", out, merged) << '\n';
  return 0;
}

/// strata-trace's subcommands and their options.
struct command_line {
  CLI::App app{"strata-trace: read a strata trace file (docs/trace-format.md) and summarise, export or draw it"};
  std::string file, out;
  bool json = false;
  int width = 1600;
  std::vector<std::string> rank_files;
  CLI::App* summary = nullptr;
  CLI::App* exp = nullptr;
  CLI::App* timeline = nullptr;
  CLI::App* dot = nullptr;
  CLI::App* merge = nullptr;

  command_line() {
    app.require_subcommand(1);
    summary = app.add_subcommand("summary", "Per-actor, per-message-type, per-stream and pipeline figures");
    summary->add_option("FILE", file, "Trace file")->required();
    summary->add_flag("--json", json, "Machine-readable JSON instead of tables");

    exp = add_view("export", "Chrome Trace Event JSON for Perfetto (ui.perfetto.dev) and chrome://tracing", "Output .json file");
    timeline = add_view("timeline", "SVG timeline: a row per actor and device stream", "Output .svg file");
    timeline->add_option("--width", width, "Picture width in pixels")->check(CLI::Range(400, 20000));
    dot = add_view("dot", "Graphviz message graph: actors as nodes, edges weighted by message count", "Output .dot file");

    merge = app.add_subcommand("merge", "Join the per-rank traces of one mpirun job (FILE.rank<r>) into one trace");
    merge->add_option("OUT", out, "Merged trace file to write")->required();
    merge->add_option("FILES", rank_files, "Per-rank trace files (FILE.rank0 FILE.rank1 ...)")->required();
  }
  command_line(const command_line&) = delete;  // the options point into it
  command_line& operator=(const command_line&) = delete;

private:
  /// A view of the trace FILE written into -o (`output` describes that file).
  CLI::App* add_view(const char* name, const char* what, const char* output) {
    auto* view = app.add_subcommand(name, what);
    view->add_option("FILE", file, "Trace file")->required();
    view->add_option("-o,--output", out, output)->required();
    return view;
  }
};

/// Parses the command line: the exit status when it ends here (help, or one sentence for an
/// unknown subcommand or a bad flag), else nothing.
std::optional<int> parse(command_line& cl, int argc, char** argv) {
  // CLI11 would call an unknown word "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    if (word != "summary" && word != "export" && word != "timeline" && word != "dot" && word != "merge")
      return complain("unknown subcommand '" + word + "' (expected summary, export, timeline, dot or merge)");
  }
  try {
    cl.app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return cl.app.exit(CLI::CallForHelp());
  } catch (const CLI::CallForAllHelp&) {
    return cl.app.exit(CLI::CallForAllHelp());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return cl.app.exit(e);  // --help of a subcommand, --version
    std::string what = e.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    for (auto& c : what)
      if (c == '\n') c = ' ';
    return complain(what + " (run strata-trace --help for usage)");
  }
  return std::nullopt;
}

/// `summary` to stdout, or `export`, `timeline` or `dot` into -o: one sentence and exit 1 on any
/// bad input.
int show(const command_line& cl) {
  const std::string& file = cl.file;
  const std::string& out = cl.out;
  // -o naming the trace itself would replace the recording with its own export.
  if (std::error_code ec; !out.empty() && std::filesystem::equivalent(file, out, ec))
    return complain("the output " + out + " is the input trace; choose another -o");
  auto read = tt::read_trace(file);
  if (!read.ok()) return complain(read.error);
  try {
    const auto model = tt::build_model(read.trace);
    if (*cl.summary) {
      auto s = tt::summary_json(model);
      if (cl.json) std::cout << dump(s, 2) << '\n';
      else tt::print_summary(s, std::cout);
      return 0;
    }
    std::string text;
    if (*cl.exp) text = dump(tt::chrome_trace(model), -1);
    else if (*cl.timeline) text = tt::timeline_svg(model, {.width = cl.width});
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

}  // namespace

int main(int argc, char** argv) {
  command_line cl;
  if (auto status = parse(cl, argc, argv)) return *status;
  if (*cl.merge) return merge_ranks(cl.out, cl.rank_files);
  return show(cl);
}
