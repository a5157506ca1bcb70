# Per-ISA kernels, relative to src/. Each ISA's files get their own compile flags.
list(APPEND TESSERA_CPU_KERNEL_SOURCES
)
