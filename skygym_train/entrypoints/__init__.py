"""Command-line entry points of the bundled trainer."""
