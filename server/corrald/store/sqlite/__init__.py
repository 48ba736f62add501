"""The SQLite store: one daemon, one file.

Modules: `schema` (the tables and their ordered migrations), `storage` (the
connections, and what the writer needs to begin, commit and retry there).
"""
