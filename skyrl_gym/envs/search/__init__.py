"""Search-R1 style question answering with a retrieval tool (id ``search``)."""
