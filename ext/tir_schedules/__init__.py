"""Hand-written TIR schedules per target; shared helpers in ``common.py``."""
