"""tests_real: the engine against a real local model (`make test-real`)."""
