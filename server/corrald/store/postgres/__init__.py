"""The PostgreSQL store: several corrald daemons serving one board.

Imported only when a daemon is given `--store postgresql://…`; the SQLite path
loads nothing of psycopg. Modules: `target` (the DSN, its checks, redaction),
`sql` (the store's SQL in PostgreSQL's dialect, and the connection the store
functions use), `schema` (migrations, the board's identity and credentials),
`storage` (what the writer, the readers and the clock need from the database),
`listener` (LISTEN/NOTIFY wake-ups between daemons).
"""
