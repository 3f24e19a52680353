// The whole DDIM denoising loop of the FiLM 1-D U-Net (diffpolicy_ros/models/unet1d.py) in one C++ call,
// for the CPU fast path (diffpolicy_ros/models/native.py builds it and lays out the weights).
//
// Why: at batch 1 the U-Net's GEMMs are bound by streaming the weights (~14 MB per denoising step), and the
// rest of a TorchScript step is per-operator overhead (interpreter, allocation, layout copies around every
// conv, GroupNorm, Mish). Here activations stay token-major [B*L, C] so every convolution is one im2col copy
// and one MKL GEMM against a weight pre-transposed to [K*C_in, C_out]; bias, GroupNorm, Mish, FiLM and the
// residual add are fused loops over a few KB that stay in L1; the DDIM update runs between the steps with no
// tensor round trips. Same maths as the eager model; sums are reordered, so results agree to float tolerance.
#include <torch/extension.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using at::Tensor;

struct Conv {
  Tensor wt;    // [K*C_in, C_out], row (k, c_in)
  Tensor bias;  // [C_out]
  int64_t k, stride, pad;
  bool transpose;  // ConvTranspose1d
};

// Columns of the packed DDIM coefficients: NoiseSchedule.step_coefficients -> StepCoefficients.packed(), whose
// field order coef_names() returns (a test compares them).
enum Coef { kSqrtAlphaBar, kSqrtOneMinusAlphaBar, kSqrtAlphaBarPrev, kDirection, kSigma, kNumCoefs };

std::vector<std::string> coef_names() {
  return {"sqrt_alpha_bar", "sqrt_one_minus_alpha_bar", "sqrt_alpha_bar_prev", "direction", "sigma"};
}

struct Norm {
  const float* gamma;
  const float* beta;
  int64_t groups;
};

struct Reader {  // walks the flat weight list and its layout in the order native.py writes them
  const std::vector<Tensor>& w;
  const std::vector<int64_t>& convs;  // (kernel, stride, padding, transposed) per conv
  const std::vector<int64_t>& norms;  // groups per GroupNorm
  size_t i = 0, ci = 0, ni = 0;
  Tensor next() {
    TORCH_CHECK(i < w.size(), "unet_ddim: the weight list is shorter than the layout needs");
    const Tensor& t = w[i++];
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.device().is_cpu(),
                "unet_ddim: weights must be contiguous float32 CPU tensors");
    return t;
  }
  Conv conv() {
    TORCH_CHECK(ci + 4 <= convs.size(), "unet_ddim: the conv layout is shorter than the net needs");
    const int64_t k = convs[ci], stride = convs[ci + 1], pad = convs[ci + 2];
    const bool transpose = convs[ci + 3] != 0;
    ci += 4;
    TORCH_CHECK(k > 0 && stride > 0 && pad >= 0, "unet_ddim: bad conv layout (k ", k, ", stride ", stride, ")");
    Tensor wt = next();
    Tensor b = next();
    TORCH_CHECK(wt.dim() == 2 && wt.size(0) % k == 0 && b.numel() == wt.size(1),
                "unet_ddim: a conv weight does not match its layout (kernel ", k, ")");
    return {wt, b, k, stride, pad, transpose};
  }
  Norm norm() {
    TORCH_CHECK(ni < norms.size() && norms[ni] > 0, "unet_ddim: the norm layout is shorter than the net needs");
    const int64_t groups = norms[ni++];
    Tensor g = next();
    Tensor b = next();
    TORCH_CHECK(g.numel() % groups == 0, "unet_ddim: GroupNorm channels not divisible by its groups");
    return {g.data_ptr<float>(), b.data_ptr<float>(), groups};
  }
};

