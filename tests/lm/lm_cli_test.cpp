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
#include <iterator>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace lm_cli_test {

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

BOOST_AUTO_TEST_CASE(an_interrupted_run_saves_its_last_step_and_exits_130) {
  const fs::path dir = fresh_dir_with_corpus("strata_lm_sigint_", " lines of text to learn");
  const std::string args = small_run(dir) + " --steps 1000000 --checkpoint " + (dir / "ck").string() + " --log " +
                           (dir / "log.jsonl").string();
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    const std::string cmd = "exec " + std::string(STRATA_LSTM_LM_EXE) + " " + args + " 2>/dev/null";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Interrupt once a few steps are logged (the handler is installed before the first step).
  auto steps_logged = [&] {  // complete lines only: the run is writing the file
    std::ifstream in(dir / "log.jsonl");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int n = 0;
    for (std::size_t at = 0; (at = text.find("\"loss\":", at)) != std::string::npos; ++at)
      if (text.find('\n', at) != std::string::npos) ++n;
    return n;
  };
  // A poll (20 ms a period): the trainer is another process, and its log file the only sign.
  for (int waited_ms = 0; waited_ms < 60000 && steps_logged() < 3; waited_ms += 20) ::usleep(20000);
  BOOST_REQUIRE(::kill(child, SIGINT) == 0);
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 130), "status " << status);
  const auto log = read_log(dir / "log.jsonl");
  BOOST_REQUIRE(!log.losses.empty());
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "ck" / "config.json"));
  BOOST_TEST(cfg.at("step").get<int>() == log.losses.rbegin()->first);  // the last step run is the one saved
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_diverging_run_fails_without_overwriting_the_checkpoint) {
  const fs::path dir = fresh_dir_with_corpus("strata_lm_diverge_", " numbers grow without bound");
  const std::string ck = " --checkpoint " + (dir / "ck").string();
  BOOST_REQUIRE_EQUAL(run(small_run(dir) + " --steps 2" + ck), 0);
  auto model_bytes = [&] {
    std::ifstream in(dir / "ck" / "model.safetensors", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string before = model_bytes();
  // lr 1e99 (inf as a float) overflows the weights in the first update; every step would be saved.
  const int diverged = run(small_run(dir) + " --steps 6 --save-every 1 --lr 1e99" + ck);
  BOOST_TEST((WIFEXITED(diverged) && WEXITSTATUS(diverged) == 1), "status " << diverged);
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "ck" / "config.json"));
  BOOST_TEST(cfg.at("step").get<int>() == 2);
  BOOST_TEST((model_bytes() == before));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_cli_test
