"""Multi-turn text-to-SQL on real SQLite databases (ids ``text2sql`` and ``sql``)."""
