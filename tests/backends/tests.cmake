# Unit tests of the CPU backend's kernels, repacking and ISA dispatch.
