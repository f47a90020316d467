// MXNet's save_optimizer_states / load_optimizer_states: the optimizer (hyper-parameters and
// scheduler) and every key's state in a file of their own, apart from the values checkpoint. A
// store that loads both continues exactly (bit for bit) where the saving store went on, across
// one store and a sharded one in both directions; bad files are refused with one sentence and
// change nothing.

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "strata/checksum.hpp"
#include "strata/device/device_manager.hpp"
#include "strata/kvstore/checkpoint.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"
#include "support/half_device.hpp"
#include "support/one_device.hpp"

namespace kvstore_optimizer_states_test {

namespace kv = strata::kvstore;
using strata::test::await;

struct fixture : strata::test::one_device {
  const std::vector<std::int64_t> shape_a{3, 7};
  const std::vector<std::int64_t> shape_b{40};

  /// Pushes `grads` (one pair per step) to keys 1 and 2.
  void train(kv::client& store, const std::vector<std::pair<std::vector<float>, std::vector<float>>>& grads) {
    for (const auto& [ga, gb] : grads) BOOST_REQUIRE(await(store.push({1, 2}, {make(ga, shape_a), make(gb, shape_b)})).has_value());
  }
  std::vector<std::pair<std::vector<float>, std::vector<float>>> steps(int n) {
    std::vector<std::pair<std::vector<float>, std::vector<float>>> out;
    for (int i = 0; i < n; ++i) out.emplace_back(random(21), random(40));
    return out;
  }
  static std::vector<kv::options> stores() {
    kv::options sharded;
    sharded.shards = 3;
    sharded.chunk_bytes = 24;
    return {kv::options{}, sharded};
  }
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("strata_kvopt_" + std::to_string(::getpid()) + "_" + name)).string();
}

using optimizer = std::variant<strata::kernels::sgd_options, strata::kernels::adam_options>;

BOOST_AUTO_TEST_SUITE(kvstore_optimizer_states)

BOOST_FIXTURE_TEST_CASE(a_store_that_loads_values_and_optimizer_states_continues_bit_for_bit, fixture) {
  const std::vector<std::pair<optimizer, kv::lr_scheduler>> settings{
      {strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
       kv::factor_scheduler{.step = 2, .factor = 0.5, .base_lr = 0.2}},
      {strata::kernels::adam_options{.lr = 0.01, .weight_decay = 0.1, .decoupled_weight_decay = true},
       kv::cosine_scheduler{.max_update = 9, .base_lr = 0.05, .final_lr = 0.001, .warmup = {.steps = 2, .begin_lr = 0.0}}},
      {strata::kernels::adam_options{.lr = 0.02, .beta1 = 0.8}, kv::multi_factor_scheduler{.steps = {2, 4}, .factor = 0.3, .base_lr = 0.03}},
  };
  const auto values = temp_path("values.ckpt");
  const auto states = temp_path("states.opt");
  for (const auto& [opt, schedule] : settings)
    for (const auto& saver : stores())
      for (const auto& loader : stores()) {
        BOOST_TEST_CONTEXT(opt.index() << ", " << saver.shards << " -> " << loader.shards << " shards") {
          kv::client a(sys, kv::spawn(sys, saver));
          BOOST_REQUIRE(await(a.init({1, 2}, {make(random(21), shape_a), make(random(40), shape_b)})).has_value());
          BOOST_REQUIRE(std::visit([&](const auto& o) { return await(a.set_optimizer(o, schedule)); }, opt).has_value());
          train(a, steps(3));
          BOOST_REQUIRE(await(a.save(values)).has_value());
          BOOST_REQUIRE(await(a.save_optimizer_states(states)).has_value());
          const auto later = steps(3);
          train(a, later);

          kv::client b(sys, kv::spawn(sys, loader));  // no set_optimizer: the file brings it
          BOOST_REQUIRE(await(b.load(values)).has_value());
          BOOST_REQUIRE(await(b.load_optimizer_states(states)).has_value());
          train(b, later);
          BOOST_TEST(value_of(b, 1, shape_a) == value_of(a, 1, shape_a), boost::test_tools::per_element());
          BOOST_TEST(value_of(b, 2, shape_b) == value_of(a, 2, shape_b), boost::test_tools::per_element());

          // Without the states (a fresh optimizer of the same settings) the run departs.
          kv::client c(sys, kv::spawn(sys, loader));
          BOOST_REQUIRE(await(c.load(values)).has_value());
          BOOST_REQUIRE(std::visit([&](const auto& o) { return await(c.set_optimizer(o, schedule)); }, opt).has_value());
          train(c, later);
          BOOST_TEST(value_of(c, 2, shape_b) != value_of(a, 2, shape_b));
        }
      }
  std::filesystem::remove(values);
  std::filesystem::remove(states);
}

