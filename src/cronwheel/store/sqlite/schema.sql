-- cronwheel schema for SQLite. Instants are INTEGER microseconds since the Unix
-- epoch, UTC. Migrations are the `-- name: migration_N` blocks, applied in order,
-- each in one transaction together with the bump of meta.schema_version.

-- name: migration_1
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace     TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    task          TEXT    NOT NULL,
    schedule      TEXT    NOT NULL,              -- JSON, Schedule.to_dict()
    payload       TEXT    NOT NULL,              -- JSON {"args": [...], "kwargs": {...}}
    policies      TEXT    NOT NULL,              -- JSON, JobPolicies.to_dict()
    spec_hash     TEXT    NOT NULL,
    priority      REAL    NOT NULL,              -- copies of hot policy values, for SQL
    max_attempts  INTEGER NOT NULL,
    visibility_us INTEGER NOT NULL,
    paused        INTEGER NOT NULL DEFAULT 0,
    next_fire_at  INTEGER,                       -- the durable cursor; NULL = exhausted
    last_fired_at INTEGER,
    missed_total  INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    shard         INTEGER NOT NULL,
    UNIQUE (namespace, name)
);
-- the due-jobs poll is a range scan of this index, never a scan of all jobs
CREATE INDEX jobs_due ON jobs (next_fire_at) WHERE paused = 0 AND next_fire_at IS NOT NULL;

CREATE TABLE firings (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id              INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    namespace           TEXT    NOT NULL,
    job_name            TEXT    NOT NULL,
    task                TEXT    NOT NULL,
    payload             TEXT    NOT NULL,
    scheduled_for       INTEGER NOT NULL,
    due_at              INTEGER NOT NULL,
    vdeadline           INTEGER NOT NULL,        -- claim order: due_at + base_latency / priority
    -- state machine (domain/firing.py):
    --   'queued'    -- enqueue (leader, fenced) | lease_expired | retry | redrive
    --   'running'   -- claim: queued -> running (attempt + 1, new claim_token)
    --   'succeeded' -- running -> succeeded (CAS on claim_token)
    --   'dead'      -- running -> dead (attempts exhausted)
    --   'cancelled' -- queued -> cancelled | running -> cancelled (cancel deadline)
    --   'skipped', 'missed' -- overlap / start deadline fates
    state               TEXT    NOT NULL,
    attempt             INTEGER NOT NULL DEFAULT 0,
    max_attempts        INTEGER NOT NULL,
    priority            REAL    NOT NULL,
    visibility_us       INTEGER NOT NULL,
    claim_token         TEXT,
    worker_id           TEXT,
    lease_until         INTEGER,
    enqueued_at         INTEGER NOT NULL,
    enqueued_epoch      INTEGER,                 -- fencing epoch of the leader that enqueued it
    started_at          INTEGER,
    finished_at         INTEGER,
    error               TEXT,
    note                TEXT,
    cancel_requested_at INTEGER,
    shard               INTEGER NOT NULL,
    UNIQUE (job_id, scheduled_for)               -- a deposed leader's duplicate is rejected here
);
CREATE INDEX firings_claim ON firings (vdeadline) WHERE state = 'queued';
CREATE INDEX firings_lease ON firings (lease_until) WHERE state = 'running';
CREATE INDEX firings_finished ON firings (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE firing_attempts (
    firing_id   INTEGER NOT NULL REFERENCES firings (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    worker_id   TEXT,
    started_at  INTEGER,
    finished_at INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,                -- 'failed' | 'lease_expired' | 'succeeded'
    error       TEXT,
    PRIMARY KEY (firing_id, attempt)
);

CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT    NOT NULL,
    epoch       INTEGER NOT NULL,                -- fencing token: +1 on every takeover
    expires_at  INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL
);

CREATE TABLE nodes (
    id           TEXT PRIMARY KEY,
    kind         TEXT    NOT NULL,
    hostname     TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    wake_addr    TEXT,
    info         TEXT    NOT NULL DEFAULT '{}'
);

CREATE TABLE job_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id   INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at       INTEGER NOT NULL,
    kind     TEXT    NOT NULL,                   -- 'missed' | ...
    first_at INTEGER,
    last_at  INTEGER,
    count    INTEGER NOT NULL,
    exact    INTEGER NOT NULL,
    detail   TEXT
);
CREATE INDEX job_events_job ON job_events (job_id, id);

