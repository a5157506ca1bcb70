# Conformance suite: every op on every device and CPU ISA tier (ctest -L conformance).
tessera_add_test(conformance_test LABELS conformance
  SOURCES conformance/harness.cpp conformance/elementwise_test.cpp conformance/movement_test.cpp
          conformance/reduce_test.cpp conformance/mul_mat_test.cpp conformance/attention_test.cpp
          conformance/image_test.cpp conformance/support_test.cpp
          conformance/mul_mat_id_test.cpp
  LIBS tessera_backends)
