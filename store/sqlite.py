"""The SQLite backend of the state store (the default): one file, WAL journal.

Durability: ``synchronous=FULL`` by default, so neither a killed process nor a power cut loses a
committed write; ``NORMAL`` keeps every commit across a process crash but may lose the last ones on a
power cut (faster on slow disks). Several processes may open the same file: WAL lets readers run
beside one writer, and a writer waits up to ``busy_timeout`` seconds for another. Every write
transaction is ``BEGIN IMMEDIATE``, so writers take turns and a read-then-write needs no lock of its own.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from typing import Any


class SQLiteBackend:
    """:class:`store.backend.Backend` over one ``sqlite3`` connection. ``path`` may be ``":memory:"``."""

    dialect = "sqlite"
    row_lock = ""  # BEGIN IMMEDIATE already holds the database's one write lock
    error = sqlite3.Error

    def __init__(self, path: str, *, synchronous: str = "FULL", busy_timeout: float = 10.0) -> None:
        if path != ":memory:" and not path.startswith("file:") and not os.path.exists(path):
            # The state holds users' progress, targets and plans: readable by its owner only. SQLite
            # gives its -wal and -shm files the database file's mode.
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        # isolation_level=None: no implicit transactions; every write opens its own BEGIN IMMEDIATE.
        self._conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'FULL' else 'NORMAL'}")
            self._conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            self._conn.close()
            raise

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        return self._conn.executemany(sql, rows).rowcount

    def begin(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        self._conn.execute("ROLLBACK")

    def serialize(self, what: str) -> None:
        pass  # BEGIN IMMEDIATE: no other writer is open

    def clock(self) -> float:
        return time.time()  # one file: every process that shares it runs on this machine

    def ddl(self, script: str) -> str:
        return script  # the scripts are written in SQLite's dialect

    def close(self) -> None:
        self._conn.close()
