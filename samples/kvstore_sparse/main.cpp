// kvstore_sparse: a sparse embedding gradient pushed as rows, and a few rows pulled back
// (MXNet's row_sparse push and row_sparse_pull; docs/kvstore.md, "Row-sparse values").
//
//   kvstore_sparse [--vocab N] [--dim D]
//
// An embedding of N words x D floats (all ones) lives in a store with SGD (lr 0.5). A batch
// that used words 2, 5 and 2 again pushes its gradient as those rows only (word 2's rows add
// up); the store updates just those rows. The sample then pulls rows 5, 2 and 0 and prints them,
// and checks every row of the embedding: a wrong value exits 1.

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "strata/device/device_manager.hpp"
#include "strata/kvstore/kvstore.hpp"
#include "strata/strata.hpp"

int main(int argc, char** argv) {
  CLI::App app{"kvstore_sparse: a row-sparse embedding gradient pushed, a few rows pulled"};
  std::int64_t vocab = 1000, dim = 4;
  app.add_option("--vocab", vocab, "rows of the embedding")->check(CLI::Range(std::int64_t{6}, std::int64_t{10'000'000}));
  app.add_option("--dim", dim, "floats per row")->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}));
  CLI11_PARSE(app, argc, argv);

  strata::actor_system sys;
  int status = 0;
  {
    strata::device_manager manager;
    auto dev = manager.create("cpu:1").at(0);
    auto s = dev.create_stream();
    auto tensor_of = [&](const std::vector<float>& v, std::vector<std::int64_t> shape) {
      return strata::tensor::from_host<float>(std::span<const float>(v), std::move(shape), dev, s);
    };
    strata::kvstore::client kv(sys, strata::kvstore::spawn(sys));
    try {
      const std::size_t n = static_cast<std::size_t>(vocab * dim);
      kv.init("embedding", tensor_of(std::vector<float>(n, 1.0f), {vocab, dim})).get().value();
      kv.set_optimizer(strata::kernels::sgd_options{.lr = 0.5}).get().value();

      // The batch's gradient: 0.2 for each use of word 2 (twice), 0.6 for word 5.
      std::vector<float> rows;
      for (float g : {0.2f, 0.6f, 0.2f}) rows.insert(rows.end(), static_cast<std::size_t>(dim), g);
      strata::kvstore::row_sparse grad{tensor_of(rows, {3, dim}), {2, 5, 2}, {vocab, dim}};
      kv.push("embedding", {grad}).get().value();

      const std::vector<std::int64_t> wanted{5, 2, 0};
      auto out = kv.row_sparse_pull("embedding", tensor_of(std::vector<float>(3 * static_cast<std::size_t>(dim)), {3, dim}),
                                    wanted)
                     .get()
                     .value();
      auto got = out.at(0).to_host<float>(s);
      for (std::size_t r = 0; r < wanted.size(); ++r)
        std::printf("row %lld -> %g (first of %lld)\n", static_cast<long long>(wanted[r]),
                    static_cast<double>(got[r * static_cast<std::size_t>(dim)]), static_cast<long long>(dim));

      // Every row: 1 - 0.5 * (sum of its gradient rows); only rows 2 and 5 moved.
      auto all = kv.pull("embedding", tensor_of(std::vector<float>(n), {vocab, dim})).get().value().at(0).to_host<float>(s);
      for (std::int64_t w = 0; w < vocab; ++w) {
        const float expected = w == 2 ? 1.0f - 0.5f * (0.2f + 0.2f) : w == 5 ? 1.0f - 0.5f * 0.6f : 1.0f;
        for (std::int64_t c = 0; c < dim; ++c)
          if (all[static_cast<std::size_t>(w * dim + c)] != expected) {
            std::fprintf(stderr, "kvstore_sparse: row %lld holds %g, expected %g.\n", static_cast<long long>(w),
                         static_cast<double>(all[static_cast<std::size_t>(w * dim + c)]), static_cast<double>(expected));
            status = 1;
            break;
          }
        if (status) break;
      }
      if (!status) std::printf("checked %lld rows: only rows 2 and 5 changed\n", static_cast<long long>(vocab));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvstore_sparse: %s\n", e.what());
      status = 1;
    }
  }
  sys.shutdown();
  return status;
}
