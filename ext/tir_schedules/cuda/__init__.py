"""CUDA schedules, one module per op family (same names as ``cpu/``)."""
