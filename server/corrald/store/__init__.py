"""The only place that speaks SQL.

Every function takes an open connection (inside a `Txn` for writes, which also
carries `now` and the wake notes) and never commits: the writer commits.
Reads take a plain connection and run inside the reader's short transaction.

Modules, each importing only those listed before it: `dialect` (what a
statement asks of its database), `boardclock` (how far the
board's clock got, kept across restarts), `events` (the Watch log), `gates` (the reads that hold
a claim back), `status` (a teammate's status), `ops` (Session ops run once), `claim_ends` (how claims ended, from
the history),
`tasks` (the task life cycle, a package: one module per concern), `output` (a
claim's live output),
`team` (the roster and credentials), `inbox` (messages and acknowledgements),
`protocol` (plans and shutdown requests).

The drivers, behind `driver`'s interfaces: `sqlite` (the schema, connections
and transactions of a board in one file) and `postgres` (a board several
daemons serve), each with the store's statements in its dialect (`queries`).
"""
