"""Stand-ins for GPU libraries and device queries, so GPU code paths run on the CPU in self-tests."""
