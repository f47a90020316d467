// Contract tests: strata/files.hpp (atomic writes, the can-a-file-be-created probe).

#include "strata/files.hpp"  // first: the public header compiles on its own

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include <unistd.h>

namespace fs = std::filesystem;

namespace files_test {

/// A fresh directory under the system's temporary directory, removed at the end of the test.
struct scratch_dir {
  fs::path path;
  scratch_dir() {
    path = fs::temp_directory_path() / ("strata-files-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(byte(rng));
  return s;
}

std::size_t entries_in(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

BOOST_AUTO_TEST_SUITE(files_contract)

BOOST_AUTO_TEST_CASE(an_atomic_write_creates_then_replaces_the_file_and_leaves_no_temporary) {
  scratch_dir dir;
  const fs::path target = dir.path / "state.bin";
  const std::string first = random_bytes(100'000, 1), second = random_bytes(3'000, 2);
  BOOST_REQUIRE(strata::write_file_atomically(target, first).has_value());
  BOOST_TEST(read_all(target) == first);
  BOOST_REQUIRE(strata::write_file_atomically(target, second, dir.path / "state.bin.tmp.42").has_value());
  BOOST_TEST(read_all(target) == second);
  BOOST_TEST(entries_in(dir.path) == 1u);
}

BOOST_AUTO_TEST_CASE(a_failed_atomic_write_names_the_file_and_leaves_the_old_one_intact) {
  scratch_dir dir;
  const fs::path target = dir.path / "state.bin";
  const std::string old_bytes = random_bytes(512, 3);
  BOOST_REQUIRE(strata::write_file_atomically(target, old_bytes).has_value());
  // The temporary's directory does not exist: nothing can be written, the target stays.
  const fs::path unreachable = dir.path / "missing" / "state.bin.tmp";
  auto r = strata::write_file_atomically(target, random_bytes(512, 4), unreachable);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().code() == strata::errc::runtime_failure);
  BOOST_TEST(r.error().message() == "cannot create '" + unreachable.string() + "': No such file or directory");
  BOOST_TEST(read_all(target) == old_bytes);
  // A directory in the way of the rename: the temporary is removed again.
  const fs::path blocked = dir.path / "blocked";
  fs::create_directories(blocked / "inside");
  r = strata::write_file_atomically(blocked, "x");
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message().find("cannot rename '" + (dir.path / "blocked.tmp").string() + "' over '" +
                                      blocked.string() + "': ") == 0u, r.error().message());
  BOOST_TEST(!fs::exists(dir.path / "blocked.tmp"));
}

BOOST_AUTO_TEST_CASE(a_synced_write_writes_every_byte) {
  scratch_dir dir;
  const std::string bytes = random_bytes(1 << 20, 5);
  BOOST_REQUIRE(strata::write_file_synced(dir.path / "big", bytes).has_value());
  BOOST_TEST(read_all(dir.path / "big") == bytes);
  BOOST_REQUIRE(strata::write_file_synced(dir.path / "big", "short").has_value());  // truncates
  BOOST_TEST(read_all(dir.path / "big") == "short");
  strata::sync_directory(dir.path);
  strata::sync_directory(dir.path / "no-such-dir");  // best effort: no error, no crash
}

BOOST_AUTO_TEST_CASE(the_probe_accepts_a_writable_directory_and_leaves_nothing_behind) {
  scratch_dir dir;
  BOOST_TEST(strata::check_file_creatable_in(dir.path).has_value());
  BOOST_TEST(entries_in(dir.path) == 0u);
}

BOOST_AUTO_TEST_CASE(the_probe_refuses_a_missing_directory_or_a_file_with_one_sentence) {
  scratch_dir dir;
  auto missing = strata::check_file_creatable_in(dir.path / "nope");
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().code() == strata::errc::invalid_argument);
  BOOST_TEST(missing.error().message() ==
             "cannot create a file in '" + (dir.path / "nope").string() + "': No such file or directory");
  std::ofstream(dir.path / "plain") << "x";
  auto file = strata::check_file_creatable_in(dir.path / "plain");
  BOOST_REQUIRE(!file.has_value());
  BOOST_TEST(file.error().message().find("Not a directory") != std::string::npos, file.error().message());
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace files_test
