# Conformance suite: every op on every device and CPU ISA tier (ctest -L conformance).
