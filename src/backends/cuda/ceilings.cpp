// The GPU's ceilings for `tessera bench` (tessera/ceilings.h), measured on
// the spot: device-to-device copy bandwidth (bytes read plus bytes written
// per second, the figure decode's weight reads are held to) and the f16
// tensor-core rate cuBLAS reaches on a large square GEMM (what prefill runs
// on: f16/bf16 weights directly, Q4_0/Q8_0 dequantized to f16 first).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda/common.h"
#include "cuda/cublas_lib.h"
#include "cuda/cuda_backend.h"
#include "tessera/backends/ceilings.h"

namespace tessera::cuda {
namespace {

// Device memory for the probes, freed on every path.
class DeviceBytes {
 public:
  DeviceBytes(int device, size_t n) : device_(device) {
    TESSERA_CUDA_CHECK(cudaMalloc(&p_, n), device_);
  }
  ~DeviceBytes() { cudaFree(p_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return p_; }

 private:
  int device_;
  void* p_ = nullptr;
};

class Timer {
 public:
  explicit Timer(int device) : device_(device) {
    TESSERA_CUDA_CHECK(cudaEventCreate(&start_), device_);
    TESSERA_CUDA_CHECK(cudaEventCreate(&stop_), device_);
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void start(cudaStream_t s) { TESSERA_CUDA_CHECK(cudaEventRecord(start_, s), device_); }
  double stop_seconds(cudaStream_t s) {
    TESSERA_CUDA_CHECK(cudaEventRecord(stop_, s), device_);
    TESSERA_CUDA_CHECK(cudaEventSynchronize(stop_), device_);
    float ms = 0.0f;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_), device_);
    return ms / 1e3;
  }

 private:
  int device_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

double copy_gbs(int dev, cudaStream_t s) {
  const size_t bytes = size_t{1} << 30;
  DeviceBytes a(dev, bytes), b(dev, bytes);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, s), dev);
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s), dev);
  Timer t(dev);
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    t.start(s);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s), dev);
    best = std::max(best, 2.0 * double(bytes) / t.stop_seconds(s) / 1e9);
  }
  return best;
}

double f16_gemm_gflops(int dev, cudaStream_t s) {
  const Cublas& lib = cublas();
  constexpr int n = 8192;
  const size_t bytes = size_t{n} * n * 2;
  DeviceBytes a(dev, bytes), b(dev, bytes), c(dev, size_t{n} * n * 4);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(a.get(), 0x11, bytes, s), dev);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(b.get(), 0x22, bytes, s), dev);
  cublasHandle_t h = nullptr;
  check_cublas(lib.create(&h), dev, "cublasCreate");
  struct Handle {
    const Cublas& lib;
    cublasHandle_t h;
    ~Handle() { lib.destroy(h); }
  } owner{lib, h};
  check_cublas(lib.set_stream(h, s), dev, "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    check_cublas(lib.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16F, n,
                             b.get(), CUDA_R_16F, n, &beta, c.get(), CUDA_R_32F, n,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 dev, "cublasGemmEx");
  };
  gemm();
  Timer t(dev);
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    t.start(s);
    gemm();
    best = std::max(best, 2.0 * double(n) * n * n / t.stop_seconds(s) / 1e9);
  }
  return best;
}

}  // namespace

Ceilings measure_gpu_ceilings(CudaDevice& device) {
  const int dev = device.index();
  DeviceScope scope(dev);
  cudaStream_t s = nullptr;
  TESSERA_CUDA_CHECK(cudaStreamCreate(&s), dev);
  struct StreamOwner {
    cudaStream_t s;
    ~StreamOwner() { cudaStreamDestroy(s); }
  } owner{s};
  Ceilings c;
  cudaDeviceProp prop{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev), dev);
  c.tier = fmt::format("cuda sm_{}{}", prop.major, prop.minor);
  c.threads = 0;
  c.read_gbs = copy_gbs(dev, s);
  c.fma_gflops = f16_gemm_gflops(dev, s);
  c.int8_gops = c.fma_gflops;  // quantized prefill runs dequantized, on f16 tensor cores
  c.int8_how = "f16 tensor cores (cuBLAS GEMM; Q4_0/Q8_0 dequantized to f16)";
  return c;
}

}  // namespace tessera::cuda
