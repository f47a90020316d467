// The worker's side of keys split over several servers: a push sends every part at once, a pull
// gathers them.

#include <algorithm>
#include <cstring>
#include <exception>
#include <future>
#include <span>
#include <utility>

#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"
#include "worker.hpp"

namespace strata::kvstore_dist::detail {

namespace {

// A split push is checked whole on the worker before any part leaves: an owner that refused its
// part while the others took theirs would leave the key half updated (and, in dist_sync, those
// owners a version ahead). The owners check the dtype and, for a 16-bit key, that the 2bit
// values hold exactly; the shape, the device and the dtype's kind are local_sum's checks.

/// Refuses a value whose dtype is not the key's (every owner would refuse its part).
expected<void> of_key_type(const worker_state& w, const kvstore::key& key, dtype type) {
  auto kept = w.types.find(key);
  if (kept == w.types.end() || kept->second == type) return {};
  return error(errc::invalid_argument, "kvstore dist push: the value for key " + key.to_string() + " has dtype " +
                                           std::string(to_string(type)) + ", expected " +
                                           std::string(to_string(kept->second)) + ".");
}

/// Refuses compressed parts that the owners of a 16-bit key would refuse: 2bit values (+t, 0, -t)
/// of a threshold t the key's dtype does not hold exactly, once any element is sent as +t or -t
/// (an owner refuses only a part that holds one).
expected<void> held_exactly(const worker_state& w, const kvstore::key& key, const std::vector<compressed_push_msg>& parts) {
  auto kept = w.types.find(key);
  if (kept == w.types.end() || !kernels::is_half(kept->second) || w.compression != kvstore::compression_type::two_bit ||
      kernels::half_value(kept->second, kernels::half_bits(kept->second, w.threshold)) == w.threshold)
    return {};
  for (const auto& m : parts) {
    std::vector<float> sent(static_cast<std::size_t>(m.shape.front()));
    kvstore::decompress(m.type, m.threshold, m.codes.data(), sent.data(), sent.size());
    if (std::any_of(sent.begin(), sent.end(), [](float x) { return x != 0.0f; }))
      return error(errc::invalid_argument, "kvstore dist push: key " + key.to_string() + " is " +
                                               std::string(to_string(kept->second)) + ", which does not hold the 2bit threshold " +
                                               std::to_string(w.threshold) + " exactly; choose one it holds (such as 0.5 or 0.25).");
  }
  return {};
}

}  // namespace

expected<std::uint64_t> push_parts(worker_state& w, const kvstore::key& key, const split_layout& layout,
                                   const std::vector<tensor>& values, std::uint64_t seq) {
  std::vector<std::future<expected<unit_t>>> replies;
  std::uint64_t bytes = 0;
  auto send = [&](int part, auto msg) {
    replies.push_back(w.sys->request<unit_t>(w.servers[static_cast<std::size_t>(part)], w.options.timeout, std::move(msg)));
  };
  if (w.compression != kvstore::compression_type::none) {
    dtype type = dtype::float32;
    auto sum = local_sum(w, key, values, &layout.shape, &type);
    if (!sum) return sum.error();
    if (auto ok = of_key_type(w, key, type); !ok) return ok.error();
    // Each part is quantized with its slice of the key's residual; the rule is per element, so
    // the parts give what the whole key would (see the unsplit push for the residual's trick).
    auto kept = w.residuals.find(key);
    const std::vector<float> zeros(kept == w.residuals.end() || kept->second.size() != sum->size() ? sum->size() : 0, 0.0f);
    const float* old = zeros.empty() ? kept->second.data() : zeros.data();
    std::vector<compressed_push_msg> parts;
    for (int p = 0; p < layout.parts(); ++p) {
      const auto n = static_cast<std::size_t>(layout.size(p));
      const auto at = static_cast<std::size_t>(layout.offset(p));
      compressed_push_msg m{to_wire(key), w.rank, seq, w.compression, w.threshold, {layout.size(p)},
                            std::vector<std::uint32_t>(kvstore::packed_words(w.compression, n)), type};
      kvstore::compress_packed(w.compression, w.threshold, old + at, sum->data() + at, m.codes.data(), n);
      bytes += m.codes.size() * sizeof(std::uint32_t) + sizeof(float);
      parts.push_back(std::move(m));
    }
    // Nothing has left yet; a refusal here keeps the residual as it was.
    if (auto ok = held_exactly(w, key, parts); !ok) return ok.error();
    for (int p = 0; p < layout.parts(); ++p) send(p, std::move(parts[static_cast<std::size_t>(p)]));
    auto sent = all_replies(replies);
    if (!sent) return sent.error();
    w.residuals[key] = std::move(*sum);
    return bytes;
  }
  tensor whole = values.empty() ? tensor() : values.front();
  if (values.size() != 1 || !whole.valid() || (whole.dtype() != dtype::float32 && !kernels::is_half(whole.dtype())) ||
      whole.shape() != layout.shape || whole.get_device().kind() != device_kind::cpu) {
    // Several local values (or one to check): summed here, in the order given (16-bit ones in
    // float32, rounded once to their dtype).
    dtype type = dtype::float32;
    auto sum = local_sum(w, key, values, &layout.shape, &type);
    if (!sum) return sum.error();
    whole = rounded(*sum, layout.shape, type, w.dev, w.s);
  }
  if (auto ok = of_key_type(w, key, whole.dtype()); !ok) return ok.error();  // a 16-bit key takes only its own
  // Every part leaves straight from its slice of `whole`: no copy to split.
  for (int p = 0; p < layout.parts(); ++p)
    send(p, push_msg{to_wire(key), w.rank, seq, net::tensor_slice{whole, layout.offset(p), {layout.size(p)}}});
  bytes = static_cast<std::uint64_t>(whole.numel()) * size_of(whole.dtype());
  auto sent = all_replies(replies);
  if (!sent) return sent.error();
  return bytes;
}

expected<tensor> pull_parts(worker_state& w, const kvstore::key& key, const split_layout& layout,
                            std::uint64_t min_version) {
  std::vector<std::future<expected<tensor>>> replies;
  for (int p = 0; p < layout.parts(); ++p)
    replies.push_back(w.sys->request<tensor>(w.servers[static_cast<std::size_t>(p)], w.options.timeout,
                                             pull_msg{to_wire(key), min_version}));
  // The key's dtype is its parts' (each owner answers in it).
  tensor out;
  expected<void> first;
  for (int p = 0; p < layout.parts(); ++p) {
    auto part = replies[static_cast<std::size_t>(p)].get();
    if (!first) continue;
    if (!part) {
      first = part.error();
      continue;
    }
    if (!out.valid() && (part->dtype() == dtype::float32 || kernels::is_half(part->dtype())))
      out = tensor::empty(layout.shape, part->dtype(), w.dev, w.s);
    if (part->numel() != layout.size(p) || !out.valid() || part->dtype() != out.dtype()) {
      first = error(errc::runtime_failure, "kvstore dist pull: rank " + std::to_string(p) + " answered " +
                                               std::string(to_string(part->dtype())) + " " + shape_text(part->shape()) +
                                               " for part " + std::to_string(p) + " of key " + key.to_string() +
                                               ", expected " + std::string(to_string(out.valid() ? out.dtype() : dtype::float32)) +
                                               " [" + std::to_string(layout.size(p)) + "].");
      continue;
    }
    try {
      part->ready_event().synchronize();  // its bytes have arrived
    } catch (const std::exception& e) {
      first = error(errc::runtime_failure, "kvstore dist pull: part " + std::to_string(p) + " of key " + key.to_string() +
                                               " did not arrive: " + e.what());
      continue;
    }
    const std::size_t element = size_of(out.dtype());
    std::memcpy(static_cast<std::byte*>(out.raw_data()) + static_cast<std::size_t>(layout.offset(p)) * element,
                part->raw_data(), static_cast<std::size_t>(layout.size(p)) * element);
  }
  if (!first) return first.error();
  return out;
}

}  // namespace strata::kvstore_dist::detail
