// Joins the per-rank traces of lstm_lm under mpirun into the one file --trace names.
#include "traces.hpp"

#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "strata/trace_tools/trace_merge.hpp"

namespace lstm_lm {

namespace {
std::string rank_file(const std::string& file, int rank) { return file + ".rank" + std::to_string(rank); }
}  // namespace

void remove_rank_traces(const std::string& file, int world) {
  for (int r = 0; r < world; ++r) {
    std::error_code ec;
    std::filesystem::remove(rank_file(file, r), ec);
  }
}

std::string join_rank_traces(const std::string& file, int world, std::chrono::milliseconds wait) {
  std::vector<std::string> files;
  for (int r = 0; r < world; ++r) files.push_back(rank_file(file, r));
  // Each rank writes its file at its own shutdown, after the last collective: atomically (a
  // rename), so a file that is there is whole.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (int r = 0; r < world; ++r) {
    std::error_code ec;
    while (!std::filesystem::exists(files[static_cast<std::size_t>(r)], ec)) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw std::runtime_error("--trace: rank " + std::to_string(r) + "'s trace " + files[static_cast<std::size_t>(r)] +
                                 " did not appear within " + std::to_string(wait.count() / 1000) +
                                 " s (ranks on other machines write theirs there: join them with strata-trace merge)");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const auto merged = strata::trace_tools::merge_trace_files(file, files);
  if (!merged.ok()) throw std::runtime_error("--trace: cannot join the ranks' traces: " + merged.error + " (the per-rank files are kept)");
  remove_rank_traces(file, world);
  return strata::trace_tools::describe_merge("lstm_lm", file, merged);
}

}  // namespace lstm_lm
