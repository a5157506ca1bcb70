// ROPE, normal and NeoX, with frequency factors and YaRN: one block per row,
// a thread per rotated pair. The angle is built as the CPU builds it
// (theta = pos * base^(-2k/n) by k repeated products), so both round alike.
#include "cuda/ops/device.cuh"

namespace tessera::cuda::k {
namespace {

constexpr int kBlock = 128;

__global__ void rope_kernel(Arr a, Arr pos, Arr factors, Arr d, Rope p) {
  int64_t row = blockIdx.x;
  const int64_t i1 = row % d.ne[1];
  row /= d.ne[1];
  const int64_t i2 = row % d.ne[2];
  const int64_t i3 = row / d.ne[2];
  const int half = p.n_dims / 2;
  const float position = static_cast<float>(*reinterpret_cast<const int32_t*>(at(pos, i2, 0, 0, 0)));
  const float theta_scale = p.theta_scale;
  for (int k = threadIdx.x; k < half; k += blockDim.x) {
    float theta_extrap = position;
    for (int j = 0; j < k; ++j) theta_extrap *= theta_scale;
    const float factor = factors.data != nullptr ? load(at(factors, k, 0, 0, 0), kF32) : 1.0f;
    const float extrap = theta_extrap / factor;
    const float interp = p.freq_scale * extrap;
    float theta = interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float y = (static_cast<float>(k) - p.yarn_low) / fmaxf(0.001f, p.yarn_high - p.yarn_low);
      const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * p.ext_factor;
      theta = interp * (1.0f - ramp) + extrap * ramp;
      mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
    }
    const float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
    const int64_t j0 = p.neox ? k : 2 * k;
    const int64_t j1 = p.neox ? k + half : 2 * k + 1;
    const float x0 = load(at(a, j0, i1, i2, i3), a.type);
    const float x1 = load(at(a, j1, i1, i2, i3), a.type);
    store(at(d, j0, i1, i2, i3), d.type, x0 * c - x1 * s);
    store(at(d, j1, i1, i2, i3), d.type, x0 * s + x1 * c);
  }
  for (int64_t j = p.n_dims + threadIdx.x; j < d.ne[0]; j += blockDim.x) {
    store(at(d, j, i1, i2, i3), d.type, load(at(a, j, i1, i2, i3), a.type));
  }
}

}  // namespace

void rope(cudaStream_t s, const Arr& a, const Arr& pos, const Arr& factors, const Arr& d,
          const Rope& p) {
  const int64_t rows = d.ne[1] * d.ne[2] * d.ne[3];
  if (rows > 0) rope_kernel<<<static_cast<unsigned>(rows), kBlock, 0, s>>>(a, pos, factors, d, p);
}

}  // namespace tessera::cuda::k