BOOST_FIXTURE_TEST_CASE(the_schedule_continues_from_the_states_file_when_the_values_come_from_elsewhere, fixture) {
  // MXNet's resume with dump_optimizer: the parameters come from a model file (init), the
  // optimizer with its update count from the states file. The scheduled lr continues; it does not
  // start again at the first update.
  const std::vector<std::pair<optimizer, kv::lr_scheduler>> settings{
      {strata::kernels::sgd_options{.lr = 0.4}, kv::factor_scheduler{.step = 2, .factor = 0.5}},
      {strata::kernels::adam_options{.lr = 0.05}, kv::cosine_scheduler{.max_update = 9, .final_lr = 0.001}},
  };
  const auto states = temp_path("resume.opt");
  for (const auto& [opt, schedule] : settings)
    for (const auto& saver : stores())
      for (const auto& loader : stores()) {
        BOOST_TEST_CONTEXT(opt.index() << ", " << saver.shards << " -> " << loader.shards << " shards") {
          kv::client a(sys, kv::spawn(sys, saver));
          BOOST_REQUIRE(await(a.init({1, 2}, {make(random(21), shape_a), make(random(40), shape_b)})).has_value());
          BOOST_REQUIRE(std::visit([&](const auto& o) { return await(a.set_optimizer(o, schedule)); }, opt).has_value());
          train(a, steps(5));
          BOOST_REQUIRE(await(a.save_optimizer_states(states)).has_value());

          kv::client b(sys, kv::spawn(sys, loader));
          BOOST_REQUIRE(await(b.init({1, 2}, {make(value_of(a, 1, shape_a), shape_a), make(value_of(a, 2, shape_b), shape_b)}))
                            .has_value());
          BOOST_REQUIRE(await(b.load_optimizer_states(states)).has_value());
          BOOST_TEST(await(b.version(1)).value() == 0u);  // the values' versions are b's own
          const auto later = steps(3);
          train(a, later);
          train(b, later);
          BOOST_TEST(value_of(b, 1, shape_a) == value_of(a, 1, shape_a), boost::test_tools::per_element());
          BOOST_TEST(value_of(b, 2, shape_b) == value_of(a, 2, shape_b), boost::test_tools::per_element());
        }
      }
  std::filesystem::remove(states);
}

