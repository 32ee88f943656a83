"""Dagster's SQLite instance storage with one SQLAlchemy engine per database file instead of one per connection.

Dagster's SQLite storages (``SqliteRunStorage``, ``SqliteEventLogStorage``, ``SqliteScheduleStorage``) build a new
SQLAlchemy engine for every connection they open. An engine owns the compiled-statement cache, so every query
was compiled again (SQLAlchemy 2 "SQL compilation caching": the cache lives on the engine), and a new run's event
database loaded Alembic's ~60 migration scripts from their files to stamp its schema version. Measured on the
2-core box: in one process that materialises every demo asset (``tests/security/_offline_run.py``, 18 runs),
statement compilation took 5.8 of 82 CPU s, engine creation 3.2 s and the new run databases' Alembic stamps 3.5 s.

The classes here change only that: engines are kept (a bounded number per process, least recently used first
out), still with ``NullPool`` (a fresh SQLite connection per use, as Dagster's: nothing is shared between
threads or across a fork), and a new run database is stamped from one parsed copy of the migration scripts per
process. The files, tables, schema versions and every query are Dagster's own; a home written by these classes is
a home Dagster's classes open, and the reverse. ``orchestration.instance`` names them in ``dagster.yaml``.

The one module of the shell on Dagster's internal modules: the classes that ``dagster.yaml`` names (its
``module``/``class`` keys, Dagster's documented way to configure storage) subclass Dagster's SQLite storages and
replace two of their methods. ``tests/service/test_sqlite_storage.py`` fails loudly if a Dagster upgrade changes
what they rely on (files, schema version, engines kept).
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import SqlEventLogStorageMetadata
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.runs import SqliteRunStorage
from dagster._core.storage.schedules import SqliteScheduleStorage
from dagster._core.storage.sql import get_alembic_config
from sqlalchemy.pool import NullPool

__all__ = [
    "MAX_CACHED_ENGINES",
    "EngineCachingSqliteEventLogStorage",
    "EngineCachingSqliteRunStorage",
    "EngineCachingSqliteScheduleStorage",
]

#: Engines kept per event-log storage object: the index database's and those of the most recently used runs (a
#: daemon serving a home for a year touches thousands of run databases; each kept engine holds its statement cache).
MAX_CACHED_ENGINES = 32
#: Seconds a connection waits for another process's write lock: Dagster's SQLITE_BUSY_TIMEOUT_SECONDS.
SQLITE_BUSY_TIMEOUT_SECONDS = 30
#: Tries when another process creates the same run database at the same moment (Dagster's own loop: 10 × 0.2 s).
INIT_RETRIES = 10


@functools.cache
def _event_log_scripts() -> ScriptDirectory:
    """Dagster's event-log migration scripts, parsed once per process (Alembic re-reads every file per call)."""
    return ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__))


def _sqlite_engine(conn_string: str, busy_timeout: bool) -> sa.engine.Engine:
    connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS} if busy_timeout else {}
    return sa.create_engine(conn_string, poolclass=NullPool, connect_args=connect_args)


class EngineCachingSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` (one database per run plus an index database) with kept engines."""

    def __init__(self, base_dir: str, inst_data=None):
        self._engines: OrderedDict[str, sa.engine.Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> sa.engine.Engine:
        with self._engines_lock:
            engine = self._engines.pop(shard, None)
            if engine is None:
                engine = _sqlite_engine(self.conn_string_for_shard(shard), busy_timeout=True)
            self._engines[shard] = engine  # most recently used last
            while len(self._engines) > MAX_CACHED_ENGINES:
                self._engines.popitem(last=False)[1].dispose()
            return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[sa.engine.Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _initdb(self, engine: sa.engine.Engine, for_index_shard: bool = False) -> None:
        """Dagster's ``_initdb`` (create the tables and stamp the schema version of a database that has none) with
        the migration scripts parsed once; the index database, rare and with a legacy case, goes to Dagster's."""
        if for_index_shard:
            super()._initdb(engine, for_index_shard=True)
            return
        scripts = _event_log_scripts()
        for attempt in range(INIT_RETRIES + 1):
            try:
                with engine.connect() as conn:
                    migration = MigrationContext.configure(conn)
                    if migration.get_current_revision():
                        return
                    SqlEventLogStorageMetadata.create_all(engine)
                    conn.execute(sa.text("PRAGMA journal_mode=WAL;"))
                    migration.stamp(scripts, "head")
                    if conn.in_transaction():
                        conn.commit()
                return
            except (sa.exc.DatabaseError, sqlite3.DatabaseError) as exc:  # another process initialising it too
                message = str(exc)
                concurrent = ("already exists" in message or "database is locked" in message
                              or "UNIQUE constraint failed: alembic_version" in message)
                if not concurrent or attempt == INIT_RETRIES:
                    raise
                time.sleep(0.2)

    def dispose(self) -> None:
        super().dispose()
        with self._engines_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()


class _OneEngine:
    """``connect`` of Dagster's single-file SQLite storages, on one kept engine."""

    _conn_string: str
    _kept_engine: sa.engine.Engine | None = None

    @contextmanager
    def connect(self) -> Iterator[sa.engine.Connection]:
        if self._kept_engine is None:
            self._kept_engine = _sqlite_engine(self._conn_string, busy_timeout=False)
        with self._kept_engine.connect() as conn, conn.begin():
            yield conn


class EngineCachingSqliteRunStorage(_OneEngine, SqliteRunStorage):
    """``SqliteRunStorage`` (``history/runs.db``) with one kept engine."""

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)


class EngineCachingSqliteScheduleStorage(_OneEngine, SqliteScheduleStorage):
    """``SqliteScheduleStorage`` (``schedules/schedules.db``: sensor cursors and ticks) with one kept engine."""

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)
