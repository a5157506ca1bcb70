# CPU op implementations (one file per op family), relative to src/.
list(APPEND TESSERA_CPU_OP_SOURCES
  backends/cpu/ops/ops.cpp
  backends/cpu/ops/rows.cpp
  backends/cpu/ops/binary.cpp
  backends/cpu/ops/copy.cpp
  backends/cpu/ops/flash_attn.cpp
  backends/cpu/ops/generate.cpp
  backends/cpu/ops/get_rows.cpp
  backends/cpu/ops/image.cpp
  backends/cpu/ops/map.cpp
  backends/cpu/ops/movement.cpp
  backends/cpu/ops/mul_mat.cpp
  backends/cpu/ops/mul_mat_id.cpp
  backends/cpu/ops/norm.cpp
  backends/cpu/ops/reduce.cpp
  backends/cpu/ops/rope.cpp
  backends/cpu/ops/set_rows.cpp
  backends/cpu/ops/softmax.cpp
)
