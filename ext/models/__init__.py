"""Small built-in models (random weights, seeded) for demos, benchmarks and tests."""
