// The checks of a run's options before anything is read (the numbers and names of the flags) and
// of its outputs (a path that cannot be written fails before the run, not after it).
#include "trainer_setup.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "strata/files.hpp"

namespace strata::lm::detail {

namespace {

namespace fs = std::filesystem;

/// Fails before the run, not after it, when `file` (the value of `flag`) cannot be written: a
/// directory, or a place where no file can be created (checked with a probe file beside it).
void check_output_file(const std::string& flag, const std::string& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw input_error(flag + " '" + file + "' is a directory; expected a file name");
  if (auto creatable = check_file_creatable_in(fs::path(file).parent_path()); !creatable)
    throw input_error(flag + " '" + file + "' cannot be written (" + creatable.error().message() + ")");
}

/// As check_output_file for a directory flag: `dir` is created when missing and must be writable.
void check_output_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw input_error(flag + " '" + dir + "' is a file; expected a directory");
  fs::create_directories(dir, ec);
  if (ec) throw input_error(flag + " '" + dir + "' cannot be created (" + ec.message() + ")");
  check_output_file(flag, (fs::path(dir) / ".lstm_lm").string());
}

}  // namespace

void check_options(const trainer_options& o) {
  for (auto [name, v] : {std::pair{"--layers", o.layers}, {"--hidden", o.hidden}, {"--embed", o.embed},
                         {"--batch", o.batch}, {"--seq", o.seq}, {"--chunks", o.chunks_given ? o.chunks : 1}})
    if (v == 0) throw input_error(std::string(name) + " must be at least 1");
  if (o.micro_batches > 0 && o.batch % o.micro_batches != 0)
    throw input_error("--micro-batches " + std::to_string(o.micro_batches) + " does not divide --batch " + std::to_string(o.batch));
  if (o.chunks_given && o.seq % o.chunks != 0)
    throw input_error("--seq " + std::to_string(o.seq) + " is not divisible by --chunks " + std::to_string(o.chunks));
  if (o.lr && (!(*o.lr > 0) || !std::isfinite(*o.lr))) throw input_error("--lr must be a positive number");
  try {
    (void)parse_optimizer(o.optimizer);
  } catch (const std::exception&) {
    throw input_error("--optimizer '" + o.optimizer + "' is not one of sgd, momentum, nesterov, adam, adamw");
  }
  try {
    (void)parse_precision(o.precision);
  } catch (const std::exception&) {
    throw input_error("--precision '" + o.precision + "' is not one of fp32, tf32, bf16");
  }
  for (auto [name, v] : {std::pair{"--momentum", o.momentum}, {"--weight-decay", o.weight_decay}})
    if (!(v >= 0) || !std::isfinite(v)) throw input_error(std::string(name) + " must be a number >= 0");
  for (auto [name, v] : {std::pair{"--beta1", o.beta1}, {"--beta2", o.beta2}})
    if (!(v >= 0 && v < 1)) throw input_error(std::string(name) + " must be a number in [0, 1)");
  if (!(o.eps > 0) || !std::isfinite(o.eps)) throw input_error("--eps must be a positive number");
  if (o.lr_schedule != "constant" && o.lr_schedule != "step" && o.lr_schedule != "cosine" && o.lr_schedule != "plateau")
    throw input_error("--lr-schedule '" + o.lr_schedule + "' is not one of constant, step, cosine, plateau");
  if (!(o.lr_decay > 0 && o.lr_decay < 1)) throw input_error("--lr-decay must be a number in (0, 1)");
  if (o.lr_step_size == 0) throw input_error("--lr-step-size must be at least 1");
  if (o.accumulate == 0) throw input_error("--accumulate must be at least 1");
  if (o.accumulate > 1 && o.carry_state.value_or(false))
    throw input_error("--carry-state needs --accumulate 1 (an accumulated step's windows are consecutive, not parallel column streams)");
  if (!(o.clip > 0) || !std::isfinite(o.clip)) throw input_error("--clip must be a positive number");
  if (!(o.dropout >= 0 && o.dropout < 1)) throw input_error("--dropout must be a number in [0, 1)");
  if (!(o.val_fraction > 0 && o.val_fraction < 0.5)) throw input_error("--val-fraction must lie in (0, 0.5)");
  if (!(o.sample_temperature >= 0) || !std::isfinite(o.sample_temperature))
    throw input_error("--sample-temperature must be a number >= 0");
  const auto shortest = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (o.link_latency_us && !(*o.link_latency_us >= 0 && std::isfinite(*o.link_latency_us)))
    throw input_error("--link-latency-us must be a finite number of microseconds >= 0, not " + shortest(*o.link_latency_us));
  if (o.link_gbps && !(*o.link_gbps > 0))
    throw input_error("--link-gbps must be a positive number of GB/s, not " + shortest(*o.link_gbps));
}

void check_outputs(const trainer_options& o) {
  if (!o.checkpoint.empty()) check_output_dir("--checkpoint", o.checkpoint);
  if (!o.report.empty()) check_output_dir("--report", o.report);
  if (!o.trace.empty()) check_output_file("--trace", o.trace);
  if (!o.log.empty()) check_output_file("--log", o.log);
}

}  // namespace strata::lm::detail
