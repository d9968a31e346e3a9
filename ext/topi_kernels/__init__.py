"""TE compute definitions, one module per op family; no schedule or tuner state."""
