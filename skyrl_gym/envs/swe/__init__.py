"""The ``swe`` environment: software-engineering tasks in docker containers (see README.md)."""
