"""Small run-time helpers with no rlvr dependencies: device resolution, time and memory accounting."""
