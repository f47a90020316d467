#include "strata/lm/data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::lm {

namespace fs = std::filesystem;

const char* to_string(token_kind kind) noexcept { return kind == token_kind::chars ? "char" : "word"; }

token_kind parse_token_kind(std::string_view name) {
  if (name == "char") return token_kind::chars;
  if (name == "word") return token_kind::words;
  throw std::invalid_argument("token kind '" + std::string(name) + "' is not one of char, word");
}

namespace {

/// Length of the UTF-8 sequence starting at text[i], or 0 if it is not valid UTF-8.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto b = static_cast<unsigned char>(text[i]);
  std::size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 0;
  if (n == 2 && b < 0xC2) return 0;  // overlong
  return n;
}

bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v'; }

}  // namespace

std::vector<std::string> tokenize(token_kind kind, std::string_view text) {
  std::vector<std::string> out;
  if (kind == token_kind::chars) {
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      std::size_t n = utf8_length(text, i);
      if (n == 0) throw std::invalid_argument("the text is not valid UTF-8 at byte " + std::to_string(i));
      out.emplace_back(text.substr(i, n));
      i += n;
    }
    return out;
  }
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\n') {
      out.emplace_back(end_of_line_token);
      ++i;
    } else if (is_space(text[i])) {
      ++i;
    } else {
      std::size_t j = i;
      while (j < text.size() && text[j] != '\n' && !is_space(text[j])) ++j;
      out.emplace_back(text.substr(i, j - i));
      i = j;
    }
  }
  return out;
}

vocabulary vocabulary::build(token_kind kind, std::string_view text, std::size_t max_size) {
  std::map<std::string, std::size_t> counts;
  for (auto& t : tokenize(kind, text)) ++counts[t];
  counts.erase(std::string(unknown_token));
  std::vector<std::string> tokens{std::string(unknown_token)};
  if (kind == token_kind::chars) {
    // Code-point order: the UTF-8 byte order of single code points is the code-point order.
    for (auto& [t, n] : counts) tokens.push_back(t);
  } else {
    std::vector<std::pair<std::string, std::size_t>> by_count(counts.begin(), counts.end());
    std::stable_sort(by_count.begin(), by_count.end(), [](auto& a, auto& b) { return a.second > b.second; });
    if (max_size > 0 && by_count.size() > max_size - 1) by_count.resize(max_size - 1);
    for (auto& [t, n] : by_count) tokens.push_back(t);
  }
  return from_tokens(kind, std::move(tokens));
}

vocabulary vocabulary::from_tokens(token_kind kind, std::vector<std::string> tokens) {
  vocabulary v;
  v.kind_ = kind;
  v.tokens_ = std::move(tokens);
  v.index();
  return v;
}

void vocabulary::index() {
  ids_.clear();
  unk_ = -1;
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (!ids_.emplace(tokens_[i], static_cast<std::int32_t>(i)).second)
      throw std::invalid_argument("the vocabulary lists token '" + tokens_[i] + "' twice");
  }
  unk_ = id(unknown_token);
}

std::int32_t vocabulary::id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

expected<std::vector<std::int32_t>> vocabulary::encode(std::string_view text) const {
  std::vector<std::string> toks;
  try {
    toks = tokenize(kind_, text);
  } catch (const std::exception& e) {
    return error(errc::invalid_argument, e.what());
  }
  std::vector<std::int32_t> ids;
  ids.reserve(toks.size());
  for (auto& t : toks) {
    auto i = id(t);
    if (i < 0) {
      if (unk_ < 0)
        return error(errc::invalid_argument, "token '" + t + "' is not in the vocabulary, which has no <unk>");
      i = unk_;
    }
    ids.push_back(i);
  }
  return ids;
}

std::string vocabulary::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  bool line_start = true;
  for (auto i : ids) {
    const std::string& t = (i >= 0 && static_cast<std::size_t>(i) < tokens_.size()) ? tokens_[static_cast<std::size_t>(i)]
                                                                                     : std::string(unknown_token);
    if (kind_ == token_kind::chars) {
      out += t;
    } else if (t == end_of_line_token) {
      out += '\n';
      line_start = true;
    } else {
      if (!line_start) out += ' ';
      out += t;
      line_start = false;
    }
  }
  return out;
}

std::string vocabulary::to_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < tokens_.size(); ++i) j[tokens_[i]] = i;
  return j.dump(1);
}

