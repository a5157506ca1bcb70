#include "cuda/vmm.h"

#include <cuda.h>

#include "cuda/common.h"

namespace tessera::cuda {
namespace {

// The driver functions the virtual pool needs, looked up once.
struct Driver {
  decltype(&cuMemCreate) mem_create = nullptr;
  decltype(&cuMemRelease) mem_release = nullptr;
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemMap) mem_map = nullptr;
  decltype(&cuMemUnmap) mem_unmap = nullptr;
  decltype(&cuMemSetAccess) mem_set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuDeviceGetAttribute) device_attribute = nullptr;
  decltype(&cuGetErrorString) error_string = nullptr;
  bool ok = false;
};

template <class F>
bool lookup(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    r.ok = lookup("cuMemCreate", r.mem_create) && lookup("cuMemRelease", r.mem_release) &&
           lookup("cuMemAddressReserve", r.address_reserve) &&
           lookup("cuMemAddressFree", r.address_free) && lookup("cuMemMap", r.mem_map) &&
           lookup("cuMemUnmap", r.mem_unmap) && lookup("cuMemSetAccess", r.mem_set_access) &&
           lookup("cuMemGetAllocationGranularity", r.granularity) &&
           lookup("cuDeviceGetAttribute", r.device_attribute) &&
           lookup("cuGetErrorString", r.error_string);
    return r;
  }();
  return d;
}

void check_cu(CUresult res, const std::string& device, const char* what) {
  if (res == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  if (driver().error_string != nullptr) driver().error_string(res, &msg);
  const ErrorCategory category =
      res == CUDA_ERROR_OUT_OF_MEMORY ? ErrorCategory::kOutOfMemory : ErrorCategory::kDevice;
  fail(category, "[{}] {}: {} (CUresult {})", device, what, msg ? msg : "unknown error",
       static_cast<int>(res));
}

CUmemAllocationProp pinned_on(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

size_t device_free_bytes(int device) {
  DeviceScope scope(device);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
}

void* CudaRawMemory::allocate(size_t bytes) {
  DeviceScope scope(device_);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCategory::kOutOfMemory, "[{}] allocation of {} bytes failed ({}), {} bytes free",
         name_, bytes, cudaGetErrorString(err), device_free_bytes(device_));
  }
  return p;
}

void CudaRawMemory::release(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  DeviceScope scope(device_, std::nothrow);
  cudaFree(ptr);
}

std::unique_ptr<CudaVirtualMemory> CudaVirtualMemory::create(int device, std::string name) {
  const Driver& d = driver();
  if (!d.ok) return nullptr;
  int supported = 0;
  if (d.device_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                         device) != CUDA_SUCCESS ||
      supported == 0) {
    return nullptr;
  }
  const CUmemAllocationProp prop = pinned_on(device);
  size_t granularity = 0;
  check_cu(d.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), name,
           "cuMemGetAllocationGranularity");
  return std::unique_ptr<CudaVirtualMemory>(
      new CudaVirtualMemory(device, std::move(name), granularity));
}

void* CudaVirtualMemory::reserve(size_t bytes) {
  CUdeviceptr addr = 0;
  check_cu(driver().address_reserve(&addr, bytes, 0, 0, 0), name_, "cuMemAddressReserve");
  return reinterpret_cast<void*>(addr);
}

void CudaVirtualMemory::commit(void* addr, size_t bytes) {
  const Driver& d = driver();
  const CUmemAllocationProp prop = pinned_on(device_);
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = d.mem_create(&handle, bytes, &prop, 0);
  if (created == CUDA_ERROR_OUT_OF_MEMORY) {
    fail(ErrorCategory::kOutOfMemory,
         "[{}] pool growth of {} bytes failed (out of device memory), {} bytes free", name_,
         bytes, device_free_bytes(device_));
  }
  check_cu(created, name_, "cuMemCreate");
  const auto ptr = reinterpret_cast<CUdeviceptr>(addr);
  const CUresult mapped = d.mem_map(ptr, bytes, 0, handle, 0);
  // The mapping keeps the memory alive; the handle is not needed after it.
  d.mem_release(handle);
  check_cu(mapped, name_, "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult set = d.mem_set_access(ptr, bytes, &access, 1);
  if (set != CUDA_SUCCESS) d.mem_unmap(ptr, bytes);
  check_cu(set, name_, "cuMemSetAccess");
}

void CudaVirtualMemory::decommit(void* addr, size_t bytes) {
  // The caller's work on this memory must be done: unmapping does not wait.
  DeviceScope scope(device_, std::nothrow);
  cudaDeviceSynchronize();
  driver().mem_unmap(reinterpret_cast<CUdeviceptr>(addr), bytes);
}

void CudaVirtualMemory::unreserve(void* addr, size_t bytes) {
  driver().address_free(reinterpret_cast<CUdeviceptr>(addr), bytes);
}

}  // namespace tessera::cuda
