// Elementwise kernels over 4-D arrays of any strides: one thread per output
// element in a grid-stride loop.
#include "cuda/ops/device.cuh"

namespace tessera::cuda::k {
namespace {

constexpr int kBlock = 256;

#define TESSERA_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

__global__ void binary_kernel(Binary op, Arr a, Arr b, Arr d) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    const float va = load(at(a, x.i0, x.i1, x.i2, x.i3), a.type);
    const float vb = load(at(b, x.i0 % b.ne[0], x.i1 % b.ne[1], x.i2 % b.ne[2], x.i3 % b.ne[3]), b.type);
    float r;
    switch (op) {
      case Binary::kAdd: r = va + vb; break;
      case Binary::kSub: r = va - vb; break;
      case Binary::kMul: r = va * vb; break;
      default: r = va / vb; break;
    }
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type, r);
  }
}

__global__ void scale_kernel(Arr a, Arr d, float mul, float add) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type,
          load(at(a, x.i0, x.i1, x.i2, x.i3), a.type) * mul + add);
  }
}

// ggml's tanh approximation 0.5 x (1 + tanh(z)), written as x / (1 + exp(-2z)) like the CPU's:
// 1 + tanh(z) cancels for x below about -3.
__device__ float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  return x / (1.0f + expf(-2.0f * kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

__device__ float apply(Unary op, float param, float x) {
  switch (op) {
    case Unary::kGelu: return gelu(x);
    case Unary::kGeluQuick: return x / (1.0f + expf(-1.702f * x));
    case Unary::kSilu: return x / (1.0f + expf(-x));
    case Unary::kRelu: return fmaxf(x, 0.0f);
    case Unary::kLeakyRelu: return x > 0.0f ? x : param * x;
    case Unary::kHardSigmoid: return fminf(1.0f, fmaxf(0.0f, (x + 3.0f) / 6.0f));
    case Unary::kHardSwish: return x * fminf(1.0f, fmaxf(0.0f, (x + 3.0f) / 6.0f));
    case Unary::kSigmoid: return 1.0f / (1.0f + expf(-x));
    default: return tanhf(x);
  }
}

__global__ void unary_kernel(Unary op, float param, Arr a, Arr d) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type,
          apply(op, param, load(at(a, x.i0, x.i1, x.i2, x.i3), a.type)));
  }
}

// As the CPU: NaN passes through, and lo wins when lo > hi.
__device__ __forceinline__ float clamped(float x, float lo, float hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

__global__ void clamp_kernel(Arr a, Arr d, float lo, float hi) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type,
          clamped(load(at(a, x.i0, x.i1, x.i2, x.i3), a.type), lo, hi));
  }
}

__global__ void glu_kernel(Glu op, Arr gate, Arr up, Arr d) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    const float g = load(at(gate, x.i0, x.i1, x.i2, x.i3), gate.type);
    const float u = load(at(up, x.i0, x.i1, x.i2, x.i3), up.type);
    const float act = op == Glu::kSwiglu ? g / (1.0f + expf(-g)) : gelu(g);
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type, act * u);
  }
}

// gpt-oss's clamped SwiGLU, as the CPU computes it (std::min, std::clamp).
__global__ void swiglu_oai_kernel(Arr gate, Arr up, Arr d, float alpha, float limit) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    const float g = load(at(gate, x.i0, x.i1, x.i2, x.i3), gate.type);
    const float u = load(at(up, x.i0, x.i1, x.i2, x.i3), up.type);
    const float gx = limit < g ? limit : g;
    const float uy = u < -limit ? -limit : (limit < u ? limit : u);
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type, gx / (1.0f + expf(alpha * -gx)) * (uy + 1.0f));
  }
}

// d[i0, i1, i2] = a[i0, i1, i2] + b[i0, ids[i1, i2]]; an id outside b's rows
// sets *bad (the stream reports it) and adds nothing.
__global__ void add_id_kernel(Arr a, Arr b, Arr ids, Arr d, int* bad) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index x = unflatten(i, d.ne);
    const int64_t id = *reinterpret_cast<const int32_t*>(at(ids, x.i1, x.i2, 0, 0));
    float v = load(at(a, x.i0, x.i1, x.i2, x.i3), a.type);
    if (id >= 0 && id < b.ne[1]) {
      v += load(at(b, x.i0, id, 0, 0), b.type);
    } else {
      *bad = 1;
    }
    store(at(d, x.i0, x.i1, x.i2, x.i3), d.type, v);
  }
}

__global__ void copy_kernel(Arr a, Arr d) {
  TESSERA_GRID_LOOP(i, d.n()) {
    const Index xs = unflatten(i, a.ne);
    const Index xd = unflatten(i, d.ne);
    const char* src = at(a, xs.i0, xs.i1, xs.i2, xs.i3);
    char* dst = at(d, xd.i0, xd.i1, xd.i2, xd.i3);
    if (a.type == kI32) {
      *reinterpret_cast<int32_t*>(dst) = *reinterpret_cast<const int32_t*>(src);
    } else {
      store(dst, d.type, load(src, a.type));
    }
  }
}

}  // namespace

void binary(cudaStream_t s, Binary op, const Arr& a, const Arr& b, const Arr& d) {
  binary_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(op, a, b, d);
}

void scale(cudaStream_t s, const Arr& a, const Arr& d, float mul, float add) {
  scale_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(a, d, mul, add);
}

void unary(cudaStream_t s, Unary op, float param, const Arr& a, const Arr& d) {
  unary_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(op, param, a, d);
}

void clamp(cudaStream_t s, const Arr& a, const Arr& d, float lo, float hi) {
  clamp_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(a, d, lo, hi);
}

void glu(cudaStream_t s, Glu op, const Arr& gate, const Arr& up, const Arr& d) {
  glu_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(op, gate, up, d);
}

void swiglu_oai(cudaStream_t s, const Arr& gate, const Arr& up, const Arr& d, float alpha, float limit) {
  swiglu_oai_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(gate, up, d, alpha, limit);
}

void add_id(cudaStream_t s, const Arr& a, const Arr& b, const Arr& ids, const Arr& d, int* bad) {
  add_id_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(a, b, ids, d, bad);
}

void copy(cudaStream_t s, const Arr& a, const Arr& d) {
  copy_kernel<<<grid_for(d.n(), kBlock), kBlock, 0, s>>>(a, d);
}

}  // namespace tessera::cuda::k
