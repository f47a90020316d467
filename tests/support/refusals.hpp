#pragma once
// What a refusal says: the sentence of the std::invalid_argument a call throws, and a search in
// it, for tests that check a bad input is refused in one sentence naming it.

#include <stdexcept>
#include <string>

namespace strata::test {

/// The message of the std::invalid_argument `f()` throws, or "" when it throws none.
template <class F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

/// Whether `text` holds `part`.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace strata::test