// im2col in token-major layout, then one GEMM. x: [B*L, C_in] -> [B*L_out, C_out].
Tensor conv1d(const Tensor& x, int64_t B, int64_t L, const Conv& c, int64_t& L_out) {
  const int64_t c_in = x.size(1);
  if (c.k == 1 && c.stride == 1 && c.pad == 0 && !c.transpose) {
    L_out = L;
    return at::addmm(c.bias, x, c.wt);
  }
  L_out = c.transpose ? (L - 1) * c.stride - 2 * c.pad + c.k : (L + 2 * c.pad - c.k) / c.stride + 1;
  Tensor cols = at::zeros({B * L_out, c.k * c_in}, x.options());
  const float* src = x.data_ptr<float>();
  float* dst = cols.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < L_out; ++o)
      for (int64_t j = 0; j < c.k; ++j) {
        int64_t i;
        if (c.transpose) {  // output o receives input i through tap j when o = i*stride + j - pad
          const int64_t num = o + c.pad - j;
          if (num < 0 || num % c.stride) continue;
          i = num / c.stride;
        } else {
          i = o * c.stride + j - c.pad;
        }
        if (i < 0 || i >= L) continue;
        std::memcpy(dst + ((b * L_out + o) * c.k + j) * c_in, src + (b * L + i) * c_in, c_in * sizeof(float));
      }
  return at::addmm(c.bias, cols, c.wt);
}

inline float mish(float v) {
  // x * tanh(softplus(x)) = x * n(n+2) / (n(n+2) + 2), n = e^x; for large x it is x (and e^x overflows)
  if (v > 20.f) return v;
  const float n = std::exp(v);
  const float t = n * (n + 2.f);
  return v * t / (t + 2.f);
}

// In place on h [B*L, C]: GroupNorm -> Mish -> optional FiLM (scale, shift: [B, 2C] row per sample).
void norm_mish_film(Tensor& h, int64_t B, int64_t L, const Norm& n, const float* film, int64_t film_stride) {
  const int64_t C = h.size(1), per = C / n.groups;
  float* d = h.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    float* hb = d + b * L * C;
    for (int64_t g = 0; g < n.groups; ++g) {
      double sum = 0.0, sq = 0.0;
      for (int64_t l = 0; l < L; ++l)
        for (int64_t c = g * per; c < (g + 1) * per; ++c) sum += hb[l * C + c];
      const double mean = sum / double(L * per);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t c = g * per; c < (g + 1) * per; ++c) {
          const double v = hb[l * C + c] - mean;
          sq += v * v;
        }
      const float rstd = float(1.0 / std::sqrt(sq / double(L * per) + 1e-5));
      const float m = float(mean);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t c = g * per; c < (g + 1) * per; ++c) {
          float v = mish((hb[l * C + c] - m) * rstd * n.gamma[c] + n.beta[c]);
          if (film) v = v * film[b * film_stride + c] + film[b * film_stride + C + c];
          hb[l * C + c] = v;
        }
    }
  }
}

struct Block {
  Conv c1, c2;
  Norm n1, n2;
  bool has_res;
  Conv res;
  int64_t c_out, film_offset;
};

struct Net {
  std::vector<std::vector<Block>> down, up;
  std::vector<Conv> down_sample, up_sample;
  std::vector<Block> mid;
  Conv final_conv, final_out;
  Norm final_norm;
  int64_t film_size = 0;  // every block's [scale, shift] per sample
};

Tensor block_forward(const Tensor& x, int64_t B, int64_t L, const Block& blk, const float* films, int64_t F) {
  int64_t L_out;
  Tensor h = conv1d(x, B, L, blk.c1, L_out);
  norm_mish_film(h, B, L, blk.n1, films + blk.film_offset, F);
  Tensor h2 = conv1d(h, B, L, blk.c2, L_out);
  norm_mish_film(h2, B, L, blk.n2, nullptr, 0);
  if (blk.has_res) {
    Tensor r = conv1d(x, B, L, blk.res, L_out);
    h2.add_(r);
  } else {
    h2.add_(x);
  }
  return h2;
}

