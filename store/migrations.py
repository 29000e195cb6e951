"""Schema migrations of the state store: one SQL script per version, applied in order, never edited.

``MIGRATIONS[i]`` takes a database from version ``i`` to version ``i + 1``. A database records the
version it is at in ``schema_version``; opening it applies every script it has not seen, all in one
write transaction that holds the schema's lock (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on
PostgreSQL), so two processes opening a fresh database at once cannot both migrate, and a failed
migration leaves the database as it was (PostgreSQL's schema changes are transactional too).
A database at a newer version than this code knows is refused (:class:`~store.errors.SchemaTooNew`):
an older FlowPlan must not write to a schema it does not understand.

The scripts are SQLite's dialect; PostgreSQL runs them through :func:`store.postgres.ddl` (its
types for ``REAL``, ``INTEGER`` and ``AUTOINCREMENT``, no ``WITHOUT ROWID``), so a new script uses
only what both engines accept after that translation (``tests/test_store.py`` compares the schemas).

To change the schema, APPEND a script; never edit or reorder the published ones. Times are Unix
seconds (``REAL``) of the wall clock of the process that wrote the row; JSON columns hold the
``flowplan/v1`` contract models as ``model_dump_json`` writes them.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: jobs, their metric history, their QoE targets, the plans made.
    """
    CREATE TABLE jobs (
        id      TEXT PRIMARY KEY,
        spec    TEXT,                        -- planner.snapshot.Job minus history (JSON), or NULL
        fields  TEXT NOT NULL DEFAULT '{}',  -- other facts a writer keeps about the job (JSON object)
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE TABLE points (
        job    TEXT NOT NULL,
        epoch  REAL NOT NULL,                -- the idempotency key with job: a retried point is ignored
        time   REAL NOT NULL,
        loss   REAL,
        metric REAL,
        PRIMARY KEY (job, epoch)
    ) WITHOUT ROWID;
    CREATE TABLE targets (
        job     TEXT PRIMARY KEY,
        target  TEXT NOT NULL,               -- planner.snapshot.QoETarget (JSON)
        updated REAL NOT NULL
    );
    CREATE TABLE plans (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        time     REAL NOT NULL,              -- the plan's (snapshot's) time
        digest   TEXT NOT NULL,              -- sha256 of the snapshot it answers
        plan     TEXT NOT NULL,              -- planner.plan.Plan (JSON)
        snapshot TEXT,                       -- planner.snapshot.Snapshot (JSON), optional
        created  REAL NOT NULL
    );
    """,
    # 2: what the daemon needs to recover from a crash: the actions it set out to apply, and a small
    # key-value table (log offsets and the like).
    """
    CREATE TABLE actions (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        plan_id  INTEGER NOT NULL REFERENCES plans(id),
        job      TEXT NOT NULL,
        kind     TEXT NOT NULL,
        payload  TEXT NOT NULL,              -- the action as given (JSON object)
        status   TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
        message  TEXT NOT NULL DEFAULT '',
        created  REAL NOT NULL,
        finished REAL
    );
    CREATE INDEX actions_pending ON actions (status) WHERE status = 'pending';
    CREATE TABLE kv (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
    # 3: leases, so that two daemons sharing a store never act on the same jobs at once.
    """
    CREATE TABLE leases (
        name     TEXT PRIMARY KEY,           -- what is held, e.g. 'docker/team=vision' or 'docker/*'
        holder   TEXT NOT NULL,              -- who holds it: host, pid and start time
        expires  REAL NOT NULL,              -- Unix time; a lease not renewed by then is free
        acquired REAL NOT NULL
    );
    """,
    # 4: each job's observed speeds with what it trains and runs, so a new job of the same task or
    # image can borrow them until its own speed is observed (store.speeds).
    """
    CREATE TABLE speed_jobs (
        job      TEXT PRIMARY KEY,
        task     TEXT,                       -- planner.snapshot.Job.task, or NULL
        image    TEXT,                       -- the container image (Job.image), or NULL
        epochs   REAL NOT NULL DEFAULT 0,    -- epochs done when last recorded
        finished INTEGER NOT NULL DEFAULT 0, -- 1: the job finished
        updated  REAL NOT NULL
    );
    CREATE INDEX speed_jobs_task ON speed_jobs (task);
    CREATE INDEX speed_jobs_image ON speed_jobs (image);
    CREATE TABLE speeds (
        job               TEXT NOT NULL REFERENCES speed_jobs(job),
        cpu_millis        INTEGER NOT NULL,  -- CPU the job actually used, per replica (millicores)
        gpus              INTEGER NOT NULL,
        seconds_per_epoch REAL NOT NULL,
        PRIMARY KEY (job, cpu_millis, gpus)
    ) WITHOUT ROWID;
    """,
    # 5: a speed's shape: the replicas and nodes it was measured with, so a gang's speeds at other
    # counts are kept apart (they overwrote each other) and a borrower scales each to its own count
    # (planner.progress). Rows of version 4 keep replicas 0: not said, the job's own count.
    """
    CREATE TABLE speeds_by_shape (
        job               TEXT NOT NULL REFERENCES speed_jobs(job),
        cpu_millis        INTEGER NOT NULL,  -- CPU the job actually used, per replica (millicores)
        gpus              INTEGER NOT NULL,
        replicas          INTEGER NOT NULL DEFAULT 0,  -- replicas it ran with (0: not said, all of the job's)
        nodes             INTEGER NOT NULL DEFAULT 1,  -- over how many nodes
        seconds_per_epoch REAL NOT NULL,
        PRIMARY KEY (job, cpu_millis, gpus, replicas, nodes)
    ) WITHOUT ROWID;
    INSERT INTO speeds_by_shape (job, cpu_millis, gpus, seconds_per_epoch)
        SELECT job, cpu_millis, gpus, seconds_per_epoch FROM speeds;
    DROP TABLE speeds;
    ALTER TABLE speeds_by_shape RENAME TO speeds;
    """,
    # 6: the learning-rate schedule a job declared, with its planned epochs (JSON: {"schedule": {...},
    # "max_epochs": N}), so that its finished run lends its curve to jobs that declare the same one
    # (store.curves). NULL: none declared.
    """
    ALTER TABLE speed_jobs ADD COLUMN schedule TEXT;
    """,
    # 7: plans kept within bounds (StateStore keep_plans / keep_snapshots): the plans still holding a
    # snapshot, and each plan's actions, found without reading the whole table.
    """
    CREATE INDEX plans_with_snapshot ON plans (id) WHERE snapshot IS NOT NULL;
    CREATE INDEX actions_plan ON actions (plan_id);
    """,
]
