"""The perf gate (base and head measured interleaved) and the CI files that run it."""