BOOST_FIXTURE_TEST_CASE(bad_optimizer_states_requests_fail_with_one_sentence_and_change_nothing, fixture) {
  const auto values = temp_path("bad_values.ckpt");
  const auto states = temp_path("bad_states.opt");
  for (const auto& o : stores()) {
    BOOST_TEST_CONTEXT(o.shards << " shards") {
      kv::client store(sys, kv::spawn(sys, o));
      BOOST_REQUIRE(await(store.init({1, 2}, {make(random(21), shape_a), make(random(40), shape_b)})).has_value());
      auto refused = [&](strata::expected<strata::unit_t> r, const std::string& expected) {
        BOOST_TEST_REQUIRE(!r.has_value());
        BOOST_TEST(r.error().message().find(expected) != std::string::npos, r.error().message());
        BOOST_TEST(r.error().message().find('\n') == std::string::npos);
      };
      refused(await(store.save_optimizer_states(states)), "the store has no optimizer (set_optimizer)");
      BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::sgd_options{.lr = 0.5, .momentum = 0.5})).has_value());
      train(store, steps(1));
      BOOST_REQUIRE(await(store.save(values)).has_value());
      BOOST_REQUIRE(await(store.save_optimizer_states(states)).has_value());
      refused(await(store.load_optimizer_states(values)), "is not an optimizer states file: it is a values checkpoint; load it with load.");
      refused(await(store.load(states)), "is not a checkpoint: it holds optimizer states only; load it with load_optimizer_states.");
      refused(await(store.load_optimizer_states(temp_path("missing.opt"))), "cannot open optimizer states file");

      // A file of other keys or shapes, and a truncated one: refused, and the store's own
      // momentum stays (its next step equals a twin's that never saw the bad files).
      kv::client other(sys, kv::spawn(sys));
      BOOST_REQUIRE(await(other.init({1, 3}, {make(random(21), shape_a), make(random(5), {5})})).has_value());
      BOOST_REQUIRE(await(other.set_optimizer(strata::kernels::adam_options{})).has_value());
      const auto foreign = temp_path("foreign.opt");
      BOOST_REQUIRE(await(other.save_optimizer_states(foreign)).has_value());
      refused(await(store.load_optimizer_states(foreign)), "has key 3, which the store does not hold.");
      kv::client reshaped(sys, kv::spawn(sys));
      BOOST_REQUIRE(await(reshaped.init({1}, {make(random(21), {7, 3})})).has_value());
      BOOST_REQUIRE(await(reshaped.set_optimizer(strata::kernels::adam_options{})).has_value());
      BOOST_REQUIRE(await(reshaped.save_optimizer_states(foreign)).has_value());
      refused(await(store.load_optimizer_states(foreign)), "has key 1 of shape [7, 3]; the store holds it with shape [3, 7].");
      {
        std::ifstream in(states, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream(foreign, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
      }
      refused(await(store.load_optimizer_states(foreign)), "is truncated or corrupt");
      std::filesystem::remove(foreign);

      kv::client twin(sys, kv::spawn(sys, o));
      BOOST_REQUIRE(await(twin.load(values)).has_value());
      BOOST_REQUIRE(await(twin.load_optimizer_states(states)).has_value());
      const auto next = steps(1);
      train(store, next);
      train(twin, next);
      BOOST_TEST(value_of(store, 2, shape_b) == value_of(twin, 2, shape_b), boost::test_tools::per_element());
    }
  }
  std::filesystem::remove(values);
  std::filesystem::remove(states);
}


/// torch.optim's Adam (no weight decay) and SGD with momentum in float64: the reference the
/// store's float32 updates are checked against, with the rate of each step given.
struct reference_optimizer {
  bool adam = true;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, momentum = 0.9;
  std::vector<double> p, m, v;
  int t = 0;
  void step(const std::vector<float>& g, double lr) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (!adam) {  // buf = momentum * buf + g (the first step: buf = g), p -= lr * buf
        m[i] = t == 1 ? g[i] : momentum * m[i] + g[i];
        p[i] -= lr * m[i];
        continue;
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * double(g[i]) * g[i];
      const double mhat = m[i] / (1 - std::pow(beta1, t)), vhat = v[i] / (1 - std::pow(beta2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

BOOST_FIXTURE_TEST_CASE(set_learning_rate_changes_the_rate_and_keeps_every_keys_state, fixture) {
  for (const bool adam : {true, false})
    for (const auto& opts : stores()) {
      BOOST_TEST_CONTEXT((adam ? "adam" : "sgd momentum") << ", " << opts.shards << " shards") {
        const auto initial = random(40);
        kv::client store(sys, kv::spawn(sys, opts));
        BOOST_REQUIRE(await(store.init(2, make(initial, shape_b))).has_value());
        if (adam) BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::adam_options{.lr = 0.01})).has_value());
        else BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::sgd_options{.lr = 0.1, .momentum = 0.9})).has_value());
        reference_optimizer ref{.adam = adam};
        ref.p.assign(initial.begin(), initial.end());
        double lr = adam ? 0.01 : 0.1;
        for (int step = 0; step < 9; ++step) {
          if (step == 3 || step == 6) {  // two changes of rate, the state kept across both
            lr = step == 3 ? lr * 0.3 : lr * 2.5;
            BOOST_REQUIRE(await(store.set_learning_rate(lr)).has_value());
            // Refused rates change nothing: the next push still runs at `lr`.
            BOOST_TEST(!await(store.set_learning_rate(-1.0)).has_value());
            BOOST_TEST(!await(store.set_learning_rate(std::nan(""))).has_value());
          }
          const auto g = random(40);
          BOOST_REQUIRE(await(store.push(2, make(g, shape_b))).has_value());
          ref.step(g, lr);
        }
        const auto got = value_of(store, 2, shape_b);
        for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == ref.p[i], boost::test_tools::tolerance(1e-4));
      }
    }
}