expected<vocabulary> vocabulary::from_json(token_kind kind, std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error(errc::invalid_argument, "vocab.json is not a JSON object");
  std::vector<std::string> tokens(j.size());
  std::vector<bool> seen(j.size(), false);
  for (auto& [token, id] : j.items()) {
    if (!id.is_number_unsigned() || id.get<std::size_t>() >= tokens.size() || seen[id.get<std::size_t>()])
      return error(errc::invalid_argument, "vocab.json maps '" + token + "' to " + id.dump() +
                                               ", not to a distinct id in [0, " + std::to_string(tokens.size()) + ")");
    seen[id.get<std::size_t>()] = true;
    tokens[id.get<std::size_t>()] = token;
  }
  return from_tokens(kind, std::move(tokens));
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw std::runtime_error("corpus file '" + path + "' does not exist");
  if (fs::is_directory(path, ec)) throw std::runtime_error("corpus '" + path + "' is a directory, not a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("corpus file '" + path + "' cannot be read");
  // Read in chunks and stop at the first NUL byte: an endless binary stream (/dev/zero) ends here
  // instead of filling the memory.
  std::string text;
  std::vector<char> chunk(1 << 16);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto end = chunk.begin() + static_cast<std::ptrdiff_t>(in.gcount());
    if (std::find(chunk.begin(), end, '\0') != end)
      throw std::runtime_error("corpus file '" + path + "' is binary (it contains NUL bytes), not text");
    text.append(chunk.begin(), end);
  }
  if (in.bad()) throw std::runtime_error("corpus file '" + path + "' cannot be read");
  if (text.empty()) throw std::runtime_error("corpus file '" + path + "' is empty");
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = utf8_length(text, i);
    if (n == 0)
      throw std::runtime_error("corpus file '" + path + "' is not UTF-8 text (invalid byte at offset " +
                               std::to_string(i) + ")");
    i += n;
  }
  return text;
}

std::string read_default_corpus(std::string& source) {
  for (const char* dir : {"/usr/share/games/fortunes", "/usr/share/common-licenses"}) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (auto& e : fs::directory_iterator(dir, ec)) {
      if (!e.is_regular_file() || e.is_symlink()) continue;
      auto ext = e.path().extension().string();
      if (ext == ".dat" || ext == ".u8") continue;
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::string text;
    std::size_t used = 0;
    for (auto& f : files) {
      try {
        text += read_text_file(f.string());
        if (text.back() != '\n') text += '\n';
        ++used;
      } catch (const std::exception&) {
        // A file that is not UTF-8 text is skipped: the default corpus takes what is readable.
      }
    }
    if (!text.empty()) {
      source = std::string(dir) + " (" + std::to_string(used) + " files)";
      return text;
    }
  }
  throw std::runtime_error(
      "no default corpus: neither /usr/share/games/fortunes (apt-get install fortunes) nor "
      "/usr/share/common-licenses holds text; pass --corpus FILE");
}

text_split split_text(const std::string& text, double fraction) {
  std::size_t cut = text.size() - static_cast<std::size_t>(static_cast<double>(text.size()) * fraction);
  // Start the held-out text at a line when one begins within 1000 bytes after the cut.
  auto nl = text.find('\n', cut);
  if (nl != std::string::npos && nl + 1 < text.size() && nl - cut < 1000) cut = nl + 1;
  // Never split inside a UTF-8 sequence.
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
  return {text.substr(0, cut), text.substr(cut)};
}

token_batches::token_batches(const std::vector<std::int32_t>& stream, std::size_t batch, std::size_t seq)
    : batch_(batch), seq_(seq), rows_(batch ? stream.size() / batch : 0) {
  if (batch == 0 || seq == 0) throw std::invalid_argument("batch and seq must be at least 1");
  if (rows_ < seq + 1)
    throw std::invalid_argument("the text has " + std::to_string(stream.size()) + " tokens, too few for one [seq " +
                                std::to_string(seq) + ", batch " + std::to_string(batch) + "] window (needs " +
                                std::to_string(batch * (seq + 1)) + ")");
  data_.resize(rows_ * batch_);
  for (std::size_t b = 0; b < batch_; ++b)
    for (std::size_t r = 0; r < rows_; ++r) data_[r * batch_ + b] = stream[b * rows_ + r];
}

void token_batches::window(std::size_t w, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) const {
  if (w >= windows()) throw std::out_of_range("window " + std::to_string(w) + " of " + std::to_string(windows()));
  const std::size_t n = seq_ * batch_, begin = w * seq_ * batch_;
  tokens.assign(data_.begin() + static_cast<std::ptrdiff_t>(begin), data_.begin() + static_cast<std::ptrdiff_t>(begin + n));
  targets.assign(data_.begin() + static_cast<std::ptrdiff_t>(begin + batch_),
                 data_.begin() + static_cast<std::ptrdiff_t>(begin + batch_ + n));
}

}  // namespace strata::lm