Tensor unet_forward(const Net& net, const Tensor& x, int64_t B, int64_t L0, const float* films, int64_t F) {
  Tensor h = x;
  int64_t L = L0;
  std::vector<std::pair<Tensor, int64_t>> skips;
  for (size_t lvl = 0; lvl < net.down.size(); ++lvl) {
    for (const Block& blk : net.down[lvl]) h = block_forward(h, B, L, blk, films, F);
    skips.emplace_back(h, L);
    if (lvl < net.down_sample.size()) {
      int64_t L_out;
      h = conv1d(h, B, L, net.down_sample[lvl], L_out);
      L = L_out;
    }
  }
  for (const Block& blk : net.mid) h = block_forward(h, B, L, blk, films, F);
  for (size_t lvl = 0; lvl < net.up.size(); ++lvl) {
    h = at::cat({h, skips.back().first}, 1);  // channel concat in token-major layout
    skips.pop_back();
    for (const Block& blk : net.up[lvl]) h = block_forward(h, B, L, blk, films, F);
    int64_t L_out;
    h = conv1d(h, B, L, net.up_sample[lvl], L_out);
    L = L_out;
  }
  int64_t L_out;
  h = conv1d(h, B, L, net.final_conv, L_out);
  norm_mish_film(h, B, L, net.final_norm, nullptr, 0);
  return conv1d(h, B, L, net.final_out, L_out);
}

Net read_net(const std::vector<Tensor>& weights, const std::vector<int64_t>& dims, const std::vector<int64_t>& convs,
             const std::vector<int64_t>& norms) {
  Reader r{weights, convs, norms};
  Net net;
  int64_t film_offset = 0;
  auto block = [&](int64_t c_in, int64_t c_out) {
    Block b;
    b.c1 = r.conv();
    b.n1 = r.norm();
    b.c2 = r.conv();
    b.n2 = r.norm();
    b.has_res = c_in != c_out;
    if (b.has_res) b.res = r.conv();
    b.c_out = c_out;
    b.film_offset = film_offset;
    film_offset += 2 * c_out;
    return b;
  };
  const size_t levels = dims.size() - 1;
  for (size_t i = 0; i < levels; ++i) {
    net.down.push_back({block(dims[i], dims[i + 1]), block(dims[i + 1], dims[i + 1])});
    if (i + 1 < levels) net.down_sample.push_back(r.conv());
  }
  net.mid = {block(dims[levels], dims[levels]), block(dims[levels], dims[levels])};
  for (size_t i = levels - 1; i >= 1; --i) {  // up levels mirror the down path, without the outermost
    net.up.push_back({block(2 * dims[i + 1], dims[i]), block(dims[i], dims[i])});
    net.up_sample.push_back(r.conv());
  }
  net.final_conv = r.conv();
  net.final_norm = r.norm();
  net.final_out = r.conv();
  TORCH_CHECK(r.i == weights.size(), "unet_ddim: ", weights.size(), " weights given, the layout uses ", r.i);
  TORCH_CHECK(r.ci == convs.size() && r.ni == norms.size(), "unet_ddim: the layout describes more layers than the net");
  net.film_size = film_offset;
  return net;
}

}  // namespace

