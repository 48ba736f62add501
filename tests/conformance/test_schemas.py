"""The two drivers' schemas, read from each live database's catalog after the daemon's own
migrations, are one schema: the same tables, the same columns with the same types (as
the drivers map them) and nullability, the same keys and the same indexes. What differs
by design is listed below, each with its reason; anything else that differs fails here,
so a column or an index added to one driver only cannot go unnoticed.
"""

from __future__ import annotations

import pathlib
import re
import sqlite3
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.postgres import fresh_schema, run_database_dsn
from tests.support.stores import migrate_postgres, migrate_sqlite

pytestmark = pytest.mark.timeout(60)

Fact = tuple[str, ...]

# PostgreSQL's types, as the driver maps each to SQLite's declared one.
PG_TYPES = {"bigint": "INTEGER", "text": "TEXT", "bytea": "BLOB", "double precision": "REAL"}

ARTIFACT_BYTES = "artifact bytes live in a PostgreSQL board's database, so every daemon serves them (SQLite: files)"

# What only one driver has, and why.
POSTGRES_ONLY: dict[Fact, str] = {
    ("table", "board"): "a PostgreSQL board's id and lead credential live in its schema (SQLite: the state directory)",
    ("table", "daemons"): "several daemons serve one PostgreSQL board",
    ("table", "schema_version"): "SQLite keeps its schema version in PRAGMA user_version",
    ("column", "teammates", "rowid", "INTEGER", "not null"): "SQLite's implicit rowid, made explicit",
    ("unique", "teammates", "rowid"): "SQLite's implicit rowid, made explicit",
    ("column", "viewers", "rowid", "INTEGER", "not null"): "SQLite's implicit rowid, made explicit",
    ("unique", "viewers", "rowid"): "SQLite's implicit rowid, made explicit",
    ("index", "tasks", "tasks_claimable", "priority DESC, seq", "", "state = 1 and unmet_deps = 0"): (
        "PostgreSQL's planner needs the claimable rows indexed apart; SQLite's uses tasks_ready"
    ),
    **{
        fact: ARTIFACT_BYTES
        for fact in (
            ("table", "artifact_uploads"),
            ("column", "artifact_uploads", "id", "INTEGER", "not null"),
            ("column", "artifact_uploads", "daemon", "TEXT", "not null"),
            ("column", "artifact_uploads", "start_ms", "INTEGER", "not null"),
            ("column", "artifact_uploads", "sha256", "TEXT", "null"),
            ("column", "artifact_uploads", "size", "INTEGER", "not null"),
            ("primary key", "artifact_uploads", "id"),
            ("index", "artifact_uploads", "artifact_uploads_sha256", "sha256", "unique", ""),
            ("table", "artifact_chunks"),
            ("column", "artifact_chunks", "upload", "INTEGER", "not null"),
            ("column", "artifact_chunks", "pos", "INTEGER", "not null"),
            ("column", "artifact_chunks", "data", "BLOB", "not null"),
            ("primary key", "artifact_chunks", "upload, pos"),
        )
    },
}
SQLITE_ONLY: dict[Fact, str] = {}


def _predicate(sql: str | None) -> str:
    """An index's WHERE clause in one spelling: no casts or parentheses, `!=`, `IN` for
    PostgreSQL's `= ANY (ARRAY[...])`, lower case."""
    if not sql:
        return ""
    text = re.sub(r"::[a-z ]+", "", sql).replace("<>", "!=")
    text = re.sub(r"= ANY \(ARRAY\[([^\]]*)\]\)", r"IN (\1)", text)
    text = text.replace("(", "").replace(")", "")
    return " ".join(text.lower().split())


