// The lstm_lm program end to end: a run killed and resumed from its checkpoint continues the
// loss curve of an uninterrupted run.

#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct run_log {
  std::multimap<int, double> losses;  // step -> loss (a step may appear twice: before a crash and after)
  nlohmann::json summary;
};

run_log read_log(const fs::path& p) {
  run_log r;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("summary")) r.summary = j;
    else if (j.contains("loss")) r.losses.emplace(j.at("step").get<int>(), j.at("loss").get<double>());
  }
  return r;
}

/// An empty temporary directory (named after `prefix` and this process) holding corpus.txt: 300
/// generated lines ending in `tail`.
fs::path fresh_dir_with_corpus(const std::string& prefix, const std::string& tail) {
  const fs::path dir = fs::temp_directory_path() / (prefix + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream corpus(dir / "corpus.txt");
  for (int i = 0; i < 300; ++i) corpus << "line " << i << ": " << (i * 7919 % 1000) << tail << "\n";
  return dir;
}

/// `train` on that corpus with a small model on cpu:2 (add --steps).
std::string small_run(const fs::path& dir) {
  return "train --corpus " + (dir / "corpus.txt").string() +
         " --devices cpu:2 --layers 2 --hidden 16 --embed 8 --batch 4 --seq 8 --val-tokens 300";
}

int run(const std::string& args) {
  const std::string cmd = std::string(STRATA_LSTM_LM_EXE) + " " + args + " 2>/dev/null";
  return std::system(cmd.c_str());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lm_cli)

BOOST_AUTO_TEST_CASE(a_run_killed_after_a_checkpoint_resumes_on_the_same_loss_curve) {
  const fs::path dir = fresh_dir_with_corpus("strata_lm_resume_", " bottles of beer on the wall");
  const std::string common = small_run(dir) + " --steps 30";
  BOOST_REQUIRE_EQUAL(run(common + " --log " + (dir / "a.jsonl").string()), 0);
  // Saves at step 10 and 20, dies (SIGKILL) after step 25, then resumes from step 20.
  const int crashed = run(common + " --save-every 10 --crash-after-step 25 --checkpoint " + (dir / "ck").string() +
                          " --log " + (dir / "b.jsonl").string());
  BOOST_TEST((WIFSIGNALED(crashed) || (WIFEXITED(crashed) && WEXITSTATUS(crashed) == 128 + SIGKILL)), "status " << crashed);
  BOOST_REQUIRE_EQUAL(run(common + " --checkpoint " + (dir / "ck").string() + " --log " + (dir / "b.jsonl").string()), 0);
  auto a = read_log(dir / "a.jsonl"), b = read_log(dir / "b.jsonl");
  BOOST_REQUIRE_EQUAL(a.losses.size(), 30u);
  BOOST_REQUIRE_EQUAL(b.losses.size(), 35u);  // 1..25, then 21..30 again after the resume
  for (auto& [step, loss] : b.losses) {
    BOOST_TEST_CONTEXT("step " << step) { BOOST_TEST(std::abs(loss - a.losses.find(step)->second) <= 1e-6); }
  }
  BOOST_TEST(std::abs(a.summary.at("param_norm").get<double>() - b.summary.at("param_norm").get<double>()) <= 1e-6);
  BOOST_TEST(std::abs(a.summary.at("val_loss").get<double>() - b.summary.at("val_loss").get<double>()) <= 1e-6);
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "ck" / "config.json"));
  BOOST_TEST(cfg.at("step").get<int>() == 30);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_failed_step_ends_the_run_or_is_retried_on_the_same_loss_curve) {
  const fs::path dir = fresh_dir_with_corpus("strata_lm_retry_", " green bottles on the wall");
  const std::string common = small_run(dir) + " --steps 6";
  BOOST_REQUIRE_EQUAL(run(common + " --log " + (dir / "clean.jsonl").string()), 0);
  // Without retries the device fault in step 3 ends the run: exit status 1.
  const int failed = run(common + " --fault-at-step 3 --log " + (dir / "failed.jsonl").string());
  BOOST_TEST((WIFEXITED(failed) && WEXITSTATUS(failed) == 1), "status " << failed);
  BOOST_TEST(read_log(dir / "failed.jsonl").losses.size() == 2u);
  // With one retry the pipeline restarts and the run continues as if nothing had failed.
  BOOST_REQUIRE_EQUAL(run(common + " --fault-at-step 3 --retries 1 --log " + (dir / "retried.jsonl").string()), 0);
  auto clean = read_log(dir / "clean.jsonl"), retried = read_log(dir / "retried.jsonl");
  BOOST_REQUIRE_EQUAL(retried.losses.size(), 6u);
  for (auto& [step, loss] : retried.losses) {
    BOOST_TEST_CONTEXT("step " << step) { BOOST_TEST(std::abs(loss - clean.losses.find(step)->second) <= 1e-6); }
  }
  BOOST_TEST(std::abs(clean.summary.at("param_norm").get<double>() - retried.summary.at("param_norm").get<double>()) <= 1e-6);
  std::ifstream in(dir / "retried.jsonl");
  std::string line;
  int retry_lines = 0;
  while (std::getline(in, line))
    if (line.find("\"retry\":1") != std::string::npos && line.find("injected device fault") != std::string::npos) ++retry_lines;
  BOOST_TEST(retry_lines == 1);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