// x: x_T [B, H, A]; films: [K, B, F] (every block's FiLM scale/shift for each step); coefs: [K, kNumCoefs]
// (StepCoefficients.packed()); stds: [K]; step_noise: [K, B, H, A] (used when stochastic); committed: [B, H, A]
// and committed_weights: [H] (real-time chunking: x0_hat pulled towards the committed actions, scheduler.Committed;
// all-zero weights: none); weights, convs, norms: native.unet_layout(). Returns x_0 [B, H, A] (not clipped), or
// with return_chain the chain [K + 1, B, H, A] from x_T to x_0 (what PPO records: models/diffusion_policy.py).
Tensor unet_ddim(Tensor x, Tensor films, Tensor coefs, Tensor stds, Tensor step_noise, Tensor committed,
                 Tensor committed_weights, std::vector<Tensor> weights, std::vector<int64_t> dims,
                 std::vector<int64_t> convs, std::vector<int64_t> norms, bool clip_sample, bool stochastic,
                 bool return_chain) {
  TORCH_CHECK(x.dim() == 3 && x.scalar_type() == at::kFloat && x.device().is_cpu(),
              "unet_ddim: x must be [B, H, A] float32 on the CPU");
  at::NoGradGuard no_grad;
  const int64_t B = x.size(0), H = x.size(1), A = x.size(2);
  TORCH_CHECK(films.dim() == 3 && films.size(1) == B && films.scalar_type() == at::kFloat,
              "unet_ddim: films must be [K, B, F] float32");
  const int64_t K = films.size(0), F = films.size(2);
  TORCH_CHECK(coefs.dim() == 2 && coefs.size(0) == K && coefs.size(1) == kNumCoefs && stds.numel() == K,
              "unet_ddim: coefs must be [K, ", kNumCoefs, "] and stds [K]");
  TORCH_CHECK(!stochastic || (step_noise.dim() == 4 && step_noise.size(0) == K && step_noise.size(1) == B &&
                              step_noise.size(2) == H && step_noise.size(3) == A),
              "unet_ddim: step_noise must be [K, B, H, A]");
  TORCH_CHECK(committed.dim() == 3 && committed.size(0) == B && committed.size(1) == H && committed.size(2) == A &&
                  committed_weights.numel() == H,
              "unet_ddim: committed must be [B, H, A] and committed_weights [H]");
  const Net net = read_net(weights, dims, convs, norms);
  TORCH_CHECK(net.film_size == F, "unet_ddim: films carry ", F, " values per sample, the net needs ", net.film_size);
  const Conv& first = net.down.at(0).at(0).c1;
  TORCH_CHECK(first.wt.size(0) == first.k * A, "unet_ddim: the first conv does not take ", A, " action dims");
  // Owned, contiguous float32 copies: every raw pointer below points into one of these.
  films = films.contiguous();
  coefs = coefs.to(at::kFloat).contiguous();
  stds = stds.to(at::kFloat).contiguous();
  step_noise = step_noise.to(at::kFloat).contiguous();
  committed = committed.to(at::kFloat).contiguous();
  committed_weights = committed_weights.to(at::kFloat).contiguous();
  const float* cw = committed_weights.data_ptr<float>();
  const float* ca = committed.data_ptr<float>();
  bool inpaint = false;
  for (int64_t h = 0; h < H; ++h) inpaint |= cw[h] != 0.f;
  Tensor cur = x.reshape({B * H, A}).clone();
  const int64_t n = cur.numel();
  Tensor chain;
  if (return_chain) {
    chain = at::empty({K + 1, B * H, A}, cur.options());
    chain[0].copy_(cur);
  }
  for (int64_t k = 0; k < K; ++k) {
    Tensor eps = unet_forward(net, cur, B, H, films.data_ptr<float>() + k * B * F, F);
    TORCH_CHECK(eps.size(1) == A, "unet_ddim: the net predicts ", eps.size(1), " action dims, x has ", A);
    const float* c = coefs.data_ptr<float>() + kNumCoefs * k;
    const float* e = eps.data_ptr<float>();
    const float* z = stochastic ? step_noise.data_ptr<float>() + k * n : nullptr;
    const float std_k = stds.data_ptr<float>()[k];
    float* xs = cur.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {  // scheduler.step_mean, then the step's noise
      float x0 = (xs[i] - c[kSqrtOneMinusAlphaBar] * e[i]) / c[kSqrtAlphaBar];
      if (clip_sample) x0 = x0 > 1.f ? 1.f : (x0 < -1.f ? -1.f : x0);  // like torch.clamp, NaN stays NaN
      if (inpaint) x0 += cw[(i / A) % H] * (ca[i] - x0);  // rows are (b, h), A values each
      float v = c[kSqrtAlphaBarPrev] * x0 + c[kDirection] * e[i];
      if (z) v += std_k * z[i];
      xs[i] = v;
    }
    if (return_chain) chain[k + 1].copy_(cur);
  }
  return return_chain ? chain.view({K + 1, B, H, A}) : cur.view({B, H, A});
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("unet_ddim", &unet_ddim, "DDIM loop of the FiLM 1-D U-Net (token-major, fused epilogues)");
  m.def("coef_names", &coef_names, "the column order of the packed DDIM coefficients this kernel reads");
}
