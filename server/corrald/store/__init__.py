"""The only place that speaks SQL.

Every function takes an open connection (inside a `Txn` for writes, which also
carries `now` and the wake notes) and never commits: the writer commits.
Reads take a plain connection and run inside the reader's short transaction.
"""