-- name: migration_2
-- HTTP API: bearer tokens (only a hash of the secret is stored), Idempotency-Key
-- records of POST /v1/firings, and an index for per-job firing history pages.
CREATE TABLE api_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace   TEXT    NOT NULL,
    role        TEXT    NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    label       TEXT,
    secret_hash TEXT    NOT NULL,                -- sha256 hex of the random secret
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER                          -- NULL while the token is valid
);

CREATE TABLE idempotency_keys (
    namespace    TEXT    NOT NULL,
    key_hash     TEXT    NOT NULL,               -- sha256 hex of the Idempotency-Key header
    request_hash TEXT    NOT NULL,               -- sha256 hex of the canonical request body
    firing_id    INTEGER NOT NULL REFERENCES firings (id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (namespace, key_hash)
);

CREATE INDEX firings_job_id ON firings (job_id, id);

-- name: migration_3
-- Scheduling policies: concurrency cap and overlap policy (decided at claim time),
-- cancellation grace, start deadline, schedule bounds and run limits, and per-namespace
-- fair-share clocks. See domain/overlap.py and domain/policies.py.
ALTER TABLE jobs ADD COLUMN max_concurrency INTEGER;           -- NULL: no cap
ALTER TABLE jobs ADD COLUMN overlap TEXT NOT NULL DEFAULT 'skip';
ALTER TABLE jobs ADD COLUMN max_buffer INTEGER NOT NULL DEFAULT 100;
ALTER TABLE jobs ADD COLUMN cancel_grace_us INTEGER NOT NULL DEFAULT 30000000;
ALTER TABLE jobs ADD COLUMN start_deadline_us INTEGER;         -- NULL: no deadline
ALTER TABLE jobs ADD COLUMN bounds TEXT NOT NULL DEFAULT '{}';  -- {"start_at", "end_at", "max_runs"}
ALTER TABLE jobs ADD COLUMN remaining_runs INTEGER;            -- NULL: unlimited
ALTER TABLE firings ADD COLUMN overlap_override TEXT;          -- trigger/backfill override
ALTER TABLE firings ADD COLUMN reason TEXT;                    -- why skipped/missed/cancelled
CREATE INDEX firings_running_job ON firings (job_id) WHERE state = 'running';
CREATE INDEX firings_queued_job ON firings (job_id, scheduled_for) WHERE state = 'queued';
CREATE TABLE fair_clocks (
    namespace TEXT PRIMARY KEY,
    vclock    INTEGER NOT NULL                                  -- µs: the namespace's virtual time
);

-- name: migration_4
-- A due firing kept waiting by its job's overlap policy (buffer_one/buffer_all/
-- cancel_other) is marked, so claim scans pass over it while the job is at its cap.
ALTER TABLE firings ADD COLUMN buffered_at INTEGER;

-- name: migration_5
-- (PostgreSQL's plan-pinned claim scan function; SQLite has none. Kept so that schema
-- versions mean the same on both stores.)
SELECT 1;

