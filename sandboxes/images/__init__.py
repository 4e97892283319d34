"""Building the images the docker backend runs (no registry needed)."""
