#pragma once
/// \file
/// FNV-1a, the 64-bit checksum of strata's own file formats (kvstore and LM checkpoints).

#include <cstdint>
#include <string_view>

namespace strata {

/// The standard 64-bit FNV-1a offset basis.
inline constexpr std::uint64_t fnv1a64_offset_basis = 14695981039346656037ull;

/// The basis the kvstore's checkpoint files were first written with (one digit short of the
/// standard one). Those files record their checksum with it, so the kvstore keeps it: changing
/// it would make every existing kvstore checkpoint fail its checksum. New formats use
/// `fnv1a64_offset_basis`.
inline constexpr std::uint64_t fnv1a64_kvstore_basis = 1469598103934665603ull;

/// The 64-bit FNV-1a hash of `bytes`, starting from `basis`.
///
/// Not cryptographic: it detects accidental corruption (a truncated or flipped file), nothing
/// more. Example: `fnv1a64("a") == 0xaf63dc4c8601ec8cull`.
constexpr std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t basis = fnv1a64_offset_basis) noexcept {
  std::uint64_t h = basis;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;  // the 64-bit FNV prime
  }
  return h;
}

}  // namespace strata