-- name: migration_6
-- When the next queued firing falls due (an idle worker's wake-up hint): a range scan
-- of this index instead of a scan of every queued firing (see the PostgreSQL schema).
-- Its predicate names buffered_at so that only the hint's query, which says so too, can
-- use it: a query on queued firings by job (a claim's facts) took it, with stale
-- statistics, to walk every due firing instead of looking its jobs up.
CREATE INDEX firings_queued_due ON firings (due_at) WHERE state = 'queued' AND buffered_at IS NULL;

-- name: migration_7
-- The reaper's start-deadline pass starts from the jobs that have one (see requeue_expired).
CREATE INDEX jobs_start_deadline ON jobs (id) WHERE start_deadline_us IS NOT NULL;

-- name: migration_8
-- CLAIMED: a firing a worker holds but has not started (prefetched, claimed early for
-- a crowd, or claimed ahead of a free slot). It becomes RUNNING by a compare-and-swap
-- when its handler is about to be called (`start`), which a cancel in between makes
-- fail: a cancelled CLAIMED firing never runs. The lease and per-job indexes cover
-- both held states; claimed_at is when the worker took it.
ALTER TABLE firings ADD COLUMN claimed_at INTEGER;
ALTER TABLE firing_attempts ADD COLUMN claimed_at INTEGER;
DROP INDEX firings_lease;
CREATE INDEX firings_lease ON firings (lease_until) WHERE state IN ('claimed', 'running');
DROP INDEX firings_running_job;
CREATE INDEX firings_held_job ON firings (job_id) WHERE state IN ('claimed', 'running');

-- name: migration_9
-- The task names workers have served (a worker's node info lists them): global names,
-- like the tasks a worker claims across namespaces. A job whose task no worker ever
-- served is refused unless allowed (domain/jobs.py); first_seen and last_seen are the
-- store's clock when a worker first and last reported the task (registration, and at
-- most once a minute on heartbeat).
CREATE TABLE served_tasks (
    task       TEXT    PRIMARY KEY,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL
);

-- name: migration_10
-- Per-namespace quotas (domain/quotas.py): a namespace's own limits (none: the
-- defaults), and the counters the store charges in the transaction of each write
-- it guards: `jobs` (window 0: for ever), `firings_per_minute` (a minute's window),
-- `backfill_per_day` (a UTC day's). window_start is µs since the epoch. The counter of
-- registered jobs starts from the jobs there are (`now` one-shots are not counted);
-- held firings per namespace are counted by the index below (claims, status).
CREATE TABLE quotas (
    namespace          TEXT    PRIMARY KEY,
    jobs               INTEGER NOT NULL,
    firings_per_minute INTEGER NOT NULL,
    min_interval_us    INTEGER NOT NULL,
    running            INTEGER NOT NULL,
    backfill           INTEGER NOT NULL,
    backfill_per_day   INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
);
CREATE TABLE quota_usage (
    namespace    TEXT    NOT NULL,
    quota        TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    used         INTEGER NOT NULL,
    PRIMARY KEY (namespace, quota, window_start)
);
INSERT INTO quota_usage (namespace, quota, window_start, used)
SELECT namespace, 'jobs', 0, count(*) FROM jobs
WHERE json_extract(schedule, '$.kind') <> 'now' GROUP BY namespace;
CREATE INDEX firings_held_namespace ON firings (namespace) WHERE state IN ('claimed', 'running');

-- name: migration_11
-- Calendars stored by name in a namespace (domain/calendars.py): the days a cron job
-- naming one may fire on. A job keeps a copy of the rules in its schedule (its
-- `calendar_def`), rewritten with its cursor when the calendar changes.
CREATE TABLE calendars (
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    rules      TEXT    NOT NULL,                -- JSON, CalendarRules.to_dict()
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- name: migration_12
-- The tz database each node computes instants with (domain/tzdb.py): its source
-- ('bundled', 'system' or a directory) and IANA version. The cluster's own is the
-- meta row 'tzdata', written by the leader that adopted it (core/tzdata.py).
ALTER TABLE nodes ADD COLUMN tz_source TEXT;
ALTER TABLE nodes ADD COLUMN tz_version TEXT;
-- name: migration_13
-- Tracing (observability/tracing.py): the W3C trace context (JSON: traceparent,
-- tracestate) captured where the job was registered or enqueued; NULL when tracing
-- was off. The worker's claim reads it with the job's policies.
ALTER TABLE jobs ADD COLUMN trace_context TEXT;

-- name: migration_14
-- Node clocks (domain/clock.py): each node's offset to the store's clock and its
-- uncertainty (seconds), and why the node is flagged (NULL: it is not), as it last
-- reported them; NULL offset: not measured yet.
ALTER TABLE nodes ADD COLUMN clock_offset REAL;
ALTER TABLE nodes ADD COLUMN clock_uncertainty REAL;
ALTER TABLE nodes ADD COLUMN clock_flag TEXT;

-- name: migration_15
-- History retention (domain/retention.py): a namespace's own policy (none: keep finished
-- firings 7 days and the last one per outcome per job), and the index that answers
-- "how many newer firings of this job ended the same way" for keep_last, a walk of at
-- most keep_last entries per firing pruning looks at.
CREATE TABLE retention (
    namespace   TEXT    PRIMARY KEY,
    keep_for_us INTEGER NOT NULL,
    keep_last   INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX firings_outcome ON firings (job_id, state, scheduled_for) WHERE finished_at IS NOT NULL;
-- No full scan on a periodic path (status, /metrics, the dashboard, the reaper): the
-- active firings by id (the paged walks of the collector and the dashboard, each job's
-- backlog), paused jobs, and the finishes of each minute counted as they happen
-- (status' "last hour" sums at most 60 minutes of rows, whatever the history holds).
-- A counter row per (minute, namespace, state, slot): the slot (id % 8) spreads
-- concurrent completions over rows on PostgreSQL, mirrored here.
CREATE INDEX firings_active ON firings (id) WHERE state IN ('queued', 'claimed', 'running');
CREATE INDEX jobs_paused ON jobs (namespace) WHERE paused = 1;
-- deleting a firing (pruning, a job's deletion) looks its idempotency keys up by this,
-- not by a scan of every key (PostgreSQL has had it since migration_2)
CREATE INDEX idempotency_keys_firing ON idempotency_keys (firing_id);
CREATE TABLE finished_counts (
    minute    INTEGER NOT NULL,                 -- finished_at in whole minutes since the epoch
    namespace TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    slot      INTEGER NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (minute, namespace, state, slot)
);
CREATE TRIGGER firings_count_finished_insert AFTER INSERT ON firings
WHEN NEW.finished_at IS NOT NULL
BEGIN
    INSERT INTO finished_counts (minute, namespace, state, slot, n)
    VALUES (NEW.finished_at / 60000000, NEW.namespace, NEW.state, NEW.id % 8, 1)
    ON CONFLICT (minute, namespace, state, slot) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER firings_count_finished_update AFTER UPDATE OF finished_at ON firings
WHEN NEW.finished_at IS NOT NULL AND (OLD.finished_at IS NULL OR OLD.finished_at <> NEW.finished_at)
BEGIN
    INSERT INTO finished_counts (minute, namespace, state, slot, n)
    VALUES (NEW.finished_at / 60000000, NEW.namespace, NEW.state, NEW.id % 8, 1)
    ON CONFLICT (minute, namespace, state, slot) DO UPDATE SET n = n + 1;
END;

-- name: migration_16
-- The jobs that override a retention policy, for the bounds a retention pass reads at
-- its start (core_retention.sql retention_job_bounds): without it the pass read every
-- job, a hundred thousand one-shot jobs a day of `app.enqueue` at the design's rate
-- kept as long as their firings. (PostgreSQL: its migration_17.)
CREATE INDEX jobs_retention_override ON jobs (id)
WHERE json_extract(policies, '$.keep_for_s') IS NOT NULL
   OR json_extract(policies, '$.keep_last') IS NOT NULL;

-- name: migration_17
-- A namespace's jobs in id order (core.sql list_jobs: search_jobs, the dashboard's jobs
-- page, the API's job list): without it SQLite read every job of the namespace through
-- the (namespace, name) unique index and sorted them by id to return the first page,
-- 26.7 ms on a store of two days at 1,000,000 a day (200,000 one-shot jobs of
-- `app.enqueue`), and the jobs page 148 ms in the soak of seven days; 2.1 ms with it
-- (docs/benchmarks.md "SQLite: a namespace's jobs in id order"). PostgreSQL's planner
-- has statistics and walks the primary key in id order.
CREATE INDEX jobs_namespace_id ON jobs (namespace, id);
