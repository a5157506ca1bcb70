#include "cuda/stream.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "cuda/buffers.h"
#include "cuda/common.h"
#include "cuda/cublas_lib.h"
#include "cuda/cuda_backend.h"
#include "cuda/ops/launch.h"
#include "cuda/ops/ops.h"
#include "tessera/core/error.h"

namespace tessera::cuda {
namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;

bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

// A captured decode step. Graphs pay off for many small kernels; a prefill
// step is a few large ones, and cuBLAS picks its kernels per shape anyway.
class CudaGraph final : public StreamGraph {
 public:
  ~CudaGraph() override {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  int runs = 0;
  bool failed = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

bool decode_step(std::span<Tensor* const> nodes) {
  for (const Tensor* n : nodes) {
    if (n->op == Op::kMulMat && n->src[1]->n_rows() > k::kMaxMmvColumns) return false;  // prefill
    if (n->op == Op::kMulMatId && n->ne[2] > k::kMaxMmvColumns) return false;
  }
  return true;
}

}  // namespace

PoolKind pool_kind_from_env() {
  return env_is("TESSERA_CUDA_POOL", "bestfit") ? PoolKind::kBestFit : PoolKind::kVirtual;
}

// ---- CudaEvent -----------------------------------------------------------------------------

CudaEvent::CudaEvent(CudaDevice& device) : device_(device) {
  DeviceScope scope(device_.index());
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), device_.index());
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

Device& CudaEvent::device() const { return device_; }

void CudaEvent::synchronize() {
  TESSERA_CUDA_CHECK(cudaEventSynchronize(event_), device_.index());
}

// ---- CudaStream ----------------------------------------------------------------------------

CudaStream::CudaStream(CudaDevice& device) : device_(device) {
  const int dev = device_.index();
  DeviceScope scope(dev);
  // Non-blocking: no implicit synchronization with the legacy default
  // stream, which another thread's call would otherwise inject into a
  // graph being captured here (buffers transfer on their device's own
  // stream instead, CudaDevice::copy).
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), dev);
  try {
    // Pinned and mapped: kernels write it in place, the host reads it after a sync.
    TESSERA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&bad_row_id_), sizeof(int),
                                     cudaHostAllocMapped),
                       dev);
    *bad_row_id_ = 0;
    const std::string name = fmt::format("{} pool", device_.name());
    pool_kind_ = pool_kind_from_env();
    if (pool_kind_ == PoolKind::kVirtual) virtual_ = CudaVirtualMemory::create(dev, name);
    if (virtual_ != nullptr) {
      // Default limit: the memory free now (the pool commits only what it uses).
      const size_t limit = std::max(device_free_bytes(dev), virtual_->granularity());
      pool_ = std::make_unique<VirtualPool>(*virtual_, limit);
    } else {
      pool_kind_ = PoolKind::kBestFit;
      raw_ = std::make_unique<CudaRawMemory>(dev, name);
      pool_ = std::make_unique<BestFitPool>(*raw_);
    }
  } catch (...) {
    if (bad_row_id_ != nullptr) cudaFreeHost(bad_row_id_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaStream::~CudaStream() {
  DeviceScope scope(device_.index(), std::nothrow);
  cudaStreamSynchronize(stream_);
  if (cublas_ != nullptr) cublas().destroy(cublas_);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  pool_.reset();  // before the stream its memory was used on
  cudaFreeHost(bad_row_id_);
  cudaStreamDestroy(stream_);
}

Device& CudaStream::device() const { return device_; }

void CudaStream::make_cublas() {
  const int dev = device_.index();
  const Cublas& lib = cublas();
  check_cublas(lib.create(&cublas_), dev, "cublasCreate");
  check_cublas(lib.set_stream(cublas_, stream_), dev, "cublasSetStream");
  // Its own workspace, so that cuBLAS allocates nothing while a graph is captured.
  TESSERA_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace), dev);
  check_cublas(lib.set_workspace(cublas_, cublas_workspace_, kCublasWorkspace), dev,
               "cublasSetWorkspace");
}

void CudaStream::set_tensor_async(Tensor& t, const void* src, size_t offset, size_t size) {
  if (cuda_device_of(t) != device_.index() || is_split(t) || is_view_of_split(t)) {
    Stream::set_tensor_async(t, src, offset, size);
    return;
  }
  TESSERA_CHECK(offset <= t.n_bytes() && size <= t.n_bytes() - offset);
  DeviceScope scope(device_.index());
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(t.data) + offset, src, size,
                                     cudaMemcpyHostToDevice, stream_),
                     device_.index());
}

