"""Benchmarks (`make bench`): results are printed as numbers and ratios, never asserted."""
