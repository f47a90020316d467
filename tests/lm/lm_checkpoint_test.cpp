// Checkpoints: safetensors bytes, the directory format, and rejection of bad checkpoints.

#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/lm_test_support.hpp"
#include "strata/lm/checkpoint.hpp"

namespace lm_checkpoint_test {

using namespace strata::lm;
namespace fs = std::filesystem;

strata::lm::config small_config() {
  strata::lm::config c = strata::lm::test::config_of(6, 3, 4, 2, 5, 2);
  c.seed = 3;
  return c;
}

checkpoint small_checkpoint() {
  checkpoint ck;
  ck.config = small_config();
  ck.tokens = token_kind::chars;
  ck.vocab = vocabulary::build(token_kind::chars, "abcde");
  for (const auto& name : parameter_names(ck.config)) ck.parameters.push_back({name, initial_parameter(ck.config, name)});
  ck.step = 17;
  ck.epoch = 2;
  ck.windows_per_epoch = 8;
  ck.corpus = "test";
  return ck;
}

fs::path empty_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("strata_lm_ck_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes; }

BOOST_AUTO_TEST_SUITE(lm_checkpoint)

BOOST_AUTO_TEST_CASE(safetensors_bytes_round_trip_and_the_header_parses_independently) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<safetensor> ts = {{"a.weight", {3, 2}, {}}, {"b", {5}, {}}, {"c.bias", {1, 1, 4}, {}}};
  for (auto& t : ts) {
    std::size_t k = 1;
    for (auto d : t.shape) k *= d;
    for (std::size_t i = 0; i < k; ++i) t.values.push_back(n(rng));
  }
  const std::string bytes = encode_safetensors(ts, {{"format", "pt"}});
  // The header, read by hand: 8-byte little-endian length, then JSON, then the data.
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  BOOST_TEST(len % 8 == 0u);
  auto header = nlohmann::json::parse(bytes.substr(8, len));
  BOOST_TEST(header.at("__metadata__").at("format") == "pt");
  std::size_t offset = 0;
  for (const auto& t : ts) {
    const auto& e = header.at(t.name);
    BOOST_TEST(e.at("dtype") == "F32");
    BOOST_TEST((e.at("shape").get<std::vector<std::size_t>>() == t.shape));
    auto off = e.at("data_offsets").get<std::vector<std::size_t>>();
    BOOST_TEST(off[0] == offset);
    BOOST_TEST(off[1] == offset + 4 * t.values.size());
    BOOST_TEST(std::memcmp(bytes.data() + 8 + len + off[0], t.values.data(), off[1] - off[0]) == 0);
    offset = off[1];
  }
  BOOST_TEST(bytes.size() == 8 + len + offset);
  auto back = decode_safetensors(bytes);
  BOOST_REQUIRE(back.has_value());
  BOOST_REQUIRE(back->size() == ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    BOOST_TEST((*back)[i].name == ts[i].name);
    BOOST_TEST(((*back)[i].values == ts[i].values));
  }
  BOOST_TEST(encode_safetensors(*back, {{"format", "pt"}}) == bytes);  // bytes equal
}

BOOST_AUTO_TEST_CASE(a_saved_checkpoint_loads_back_unchanged_and_leaves_no_temporary_files) {
  auto dir = empty_dir("roundtrip");
  auto ck = small_checkpoint();
  BOOST_REQUIRE(!save_checkpoint(dir.string(), ck));
  BOOST_REQUIRE(!save_checkpoint(dir.string(), ck));  // overwriting works too
  for (auto& e : fs::directory_iterator(dir)) BOOST_TEST(e.path().filename().string().rfind(".tmp-", 0) != 0u);
  auto back = load_checkpoint(dir.string());
  BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? std::string() : back.error().message()));
  BOOST_TEST(back->step == 17u);
  BOOST_TEST(back->epoch == 2u);
  BOOST_TEST(back->windows_per_epoch == 8u);
  BOOST_TEST((back->vocab == ck.vocab));
  BOOST_TEST(!check_compatible(*back, ck.config, token_kind::chars));
  BOOST_REQUIRE(back->parameters.size() == ck.parameters.size());
  for (std::size_t i = 0; i < ck.parameters.size(); ++i) {
    BOOST_TEST(back->parameters[i].name == ck.parameters[i].name);
    BOOST_TEST((back->parameters[i].values == ck.parameters[i].values));
  }
  auto cfg = nlohmann::json::parse(slurp(dir / "config.json"));
  for (const char* key : {"layers", "hidden", "embed", "tokens", "vocab", "seq", "batch", "step", "epoch", "seed"})
    BOOST_TEST_CONTEXT(key) { BOOST_TEST(cfg.contains(key)); }
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(the_carried_lstm_state_round_trips_in_state_safetensors_and_a_misshapen_one_is_refused) {
  auto dir = empty_dir("carried");
  auto ck = small_checkpoint();
  const std::size_t per = ck.config.batch * ck.config.hidden;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (std::size_t l = 0; l < ck.config.layers; ++l)
    for (const char* part : {"h_l", "c_l"}) {
      std::vector<float> v(per);
      for (auto& x : v) x = u(rng);
      ck.carried_state.push_back({part + std::to_string(l), v});
    }
  BOOST_REQUIRE(!save_checkpoint(dir.string(), ck));
  BOOST_TEST(fs::exists(dir / "state.safetensors"));
  auto back = load_checkpoint(dir.string());
  BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? std::string() : back.error().message()));
  BOOST_REQUIRE_EQUAL(back->carried_state.size(), 2 * ck.config.layers);
  for (std::size_t i = 0; i < ck.carried_state.size(); ++i) {
    BOOST_TEST(back->carried_state[i].name == ck.carried_state[i].name);
    BOOST_TEST((back->carried_state[i].values == ck.carried_state[i].values));
  }
  // A save without state (a run that does not carry it) removes the file of the earlier one.
  auto plain = small_checkpoint();
  BOOST_REQUIRE(!save_checkpoint(dir.string(), plain));
  BOOST_TEST(!fs::exists(dir / "state.safetensors"));
  BOOST_TEST(load_checkpoint(dir.string())->carried_state.empty());
  // A state of the wrong shape (another batch) is refused with one sentence.
  auto wrong = ck;
  wrong.config.batch += 1;
  for (auto& t : wrong.carried_state) t.values.assign(wrong.config.batch * wrong.config.hidden, 0.5f);
  BOOST_REQUIRE(!save_checkpoint(dir.string(), wrong));
  auto cfg = nlohmann::json::parse(slurp(dir / "config.json"));  // now claim the original batch
  cfg["batch"] = ck.config.batch;
  spit(dir / "config.json", cfg.dump(1) + "\n");
  auto refused = load_checkpoint(dir.string());
  BOOST_REQUIRE(!refused.has_value());
  BOOST_TEST(refused.error().message().find("carried state 'h_l0' with a shape other than [batch, hidden]") != std::string::npos,
             refused.error().message());
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_truncated_or_corrupt_checkpoint_is_rejected_with_one_sentence) {
  auto dir = empty_dir("corrupt");
  auto ck = small_checkpoint();
  BOOST_REQUIRE(!save_checkpoint(dir.string(), ck));
  const std::string model = slurp(dir / "model.safetensors"), config = slurp(dir / "config.json");
  auto expect_error = [&](const std::string& what, const std::string& fragment) {
    auto r = load_checkpoint(dir.string());
    BOOST_TEST_CONTEXT(what) {
      BOOST_REQUIRE(!r.has_value());
      BOOST_TEST(r.error().message().find(fragment) != std::string::npos, r.error().message());
      BOOST_TEST(r.error().message().find('\n') == std::string::npos);
    }
  };
  spit(dir / "model.safetensors", model.substr(0, model.size() / 2));
  expect_error("truncated model", "model.safetensors does not match");
  std::string flipped = model;
  flipped[flipped.size() - 3] ^= 0x40;
  spit(dir / "model.safetensors", flipped);
  expect_error("flipped data bit", "corrupt");
  spit(dir / "model.safetensors", model);
  spit(dir / "config.json", config.substr(0, config.size() / 2));
  expect_error("truncated config", "not valid JSON");
  spit(dir / "config.json", config);
  fs::remove(dir / "vocab.json");
  expect_error("missing vocab", "vocab.json");
  fs::remove_all(dir);
  expect_error("no directory", "no config.json");
  // The safetensors decoder on its own refuses damaged bytes.
  BOOST_TEST(!decode_safetensors(model.substr(0, 5)).has_value());
  BOOST_TEST(!decode_safetensors(model.substr(0, model.size() - 4)).has_value());
  std::string bad_header = model;
  bad_header[9] = '#';
  BOOST_TEST(!decode_safetensors(bad_header).has_value());
}