BOOST_FIXTURE_TEST_CASE(set_learning_rate_without_an_optimizer_or_beside_a_scheduler_fails_with_one_sentence, fixture) {
  for (const auto& opts : stores()) {
    BOOST_TEST_CONTEXT(opts.shards << " shards") {
      kv::client store(sys, kv::spawn(sys, opts));
      BOOST_REQUIRE(await(store.init(2, make(random(40), shape_b))).has_value());
      auto none = await(store.set_learning_rate(0.1));  // the default rule (assign) has no rate
      BOOST_REQUIRE(!none.has_value());
      BOOST_TEST(none.error().message().find("has no optimizer") != std::string::npos, none.error().message());
      BOOST_REQUIRE(await(store.set_optimizer(strata::kernels::adam_options{.lr = 0.01},
                                              kv::factor_scheduler{.step = 2, .factor = 0.5, .base_lr = 0.01}))
                        .has_value());
      auto scheduled = await(store.set_learning_rate(0.1));
      BOOST_REQUIRE(!scheduled.has_value());
      BOOST_TEST(scheduled.error().message().find("scheduler") != std::string::npos, scheduled.error().message());
      auto negative = await(store.set_learning_rate(-0.5));
      BOOST_REQUIRE(!negative.has_value());
      BOOST_TEST(negative.error().message().find("is not a learning rate") != std::string::npos);
      BOOST_REQUIRE(await(store.set_updater(kv::updater{})).has_value());  // back to assign
      BOOST_TEST(!await(store.set_learning_rate(0.1)).has_value());
    }
  }
}

using strata::dtype;

/// Keys 1 (float16 [3, 7]) and 2 (bfloat16 [40]) and 3 (float32 [5]) under a multi_precision
/// optimizer: the float32 master copies carry steps below half a 16-bit ulp.
struct half_fixture : strata::test::half_device {
  const std::vector<std::int64_t> shape_a{3, 7};
  const std::vector<std::int64_t> shape_b{40};
  const std::vector<std::int64_t> shape_c{5};

  void init(kv::client& store, dtype type_a = dtype::float16) {
    const auto a = random(21);
    BOOST_REQUIRE(await(store.init({1, 2, 3}, {type_a == dtype::float32 ? make(a, shape_a) : make16(type_a, a, shape_a),
                                              make16(dtype::bfloat16, random(40), shape_b), make(random(5), shape_c)}))
                      .has_value());
  }
  struct grads {
    std::vector<float> a, b, c;
  };
  std::vector<grads> steps(int n) {
    std::vector<grads> out;
    for (int i = 0; i < n; ++i) out.push_back({random(21), random(40), random(5)});
    return out;
  }
  void train(kv::client& store, const std::vector<grads>& gs) {
    for (const auto& g : gs)
      BOOST_REQUIRE(await(store.push({1, 2, 3}, {make16(dtype::float16, g.a, shape_a), make16(dtype::bfloat16, g.b, shape_b),
                                                 make(g.c, shape_c)}))
                        .has_value());
  }
  /// Every key's bits: the 16-bit words of keys 1 and 2, the float32 bits of key 3.
  std::vector<std::uint32_t> bits(kv::client& store) {
    std::vector<std::uint32_t> out;
    for (auto b : pulled_bits(store, 1, dtype::float16, 21, shape_a)) out.push_back(b);
    for (auto b : pulled_bits(store, 2, dtype::bfloat16, 40)) out.push_back(b);
    for (float f : value_of(store, 3, shape_c)) out.push_back(std::bit_cast<std::uint32_t>(f));
    return out;
  }
};

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {(std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()};
}

