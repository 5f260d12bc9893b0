"""The tools around the engine: estimate, compare, calibrate, report (and the sample generator)."""
