// The kernels composed into a 2-layer LSTM stack and a tiny language-model training step,
// checked against results recorded with PyTorch (tests/fixtures/torch, format in its README).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "reference.hpp"
#include "strata/kernels/cpu.hpp"

namespace sk = strata::kernels;
namespace ref = strata::kernels::test;
using nlohmann::json;

namespace torch_fixtures_test {

// Agreement with PyTorch's float32 results: max|a - b| <= 1e-4 * max|b| per tensor.
constexpr double k_torch_tol = 1e-4;

const std::filesystem::path fixture_dir = STRATA_TORCH_FIXTURES_DIR;

json load(const std::string& name) {
  std::ifstream in(fixture_dir / name);
  BOOST_REQUIRE_MESSAGE(in.good(), "cannot open " << (fixture_dir / name));
  return json::parse(in);
}

ref::fvec tensor(const json& t) {
  ref::fvec v;
  for (const auto& x : t.at("data")) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

ref::vec tensor64(const json& t) {
  ref::vec v;
  for (const auto& x : t.at("data")) v.push_back(x.get<double>());
  return v;
}

std::vector<std::int32_t> ids(const json& t) {
  std::vector<std::int32_t> v;
  for (const auto& x : t.at("data")) v.push_back(static_cast<std::int32_t>(x.get<std::int64_t>()));
  return v;
}

// Largest error seen, reported at the end of each test (BOOST_TEST_LOG_LEVEL=message).
double worst_error = 0.0;

void check(std::span<const float> got, const json& expected, const std::string& what) {
  const ref::vec e = tensor64(expected);
  BOOST_REQUIRE_EQUAL(got.size(), e.size());
  const double err = ref::relative_error(got, e);
  worst_error = std::max(worst_error, err);
  BOOST_TEST(err <= k_torch_tol, what << ": relative error " << err);
}

void check_number(double got, double expected, const std::string& what) {
  worst_error = std::max(worst_error, std::abs(got - expected) / std::abs(expected));
  BOOST_TEST(std::abs(got - expected) <= k_torch_tol * std::abs(expected), what << ": " << got << " vs " << expected);
}

bool have_fixtures() {
  if (std::filesystem::exists(fixture_dir / "lstm_stack.json") && std::filesystem::exists(fixture_dir / "lm_step.json")) return true;
  BOOST_TEST_MESSAGE("no PyTorch fixtures under " << fixture_dir << "; skipped");
  return false;
}

// One LSTM layer's buffers for a forward and backward pass.
struct layer_run {
  sk::lstm_dims d;
  ref::fvec y, h_out, c_out, reserve;
  ref::fvec dx, dh_in, dc_in, dw_ih, dw_hh, db_ih, db_hh;
  explicit layer_run(sk::lstm_dims dims)
      : d(dims), y(dims.steps * dims.batch * dims.hidden), h_out(dims.batch * dims.hidden), c_out(h_out.size()),
        reserve(sk::lstm_reserve_size(dims)), dx(dims.steps * dims.batch * dims.input), dh_in(h_out.size()),
        dc_in(h_out.size()), dw_ih(4 * dims.hidden * dims.input), dw_hh(4 * dims.hidden * dims.hidden),
        db_ih(4 * dims.hidden), db_hh(4 * dims.hidden) {}
  void forward(const sk::lstm_weights& w, const float* x, const float* h0, const float* c0) {
    sk::cpu::lstm_forward(d, w, {.x = x, .h_in = h0, .c_in = c0, .y = y.data(), .h_out = h_out.data(),
                                 .c_out = c_out.data(), .reserve = reserve.data()});
  }
  void backward(const sk::lstm_weights& w, const float* x, const float* dy, const float* dh, const float* dc) {
    ref::fvec work(sk::lstm_backward_workspace_size(d));
    sk::cpu::lstm_backward(d, w, {.x = x, .reserve = reserve.data(), .dy = dy, .dh_out = dh, .dc_out = dc, .dx = dx.data(),
                                  .dh_in = dh_in.data(), .dc_in = dc_in.data(), .workspace = work.data()},
                           {dw_ih.data(), dw_hh.data(), db_ih.data(), db_hh.data()});
  }
};

using param_map = std::map<std::string, ref::fvec>;

sk::lstm_weights lstm_weights(const param_map& p, const std::string& prefix, int layer) {
  const std::string l = std::to_string(layer);
  return {p.at(prefix + "weight_ih_l" + l).data(), p.at(prefix + "weight_hh_l" + l).data(),
          p.at(prefix + "bias_ih_l" + l).data(), p.at(prefix + "bias_hh_l" + l).data()};
}

// The language model of lm_step.json: embedding -> 2 LSTM layers (zero state) -> linear +
// mean cross-entropy. Returns the loss and the gradients of every parameter (overwritten).
double lm_loss_and_grads(const json& cfg, const param_map& p, const std::vector<std::int32_t>& tokens,
                         const std::vector<std::int32_t>& targets, param_map& g) {
  const auto V = cfg.at("vocab_size").get<std::size_t>(), E = cfg.at("embed_size").get<std::size_t>(),
             H = cfg.at("hidden_size").get<std::size_t>(), T = cfg.at("seq_len").get<std::size_t>(),
             B = cfg.at("batch").get<std::size_t>();
  for (auto& [name, v] : g) sk::cpu::fill(v.size(), 0.0f, v.data());  // zero_grad
  ref::fvec emb(T * B * E);
  sk::cpu::embedding_forward(V, E, p.at("embedding.weight").data(), T * B, tokens.data(), emb.data());
  layer_run l0({T, B, E, H}), l1({T, B, H, H});
  l0.forward(lstm_weights(p, "lstm.", 0), emb.data(), nullptr, nullptr);
  l1.forward(lstm_weights(p, "lstm.", 1), l0.y.data(), nullptr, nullptr);
  const sk::linear_cross_entropy_dims xd{T * B, H, V};
  ref::fvec ws(sk::linear_cross_entropy_workspace_size(xd, T * B)), dtop(T * B * H);
  const double loss = sk::cpu::linear_cross_entropy_forward_backward(
      xd, {l1.y.data(), p.at("decoder.weight").data(), p.at("decoder.bias").data(), targets.data(), sk::loss_reduction::mean},
      {dtop.data(), g.at("decoder.weight").data(), g.at("decoder.bias").data()}, ws.data(), ws.size());
  l1.backward(lstm_weights(p, "lstm.", 1), l0.y.data(), dtop.data(), nullptr, nullptr);
  l0.backward(lstm_weights(p, "lstm.", 0), emb.data(), l1.dx.data(), nullptr, nullptr);
  for (int l = 0; l < 2; ++l) {
    const layer_run& r = l == 0 ? l0 : l1;
    const std::string s = std::to_string(l);
    g.at("lstm.weight_ih_l" + s) = r.dw_ih;
    g.at("lstm.weight_hh_l" + s) = r.dw_hh;
    g.at("lstm.bias_ih_l" + s) = r.db_ih;
    g.at("lstm.bias_hh_l" + s) = r.db_hh;
  }
  sk::cpu::embedding_backward(V, E, T * B, tokens.data(), l0.dx.data(), g.at("embedding.weight").data());
  return loss;
}

std::vector<std::span<float>> spans(param_map& m, const json& names) {
  std::vector<std::span<float>> v;
  for (const auto& n : names) v.emplace_back(m.at(n.get<std::string>()));
  return v;
}

BOOST_AUTO_TEST_SUITE(torch_fixtures)

BOOST_AUTO_TEST_CASE(two_layer_lstm_forward_and_backward_match_pytorch) {
  if (!have_fixtures()) return;
  worst_error = 0.0;
  const json f = load("lstm_stack.json");
  const json& cfg = f.at("config");
  const auto I = cfg.at("input_size").get<std::size_t>(), H = cfg.at("hidden_size").get<std::size_t>(),
             T = cfg.at("seq_len").get<std::size_t>(), B = cfg.at("batch").get<std::size_t>();
  BOOST_REQUIRE_EQUAL(cfg.at("num_layers").get<int>(), 2);
  param_map p;
  for (const auto& n : f.at("param_names")) p[n.get<std::string>()] = tensor(f.at("params").at(n.get<std::string>()));
  const ref::fvec x = tensor(f.at("inputs").at("x")), h0 = tensor(f.at("inputs").at("h0")), c0 = tensor(f.at("inputs").at("c0"));
  const ref::fvec r = tensor(f.at("loss").at("r")), rh = tensor(f.at("loss").at("rh")), rc = tensor(f.at("loss").at("rc"));
  const std::size_t bh = B * H;

  layer_run l0({T, B, I, H}), l1({T, B, H, H});
  l0.forward(lstm_weights(p, "", 0), x.data(), h0.data(), c0.data());
  l1.forward(lstm_weights(p, "", 1), l0.y.data(), h0.data() + bh, c0.data() + bh);
  check(l1.y, f.at("outputs").at("y"), "y");
  ref::fvec h_n(l0.h_out), c_n(l0.c_out);
  h_n.insert(h_n.end(), l1.h_out.begin(), l1.h_out.end());
  c_n.insert(c_n.end(), l1.c_out.begin(), l1.c_out.end());
  check(h_n, f.at("outputs").at("h_n"), "h_n");
  check(c_n, f.at("outputs").at("c_n"), "c_n");
  double loss = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) loss += static_cast<double>(l1.y[i]) * r[i];
  for (std::size_t i = 0; i < rh.size(); ++i) loss += static_cast<double>(h_n[i]) * rh[i] + static_cast<double>(c_n[i]) * rc[i];
  check_number(loss, f.at("loss").at("value").get<double>(), "loss");

  l1.backward(lstm_weights(p, "", 1), l0.y.data(), r.data(), rh.data() + bh, rc.data() + bh);
  l0.backward(lstm_weights(p, "", 0), x.data(), l1.dx.data(), rh.data(), rc.data());
  const json& g = f.at("grads");
  check(l0.dx, g.at("x"), "dx");
  ref::fvec dh0(l0.dh_in), dc0(l0.dc_in);
  dh0.insert(dh0.end(), l1.dh_in.begin(), l1.dh_in.end());
  dc0.insert(dc0.end(), l1.dc_in.begin(), l1.dc_in.end());
  check(dh0, g.at("h0"), "dh0");
  check(dc0, g.at("c0"), "dc0");
  for (int l = 0; l < 2; ++l) {
    const layer_run& lr = l == 0 ? l0 : l1;
    const std::string s = std::to_string(l);
    check(lr.dw_ih, g.at("weight_ih_l" + s), "dweight_ih_l" + s);
    check(lr.dw_hh, g.at("weight_hh_l" + s), "dweight_hh_l" + s);
    check(lr.db_ih, g.at("bias_ih_l" + s), "dbias_ih_l" + s);
    check(lr.db_hh, g.at("bias_hh_l" + s), "dbias_hh_l" + s);
  }
  BOOST_TEST_MESSAGE("lstm_stack: largest relative error against PyTorch " << worst_error);
}

BOOST_AUTO_TEST_CASE(language_model_training_steps_match_pytorch_sgd_with_clipping) {
  if (!have_fixtures()) return;
  worst_error = 0.0;
  const json f = load("lm_step.json");
  const json& cfg = f.at("config");
  const json& names = f.at("param_names");
  const auto tokens = ids(f.at("tokens")), targets = ids(f.at("targets"));
  const double max_norm = cfg.at("max_norm").get<double>();
  param_map initial, g;
  for (const auto& n : names) {
    initial[n.get<std::string>()] = tensor(f.at("params").at(n.get<std::string>()));
    g[n.get<std::string>()] = ref::fvec(initial[n.get<std::string>()].size());
  }

  // Variant 1: one plain SGD step, every intermediate checked.
  {
    const json& v = f.at("sgd");
    param_map p = initial;
    const double loss = lm_loss_and_grads(cfg, p, tokens, targets, g);
    check_number(loss, v.at("loss").get<double>(), "loss");
    for (const auto& n : names) check(g.at(n.get<std::string>()), v.at("grads").at(n.get<std::string>()), "grad " + n.get<std::string>());
    const double norm = sk::cpu::clip_grad_norm(spans(g, names), max_norm);
    check_number(norm, v.at("grad_norm").get<double>(), "grad_norm");
    check_number(std::min(1.0, max_norm / (norm + 1e-6)), v.at("clip_coef").get<double>(), "clip_coef");
    for (const auto& n : names) check(g.at(n.get<std::string>()), v.at("clipped_grads").at(n.get<std::string>()), "clipped " + n.get<std::string>());
    const json& o = v.at("optimizer");
    const sk::sgd_options opt{.lr = o.at("lr").get<double>(), .momentum = o.at("momentum").get<double>(),
                              .weight_decay = o.at("weight_decay").get<double>(), .nesterov = o.at("nesterov").get<bool>()};
    for (const auto& n : names) {
      auto& pv = p.at(n.get<std::string>());
      sk::cpu::sgd_step(pv.size(), pv.data(), g.at(n.get<std::string>()).data(), nullptr, opt);
      check(pv, v.at("params_after").at(n.get<std::string>()), "params_after " + n.get<std::string>());
    }
  }

  // Variant 2: two steps with momentum and weight decay, from fresh (zero) momentum buffers.
  {
    const json& v = f.at("sgd_momentum");
    const json& o = v.at("optimizer");
    const sk::sgd_options opt{.lr = o.at("lr").get<double>(), .momentum = o.at("momentum").get<double>(),
                              .weight_decay = o.at("weight_decay").get<double>(), .nesterov = o.at("nesterov").get<bool>()};
    param_map p = initial, buf;
    for (const auto& [name, t] : p) buf[name] = ref::fvec(t.size(), 0.0f);
    for (const auto& step : v.at("steps")) {
      const double loss = lm_loss_and_grads(cfg, p, tokens, targets, g);
      check_number(loss, step.at("loss").get<double>(), "momentum step loss");
      check_number(sk::cpu::clip_grad_norm(spans(g, names), max_norm), step.at("grad_norm").get<double>(), "momentum grad_norm");
      for (const auto& n : names) {
        const std::string s = n.get<std::string>();
        sk::cpu::sgd_step(p.at(s).size(), p.at(s).data(), g.at(s).data(), buf.at(s).data(), opt);
        check(p.at(s), step.at("params_after").at(s), "momentum params_after " + s);
        check(buf.at(s), step.at("momentum_buffer_after").at(s), "momentum buffer " + s);
      }
    }
  }
  BOOST_TEST_MESSAGE("lm_step: largest relative error against PyTorch " << worst_error);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace torch_fixtures_test
