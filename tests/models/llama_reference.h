// A plain Llama forward pass in double precision, straight from a GGUF file:
// no graph, no runtime, no kernels. The engine is checked against it.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/gguf/gguf.h"
#include "tessera/models/model.h"

namespace tessera::testing {

class LlamaReference {
 public:
  explicit LlamaReference(const gguf::File& file) : hp_(read_hparams(file)) {
    auto load = [&](const std::string& name) {
      const gguf::TensorInfo* t = file.find_tensor(name);
      std::vector<float> out(static_cast<size_t>(t->n_elements()));
      dequantize_row(t->type, file.tensor_data(*t).data(), out.data(), t->n_elements());
      return std::vector<double>(out.begin(), out.end());
    };
    embd_ = load("token_embd.weight");
    out_norm_ = load("output_norm.weight");
    out_ = file.find_tensor("output.weight") ? load("output.weight") : embd_;
    for (int64_t i = 0; i < hp_.n_layer; ++i) {
      auto n = [i](const char* w) { return "blk." + std::to_string(i) + "." + w + ".weight"; };
      layers_.push_back({load(n("attn_norm")), load(n("attn_q")), load(n("attn_k")),
                         load(n("attn_v")), load(n("attn_output")), load(n("ffn_norm")),
                         load(n("ffn_gate")), load(n("ffn_up")), load(n("ffn_down"))});
    }
    k_cache_.resize(layers_.size());
    v_cache_.resize(layers_.size());
  }

  // Logits for the next token after feeding `token` at the next position.
  std::vector<double> step(int32_t token) {
    const int64_t e = hp_.n_embd, d = hp_.head_dim, pos = n_past_;
    std::vector<double> x(embd_.begin() + token * e, embd_.begin() + (token + 1) * e);
    for (size_t il = 0; il < layers_.size(); ++il) {
      const Layer& l = layers_[il];
      const auto h = norm(x, l.attn_norm);
      auto q = matvec(l.wq, h, hp_.n_embd_q());
      auto k = matvec(l.wk, h, hp_.n_embd_kv());
      const auto v = matvec(l.wv, h, hp_.n_embd_kv());
      rope(q, hp_.n_head, pos);
      rope(k, hp_.n_head_kv, pos);
      k_cache_[il].push_back(k);
      v_cache_[il].push_back(v);
      std::vector<double> attn(static_cast<size_t>(hp_.n_embd_q()), 0.0);
      const int64_t group = hp_.n_head / hp_.n_head_kv;
      for (int64_t hq = 0; hq < hp_.n_head; ++hq) {
        const int64_t hk = hq / group;
        std::vector<double> s(static_cast<size_t>(pos + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += q[hq * d + c] * k_cache_[il][j][hk * d + c];
          s[j] = dot / std::sqrt(double(d));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& z : s) sum += (z = std::exp(z - mx));
        for (int64_t j = 0; j <= pos; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            attn[hq * d + c] += s[j] / sum * v_cache_[il][j][hk * d + c];
          }
        }
      }
      const auto o = matvec(l.wo, attn, e);
      for (int64_t i = 0; i < e; ++i) x[i] += o[i];
      const auto f = norm(x, l.ffn_norm);
      auto gate = matvec(l.ffn_gate, f, hp_.n_ff);
      const auto up = matvec(l.ffn_up, f, hp_.n_ff);
      for (int64_t i = 0; i < hp_.n_ff; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      const auto down = matvec(l.ffn_down, gate, e);
      for (int64_t i = 0; i < e; ++i) x[i] += down[i];
    }
    n_past_ += 1;
    return matvec(out_, norm(x, out_norm_), hp_.n_vocab);
  }

  const Hparams& hparams() const { return hp_; }

 private:
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, wo, ffn_norm, ffn_gate, ffn_up, ffn_down;
  };

  // W is stored as `rows` rows of x.size() inputs (GGUF ne0 = inputs).
  static std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x,
                                    int64_t rows) {
    std::vector<double> y(static_cast<size_t>(rows));
    const size_t n = x.size();
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (size_t c = 0; c < n; ++c) s += w[r * n + c] * x[c];
      y[r] = s;
    }
    return y;
  }

  std::vector<double> norm(const std::vector<double>& x, const std::vector<double>& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + hp_.norm_rms_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
    return y;
  }

  // "Normal" RoPE: adjacent pairs (2i, 2i+1) of the first n_rot dims rotate
  // by pos * base^(-2i / n_rot) * freq_scale.
  void rope(std::vector<double>& v, int64_t heads, int64_t pos) const {
    const int64_t d = hp_.head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < hp_.n_rot; i += 2) {
        const double theta = pos * hp_.rope_freq_scale *
                             std::pow(double(hp_.rope_freq_base), -double(i) / hp_.n_rot);
        const double c = std::cos(theta), s = std::sin(theta);
        double& a = v[h * d + i];
        double& b = v[h * d + i + 1];
        const double a0 = a, b0 = b;
        a = a0 * c - b0 * s;
        b = a0 * s + b0 * c;
      }
    }
  }

  Hparams hp_;
  std::vector<double> embd_, out_norm_, out_;
  std::vector<Layer> layers_;
  std::vector<std::vector<std::vector<double>>> k_cache_, v_cache_;
  int64_t n_past_ = 0;
};

}  // namespace tessera::testing
