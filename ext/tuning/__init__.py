"""Autotuning: task extraction, search, cost model, measurement, tuning log."""
