"""Multi-turn text games with their state held by the env (``games/<name>``; see README.md)."""