/// `bytes` with a fresh checksum and end marker, written to `path`: a file that passes the
/// format's checks but holds what a test edited into it.
void write_resealed(const std::string& path, std::string bytes) {
  bytes.resize(bytes.size() - 16);
  const std::uint64_t sum = strata::fnv1a64(bytes, strata::fnv1a64_kvstore_basis);
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  bytes += "STRKVEND";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

const std::vector<std::variant<strata::kernels::sgd_options, strata::kernels::adam_options>> small_steps{
    strata::kernels::sgd_options{.lr = 2e-4, .momentum = 0.9, .weight_decay = 0.01},
    strata::kernels::adam_options{.lr = 2e-4, .weight_decay = 0.01}};

BOOST_FIXTURE_TEST_CASE(multi_precision_master_copies_travel_in_the_optimizer_states_file_and_continue_bit_for_bit,
                        half_fixture) {
  const auto values = temp_path("mp_values.ckpt");
  const auto bare = temp_path("mp_bare.ckpt");
  const auto states = temp_path("mp_states.opt");
  const auto again = temp_path("mp_again.opt");
  for (const auto& opt : small_steps)
    for (const auto& saver : fixture::stores())
      for (const auto& loader : fixture::stores()) {
        BOOST_TEST_CONTEXT(opt.index() << ", " << saver.shards << " -> " << loader.shards << " shards") {
          auto install = [&](kv::client& store) {
            BOOST_REQUIRE(std::visit([&](const auto& o) { return await(store.send(kv::set_optimizer{.options = o, .multi_precision = true})); },
                                     opt).has_value());
          };
          kv::client a(sys, kv::spawn(sys, saver));
          init(a);
          install(a);
          train(a, steps(3));
          BOOST_REQUIRE(await(a.save(values)).has_value());
          BOOST_REQUIRE(await(a.save_optimizer_states(states)).has_value());
          const auto later = steps(4);
          train(a, later);

          // The values checkpoint without its master copies: only the states file brings them.
          auto ckpt = kv::read_checkpoint(values);
          BOOST_REQUIRE(ckpt.has_value());
          BOOST_TEST_REQUIRE(ckpt->entries.at(0).master.size() == 21u);
          BOOST_TEST_REQUIRE(ckpt->entries.at(1).master.size() == 40u);
          for (auto& e : ckpt->entries) e.master.clear();
          BOOST_REQUIRE(kv::write_checkpoint(bare, ckpt->entries).has_value());

          kv::client b(sys, kv::spawn(sys, loader));  // no set_optimizer: the file brings it, multi_precision too
          BOOST_REQUIRE(await(b.load(bare)).has_value());
          BOOST_REQUIRE(await(b.load_optimizer_states(states)).has_value());
          BOOST_REQUIRE(await(b.save_optimizer_states(again)).has_value());
          BOOST_TEST((file_bytes(again) == file_bytes(states)));  // masters, states and header as saved
          train(b, later);
          BOOST_TEST(bits(b) == bits(a), boost::test_tools::per_element());

          // Without the master copies (the same optimizer made afresh, masters from the rounded
          // values) the run departs.
          kv::client c(sys, kv::spawn(sys, loader));
          BOOST_REQUIRE(await(c.load(bare)).has_value());
          install(c);
          train(c, later);
          BOOST_TEST(bits(c) != bits(a));
        }
      }
  for (const auto& f : {values, bare, states, again}) std::filesystem::remove(f);
}

/// An optimizer states file as strata wrote it before master copies ("STRKVOPT"): SGD with
/// `momentum` and integer keys with one state array each, written here byte by byte.
void write_previous_version(const std::string& path, const strata::kernels::sgd_options& o,
                            const std::vector<std::tuple<std::int64_t, std::vector<std::int64_t>, std::vector<float>>>& keys) {
  auto put = [](std::string& to, auto v) { to.append(reinterpret_cast<const char*>(&v), sizeof v); };
  std::string header;  // SGD, its four fields, no scheduler; no multi_precision byte
  put(header, std::uint8_t{1}), put(header, o.lr), put(header, o.momentum), put(header, o.weight_decay);
  put(header, std::uint8_t{o.nesterov}), put(header, std::uint8_t{0});
  std::string out = "STRKVOPT";
  put(out, std::uint64_t{header.size()});
  out += header;
  put(out, std::uint64_t{keys.size()});
  for (const auto& [key, shape, momentum] : keys) {  // no dtype, no master copy
    put(out, std::uint8_t{0}), put(out, key), put(out, std::uint64_t{2}), put(out, std::int64_t{0});
    put(out, std::uint64_t{shape.size()});
    for (auto d : shape) put(out, d);
    put(out, std::uint64_t{1});
    out.append(reinterpret_cast<const char*>(momentum.data()), momentum.size() * sizeof(float));
  }
  write_resealed(path, out + std::string(16, '\0'));
}

BOOST_FIXTURE_TEST_CASE(an_optimizer_states_file_of_the_previous_version_still_loads, half_fixture) {
  const auto old = temp_path("previous.opt");
  const auto values = temp_path("previous_values.ckpt");
  const strata::kernels::sgd_options sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
  for (const auto& loader : fixture::stores()) {
    BOOST_TEST_CONTEXT(loader.shards << " shards") {
      const auto w1 = representable(dtype::float16, random(21)), w2 = representable(dtype::bfloat16, random(40)),
                 w3 = random(5);
      const auto m1 = random(21), m2 = random(40), m3 = random(5);
      write_previous_version(old, sgd, {{1, shape_a, m1}, {2, shape_b, m2}, {3, shape_c, m3}});
      kv::client b(sys, kv::spawn(sys, loader));
      BOOST_REQUIRE(await(b.init({1, 2, 3}, {make16(dtype::float16, w1, shape_a), make16(dtype::bfloat16, w2, shape_b),
                                            make(w3, shape_c)}))
                        .has_value());
      BOOST_REQUIRE(await(b.load_optimizer_states(old)).has_value());

      // The same values and momenta through a values checkpoint (tested on its own), under the
      // same optimizer without multi_precision.
      std::vector<kv::checkpoint_entry> entries{{.key = 1, .shape = shape_a, .arrays = {w1, m1}, .type = dtype::float16},
                                                {.key = 2, .shape = shape_b, .arrays = {w2, m2}, .type = dtype::bfloat16},
                                                {.key = 3, .shape = shape_c, .arrays = {w3, m3}}};
      BOOST_REQUIRE(kv::write_checkpoint(values, entries).has_value());
      kv::client c(sys, kv::spawn(sys, loader));
      BOOST_REQUIRE(await(c.set_optimizer(sgd)).has_value());
      BOOST_REQUIRE(await(c.load(values)).has_value());

      const auto later = steps(3);
      train(b, later);
      train(c, later);
      BOOST_TEST(bits(b) == bits(c), boost::test_tools::per_element());
      BOOST_REQUIRE(await(b.save_optimizer_states(old)).has_value());
      BOOST_TEST(file_bytes(old).substr(0, 8) == "STRKVOP2");
    }
  }
  std::filesystem::remove(old);
  std::filesystem::remove(values);
}

BOOST_FIXTURE_TEST_CASE(master_copies_that_do_not_fit_the_store_or_a_damaged_file_are_refused_with_one_sentence,
                        half_fixture) {
  const auto states = temp_path("mp_bad_states.opt");
  const auto values = temp_path("mp_bad_values.ckpt");
  const auto edited = temp_path("mp_edited.opt");
  for (const auto& o : fixture::stores()) {
    BOOST_TEST_CONTEXT(o.shards << " shards") {
      auto refused = [&](strata::expected<strata::unit_t> r, const std::string& expected) {
        BOOST_TEST_REQUIRE(!r.has_value());
        BOOST_TEST(r.error().message().find(expected) != std::string::npos, r.error().message());
        BOOST_TEST(r.error().message().find('\n') == std::string::npos);
      };
      kv::client a(sys, kv::spawn(sys, o));
      init(a);
      BOOST_REQUIRE(await(a.send(kv::set_optimizer{.options = strata::kernels::adam_options{.lr = 2e-4}, .multi_precision = true}))
                        .has_value());
      train(a, steps(2));
      BOOST_REQUIRE(await(a.save(values)).has_value());
      BOOST_REQUIRE(await(a.save_optimizer_states(states)).has_value());

      // Key 1 of another dtype or shape in the store.
      for (dtype other : {dtype::bfloat16, dtype::float32}) {
        kv::client d(sys, kv::spawn(sys, o));
        init(d, other);
        refused(await(d.load_optimizer_states(states)),
                "has key 1 of dtype float16 with a float32 master copy; the store holds it as " +
                    std::string(strata::to_string(other)) + ".");
      }
      kv::client reshaped(sys, kv::spawn(sys, o));
      BOOST_REQUIRE(await(reshaped.init({1, 2, 3}, {make16(dtype::float16, random(21), {7, 3}),
                                                    make16(dtype::bfloat16, random(40), shape_b), make(random(5), shape_c)}))
                        .has_value());
      refused(await(reshaped.load_optimizer_states(states)), "has key 1 of shape [3, 7]; the store holds it with shape [7, 3].");

      // Damaged files, onto a store that loaded the same point: it stays as it was.
      kv::client twin(sys, kv::spawn(sys, o));
      BOOST_REQUIRE(await(twin.load(values)).has_value());
      BOOST_REQUIRE(await(twin.load_optimizer_states(states)).has_value());
      const std::string bytes = file_bytes(states);
      std::uint64_t header_length;
      std::memcpy(&header_length, bytes.data() + 8, sizeof header_length);
      const std::size_t header_end = 16 + header_length;
      std::string flag_off = bytes;  // the header's last byte: multi_precision
      flag_off[header_end - 1] = 0;
      write_resealed(edited, flag_off);
      refused(await(twin.load_optimizer_states(edited)),
              "is truncated or corrupt: it has a master copy for key 1 but its optimizer is not multi_precision.");
      std::string as_float32 = bytes;  // key 1's dtype byte: count, kind, key, version, step, rank, 2 dims, states
      as_float32[header_end + 8 + 1 + 8 + 8 + 8 + 8 + 16 + 8] = 0;
      write_resealed(edited, as_float32);
      refused(await(twin.load_optimizer_states(edited)), "is truncated or corrupt: a float32 key carries a multi_precision master copy.");
      std::ofstream(edited, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 100);
      refused(await(twin.load_optimizer_states(edited)), "is truncated or corrupt");
      std::string flipped = bytes;  // a bit of key 3's Adam state
      flipped[bytes.size() - 20] ^= 0x10;
      std::ofstream(edited, std::ios::binary | std::ios::trunc) << flipped;
      refused(await(twin.load_optimizer_states(edited)), "is truncated or corrupt: its checksum does not match its contents.");

      const auto next = steps(2);
      train(a, next);
      train(twin, next);
      BOOST_TEST(bits(twin) == bits(a), boost::test_tools::per_element());
    }
  }
  for (const auto& f : {values, states, edited}) std::filesystem::remove(f);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace kvstore_optimizer_states_test
