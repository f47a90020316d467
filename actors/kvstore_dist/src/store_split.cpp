// The worker's side of keys split over several servers: a push sends every part at once, a pull
// gathers them.

#include <cstring>
#include <exception>
#include <future>
#include <span>
#include <utility>

#include "strata/device/shape.hpp"
#include "strata/kernels/half.hpp"
#include "worker.hpp"

namespace strata::kvstore_dist::internal {

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
    // Each part is quantized with its slice of the key's residual; the rule is per element, so
    // the parts give what the whole key would (see the unsplit push for the residual's trick).
    auto kept = w.residuals.find(key);
    const std::vector<float> zeros(kept == w.residuals.end() || kept->second.size() != sum->size() ? sum->size() : 0, 0.0f);
    const float* old = zeros.empty() ? kept->second.data() : zeros.data();
    for (int p = 0; p < layout.parts(); ++p) {
      const auto n = static_cast<std::size_t>(layout.size(p));
      const auto at = static_cast<std::size_t>(layout.offset(p));
      compressed_push_msg m{to_wire(key), w.rank, seq, w.compression, w.threshold, {layout.size(p)},
                            std::vector<std::uint32_t>(kvstore::packed_words(w.compression, n)), type};
      kvstore::compress_packed(w.compression, w.threshold, old + at, sum->data() + at, m.codes.data(), n);
      bytes += m.codes.size() * sizeof(std::uint32_t) + sizeof(float);
      send(p, std::move(m));
    }
    auto sent = all_replies(replies);
    if (!sent) return sent.error();
    w.residuals[key] = std::move(*sum);
    return bytes;
  }
  // The owners check the dtype against the key's (a 16-bit key takes only its own).
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

}  // namespace strata::kvstore_dist::internal