void CudaStream::get_tensor_async(const Tensor& t, void* dst, size_t offset, size_t size) {
  if (cuda_device_of(t) != device_.index() || is_split(t) || is_view_of_split(t)) {
    Stream::get_tensor_async(t, dst, offset, size);
    return;
  }
  TESSERA_CHECK(offset <= t.n_bytes() && size <= t.n_bytes() - offset);
  DeviceScope scope(device_.index());
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const uint8_t*>(t.data) + offset, size,
                                     cudaMemcpyDeviceToHost, stream_),
                     device_.index());
}

bool CudaStream::copy_tensor_async(const Tensor& src, Tensor& dst) {
  if (cuda_device_of(dst) != device_.index() || is_split(dst) || is_view_of_split(dst)) return false;
  if (src.type != dst.type || !same_shape(src, dst) || src.nb != dst.nb || src.buffer == nullptr) {
    return false;
  }
  const size_t n = src.n_bytes();
  DeviceScope scope(device_.index());
  if (src.buffer->is_host()) {
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, n, cudaMemcpyHostToDevice, stream_),
                       device_.index());
    return true;
  }
  const int from = cuda_device_of(src);
  if (from < 0 || is_split(src) || is_view_of_split(src)) return false;
  TESSERA_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data, device_.index(), src.data, from, n, stream_),
                     device_.index());
  return true;
}

void CudaStream::synchronize() {
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_), device_.index());
  if (*bad_row_id_ != 0) {
    *bad_row_id_ = 0;
    fail(ErrorCategory::kInvalidArgument,
         "[{}] GET_ROWS or SET_ROWS found a row id outside its tensor's rows (that row was "
         "not read or written), or MUL_MAT_ID / ADD_ID an expert id outside its experts (that "
         "product reads as zeros, that bias as nothing)",
         device_.name());
  }
}

void CudaStream::run(std::span<Tensor* const> nodes) {
  OpContext ctx;
  ctx.stream = stream_;
  ctx.device = device_.index();
  ctx.sm_count = device_.sm_count();
  ctx.pool = pool_.get();
  ctx.bad_row_id = bad_row_id_;
  for (Tensor* node : nodes) {
    if (node->op == Op::kNone || is_view_op(node->op)) continue;
    if (!supports(*node)) {
      fail(ErrorCategory::kUnsupported, "[{}] cannot compute {} on {}", device_.name(),
           op_name(node->op), node->describe());
    }
    if (cublas_ == nullptr && needs_cublas(*node)) make_cublas();
    ctx.cublas = cublas_;
    cuda::compute(ctx, *node);
  }
  // Launch errors (bad configurations) surface here, naming the stream's device.
  TESSERA_CUDA_CHECK(cudaPeekAtLastError(), device_.index());
}

void CudaStream::compute(std::span<Tensor* const> nodes) {
  DeviceScope scope(device_.index());
  run(nodes);
}

std::unique_ptr<StreamGraph> CudaStream::prepare(std::span<Tensor* const> nodes) {
  if (env_is("TESSERA_CUDA_GRAPHS", "0") || !decode_step(nodes)) return nullptr;
  return std::make_unique<CudaGraph>();
}

void CudaStream::compute(StreamGraph& handle, std::span<Tensor* const> nodes) {
  auto& g = dynamic_cast<CudaGraph&>(handle);
  DeviceScope scope(device_.index());
  if (g.failed || g.runs++ == 0) {
    run(nodes);
    return;
  }
  if (g.exec == nullptr) {
    // Capture the nodes (nothing runs while capturing), then launch the graph.
    TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                       device_.index());
    bool captured = true;
    try {
      run(nodes);
    } catch (const Error&) {
      captured = false;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (!captured || ended != cudaSuccess ||
        cudaGraphInstantiate(&g.exec, graph, 0) != cudaSuccess) {
      // Not capturable (an op or cuBLAS refused): plain launches from now on.
      cudaGetLastError();
      if (graph != nullptr) cudaGraphDestroy(graph);
      g.exec = nullptr;
      g.failed = true;
      run(nodes);
      return;
    }
    g.graph = graph;
  }
  TESSERA_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_), device_.index());
  graphs_launched_ += 1;
}

void CudaStream::record(Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  if (e == nullptr) {
    fail(ErrorCategory::kInvalidArgument, "[{}] record of an event of device {}", device_.name(),
         event.device().name());
  }
  DeviceScope scope(device_.index());
  TESSERA_CUDA_CHECK(cudaEventRecord(e->get(), stream_), device_.index());
}

void CudaStream::wait(Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  if (e == nullptr) {
    event.synchronize();  // another backend's event: the host waits for it
    return;
  }
  DeviceScope scope(device_.index());
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, e->get(), 0), device_.index());
}

}  // namespace tessera::cuda
