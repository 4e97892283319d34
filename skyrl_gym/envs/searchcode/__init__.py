"""Two tools in one env: search and sandboxed Python (id ``searchcode``)."""
