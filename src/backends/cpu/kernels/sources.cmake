# Per-ISA kernels, relative to src/. Each ISA's files get their own compile flags;
# the ref tier and the table/repack code are built for the baseline target.
list(APPEND TESSERA_CPU_KERNEL_SOURCES
  backends/cpu/kernels/kernels.cpp
  backends/cpu/kernels/repack.cpp
  backends/cpu/kernels/ref/ref_kernels.cpp
)

set(TESSERA_CPU_AVX2_SOURCES
  backends/cpu/kernels/avx2/panel.cpp
  backends/cpu/kernels/avx2/kpanel.cpp
  backends/cpu/kernels/avx2/table.cpp
  backends/cpu/kernels/avx2/probes.cpp
)
set(TESSERA_CPU_AVX512_SOURCES
  backends/cpu/kernels/avx512/panel.cpp
  backends/cpu/kernels/avx512/kpanel.cpp
  backends/cpu/kernels/avx512/table.cpp
  backends/cpu/kernels/avx512/probes.cpp
)
set(TESSERA_CPU_AMX_SOURCES
  backends/cpu/kernels/amx/panel.cpp
  backends/cpu/kernels/amx/kpanel.cpp
  backends/cpu/kernels/amx/probes.cpp
)
list(APPEND TESSERA_CPU_KERNEL_SOURCES ${TESSERA_CPU_AVX2_SOURCES} ${TESSERA_CPU_AVX512_SOURCES}
  ${TESSERA_CPU_AMX_SOURCES}
  backends/cpu/kernels/avx2/probes_vnni.cpp)

# Flags match the tier checks in isa.cpp: a tier is only run where cpuid has them all.
set_source_files_properties(${TESSERA_CPU_AVX2_SOURCES} PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
set_source_files_properties(${TESSERA_CPU_AVX512_SOURCES} PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx512bf16;-mgfni")
set_source_files_properties(${TESSERA_CPU_AMX_SOURCES} PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx512bf16;-mgfni;-mamx-tile;-mamx-int8")
# Under UBSan, clang takes minutes over the tiers' templated intrinsics (192 s
# for avx512/kpanel.cpp against 76 s with ASan alone): these files keep ASan,
# and the scalar reference and the code around the kernels keep UBSan.
if("undefined" IN_LIST TESSERA_SANITIZE)
  foreach(_f ${TESSERA_CPU_AVX2_SOURCES} ${TESSERA_CPU_AVX512_SOURCES} ${TESSERA_CPU_AMX_SOURCES})
    set_property(SOURCE ${_f} APPEND PROPERTY COMPILE_OPTIONS "-fno-sanitize=undefined")
  endforeach()
endif()
# A ceiling probe for a feature no tier needs: run only where cpuid reports it.
set_source_files_properties(backends/cpu/kernels/avx2/probes_vnni.cpp PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mavxvnni")
