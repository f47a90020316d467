#pragma once
// The JSON-lines log of a training run (--log). Private to strata::lm.

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "strata/lm/trainer.hpp"

namespace strata::lm::detail {

/// The JSON-lines log: one line per step, retry, validation and stop, and a summary. Writes
/// nothing until opened with a path; each line is flushed as it is written.
class run_log {
public:
  using json = nlohmann::ordered_json;

  /// Opens `path` (empty: no log), appended to when `append` (a resumed run). Throws input_error
  /// when it cannot be opened.
  void open(const std::string& path, bool append) {
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw input_error("--log '" + path + "' cannot be opened for writing");
  }
  void write(const json& j) {
    if (out_.is_open()) out_ << j.dump() << '\n' << std::flush;
  }
  /// `j` with `more`'s keys after its own.
  void write(json j, const json& more) {
    j.update(more);
    write(j);
  }

private:
  std::ofstream out_;
};

}  // namespace strata::lm::detail