def sqlite_shape(path: pathlib.Path) -> set[Fact]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        facts: set[Fact] = set()
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table.startswith("sqlite_"):
                continue  # SQLite's own (sqlite_sequence)
            facts.add(("table", table))
            columns = conn.execute(f"PRAGMA table_info({table})").fetchall()
            key = [name for _, name, _, _, _, pk in sorted(columns, key=lambda column: column[5]) if pk]
            facts.add(("primary key", table, ", ".join(key)))
            for _, name, declared, notnull, _, pk in columns:
                facts.add(("column", table, name, declared.upper(), "not null" if notnull or pk else "null"))
            for _, index, unique, origin, partial in conn.execute(f"PRAGMA index_list({table})"):
                keys = [
                    name + (" DESC" if desc else "")
                    for _, _, name, desc, _, is_key in conn.execute(f"PRAGMA index_xinfo({index})")
                    if is_key
                ]
                if origin == "u":
                    facts.add(("unique", table, ", ".join(keys)))
                elif origin == "c":
                    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (index,)).fetchone()
                    where = sql.split(" WHERE ", 1)[1] if partial else None
                    facts.add(("index", table, index, ", ".join(keys), "unique" if unique else "", _predicate(where)))
        return facts
    finally:
        conn.close()


def postgres_shape(conn: psycopg.Connection, schema: str) -> set[Fact]:
    facts: set[Fact] = set()
    for (table,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)):
        facts.add(("table", table))
    for table, name, pg_type, notnull in conn.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped",
        (schema,),
    ):
        facts.add(("column", table, name, PG_TYPES.get(pg_type, pg_type), "not null" if notnull else "null"))
    for table, index, unique, primary, constraint, definition, where in conn.execute(
        "SELECT t.relname, c.relname, i.indisunique, i.indisprimary,"
        " EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid),"
        " pg_get_indexdef(i.indexrelid), pg_get_expr(i.indpred, i.indrelid)"
        " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid"
        " WHERE c.relnamespace = %s::regnamespace",
        (schema,),
    ):
        match = re.search(r"USING \w+ \((.*?)\)(?: WHERE |$)", definition)
        assert match, definition
        keys = match.group(1)
        if primary:
            facts.add(("primary key", table, keys))
        elif constraint and unique:
            facts.add(("unique", table, keys))
        else:
            facts.add(("index", table, index, keys, "unique" if unique else "", _predicate(where)))
    return facts


@pytest.fixture
def shapes(tmp_path) -> Iterator[tuple[set[Fact], set[Fact]]]:
    """(SQLite's shape, PostgreSQL's shape), each read from a database migrated just now."""
    migrate_sqlite(tmp_path / "corral.sqlite3")
    schema = fresh_schema()
    with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
        migrate_postgres(conn, schema)
        try:
            yield sqlite_shape(tmp_path / "corral.sqlite3"), postgres_shape(conn, schema)
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _unexcused(facts: set[Fact], excused: dict[Fact, str]) -> list[str]:
    """`facts` but those excused, each fact of an excused table with it."""
    tables = {fact[1] for fact in excused if fact[0] == "table"}
    return [" ".join(fact) for fact in sorted(facts) if fact not in excused and fact[1] not in tables]


def test_the_two_drivers_migrate_to_one_schema(shapes):
    lite, postgres = shapes
    assert len({fact for fact in lite if fact[0] == "table"}) >= 10, "too few tables read from SQLite's catalog"
    only_sqlite = _unexcused(lite - postgres, SQLITE_ONLY)
    only_postgres = _unexcused(postgres - lite, POSTGRES_ONLY)
    lines = [f"  SQLite only:     {fact}" for fact in only_sqlite]
    lines += [f"  PostgreSQL only: {fact}" for fact in only_postgres]
    assert not lines, "the schemas differ:\n" + "\n".join(lines)


def test_each_difference_listed_as_by_design_is_still_there(shapes):
    """A difference removed from the schemas is removed from the lists too: the lists never
    excuse more than what differs."""
    lite, postgres = shapes
    assert sorted(POSTGRES_ONLY.keys() - (postgres - lite)) == []
    assert sorted(SQLITE_ONLY.keys() - (lite - postgres)) == []
