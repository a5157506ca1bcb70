# Unit tests of the CPU backend's kernels, repacking, ISA dispatch and op errors.
tessera_add_test(cpu_kernels_test LABELS unit
  SOURCES backends/repack_test.cpp backends/quantize_test.cpp backends/mat_kernels_test.cpp
          backends/mul_mat_test.cpp backends/attn_kernel_test.cpp
          backends/row_kernels_test.cpp backends/set_rows_test.cpp backends/thread_pool_test.cpp
          backends/moe_ops_test.cpp
  LIBS tessera_backends)

# The GEMV group kernels keep their software prefetches (the compiler once
# dropped them silently; results stay exact, so only the disassembly shows).
add_test(NAME cpu_gemv_prefetch_check
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/backends/prefetch_check.sh
                 $<TARGET_FILE:tessera_backend_cpu>)
set_tests_properties(cpu_gemv_prefetch_check PROPERTIES LABELS unit TIMEOUT 120)

# The CUDA kernels' K-quant block arithmetic, compiled for the host: every build.
tessera_add_test(cuda_kquants_test LABELS unit
  SOURCES backends/cuda_kquants_test.cpp
  LIBS tessera_core)

# The CUDA backend: layout and no-GPU behaviour everywhere; pools, buffers,
# copies and generation on a GPU (skipped without one).
if(TESSERA_HAVE_CUDA)
  tessera_add_test(cuda_test LABELS unit cuda
    SOURCES backends/cuda_test.cpp
    LIBS tessera_backends tessera_engine)
endif()
