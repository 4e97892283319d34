"""Word sort: a skyrl-gym environment (see README.md)."""
