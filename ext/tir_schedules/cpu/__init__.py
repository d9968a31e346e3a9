"""CPU (LLVM) schedules, one module per op family."""