BOOST_AUTO_TEST_CASE(a_checkpoint_from_another_configuration_cannot_continue_a_run) {
  auto ck = small_checkpoint();
  auto other = ck.config;
  other.hidden = 8;
  auto e = check_compatible(ck, other, token_kind::chars);
  BOOST_REQUIRE(e);
  BOOST_TEST(e.message() == "the checkpoint was written for another configuration (hidden 4, this run 8)");
  BOOST_TEST(check_compatible(ck, ck.config, token_kind::words).message().find("tokens char") != std::string::npos);
  other = ck.config;
  other.seq = 7;
  BOOST_TEST(check_compatible(ck, other, token_kind::chars).message().find("seq 5") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_hand_edited_config_json_is_refused_not_misread) {
  auto dir = empty_dir("edited");
  BOOST_REQUIRE(!save_checkpoint(dir.string(), small_checkpoint()));
  const auto good = nlohmann::json::parse(slurp(dir / "config.json"));
  auto expect_refused = [&](const std::string& what, const std::function<void(nlohmann::json&)>& edit,
                            const std::string& fragment) {
    auto cfg = good;
    edit(cfg);
    spit(dir / "config.json", cfg.dump());
    auto r = load_checkpoint(dir.string());
    BOOST_TEST_CONTEXT(what) {
      BOOST_REQUIRE(!r.has_value());
      BOOST_TEST(r.error().message().find(fragment) != std::string::npos, r.error().message());
      BOOST_TEST(r.error().message().find("json.exception") == std::string::npos, r.error().message());
    }
  };
  // A negative count used to wrap to 2^64 - 1 (layers: a loop that never ends), a fraction was
  // truncated, a wrong type escaped as nlohmann's exception text, an unknown key was ignored.
  expect_refused("negative layers", [](auto& c) { c["layers"] = -1; }, "'layers' is -1, not a whole number");
  expect_refused("negative seq", [](auto& c) { c["seq"] = -1; }, "'seq' is -1");
  expect_refused("fractional hidden", [](auto& c) { c["hidden"] = 4.5; }, "'hidden' is 4.5");
  expect_refused("seq as text", [](auto& c) { c["seq"] = "5"; }, "'seq' is \"5\"");
  expect_refused("lr as text", [](auto& c) { c["lr"] = "fast"; }, "not a number");
  expect_refused("missing step", [](auto& c) { c.erase("step"); }, "'step' is missing");
  expect_refused("unknown key", [](auto& c) { c["learning_rate"] = 0.1; }, "unknown key 'learning_rate'");
  expect_refused("format as a number", [](auto& c) { c["format"] = 5; }, "not a strata lstm_lm checkpoint");
  expect_refused("file size as text", [](auto& c) { c["files"]["vocab.json"]["bytes"] = "many"; }, "vocab.json does not match");
  expect_refused("more layers than tensors", [](auto& c) { c["layers"] = 1'000'000'000'000ull; }, "does not fit");
  spit(dir / "config.json", good.dump());
  BOOST_TEST(load_checkpoint(dir.string()).has_value());
  fs::remove_all(dir);
}

// A process saving in a loop is SIGKILLed at random moments (the window between the first data
// file's rename and config.json's used to leave a checkpoint that no longer loaded): the
// directory always loads, as one whole save, and never goes back to an earlier one.
BOOST_AUTO_TEST_CASE(a_checkpoint_survives_sigkill_of_the_saver_at_any_moment) {
  auto dir = empty_dir("kill");
  auto ck = small_checkpoint();
  auto stamp = [](checkpoint& c, std::size_t step) {  // every value of save k is k
    c.step = step;
    for (auto& p : c.parameters) std::fill(p.values.begin(), p.values.end(), static_cast<float>(step));
  };
  stamp(ck, 1);
  // The kill window spans a few saves, measured on this first one: a save fsyncs several files,
  // which on a busy disk or under a sanitizer outlasts a fixed 20 ms window.
  const auto save_start = std::chrono::steady_clock::now();
  BOOST_REQUIRE(!save_checkpoint(dir.string(), ck));
  const auto save_us = static_cast<unsigned>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - save_start).count());
  // A kill that finds no newer save doubles the window (up to 2 s): on a loaded machine a save
  // can take far longer than the first one did, and the drill must see saves complete.
  unsigned max_delay_us = std::max(20000u, 3 * save_us);
  std::mt19937 rng(5);
  std::size_t last = 1;
  int mid_save = 0;
  for (int k = 0; k < 40 || (last == 1 && k < 80); ++k) {
    const pid_t child = ::fork();
    BOOST_REQUIRE(child >= 0);
    if (child == 0) {
      for (std::size_t step = last + 1;; ++step) {
        stamp(ck, step);
        if (save_checkpoint(dir.string(), ck)) ::_exit(1);
      }
    }
    ::usleep(std::uniform_int_distribution<unsigned>(500, max_delay_us)(rng));  // a random kill point, under test
    BOOST_REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_REQUIRE_MESSAGE(WIFSIGNALED(status), "the saver stopped by itself (status " << status << ")");
    if (fs::exists(dir / ".prev-model.safetensors")) ++mid_save;
    auto back = load_checkpoint(dir.string());
    BOOST_REQUIRE_MESSAGE(back.has_value(), "kill " << k << ": " << back.error().message());
    bool whole = true;
    for (auto& p : back->parameters)
      for (float v : p.values) whole = whole && v == static_cast<float>(back->step);
    BOOST_TEST(whole, "kill " << k << ": the checkpoint of step " << back->step << " mixes saves");
    BOOST_TEST(back->step >= last, "kill " << k << ": the step went back from " << last << " to " << back->step);
    if (back->step == last) max_delay_us = std::min(2 * max_delay_us, 2'000'000u);
    last = back->step;
  }
  BOOST_TEST_MESSAGE("checkpoint kills: 40, mid-save (a .prev- file left) " << mid_save << ", last step " << last);
  BOOST_TEST(last > 1u);  // the saver did save: the drill exercised something
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace lm_checkpoint_test
