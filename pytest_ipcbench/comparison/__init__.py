"""Comparison of two sides: noise models, intervals, verdicts and their words."""
