-- cronwheel schema for PostgreSQL. Instants are timestamptz; schedule, policies
-- and node info are jsonb. A payload is `json`, not jsonb: it is the user's
-- arguments, opaque to SQL, and must come back exactly as given — jsonb rejects
-- "\u0000" in strings and rewrites numbers (1e+300 comes back as an integer). Migrations are the `-- name: migration_N`
-- blocks, applied in order by PostgresStore.migrate(): all pending ones in ONE
-- transaction under pg_advisory_xact_lock (a transaction-level lock: released at
-- commit, safe on pooled connections), together with the bump of
-- meta.schema_version, so two processes migrating at once apply each block once.
-- Tables and columns mirror the SQLite schema one for one.

-- name: migration_1
CREATE TABLE IF NOT EXISTS meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace     text             NOT NULL,
    name          text             NOT NULL,
    task          text             NOT NULL,
    schedule      jsonb            NOT NULL,     -- Schedule.to_dict()
    payload       json             NOT NULL,     -- {"args": [...], "kwargs": {...}}, verbatim
    policies      jsonb            NOT NULL,     -- JobPolicies.to_dict()
    spec_hash     text             NOT NULL,
    priority      double precision NOT NULL,     -- copies of hot policy values, for SQL
    max_attempts  integer          NOT NULL,
    visibility_us bigint           NOT NULL,
    paused        boolean          NOT NULL DEFAULT false,
    next_fire_at  timestamptz,                   -- the durable cursor; NULL = exhausted
    last_fired_at timestamptz,
    missed_total  bigint           NOT NULL DEFAULT 0,
    created_at    timestamptz      NOT NULL,
    updated_at    timestamptz      NOT NULL,
    shard         smallint         NOT NULL,     -- hash(namespace, name) % 256 (scale path)
    UNIQUE (namespace, name)
);
-- the due-jobs poll is a range scan of this index, never a scan of all jobs
CREATE INDEX jobs_due ON jobs (next_fire_at) WHERE NOT paused AND next_fire_at IS NOT NULL;

CREATE TABLE firings (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id              bigint           NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    namespace           text             NOT NULL,
    job_name            text             NOT NULL,
    task                text             NOT NULL,
    payload             json             NOT NULL,
    scheduled_for       timestamptz      NOT NULL,
    due_at              timestamptz      NOT NULL,
    vdeadline           timestamptz      NOT NULL, -- claim order: due_at + base_latency / priority
    -- state machine (domain/firing.py):
    --   'queued'    -- enqueue (leader, fenced) | lease_expired | retry | redrive
    --   'running'   -- claim: queued -> running (attempt + 1, new claim_token)
    --   'succeeded' -- running -> succeeded (CAS on claim_token)
    --   'dead'      -- running -> dead (attempts exhausted)
    --   'cancelled' -- queued -> cancelled | running -> cancelled (cancel deadline)
    --   'skipped', 'missed' -- overlap / start deadline fates
    state               text             NOT NULL,
    attempt             integer          NOT NULL DEFAULT 0,
    max_attempts        integer          NOT NULL,
    priority            double precision NOT NULL,
    visibility_us       bigint           NOT NULL,
    claim_token         text,
    worker_id           text,
    lease_until         timestamptz,
    enqueued_at         timestamptz      NOT NULL,
    enqueued_epoch      bigint,                    -- fencing epoch of the leader that enqueued it
    started_at          timestamptz,
    finished_at         timestamptz,
    error               text,
    note                text,
    cancel_requested_at timestamptz,
    shard               smallint         NOT NULL,
    UNIQUE (job_id, scheduled_for)                 -- a deposed leader's duplicate is rejected here
);
CREATE INDEX firings_claim ON firings (vdeadline) WHERE state = 'queued';
CREATE INDEX firings_lease ON firings (lease_until) WHERE state = 'running';
CREATE INDEX firings_finished ON firings (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE firing_attempts (
    firing_id   bigint      NOT NULL REFERENCES firings (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    worker_id   text,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL,
    outcome     text        NOT NULL,            -- 'failed' | 'lease_expired' | 'succeeded'
    error       text,
    PRIMARY KEY (firing_id, attempt)
);

CREATE TABLE leases (
    name        text PRIMARY KEY,
    holder      text        NOT NULL,
    epoch       bigint      NOT NULL,            -- fencing token: +1 on every takeover
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL
);

CREATE TABLE nodes (
    id           text PRIMARY KEY,
    kind         text        NOT NULL,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    wake_addr    text,
    info         jsonb       NOT NULL DEFAULT '{}'
);

CREATE TABLE job_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   bigint      NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at       timestamptz NOT NULL,
    kind     text        NOT NULL,               -- 'missed' | ...
    first_at timestamptz,
    last_at  timestamptz,
    count    bigint      NOT NULL,
    exact    boolean     NOT NULL,
    detail   text
);
CREATE INDEX job_events_job ON job_events (job_id, id);

-- name: migration_2
-- HTTP API: bearer tokens (only a hash of the secret is stored), Idempotency-Key
-- records of POST /v1/firings, and an index for per-job firing history pages.
CREATE TABLE api_tokens (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace   text        NOT NULL,
    role        text        NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    label       text,
    secret_hash text        NOT NULL,            -- sha256 hex of the random secret
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz                      -- NULL while the token is valid
);

CREATE TABLE idempotency_keys (
    namespace    text        NOT NULL,
    key_hash     text        NOT NULL,           -- sha256 hex of the Idempotency-Key header
    request_hash text        NOT NULL,           -- sha256 hex of the canonical request body
    firing_id    bigint      NOT NULL REFERENCES firings (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (namespace, key_hash)
);
-- PostgreSQL does not index a referencing column by itself: without this, deleting a
-- job (cascading to its firings) would scan idempotency_keys once per firing
CREATE INDEX idempotency_keys_firing ON idempotency_keys (firing_id);

CREATE INDEX firings_job_id ON firings (job_id, id);

-- name: migration_3
-- Scheduling policies: concurrency cap and overlap policy (decided at claim time),
-- cancellation grace, start deadline, schedule bounds and run limits, and per-namespace
-- fair-share clocks. See domain/overlap.py and domain/policies.py. Durations are bigint
-- microseconds like visibility_us; ADD COLUMN with a constant default rewrites no rows.
ALTER TABLE jobs ADD COLUMN max_concurrency integer;                 -- NULL: no cap
ALTER TABLE jobs ADD COLUMN overlap text NOT NULL DEFAULT 'skip';
ALTER TABLE jobs ADD COLUMN max_buffer integer NOT NULL DEFAULT 100;
ALTER TABLE jobs ADD COLUMN cancel_grace_us bigint NOT NULL DEFAULT 30000000;
ALTER TABLE jobs ADD COLUMN start_deadline_us bigint;                -- NULL: no deadline
ALTER TABLE jobs ADD COLUMN bounds jsonb NOT NULL DEFAULT '{}';      -- {"start_at", "end_at", "max_runs"}
ALTER TABLE jobs ADD COLUMN remaining_runs integer;                  -- NULL: unlimited
ALTER TABLE firings ADD COLUMN overlap_override text;                -- trigger/backfill override
ALTER TABLE firings ADD COLUMN reason text;                          -- why skipped/missed/cancelled
CREATE INDEX firings_running_job ON firings (job_id) WHERE state = 'running';
CREATE INDEX firings_queued_job ON firings (job_id, scheduled_for) WHERE state = 'queued';
CREATE TABLE fair_clocks (
    namespace text PRIMARY KEY,
    vclock    bigint NOT NULL                                        -- µs: the namespace's virtual time
);

-- name: migration_4
-- A due firing kept waiting by its job's overlap policy (buffer_one/buffer_all/
-- cancel_other) is marked, so claim scans pass over it while the job is at its cap.
ALTER TABLE firings ADD COLUMN buffered_at timestamptz;

-- name: migration_5
-- The queue scan of every claim, as a function so that its plan is fixed whatever the
-- table's statistics say: a walk of firings_claim in vdeadline order, each firing's job
-- looked up by primary key, stopping after p_scan unlocked rows. Statistics go stale in
-- exactly the moment that matters — a herd of firings enqueued since the last ANALYZE —
-- and the planner, believing a handful of rows are queued, then chose a bitmap scan
-- and a sort of the whole queue on every claim (measured: 50 ms per claim at 20,000
-- queued firings instead of 1 ms, so that draining a herd was quadratic). The SET
-- clauses only steer this function's own statement; they are restored on return.
CREATE FUNCTION cronwheel_claim_scan(p_tasks text[], p_horizon timestamptz, p_scan integer)
RETURNS TABLE (id bigint, job_id bigint, vdeadline timestamptz, due_at timestamptz,
               overlap_override text, max_concurrency integer, overlap text,
               max_buffer integer, start_deadline_us bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
BEGIN
    RETURN QUERY
    SELECT f.id, f.job_id, f.vdeadline, f.due_at, f.overlap_override,
           j.max_concurrency, j.overlap, j.max_buffer, j.start_deadline_us
    FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state = 'queued' AND f.due_at <= p_horizon AND f.task = ANY (p_tasks)
      -- a buffered firing waits, unlooked-at, while its job is at its cap
      AND NOT (f.buffered_at IS NOT NULL AND j.max_concurrency IS NOT NULL
               AND (SELECT count(*) FROM firings r
                    WHERE r.job_id = f.job_id AND r.state = 'running') >= j.max_concurrency)
    ORDER BY f.vdeadline
    LIMIT p_scan
    FOR UPDATE OF f SKIP LOCKED;
END
$fn$;

-- name: migration_6
-- When the next queued firing falls due (an idle worker's wake-up hint): a range scan
-- of this index instead of a scan of every queued firing, which a worker ran each time
-- it waited (measured: 16 ms per call with 50,000 firings queued and due, so that a
-- deep queue slowed its own drain). Only queued rows are in it: claims and completions
-- add no entry.
-- Its predicate names buffered_at so that only the hint's query, which says so too, can
-- use it: a query on queued firings by job (a claim's facts) took it, with stale
-- statistics, to walk every due firing instead of looking its jobs up.
CREATE INDEX firings_queued_due ON firings (due_at) WHERE state = 'queued' AND buffered_at IS NULL;

-- name: migration_7
-- The reaper's start-deadline pass (once a second): queued firings past their job's start
-- deadline, found from the jobs that have one (usually few: this index), each one's
-- queued firings by index, locked SKIP LOCKED. It was a join that read every queued
-- firing (20,472 buffers with 20,000 queued); as a plain query, with statistics that
-- had not seen the jobs, the planner read every job instead. The function pins the plan
-- as cronwheel_claim_scan does.
CREATE INDEX jobs_start_deadline ON jobs (id) WHERE start_deadline_us IS NOT NULL;
CREATE FUNCTION cronwheel_late_firings(p_now timestamptz, p_limit integer)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $fn$
BEGIN
    RETURN QUERY
    SELECT f.id
    FROM jobs j
    CROSS JOIN LATERAL (
        SELECT q.id FROM firings q
        WHERE q.job_id = j.id AND q.state = 'queued'
          AND q.due_at < p_now - j.start_deadline_us * interval '1 microsecond'
        LIMIT p_limit
        FOR UPDATE OF q SKIP LOCKED
    ) f
    WHERE j.start_deadline_us IS NOT NULL
    LIMIT p_limit;
END
$fn$;

-- name: migration_8
-- CLAIMED: a firing a worker holds but has not started (prefetched, claimed early for
-- a crowd, or claimed ahead of a free slot). It becomes RUNNING by a compare-and-swap
-- when its handler is about to be called (`start`), which a cancel in between makes
-- fail: a cancelled CLAIMED firing never runs. The lease and per-job indexes cover
-- both held states, and a buffered firing's cap counts both; claimed_at is when the
-- worker took it.
ALTER TABLE firings ADD COLUMN claimed_at timestamptz;
ALTER TABLE firing_attempts ADD COLUMN claimed_at timestamptz;
DROP INDEX firings_lease;
CREATE INDEX firings_lease ON firings (lease_until) WHERE state IN ('claimed', 'running');
DROP INDEX firings_running_job;
CREATE INDEX firings_held_job ON firings (job_id) WHERE state IN ('claimed', 'running');
CREATE OR REPLACE FUNCTION cronwheel_claim_scan(p_tasks text[], p_horizon timestamptz,
                                                p_scan integer)
RETURNS TABLE (id bigint, job_id bigint, vdeadline timestamptz, due_at timestamptz,
               overlap_override text, max_concurrency integer, overlap text,
               max_buffer integer, start_deadline_us bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
BEGIN
    RETURN QUERY
    SELECT f.id, f.job_id, f.vdeadline, f.due_at, f.overlap_override,
           j.max_concurrency, j.overlap, j.max_buffer, j.start_deadline_us
    FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state = 'queued' AND f.due_at <= p_horizon AND f.task = ANY (p_tasks)
      -- a buffered firing waits, unlooked-at, while its job is at its cap
      AND NOT (f.buffered_at IS NOT NULL AND j.max_concurrency IS NOT NULL
               AND (SELECT count(*) FROM firings r
                    WHERE r.job_id = f.job_id AND r.state IN ('claimed', 'running'))
                   >= j.max_concurrency)
    ORDER BY f.vdeadline
    LIMIT p_scan
    FOR UPDATE OF f SKIP LOCKED;
END
$fn$;

-- name: migration_9
-- The task names workers have served (a worker's node info lists them): global names,
-- like the tasks a worker claims across namespaces. A job whose task no worker ever
-- served is refused unless allowed (domain/jobs.py); first_seen and last_seen are the
-- store's clock when a worker first and last reported the task (registration, and at
-- most once a minute on heartbeat).
CREATE TABLE served_tasks (
    task       text        PRIMARY KEY,
    first_seen timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL
);

-- name: migration_10
-- Per-namespace quotas (domain/quotas.py): a namespace's own limits (none: the
-- defaults), and the counters the store charges in the transaction of each write
-- it guards: `jobs` (window 0: for ever), `firings_per_minute` (a minute's window),
-- `backfill_per_day` (a UTC day's). window_start is µs since the epoch. A charge is an
-- upsert of the counter row: its row lock serializes two API servers charging one
-- namespace, so they cannot both pass a check. The counter of registered jobs starts
-- from the jobs there are (`now` one-shots are not counted); held firings per
-- namespace are counted by the index below (claims, status).
CREATE TABLE quotas (
    namespace          text        PRIMARY KEY,
    jobs               bigint      NOT NULL,
    firings_per_minute bigint      NOT NULL,
    min_interval_us    bigint      NOT NULL,
    running            bigint      NOT NULL,
    backfill           bigint      NOT NULL,
    backfill_per_day   bigint      NOT NULL,
    updated_at         timestamptz NOT NULL
);
CREATE TABLE quota_usage (
    namespace    text   NOT NULL,
    quota        text   NOT NULL,
    window_start bigint NOT NULL,
    used         bigint NOT NULL,
    PRIMARY KEY (namespace, quota, window_start)
);
INSERT INTO quota_usage (namespace, quota, window_start, used)
SELECT namespace, 'jobs', 0, count(*) FROM jobs
WHERE schedule->>'kind' <> 'now' GROUP BY namespace;
CREATE INDEX firings_held_namespace ON firings (namespace) WHERE state IN ('claimed', 'running');

-- name: migration_11
-- Calendars stored by name in a namespace (domain/calendars.py): the days a cron job
-- naming one may fire on. A job keeps a copy of the rules in its schedule (its
-- `calendar_def`), rewritten with its cursor when the calendar changes.
CREATE TABLE calendars (
    namespace  text        NOT NULL,
    name       text        NOT NULL,
    rules      jsonb       NOT NULL,            -- CalendarRules.to_dict()
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- name: migration_12
-- The tz database each node computes instants with (domain/tzdb.py): its source
-- ('bundled', 'system' or a directory) and IANA version. The cluster's own is the
-- meta row 'tzdata', written by the leader that adopted it (core/tzdata.py).
ALTER TABLE nodes ADD COLUMN tz_source text;
ALTER TABLE nodes ADD COLUMN tz_version text;
-- name: migration_13
-- Tracing (observability/tracing.py): the W3C trace context (JSON: traceparent,
-- tracestate) captured where the job was registered or enqueued; NULL when tracing
-- was off. The worker's claim reads it with the job's policies.
ALTER TABLE jobs ADD COLUMN trace_context text;

-- name: migration_14
-- Node clocks (domain/clock.py): each node's offset to the store's clock and its
-- uncertainty (seconds), and why the node is flagged (NULL: it is not), as it last
-- reported them; NULL offset: not measured yet.
ALTER TABLE nodes ADD COLUMN clock_offset double precision;
ALTER TABLE nodes ADD COLUMN clock_uncertainty double precision;
ALTER TABLE nodes ADD COLUMN clock_flag text;

-- name: migration_15
-- History retention (domain/retention.py): a namespace's own policy (none: keep finished
-- firings 7 days and the last one per outcome per job), and the index that answers
-- "how many newer firings of this job ended the same way" for keep_last, a walk of at
-- most keep_last entries per firing pruning looks at.
CREATE TABLE retention (
    namespace   text        PRIMARY KEY,
    keep_for_us bigint      NOT NULL,
    keep_last   integer     NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX firings_outcome ON firings (job_id, state, scheduled_for) WHERE finished_at IS NOT NULL;
-- No full scan on a periodic path (status, /metrics, the dashboard, the reaper): the
-- active firings by id (the paged walks of the collector and the dashboard, each job's
-- backlog), paused jobs, and the finishes of each minute counted as they happen
-- (status' "last hour" sums at most 60 minutes of rows, whatever the history holds).
-- A counter row per (minute, namespace, state, slot): the slot (id % 8) spreads
-- concurrent completions over 8 rows, so that workers completing at once rarely wait
-- on one row's lock.
CREATE INDEX firings_active ON firings (id) WHERE state IN ('queued', 'claimed', 'running');
CREATE INDEX jobs_paused ON jobs (namespace) WHERE paused;
CREATE TABLE finished_counts (
    minute    bigint   NOT NULL,                -- finished_at in whole minutes since the epoch
    namespace text     NOT NULL,
    state     text     NOT NULL,
    slot      smallint NOT NULL,
    n         bigint   NOT NULL,
    PRIMARY KEY (minute, namespace, state, slot)
);
CREATE FUNCTION cronwheel_count_finished() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF NEW.finished_at IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.finished_at IS NULL OR OLD.finished_at <> NEW.finished_at) THEN
        INSERT INTO finished_counts (minute, namespace, state, slot, n)
        VALUES (floor(extract(epoch FROM NEW.finished_at) / 60)::bigint, NEW.namespace,
                NEW.state, NEW.id % 8, 1)
        ON CONFLICT (minute, namespace, state, slot) DO UPDATE SET n = finished_counts.n + 1;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER firings_count_finished AFTER INSERT OR UPDATE OF finished_at ON firings
FOR EACH ROW EXECUTE FUNCTION cronwheel_count_finished();

-- name: migration_16
-- Firings partitioned by time (store/postgres/partitions.py): `firings` becomes
-- PARTITION BY RANGE (scheduled_for), one partition per UTC day, so that retention drops
-- a day whose every firing is past its policy in O(1) instead of deleting its rows.
-- The table as it was becomes one partition, `firings_legacy`, covering every instant
-- before the boundary B (a UTC midnight, the meta row 'firings_partitions_from'); days
-- from B on get partitions of their own. On a database holding data, run
-- PostgresStore.prepare_partitioning first (`cronwheel migrate` does): it adds the CHECK
-- (scheduled_for < B) NOT VALID and VALIDATEs it, and builds the unique index on
-- (id, scheduled_for) CONCURRENTLY, both without blocking writers, so that this
-- transaction only changes catalogs (the ATTACH proves the range from the CHECK instead
-- of scanning the table). Without it (a fresh or small database), both are done here.
-- Keys: UNIQUE (id, scheduled_for) (ids still come from one sequence, so id alone stays
-- unique) and UNIQUE (job_id, scheduled_for) (a deposed leader's duplicate is still
-- rejected: it includes the partition key). No DEFAULT partition: attaching a day would
-- have to scan it. firing_attempts and idempotency_keys lose their foreign keys onto
-- firings(id) (a key onto a partitioned table must include scheduled_for, and a
-- referenced partition cannot be dropped without a scan); the statement trigger
-- firings_cascade deletes them with their firing as ON DELETE CASCADE did.
DO $mig$
DECLARE
    b      timestamptz;
    nextid bigint;
    ix     record;
BEGIN
    LOCK TABLE firings IN ACCESS EXCLUSIVE MODE;
    SELECT value::timestamptz INTO b FROM meta WHERE key = 'firings_partitions_from';
    IF b IS NULL OR NOT EXISTS (SELECT 1 FROM pg_constraint
                                WHERE conrelid = 'firings'::regclass
                                  AND conname = 'firings_partition_bound' AND convalidated) THEN
        SELECT greatest(date_trunc('day', now(), 'UTC'),
                        coalesce(date_trunc('day', max(scheduled_for), 'UTC') + interval '1 day',
                                 '-infinity'))
        INTO b FROM firings;
        ALTER TABLE firings DROP CONSTRAINT IF EXISTS firings_partition_bound;
        EXECUTE format('ALTER TABLE firings ADD CONSTRAINT firings_partition_bound '
                       'CHECK (scheduled_for < %L)', b);
        INSERT INTO meta (key, value) VALUES ('firings_partitions_from', b::text)
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE i.indrelid = 'firings'::regclass AND c.relname = 'firings_id_at'
                     AND i.indisvalid) THEN
        DROP INDEX IF EXISTS firings_id_at;
        CREATE UNIQUE INDEX firings_id_at ON firings (id, scheduled_for);
    END IF;
    ALTER TABLE firings ADD CONSTRAINT firings_id_at UNIQUE USING INDEX firings_id_at;
    ALTER TABLE firing_attempts DROP CONSTRAINT firing_attempts_firing_id_fkey;
    ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_firing_id_fkey;
    ALTER TABLE firings DROP CONSTRAINT firings_pkey;
    DROP TRIGGER firings_count_finished ON firings;
    -- ids: one sequence for every partition, continuing the identity's
    nextid := nextval(pg_get_serial_sequence('firings', 'id'));
    ALTER TABLE firings ALTER COLUMN id DROP IDENTITY;
    CREATE SEQUENCE firings_id_seq AS bigint;
    PERFORM setval('firings_id_seq', nextid, false);
    -- the old table's indexes and constraints keep their definitions, renamed
    FOR ix IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              WHERE i.indrelid = 'firings'::regclass LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', ix.relname,
                       'firings_legacy' || substr(ix.relname, length('firings') + 1));
    END LOOP;
    ALTER TABLE firings RENAME CONSTRAINT firings_job_id_fkey TO firings_legacy_job_id_fkey;
    ALTER TABLE firings RENAME CONSTRAINT firings_partition_bound TO firings_legacy_bound;
    ALTER TABLE firings RENAME TO firings_legacy;
    CREATE TABLE firings (LIKE firings_legacy INCLUDING DEFAULTS) PARTITION BY RANGE (scheduled_for);
    ALTER SEQUENCE firings_id_seq OWNED BY firings.id;
    ALTER TABLE firings ALTER COLUMN id SET DEFAULT nextval('firings_id_seq');
    ALTER TABLE firings ADD CONSTRAINT firings_id_at UNIQUE (id, scheduled_for);
    ALTER TABLE firings ADD CONSTRAINT firings_job_id_scheduled_for_key UNIQUE (job_id, scheduled_for);
    ALTER TABLE firings ADD CONSTRAINT firings_job_id_fkey
        FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE;
    CREATE INDEX firings_claim ON firings (vdeadline) WHERE state = 'queued';
    CREATE INDEX firings_lease ON firings (lease_until) WHERE state IN ('claimed', 'running');
    CREATE INDEX firings_finished ON firings (finished_at) WHERE finished_at IS NOT NULL;
    CREATE INDEX firings_job_id ON firings (job_id, id);
    CREATE INDEX firings_held_job ON firings (job_id) WHERE state IN ('claimed', 'running');
    CREATE INDEX firings_queued_job ON firings (job_id, scheduled_for) WHERE state = 'queued';
    CREATE INDEX firings_held_namespace ON firings (namespace) WHERE state IN ('claimed', 'running');
    CREATE INDEX firings_queued_due ON firings (due_at) WHERE state = 'queued' AND buffered_at IS NULL;
    CREATE INDEX firings_outcome ON firings (job_id, state, scheduled_for) WHERE finished_at IS NOT NULL;
    CREATE INDEX firings_active ON firings (id) WHERE state IN ('queued', 'claimed', 'running');
    CREATE TRIGGER firings_count_finished AFTER INSERT OR UPDATE OF finished_at ON firings
    FOR EACH ROW EXECUTE FUNCTION cronwheel_count_finished();
    EXECUTE format('ALTER TABLE firings ATTACH PARTITION firings_legacy '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', b);
    -- a new database's (empty) old table is no partition to keep: every query would
    -- probe it
    IF NOT EXISTS (SELECT 1 FROM firings_legacy) THEN
        ALTER TABLE firings DETACH PARTITION firings_legacy;
        DROP TABLE firings_legacy;
    END IF;
END
$mig$;
CREATE FUNCTION cronwheel_firing_deleted() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    DELETE FROM firing_attempts a USING gone g WHERE a.firing_id = g.id;
    DELETE FROM idempotency_keys k USING gone g WHERE k.firing_id = g.id;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER firings_cascade AFTER DELETE ON firings REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION cronwheel_firing_deleted();
-- A day's partition: a plain table like the parent, then ATTACHed (SHARE UPDATE
-- EXCLUSIVE on the parent: reads and writes go on; CREATE TABLE ... PARTITION OF would
-- take ACCESS EXCLUSIVE). Idempotent; serialized on an advisory lock; nothing when the
-- instant is before the boundary while firings_legacy still covers it. The name of the
-- partition holding the instant.
CREATE FUNCTION cronwheel_firings_partition(p_at timestamptz) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    lo   timestamptz := date_trunc('day', p_at, 'UTC');
    name text := 'firings_p' || to_char(date_trunc('day', p_at, 'UTC') AT TIME ZONE 'UTC', 'YYYYMMDD');
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('cronwheel.partitions:' || current_schema(), 0));
    IF to_regclass('firings_legacy') IS NOT NULL AND EXISTS (
        SELECT 1 FROM meta WHERE key = 'firings_partitions_from' AND p_at < value::timestamptz) THEN
        RETURN 'firings_legacy';
    END IF;
    IF to_regclass(name) IS NULL THEN
        EXECUTE format('CREATE TABLE %I (LIKE firings)', name);
        EXECUTE format('ALTER TABLE firings ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       name, lo, lo + interval '1 day');
    END IF;
    RETURN name;
END
$fn$;
SELECT cronwheel_firings_partition(greatest(date_trunc('day', now(), 'UTC'), value::timestamptz)
                                   + d * interval '1 day')
FROM meta, generate_series(0, 1) d WHERE key = 'firings_partitions_from';

-- name: migration_17
-- The claim (claims.sql claim_fast) as a function planned once per session. As a
-- prepared statement PostgreSQL planned it afresh on every call (its plan cache kept
-- choosing custom plans: 45 of 45 after 50 claims), and planning a statement over the
-- partitions of firings costs a few hundred microseconds per partition (11.98 ms a
-- claim + completion with 41 partitions, 2.89 with 3). A generic plan for the whole
-- session would have cost other statements their index (status' finished_counts range
-- became a sequential scan): so only the claim's two functions are told so. The
-- candidates in virtual deadline order (cronwheel_claim_scan: locked with SKIP LOCKED,
-- so concurrent claimers pass over each other's rows), the first p_limit of them
-- claimed; the first p_start, if due, start at once (RUNNING), the rest are held
-- (CLAIMED). `f` is the claimed firing's row, NULL with simple false when a candidate
-- needs a policy decision (nothing claimed).
ALTER FUNCTION cronwheel_claim_scan(text[], timestamptz, integer)
    SET plan_cache_mode = force_generic_plan;
CREATE FUNCTION cronwheel_claim_fast(p_tasks text[], p_prefetch interval, p_scan integer,
                                     p_limit integer, p_start integer, p_worker text,
                                     p_now timestamptz)
RETURNS TABLE (simple boolean, f firings, job_policies text, job_trace text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT s.id, s.vdeadline,
               (s.overlap_override IS NOT NULL
                OR (s.max_concurrency IS NOT NULL AND s.overlap <> 'allow')
                OR (s.start_deadline_us IS NOT NULL
                    AND s.due_at + s.start_deadline_us * interval '1 microsecond' < p_now))
                   AS planned
        FROM cronwheel_claim_scan(p_tasks, p_now + p_prefetch, p_scan) s
    ),
    ok AS (
        SELECT NOT coalesce(bool_or(c.planned), false) AS ok FROM cand c
    ),
    pick AS MATERIALIZED (
        SELECT c.id, row_number() OVER (ORDER BY c.vdeadline) AS rn
        FROM cand c WHERE (SELECT o.ok FROM ok o)
        ORDER BY c.vdeadline LIMIT p_limit
    ),
    upd AS (
        UPDATE firings u
        SET state = CASE WHEN p.rn <= p_start AND u.due_at <= p_now THEN 'running'
                         ELSE 'claimed' END,
            started_at = CASE WHEN p.rn <= p_start AND u.due_at <= p_now THEN p_now END,
            attempt = u.attempt + 1,
            claim_token = replace(gen_random_uuid()::text, '-', ''),
            worker_id = p_worker,
            lease_until = p_now + u.visibility_us * interval '1 microsecond',
            claimed_at = p_now,
            finished_at = NULL,
            buffered_at = NULL  -- a retry of it is hinted again (next_due_at)
        FROM pick p, jobs j
        WHERE u.id = ANY (ARRAY(SELECT p2.id FROM pick p2)) AND p.id = u.id
          AND j.id = u.job_id
        RETURNING u AS frow, j.policies::text AS pol, j.trace_context AS trace
    )
    SELECT o.ok, x.frow, x.pol, x.trace FROM ok o LEFT JOIN upd x ON true;
END
$fn$;
-- The jobs that override a retention policy, for the bounds a retention pass reads at
-- its start and when it decides a day (core_retention.sql retention_job_bounds,
-- partitions.sql retention_longest_keep_for): without it those read every job, a
-- hundred thousand one-shot jobs a day of `app.enqueue` at the design's rate kept as
-- long as their firings.
CREATE INDEX jobs_retention_override ON jobs (id)
WHERE policies ? 'keep_for_s' OR policies ? 'keep_last';

-- name: migration_18
-- A claim token carries its firing's scheduled instant (the partition key): hexadecimal
-- epoch microseconds, '.', 32 random hex digits. The statements that find held firings
-- by (id, token) — start, heartbeat, completions — are given the instants read from
-- the tokens (params.token_instant) and read and update only the day partitions they
-- name. By id alone they probed every partition's primary key, and a statement that
-- PostgreSQL planned afresh at each call was planned for every partition, a few
-- hundred microseconds each (a heartbeat: 18-23 ms with 41 partitions against 2-3 ms
-- with 3). The claim's update (claim_fast) names them the same way, from the
-- candidates' own rows.
CREATE FUNCTION cronwheel_claim_token(p_at timestamptz) RETURNS text
LANGUAGE sql VOLATILE
AS $fn$
    SELECT to_hex((extract(epoch FROM p_at) * 1000000)::bigint) || '.'
           || replace(gen_random_uuid()::text, '-', '')
$fn$;
-- The statements that find held firings by (id, claim token) as functions planned once
-- per session (as the claim, migration_17) and confined at each execution to the
-- partitions from the earliest to the latest of p_instants: a generic plan prunes
-- partitions by a range of parameters, not by `= ANY` of an array parameter.
-- (PostgreSQL 15 still locks every partition of a generic plan, but reads and updates
-- only these.) p_instants NULL (a token written before
-- this migration carries none): the instants are read first, by id, in every
-- partition. Each: rows by primary key, the state test kept off the partial indexes
-- (see cronwheel_complete), locked in id order first (`lk`), the order every writer of
-- a worker's claims takes them in: an UPDATE over a join takes its rows in the join's
-- order, and a heartbeat of a crowd's thousands of held claims deadlocked with the
-- starts of the same claims (PostgreSQL's 1 s deadlock timeout, then a retry).
CREATE FUNCTION cronwheel_instants(p_ids bigint[]) RETURNS timestamptz[]
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $fn$
    SELECT coalesce(array_agg(f.scheduled_for), '{}') FROM firings f WHERE f.id = ANY (p_ids)
$fn$;
-- Held firings start: CLAIMED -> RUNNING, each a CAS on (claimed, claim token); a
-- cancel since the claim makes it fail, and the handler is never called. p_batch is a
-- JSON array of [id, token].
CREATE FUNCTION cronwheel_start(p_batch json, p_instants timestamptz[], p_now timestamptz)
RETURNS TABLE (o_id bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_ids bigint[] := ARRAY(SELECT (e ->> 0)::bigint FROM json_array_elements(p_batch) AS e);
    v_at timestamptz[] := coalesce(p_instants, cronwheel_instants(v_ids));
    v_lo timestamptz := (SELECT min(a) FROM unnest(v_at) AS a);
    v_hi timestamptz := (SELECT max(a) FROM unnest(v_at) AS a);
BEGIN
    RETURN QUERY
    WITH c AS (
        SELECT (e ->> 0)::bigint AS id, e ->> 1 AS token
        FROM json_array_elements(p_batch) AS e
    ),
    lk AS MATERIALIZED (
        SELECT f.id FROM firings f
        WHERE f.id = ANY (v_ids) AND f.scheduled_for BETWEEN v_lo AND v_hi
          AND f.scheduled_for = ANY (v_at)
        ORDER BY f.id FOR NO KEY UPDATE
    )
    UPDATE firings f
    SET state = 'running', started_at = p_now,
        lease_until = p_now + f.visibility_us * interval '1 microsecond'
    FROM c
    WHERE f.id = ANY (ARRAY(SELECT lk.id FROM lk))
      AND f.scheduled_for BETWEEN v_lo AND v_hi AND f.scheduled_for = ANY (v_at)
      AND f.id = c.id AND f.claim_token = c.token AND (f.state = 'claimed') IS NOT FALSE
    RETURNING f.id;
END
$fn$;
-- A worker's held firings' leases renewed, each a CAS on (held, claim token).
CREATE FUNCTION cronwheel_heartbeat(p_ids bigint[], p_tokens text[], p_instants timestamptz[],
                                    p_now timestamptz)
RETURNS TABLE (o_id bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_at timestamptz[] := coalesce(p_instants, cronwheel_instants(p_ids));
    v_lo timestamptz := (SELECT min(a) FROM unnest(v_at) AS a);
    v_hi timestamptz := (SELECT max(a) FROM unnest(v_at) AS a);
BEGIN
    RETURN QUERY
    WITH lk AS MATERIALIZED (
        SELECT f.id FROM firings f
        WHERE f.id = ANY (p_ids) AND f.scheduled_for BETWEEN v_lo AND v_hi
          AND f.scheduled_for = ANY (v_at)
        ORDER BY f.id FOR NO KEY UPDATE
    )
    UPDATE firings f SET lease_until = p_now + f.visibility_us * interval '1 microsecond'
    FROM unnest(p_ids, p_tokens) AS c (id, token)
    WHERE f.id = ANY (ARRAY(SELECT lk.id FROM lk))
      AND f.scheduled_for BETWEEN v_lo AND v_hi AND f.scheduled_for = ANY (v_at)
      AND f.id = c.id AND f.claim_token = c.token
      AND (f.state IN ('claimed', 'running')) IS NOT FALSE
    RETURNING f.id;
END
$fn$;
-- Outcomes for a batch of claims, each a CAS on (state running, claim token).
-- A handler that stopped on a cancellation request ends CANCELLED; a failure with
-- retry_at and attempts left goes back to queued, else dead; every failure records
-- its attempt. p_batch is one JSON array of objects (params.complete_params):
-- encoding it is one C call in the worker, where eight parameter arrays cost ~20 µs
-- per completion.
CREATE FUNCTION cronwheel_complete(p_batch json, p_instants timestamptz[])
RETURNS TABLE (o_id bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_ids bigint[] := ARRAY(SELECT (e ->> 'id')::bigint FROM json_array_elements(p_batch) AS e);
    v_at timestamptz[] := coalesce(p_instants, cronwheel_instants(v_ids));
    v_lo timestamptz := (SELECT min(a) FROM unnest(v_at) AS a);
    v_hi timestamptz := (SELECT max(a) FROM unnest(v_at) AS a);
BEGIN
    RETURN QUERY
    WITH c AS (
        SELECT * FROM json_to_recordset(p_batch)
            AS c (id bigint, token text, ok boolean, cancelled boolean,
                  started_at timestamptz, finished_at timestamptz, error text,
                  retry_at timestamptz)
    ),
    upd AS (
        UPDATE firings f
        -- a failure asking for a retry of a firing whose cancel was requested ends it
        -- cancelled: a cancelled firing is not run again
        SET state = CASE WHEN c.cancelled THEN 'cancelled'
                         WHEN c.ok THEN 'succeeded'
                         WHEN c.retry_at IS NULL OR f.attempt >= f.max_attempts THEN 'dead'
                         WHEN f.cancel_requested_at IS NOT NULL THEN 'cancelled'
                         ELSE 'queued' END,
            vdeadline = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                                  AND f.attempt < f.max_attempts
                                  AND f.cancel_requested_at IS NULL
                             THEN c.retry_at + (f.vdeadline - f.due_at) ELSE f.vdeadline END,
            due_at = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                               AND f.attempt < f.max_attempts AND f.cancel_requested_at IS NULL
                          THEN c.retry_at ELSE f.due_at END,
            finished_at = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                                    AND f.attempt < f.max_attempts
                                    AND f.cancel_requested_at IS NULL
                               THEN NULL ELSE c.finished_at END,
            started_at = c.started_at,
            claim_token = CASE WHEN c.ok AND NOT c.cancelled THEN f.claim_token ELSE NULL END,
            lease_until = NULL,
            error = CASE WHEN c.ok AND NOT c.cancelled THEN NULL ELSE c.error END,
            reason = CASE WHEN c.cancelled
                          THEN coalesce(f.reason, 'cancelled: the handler stopped')
                          WHEN NOT c.ok AND c.retry_at IS NOT NULL
                               AND f.attempt < f.max_attempts
                               AND f.cancel_requested_at IS NOT NULL
                          THEN coalesce(f.reason,
                                        'cancel requested; the attempt failed and is not retried')
                          ELSE f.reason END
        FROM c
        -- The rows are found by primary key, the ids passed again as an array. The
        -- state test is spelled so that it does not match the partial indexes on state:
        -- the planner otherwise chose to scan every RUNNING firing, cluster-wide (dead
        -- index entries included), for each batch. (state is NOT NULL: IS NOT FALSE is
        -- "=")
        WHERE f.id = ANY (v_ids)
          AND f.scheduled_for BETWEEN v_lo AND v_hi AND f.scheduled_for = ANY (v_at)
          AND f.id = c.id AND f.claim_token = c.token AND (f.state = 'running') IS NOT FALSE
        RETURNING f.id, f.attempt, f.worker_id, f.claimed_at, c.ok, c.cancelled,
                  c.started_at, c.finished_at, c.error
    ),
    att AS (
        INSERT INTO firing_attempts (firing_id, attempt, worker_id, claimed_at, started_at,
                                     finished_at, outcome, error)
        SELECT u.id, u.attempt, u.worker_id, u.claimed_at, u.started_at, u.finished_at,
               'failed', u.error
        FROM upd u WHERE NOT u.ok AND NOT u.cancelled
        ON CONFLICT (firing_id, attempt) DO UPDATE
        SET worker_id = excluded.worker_id, claimed_at = excluded.claimed_at,
            started_at = excluded.started_at, finished_at = excluded.finished_at,
            outcome = excluded.outcome, error = excluded.error
    )
    SELECT u.id FROM upd u;
END
$fn$;
DROP FUNCTION cronwheel_claim_fast(text[], interval, integer, integer, integer, text,
                                   timestamptz);
DROP FUNCTION cronwheel_claim_scan(text[], timestamptz, integer);
CREATE FUNCTION cronwheel_claim_scan(p_tasks text[], p_horizon timestamptz, p_scan integer)
RETURNS TABLE (id bigint, job_id bigint, scheduled_for timestamptz, vdeadline timestamptz,
               due_at timestamptz, overlap_override text, max_concurrency integer,
               overlap text, max_buffer integer, start_deadline_us bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
    RETURN QUERY
    SELECT f.id, f.job_id, f.scheduled_for, f.vdeadline, f.due_at, f.overlap_override,
           j.max_concurrency, j.overlap, j.max_buffer, j.start_deadline_us
    FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state = 'queued' AND f.due_at <= p_horizon AND f.task = ANY (p_tasks)
      -- a buffered firing waits, unlooked-at, while its job is at its cap
      AND NOT (f.buffered_at IS NOT NULL AND j.max_concurrency IS NOT NULL
               AND (SELECT count(*) FROM firings r
                    WHERE r.job_id = f.job_id AND r.state IN ('claimed', 'running'))
                   >= j.max_concurrency)
    ORDER BY f.vdeadline
    LIMIT p_scan
    FOR UPDATE OF f SKIP LOCKED;
END
$fn$;
CREATE FUNCTION cronwheel_claim_fast(p_tasks text[], p_prefetch interval, p_scan integer,
                                     p_limit integer, p_start integer, p_worker text,
                                     p_now timestamptz)
RETURNS TABLE (simple boolean, f firings, job_policies text, job_trace text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT s.id, s.scheduled_for, s.vdeadline,
               (s.overlap_override IS NOT NULL
                OR (s.max_concurrency IS NOT NULL AND s.overlap <> 'allow')
                OR (s.start_deadline_us IS NOT NULL
                    AND s.due_at + s.start_deadline_us * interval '1 microsecond' < p_now))
                   AS planned
        FROM cronwheel_claim_scan(p_tasks, p_now + p_prefetch, p_scan) s
    ),
    ok AS (
        SELECT NOT coalesce(bool_or(c.planned), false) AS ok FROM cand c
    ),
    pick AS MATERIALIZED (
        SELECT c.id, c.scheduled_for, row_number() OVER (ORDER BY c.vdeadline) AS rn
        FROM cand c WHERE (SELECT o.ok FROM ok o)
        ORDER BY c.vdeadline LIMIT p_limit
    ),
    upd AS (
        UPDATE firings u
        SET state = CASE WHEN p.rn <= p_start AND u.due_at <= p_now THEN 'running'
                         ELSE 'claimed' END,
            started_at = CASE WHEN p.rn <= p_start AND u.due_at <= p_now THEN p_now END,
            attempt = u.attempt + 1,
            claim_token = cronwheel_claim_token(u.scheduled_for),
            worker_id = p_worker,
            lease_until = p_now + u.visibility_us * interval '1 microsecond',
            claimed_at = p_now,
            finished_at = NULL,
            buffered_at = NULL  -- a retry of it is hinted again (next_due_at)
        FROM pick p, jobs j
        WHERE u.id = ANY (ARRAY(SELECT p2.id FROM pick p2))
          AND u.scheduled_for BETWEEN (SELECT min(p3.scheduled_for) FROM pick p3)
                                  AND (SELECT max(p3.scheduled_for) FROM pick p3)
          AND p.id = u.id AND j.id = u.job_id
        RETURNING u AS frow, j.policies::text AS pol, j.trace_context AS trace
    )
    SELECT o.ok, x.frow, x.pol, x.trace FROM ok o LEFT JOIN upd x ON true;
END
$fn$;

-- name: migration_19
-- status' recent lateness as a function planned once per session. As a prepared
-- statement PostgreSQL planned it afresh at every call (its plan cache kept the custom
-- plan: its bound on finished_at made the generic plan look costlier), and planning a
-- read of every partition cost 9-12 ms with 32 day partitions against under 1 ms to
-- run it. Its generic plan is the same walk of each partition's firings_finished
-- index, newest first.
CREATE FUNCTION cronwheel_recent_lateness(p_since timestamptz, p_namespace text,
                                          p_limit integer)
RETURNS TABLE (lateness_ms float8)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
    IF p_namespace IS NULL THEN
        RETURN QUERY
        SELECT (extract(epoch FROM f.started_at - f.scheduled_for) * 1000)::float8
        FROM firings f
        WHERE f.finished_at IS NOT NULL AND f.finished_at >= p_since
          AND f.state = 'succeeded' AND f.attempt = 1
        ORDER BY f.finished_at DESC
        LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT (extract(epoch FROM f.started_at - f.scheduled_for) * 1000)::float8
        FROM firings f
        WHERE f.finished_at IS NOT NULL AND f.finished_at >= p_since
          AND f.state = 'succeeded' AND f.attempt = 1 AND f.namespace = p_namespace
        ORDER BY f.finished_at DESC
        LIMIT p_limit;
    END IF;
END
$fn$;

-- name: migration_20
-- Creating a job no longer holds a row every other creation of the namespace (or of
-- the cluster) waits for until COMMIT. Before, each one added 1 to its namespace's
-- jobs counter (one quota_usage row) and to meta's jobs_version, and both row locks
-- were held through the COMMIT's WAL flush, so one namespace's creations ran one at
-- a time from the charge to the commit, however many API processes served them.
-- - job_changes: a row per transaction that changed the job set; the version is
--   meta's jobs_version plus their count (store/postgres/jobs_quota.py), folded into
--   meta now and then. The count only grows with each committed change, and a fold
--   deletes rows and adds their number to meta in one transaction, so no snapshot sees
--   the version go back or stay when a change committed.
-- - quota_jobs: each namespace's jobs counter in shards, each with its share of the
--   room left under the limit (`room`). A creation takes its jobs from the room of one
--   shard that no other transaction holds (SKIP LOCKED), so creations on different
--   shards run side by side and none passes the limit: sum(used) + sum(room) is the
--   limit, and room >= 0. When no free shard has room it locks every shard of the
--   namespace, counts, refuses or shares the room out again.
CREATE TABLE job_changes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY);
CREATE TABLE quota_jobs (
    namespace text   NOT NULL,
    shard     int    NOT NULL,
    used      bigint NOT NULL,
    room      bigint NOT NULL CHECK (room >= 0),
    PRIMARY KEY (namespace, shard)
);
INSERT INTO quota_jobs (namespace, shard, used, room)
SELECT namespace, 0, used, 0 FROM quota_usage WHERE quota = 'jobs' AND window_start = 0;
DELETE FROM quota_usage WHERE quota = 'jobs' AND window_start = 0;

-- name: migration_21
-- The jobs' recent runs (core.sql recent_runs) as a function planned once per
-- session: planning the statement for 32 day partitions cost about 10 ms a call,
-- running it about 15 ms (50 jobs). Per job, its newest p_sample firings by scheduled
-- instant (unique per job): the first-attempt lateness in microseconds of its newest
-- ones in a started state (succeeded, dead, cancelled) that started at attempt 1,
-- newest first; its last outcome, the newest non-open firing among its newest of any
-- state. Each is a backward walk of the (job_id, scheduled_for) unique index, the day
-- partitions newest first (an ordered Append on the partition key, in the generic plan
-- too), stopped at the LIMIT: the partitions it does not reach are never read (a walk
-- by id merged every partition's index: 54-64 ms for 50 jobs on 32 partitions).
CREATE FUNCTION cronwheel_recent_runs(p_ids bigint[], p_sample integer)
RETURNS TABLE (job_id bigint, late_us bigint[], last_id bigint, last_state text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT j.id AS job_id,
           ARRAY(SELECT s.late_us FROM (
                     SELECT f.scheduled_for,
                            CASE WHEN f.attempt = 1 AND f.started_at IS NOT NULL
                                 THEN (extract(epoch FROM f.started_at - f.scheduled_for)
                                       * 1000000)::bigint END AS late_us
                     FROM firings f
                     WHERE f.job_id = j.id AND f.state IN ('succeeded', 'dead', 'cancelled')
                     ORDER BY f.scheduled_for DESC
                     LIMIT p_sample) s
                 WHERE s.late_us IS NOT NULL
                 ORDER BY s.scheduled_for DESC) AS late_us,
           l.id AS last_id, l.state AS last_state
    FROM unnest(p_ids) AS j(id)
    LEFT JOIN LATERAL (
        SELECT r.id, r.state FROM (
            SELECT f.id, f.state, f.scheduled_for FROM firings f
            WHERE f.job_id = j.id
            ORDER BY f.scheduled_for DESC
            LIMIT p_sample) r
        WHERE r.state NOT IN ('queued', 'claimed', 'running')
        ORDER BY r.scheduled_for DESC
        LIMIT 1
    ) l ON true;
END
$fn$;

-- name: migration_22
-- The finishes' counter rows (migration_15) by transaction, not by firing: a
-- transaction's finishes of one (minute, namespace, state) go to one of 16 slots, picked
-- by its transaction id. A slot by firing id (id % 8) made every batch of eight or more
-- completions lock all eight rows until its commit, so the workers' completions (and the
-- claims that carry them) ran one at a time: in a drain of 20,000 firings by two workers,
-- most samples of the completing sessions waited on `Lock:transactionid`. Now two
-- transactions wait for each other only when their ids fall in the same slot.
CREATE OR REPLACE FUNCTION cronwheel_count_finished() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF NEW.finished_at IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.finished_at IS NULL OR OLD.finished_at <> NEW.finished_at) THEN
        INSERT INTO finished_counts (minute, namespace, state, slot, n)
        VALUES (floor(extract(epoch FROM NEW.finished_at) / 60)::bigint, NEW.namespace,
                NEW.state, (pg_current_xact_id()::text::bigint % 16)::smallint, 1)
        ON CONFLICT (minute, namespace, state, slot) DO UPDATE SET n = finished_counts.n + 1;
    END IF;
    RETURN NULL;
END
$fn$;

-- name: migration_23
-- A job created in one statement (store/postgres/jobs_quota.py create_job): what
-- CoreStore.create_job does in a transaction of six round trips (BEGIN, the quota read,
-- the insert, a shard of the jobs counter, the job set's change, COMMIT), in one
-- autocommitted call, for the common case only. Whatever needs a decision is left to
-- that transaction, which then decides with its own reads and errors: the function
-- raises SQLSTATE CW001 (so that nothing it wrote stays) when the task is to be checked
-- and a worker has served tasks but not this one, when the schedule fires more often
-- than the namespace's min_interval (p_min_interval_us: the default quota's, for a
-- namespace with no record), or when no shard of the namespace's jobs counter is free
-- with room (none yet, every one held, or the limit reached), and when the store's
-- clock is outside [p_valid_from, p_next_fire_at) (p_valid_from not NULL: the first
-- instant was made from a guess of the clock, right for any reading in that range: the
-- API's creation, domain/jobs.py first_fire_window). A name the namespace has already
-- returns no row and writes nothing.
CREATE FUNCTION cronwheel_create_job(
    p_namespace text, p_name text, p_task text, p_schedule jsonb, p_payload json,
    p_policies jsonb, p_spec_hash text, p_priority double precision, p_max_attempts integer,
    p_visibility_us bigint, p_paused boolean, p_next_fire_at timestamptz, p_shard smallint,
    p_max_concurrency integer, p_overlap text, p_max_buffer integer,
    p_cancel_grace_us bigint, p_start_deadline_us bigint, p_bounds jsonb,
    p_remaining_runs integer, p_trace_context text, p_now timestamptz, p_gap_us bigint,
    p_min_interval_us bigint, p_counts boolean, p_check_task boolean,
    p_valid_from timestamptz)
RETURNS SETOF jobs
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    created jobs;
BEGIN
    IF p_valid_from IS NOT NULL
       AND NOT (p_valid_from <= p_now AND p_now < p_next_fire_at) THEN
        RAISE EXCEPTION 'cronwheel: the clock is off its guess' USING ERRCODE = 'CW001';
    END IF;
    IF p_check_task AND EXISTS (SELECT 1 FROM served_tasks)
       AND NOT EXISTS (SELECT 1 FROM served_tasks WHERE task = p_task) THEN
        RAISE EXCEPTION 'cronwheel: task % is not served', p_task USING ERRCODE = 'CW001';
    END IF;
    IF p_gap_us IS NOT NULL AND p_gap_us < coalesce(
           (SELECT min_interval_us FROM quotas WHERE namespace = p_namespace),
           p_min_interval_us) THEN
        RAISE EXCEPTION 'cronwheel: under min_interval' USING ERRCODE = 'CW001';
    END IF;
    INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                      max_attempts, visibility_us, paused, next_fire_at, created_at,
                      updated_at, shard, max_concurrency, overlap, max_buffer,
                      cancel_grace_us, start_deadline_us, bounds, remaining_runs,
                      trace_context)
    VALUES (p_namespace, p_name, p_task, p_schedule, p_payload, p_policies, p_spec_hash,
            p_priority, p_max_attempts, p_visibility_us, p_paused, p_next_fire_at, p_now,
            p_now, p_shard, p_max_concurrency, p_overlap, p_max_buffer, p_cancel_grace_us,
            p_start_deadline_us, p_bounds, p_remaining_runs, p_trace_context)
    ON CONFLICT (namespace, name) DO NOTHING
    RETURNING * INTO created;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_counts THEN
        UPDATE quota_jobs q SET used = q.used + 1, room = q.room - 1
        FROM (SELECT shard FROM quota_jobs
              WHERE namespace = p_namespace AND room >= 1
              ORDER BY random() LIMIT 1
              FOR UPDATE SKIP LOCKED) pick
        WHERE q.namespace = p_namespace AND q.shard = pick.shard;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cronwheel: no free shard with room' USING ERRCODE = 'CW001';
        END IF;
    END IF;
    INSERT INTO job_changes DEFAULT VALUES;
    RETURN NEXT created;
END
$fn$;

-- name: migration_24
-- A job put in one statement (store/postgres/jobs_quota.py): cronwheel_put_job creates
-- (p_upsert false: create_job, the API's POST; as cronwheel_create_job, migration_23,
-- whose decisions and CW001 it keeps: no row for a name taken) or upserts (p_upsert
-- true: upsert_job, that is App.schedule's default, the API's PUT, `jobs add`).
-- An upsert's o_outcome:
-- 'unchanged': the namespace has the name stored with the same definition (spec_hash),
--   o_job as stored, nothing written;
-- 'updated': stored with another definition but the same schedule: updated by
--   cronwheel_update_job (the cursor stays), if its definition is still the one read
--   (a compare-and-swap on spec_hash), and the job set's change recorded;
-- 'created': a new name, created by cronwheel_create_job, o_job the new row;
-- 'decide' (o_job NULL, nothing written): a new schedule (its min_interval and its
--   cursor are decided by the transaction), a definition changed since the read, or a
--   name created by another session between the read and the insert: CoreStore's
--   upsert transaction then compares and updates under the row's lock. (An answer, not
--   an error: an error's round trip costs the client more than a row's.)
-- The read takes no lock: an upsert that finds its own definition writes nothing, and
-- is ordered before any change committed after its read.
-- cronwheel_update_job is also core.sql's update_job_spec (the transaction's update).
CREATE FUNCTION cronwheel_update_job(
    p_id bigint, p_expect_hash text, p_task text, p_schedule jsonb, p_payload json,
    p_policies jsonb, p_spec_hash text, p_priority double precision, p_max_attempts integer,
    p_visibility_us bigint, p_next_fire_at timestamptz, p_max_concurrency integer,
    p_overlap text, p_max_buffer integer, p_cancel_grace_us bigint,
    p_start_deadline_us bigint, p_bounds jsonb, p_remaining_runs integer,
    p_trace_context text, p_now timestamptz)
RETURNS SETOF jobs
LANGUAGE sql
SET search_path FROM CURRENT
AS $fn$
    -- the cursor moves to p_next_fire_at only when the schedule changed, the run budget
    -- restarts only when the bounds changed (every SET sees the old row); a trace
    -- context is replaced only by another (a write without one keeps it)
    UPDATE jobs
    SET task = p_task, schedule = p_schedule, payload = p_payload, policies = p_policies,
        spec_hash = p_spec_hash, priority = p_priority, max_attempts = p_max_attempts,
        visibility_us = p_visibility_us,
        next_fire_at = CASE WHEN schedule = p_schedule THEN next_fire_at
                            ELSE p_next_fire_at END,
        updated_at = p_now,
        max_concurrency = p_max_concurrency, overlap = p_overlap, max_buffer = p_max_buffer,
        cancel_grace_us = p_cancel_grace_us, start_deadline_us = p_start_deadline_us,
        remaining_runs = CASE WHEN bounds = p_bounds THEN remaining_runs
                              ELSE p_remaining_runs END,
        bounds = p_bounds,
        trace_context = coalesce(p_trace_context, trace_context)
    WHERE id = p_id AND (p_expect_hash IS NULL OR spec_hash = p_expect_hash)
    RETURNING *
$fn$;

CREATE FUNCTION cronwheel_put_job(
    p_namespace text, p_name text, p_task text, p_schedule jsonb, p_payload json,
    p_policies jsonb, p_spec_hash text, p_priority double precision, p_max_attempts integer,
    p_visibility_us bigint, p_paused boolean, p_next_fire_at timestamptz, p_shard smallint,
    p_max_concurrency integer, p_overlap text, p_max_buffer integer,
    p_cancel_grace_us bigint, p_start_deadline_us bigint, p_bounds jsonb,
    p_remaining_runs integer, p_trace_context text, p_now timestamptz, p_gap_us bigint,
    p_min_interval_us bigint, p_counts boolean, p_check_task boolean,
    p_valid_from timestamptz, p_upsert boolean)
RETURNS TABLE (o_outcome text, o_job jobs)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    stored jobs;
    changed jobs;
BEGIN
    IF p_upsert THEN
        SELECT * INTO stored FROM jobs WHERE namespace = p_namespace AND name = p_name;
        IF FOUND THEN
            IF stored.spec_hash = p_spec_hash THEN
                RETURN QUERY SELECT 'unchanged', stored;
                RETURN;
            END IF;
            IF stored.schedule = p_schedule THEN
                SELECT * INTO changed FROM cronwheel_update_job(
                    stored.id, stored.spec_hash, p_task, p_schedule, p_payload, p_policies,
                    p_spec_hash, p_priority, p_max_attempts, p_visibility_us,
                    p_next_fire_at, p_max_concurrency, p_overlap, p_max_buffer,
                    p_cancel_grace_us, p_start_deadline_us, p_bounds, p_remaining_runs,
                    p_trace_context, p_now);
                IF FOUND THEN
                    INSERT INTO job_changes DEFAULT VALUES;
                    RETURN QUERY SELECT 'updated', changed;
                    RETURN;
                END IF;
            END IF;
            RETURN QUERY SELECT 'decide', NULL::jobs;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
    SELECT 'created', c FROM cronwheel_create_job(
        p_namespace, p_name, p_task, p_schedule, p_payload, p_policies, p_spec_hash,
        p_priority, p_max_attempts, p_visibility_us, p_paused, p_next_fire_at, p_shard,
        p_max_concurrency, p_overlap, p_max_buffer, p_cancel_grace_us, p_start_deadline_us,
        p_bounds, p_remaining_runs, p_trace_context, p_now, p_gap_us, p_min_interval_us,
        p_counts, p_check_task, p_valid_from) c;
    IF NOT FOUND AND p_upsert THEN
        RETURN QUERY SELECT 'decide', NULL::jobs;
    END IF;
END
$fn$;

-- name: migration_25
-- An immediate enqueue in one statement (store/postgres/dispatch.py enqueue_now:
-- App.enqueue, the API's enqueue): the one-shot job, its namespace's fair clock moved
-- on, its firing due now, the namespace's firings_per_minute charged and the workers
-- woken, where the transaction made six round trips (BEGIN, the job, the firing, the
-- quota read, the charge, COMMIT). cronwheel_charge_firings charges p_n firings to the
-- namespace's counter of this minute (the upsert locks it until commit, so two servers
-- cannot both pass), forgets older minutes when this one is new, and answers the
-- counter, the limit (the namespace's record, else p_default) and the window; over the
-- limit with p_refuse it raises CW001 instead, so that nothing the statement wrote
-- stays and the transaction runs and refuses with its retry-after (inside a
-- transaction the caller compares and refuses itself).
CREATE FUNCTION cronwheel_charge_firings(p_namespace text, p_n integer, p_default bigint,
                                         p_refuse boolean, p_now timestamptz)
RETURNS TABLE (o_used bigint, o_limit bigint, o_window_start bigint, o_now_us bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_now_us bigint := (extract(epoch FROM p_now) * 1000000)::bigint;
    v_window bigint := (v_now_us / 60000000) * 60000000;
    v_used bigint;
    v_limit bigint := coalesce(
        (SELECT firings_per_minute FROM quotas WHERE namespace = p_namespace), p_default);
BEGIN
    INSERT INTO quota_usage AS u (namespace, quota, window_start, used)
    VALUES (p_namespace, 'firings_per_minute', v_window, p_n)
    ON CONFLICT (namespace, quota, window_start) DO UPDATE SET used = u.used + excluded.used
    RETURNING u.used INTO v_used;
    IF p_refuse AND v_used > v_limit THEN
        RAISE EXCEPTION 'cronwheel: over firings_per_minute' USING ERRCODE = 'CW001';
    END IF;
    IF v_used = p_n THEN  -- a new window: forget the old ones (as core.quotas._charge)
        DELETE FROM quota_usage
        WHERE namespace = p_namespace AND quota = 'firings_per_minute'
          AND window_start < v_window;
    END IF;
    RETURN QUERY SELECT v_used, v_limit, v_window, v_now_us;
END
$fn$;

-- name: migration_26
-- The finish counters' row trigger (migration_15, by transaction since migration_22)
-- fires for a finish only, as SQLite's triggers do: a WHEN condition, tested before an
-- event is queued. It fired on every insert and on every update naming finished_at, and
-- the function tested the same inside: an enqueue's insert and a claim's update (which
-- sets finished_at to NULL) each queued an after-trigger event and called the function
-- for nothing, two of the three calls a drained firing made.
DROP TRIGGER firings_count_finished ON firings;
CREATE TRIGGER firings_count_finished AFTER INSERT ON firings
FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL)
EXECUTE FUNCTION cronwheel_count_finished();
CREATE TRIGGER firings_count_refinished AFTER UPDATE OF finished_at ON firings
FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL
                   AND NEW.finished_at IS DISTINCT FROM OLD.finished_at)
EXECUTE FUNCTION cronwheel_count_finished();

-- name: migration_27
-- A creation's shard of the jobs counter (cronwheel_create_job, migration_23): the
-- transaction's own first, the one its id names (xid % 8, jobs_quota.SHARDS; a hint
-- only: any free shard with room is taken otherwise, as before). The creations that
-- one statement makes together (the API's, create_jobs_one) each took a shard at random,
-- a statement of k jobs holding up to k of the 8 until its commit; with four such
-- statements in flight, a creation found every shard held by the others (CW001) and its
-- statement was made again, one creation at a time. Now one statement holds one shard
-- (its own lock is not skipped), and statements of consecutive transactions hold
-- different ones.
CREATE OR REPLACE FUNCTION cronwheel_create_job(
    p_namespace text, p_name text, p_task text, p_schedule jsonb, p_payload json,
    p_policies jsonb, p_spec_hash text, p_priority double precision, p_max_attempts integer,
    p_visibility_us bigint, p_paused boolean, p_next_fire_at timestamptz, p_shard smallint,
    p_max_concurrency integer, p_overlap text, p_max_buffer integer,
    p_cancel_grace_us bigint, p_start_deadline_us bigint, p_bounds jsonb,
    p_remaining_runs integer, p_trace_context text, p_now timestamptz, p_gap_us bigint,
    p_min_interval_us bigint, p_counts boolean, p_check_task boolean,
    p_valid_from timestamptz)
RETURNS SETOF jobs
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    created jobs;
BEGIN
    IF p_valid_from IS NOT NULL
       AND NOT (p_valid_from <= p_now AND p_now < p_next_fire_at) THEN
        RAISE EXCEPTION 'cronwheel: the clock is off its guess' USING ERRCODE = 'CW001';
    END IF;
    IF p_check_task AND EXISTS (SELECT 1 FROM served_tasks)
       AND NOT EXISTS (SELECT 1 FROM served_tasks WHERE task = p_task) THEN
        RAISE EXCEPTION 'cronwheel: task % is not served', p_task USING ERRCODE = 'CW001';
    END IF;
    IF p_gap_us IS NOT NULL AND p_gap_us < coalesce(
           (SELECT min_interval_us FROM quotas WHERE namespace = p_namespace),
           p_min_interval_us) THEN
        RAISE EXCEPTION 'cronwheel: under min_interval' USING ERRCODE = 'CW001';
    END IF;
    INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                      max_attempts, visibility_us, paused, next_fire_at, created_at,
                      updated_at, shard, max_concurrency, overlap, max_buffer,
                      cancel_grace_us, start_deadline_us, bounds, remaining_runs,
                      trace_context)
    VALUES (p_namespace, p_name, p_task, p_schedule, p_payload, p_policies, p_spec_hash,
            p_priority, p_max_attempts, p_visibility_us, p_paused, p_next_fire_at, p_now,
            p_now, p_shard, p_max_concurrency, p_overlap, p_max_buffer, p_cancel_grace_us,
            p_start_deadline_us, p_bounds, p_remaining_runs, p_trace_context)
    ON CONFLICT (namespace, name) DO NOTHING
    RETURNING * INTO created;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_counts THEN
        UPDATE quota_jobs q SET used = q.used + 1, room = q.room - 1
        FROM (SELECT shard FROM quota_jobs
              WHERE namespace = p_namespace AND room >= 1
              ORDER BY shard = (pg_current_xact_id()::text::bigint % 8) DESC, random()
              LIMIT 1
              FOR UPDATE SKIP LOCKED) pick
        WHERE q.namespace = p_namespace AND q.shard = pick.shard;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cronwheel: no free shard with room' USING ERRCODE = 'CW001';
        END IF;
    END IF;
    INSERT INTO job_changes DEFAULT VALUES;
    RETURN NEXT created;
END
$fn$;

-- name: migration_28
-- A held firing's start at its instant, waited for on the server's clock (claims.sql
-- start_at; claims.py _started). The worker sends the statement a few tenths of a
-- millisecond before the instant (WorkerPort.waits_for_instant): its round trip then
-- overlaps the wait instead of following it. The function spins until the instant,
-- p_at on the store's clock (clock_timestamp() + p_off, db.py DbTime), at most 5 ms (a
-- worker's clock estimate far ahead of the server's does not hold the statement), and
-- not at all on a pinned clock (p_pin: the contract suite's frozen time). RUNNING is
-- written at the instant or after it, never before, with started_at the time it was
-- written.
CREATE FUNCTION cronwheel_start_at(p_batch json, p_instants timestamptz[], p_at timestamptz,
                                   p_pin timestamptz, p_off interval)
RETURNS TABLE (o_id bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_until timestamptz;
BEGIN
    IF p_pin IS NULL AND p_at IS NOT NULL THEN
        v_until := least(p_at - p_off, clock_timestamp() + interval '5 milliseconds');
        WHILE clock_timestamp() < v_until LOOP
            NULL;
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT s.o_id FROM cronwheel_start(p_batch, p_instants,
                                       coalesce(p_pin, clock_timestamp()) + p_off) s;
END
$fn$;

-- name: migration_29
-- The claim's floor: no unfinished firing is scheduled before firings_floor.at, so the
-- claim's scan (cronwheel_claim_scan) reads only the partitions from it on. Planned
-- generic, a scan of every partition cost every day partition at each call: an empty
-- claim took 0.54 ms with 32 of them against 0.19 with 2, and 0.10 ms with a bound on
-- the instant (docs/benchmarks.md "The claim's floor").
-- The rule kept: every firing that is unfinished (queued, claimed or running, as
-- firings_active) is scheduled at or after the floor, in every snapshot that a claim
-- reads the floor in.
-- - Lowered by whoever makes such a firing: a statement inserting firings (a catch-up
--   of old instants, a one-shot in the past) or making a finished firing unfinished
--   again (a re-drive) lowers it to that firing's instant, in its own transaction; no
--   write when it is below already (an insert for now or later never writes).
-- - Raised only by the leader (cronwheel_raise_floor, at each retention pass), to the
--   start of the oldest partition holding an unfinished firing, never above today's;
--   only while no such statement's transaction is open: each takes a shared advisory
--   lock (its trigger, after its rows are written) held to its end, the raise tries the
--   exclusive one and passes its turn if it cannot have it at once (it never waits, nor
--   makes writers wait long), then looks at the partitions in a snapshot taken after it
--   has the lock. A writer whose rows the raise could not see (not committed) takes its
--   lock after the raise committed, and then reads the raised floor and lowers it.
-- - AFTER triggers: a BEFORE UPDATE row trigger fetched and locked each updated row
--   again before its WHEN was tested (every claim, start and completion: bench limit's
--   claims 8,186-9,864 rows/s against 9,461-13,180); an AFTER one with a false WHEN
--   costs its test only.
CREATE TABLE firings_floor (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    at  timestamptz NOT NULL
);
INSERT INTO firings_floor (at) VALUES ('-infinity');  -- every partition, until raised
CREATE FUNCTION cronwheel_floor_key() RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $fn$ SELECT hashtextextended('cronwheel.firings_floor', 0) $fn$;
CREATE FUNCTION cronwheel_floor_inserted() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_min timestamptz := (SELECT min(n.scheduled_for) FROM new_firings n
                          WHERE n.state IN ('queued', 'claimed', 'running'));
BEGIN
    PERFORM pg_advisory_xact_lock_shared(cronwheel_floor_key());
    IF v_min IS NOT NULL THEN
        UPDATE firings_floor SET at = v_min WHERE at > v_min;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE FUNCTION cronwheel_floor_revived() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(cronwheel_floor_key());
    UPDATE firings_floor SET at = NEW.scheduled_for WHERE at > NEW.scheduled_for;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER firings_floor_inserted AFTER INSERT ON firings
    REFERENCING NEW TABLE AS new_firings
    FOR EACH STATEMENT EXECUTE FUNCTION cronwheel_floor_inserted();
CREATE TRIGGER firings_floor_revived AFTER UPDATE OF state ON firings FOR EACH ROW
    WHEN (OLD.state NOT IN ('queued', 'claimed', 'running')
          AND NEW.state IN ('queued', 'claimed', 'running'))
    EXECUTE FUNCTION cronwheel_floor_revived();
-- The floor raised (or lowered) to the start of the oldest partition holding an
-- unfinished firing [its firings_active], at most the start of p_now's day (UTC); NULL
-- when a writer holds the floor's lock (this pass is skipped).
CREATE FUNCTION cronwheel_raise_floor(p_now timestamptz) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_floor timestamptz := date_trunc('day', p_now, 'UTC');
    v_part  record;
    v_live  boolean;
BEGIN
    IF NOT pg_try_advisory_xact_lock(cronwheel_floor_key()) THEN
        RETURN NULL;
    END IF;
    FOR v_part IN
        SELECT c.relname::text AS name,
               CASE WHEN c.relname ~ '^firings_p[0-9]{8}$'
                    THEN to_date(substr(c.relname, 10), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC'
                    ELSE '-infinity'::timestamptz END AS lo  -- firings_legacy, or not ours
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'firings'::regclass
        ORDER BY 2
    LOOP
        EXIT WHEN v_part.lo >= v_floor;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE state IN '
                       '(''queued'', ''claimed'', ''running''))', v_part.name)
            INTO v_live;
        IF v_live THEN
            v_floor := v_part.lo;
            EXIT;
        END IF;
    END LOOP;
    UPDATE firings_floor SET at = v_floor;
    RETURN v_floor;
END
$fn$;
CREATE OR REPLACE FUNCTION cronwheel_claim_scan(p_tasks text[], p_horizon timestamptz,
                                                p_scan integer)
RETURNS TABLE (id bigint, job_id bigint, scheduled_for timestamptz, vdeadline timestamptz,
               due_at timestamptz, overlap_override text, max_concurrency integer,
               overlap text, max_buffer integer, start_deadline_us bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    -- by its key: with enable_seqscan off, a scan of the table cost 1e10, which had
    -- each call compile it (JIT, jit_above_cost): 10 ms a claim
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN QUERY
    SELECT f.id, f.job_id, f.scheduled_for, f.vdeadline, f.due_at, f.overlap_override,
           j.max_concurrency, j.overlap, j.max_buffer, j.start_deadline_us
    FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state = 'queued' AND f.due_at <= p_horizon AND f.task = ANY (p_tasks)
      AND f.scheduled_for >= v_floor  -- the partitions that can hold one (the floor)
      -- a buffered firing waits, unlooked-at, while its job is at its cap
      AND NOT (f.buffered_at IS NOT NULL AND j.max_concurrency IS NOT NULL
               AND (SELECT count(*) FROM firings r
                    WHERE r.job_id = f.job_id AND r.state IN ('claimed', 'running')
                      AND r.scheduled_for >= v_floor)
                   >= j.max_concurrency)
    ORDER BY f.vdeadline
    LIMIT p_scan
    FOR UPDATE OF f SKIP LOCKED;
END
$fn$;
-- The claim's UPDATE bounded by the floor too (its rows come from the scan, which is):
-- its partitions are then pruned when the plan starts, not opened for the instants of
-- the claimed rows, which are known only as it runs.
CREATE OR REPLACE FUNCTION cronwheel_claim_fast(p_tasks text[], p_prefetch interval, p_scan integer,
                                     p_limit integer, p_start integer, p_worker text,
                                     p_now timestamptz)
RETURNS TABLE (simple boolean, f firings, job_policies text, job_trace text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT s.id, s.scheduled_for, s.vdeadline,
               (s.overlap_override IS NOT NULL
                OR (s.max_concurrency IS NOT NULL AND s.overlap <> 'allow')
                OR (s.start_deadline_us IS NOT NULL
                    AND s.due_at + s.start_deadline_us * interval '1 microsecond' < p_now))
                   AS planned
        FROM cronwheel_claim_scan(p_tasks, p_now + p_prefetch, p_scan) s
    ),
    ok AS (
        SELECT NOT coalesce(bool_or(c.planned), false) AS ok FROM cand c
    ),
    pick AS MATERIALIZED (
        SELECT c.id, c.scheduled_for, row_number() OVER (ORDER BY c.vdeadline) AS rn
        FROM cand c WHERE (SELECT o.ok FROM ok o)
        ORDER BY c.vdeadline LIMIT p_limit
    ),
    upd AS (
        UPDATE firings u
        SET state = CASE WHEN p.rn <= p_start AND u.due_at <= p_now THEN 'running'
                         ELSE 'claimed' END,
            started_at = CASE WHEN p.rn <= p_start AND u.due_at <= p_now THEN p_now END,
            attempt = u.attempt + 1,
            claim_token = cronwheel_claim_token(u.scheduled_for),
            worker_id = p_worker,
            lease_until = p_now + u.visibility_us * interval '1 microsecond',
            claimed_at = p_now,
            finished_at = NULL,
            buffered_at = NULL  -- a retry of it is hinted again (next_due_at)
        FROM pick p, jobs j
        WHERE u.id = ANY (ARRAY(SELECT p2.id FROM pick p2))
          AND u.scheduled_for BETWEEN (SELECT min(p3.scheduled_for) FROM pick p3)
                                  AND (SELECT max(p3.scheduled_for) FROM pick p3)
          AND u.scheduled_for >= v_floor  -- as the scan's: the older partitions pruned
          AND p.id = u.id AND j.id = u.job_id
        RETURNING u AS frow, j.policies::text AS pol, j.trace_context AS trace
    )
    SELECT o.ok, x.frow, x.pol, x.trace FROM ok o LEFT JOIN upd x ON true;
END
$fn$;
-- The first floor: this transaction's triggers locked firings against every writer
-- until it commits, so none is in flight.
SELECT cronwheel_raise_floor(now());

-- name: migration_30
-- Periodic reads of the live work bounded by the claim's floor (migration_29), as the
-- claim's scan is: status' counts and oldest queued instant, and the workers' hint of
-- the next instant (next_due_at). Each read every day partition's partial index: with
-- 32 of them status took 1.70 ms against 1.31 with 5 (docs/benchmarks.md "Status and
-- the scrape bounded by the claim's floor").
-- - Each function reads the floor into a variable: a parameter of its plan, which prunes
--   the partitions below it when the plan starts. (A STABLE function in the statement
--   prunes too, but is called again for every row the scans find: 20,000 queued firings
--   counted in 49.8 ms against 3.3.)
-- - STABLE: one snapshot for the floor and the scans, so that a firing made unfinished
--   below the old floor is counted with the floor it lowered.
-- Queued, claimed and running now, of one namespace or (NULL) of all; and the oldest
-- queued firing's due instant. A namespace filters the rows the walks find: the held
-- ones are bounded by the workers' slots, the queued ones are walked for every
-- namespace alike. [firings_claim, firings_lease]
CREATE FUNCTION cronwheel_live_counts(p_namespace text)
RETURNS TABLE (state text, n bigint)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN QUERY
    SELECT 'queued'::text, count(*) FROM firings f
    WHERE f.state = 'queued' AND f.scheduled_for >= v_floor
      AND (p_namespace IS NULL OR f.namespace = p_namespace)
    UNION ALL
    SELECT f.state::text, count(*) FROM firings f
    WHERE f.state IN ('claimed', 'running') AND f.scheduled_for >= v_floor
      AND (p_namespace IS NULL OR f.namespace = p_namespace)
    GROUP BY f.state;
END
$fn$;
CREATE FUNCTION cronwheel_oldest_queued(p_namespace text) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN (SELECT min(f.due_at) FROM firings f
            WHERE f.state = 'queued' AND f.scheduled_for >= v_floor
              AND (p_namespace IS NULL OR f.namespace = p_namespace));
END
$fn$;
-- When the earliest queued firing not yet due at p_now becomes due (an ordered walk
-- that stops at its first entry, as core.sql next_due_at says why). [firings_queued_due]
CREATE FUNCTION cronwheel_next_due(p_now timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN (SELECT f.due_at FROM firings f
            WHERE f.state = 'queued' AND f.buffered_at IS NULL AND f.due_at > p_now
              AND f.scheduled_for >= v_floor
            ORDER BY f.due_at
            LIMIT 1);
END
$fn$;
-- A keyset page of every firing between two ids, newest first (core.sql
-- list_firings_page): each partition's id index walked backwards, the walks merged,
-- stopped at p_limit. [each partition's primary key]
CREATE FUNCTION cronwheel_firings_page(p_after bigint, p_before bigint, p_limit integer)
RETURNS SETOF firings
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
    RETURN QUERY
    SELECT f.* FROM firings f
    WHERE f.id > coalesce(p_after, -1) AND f.id < coalesce(p_before, 9223372036854775807)
    ORDER BY f.id DESC
    LIMIT p_limit;
END
$fn$;

-- name: migration_31
-- The scrape's other reads of the live work bounded by the claim's floor, as
-- migration_30's: the walk of the active firings, the queued firings' tasks (for the
-- tasks no worker serves) and the held firings per namespace. As statements each read
-- every day partition's partial index: on a store of 30 days (32 partitions) against
-- one of 2.5 days (4), 0.29, 0.29 and 0.29 ms more (docs/benchmarks.md "The scrape's
-- other live reads bounded by the floor"). Each reads the floor into a variable and is
-- STABLE (one snapshot for the floor and the scans), as migration_30 says why.
-- A keyset page of the firings in some of the live states (p_states, a subset of
-- queued, claimed and running), of one namespace or (NULL) of all, between two ids,
-- newest first (core.sql list_active_page). [firings_active]
CREATE FUNCTION cronwheel_active_page(p_states text[], p_namespace text, p_after bigint,
                                      p_before bigint, p_limit integer)
RETURNS SETOF firings
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN QUERY
    SELECT f.* FROM firings f
    WHERE f.state IN ('queued', 'claimed', 'running') AND f.state = ANY (p_states)
      AND f.scheduled_for >= v_floor
      AND (p_namespace IS NULL OR f.namespace = p_namespace)
      AND f.id > coalesce(p_after, -1) AND f.id < coalesce(p_before, 9223372036854775807)
    ORDER BY f.id DESC
    LIMIT p_limit;
END
$fn$;
-- The tasks of at most p_scan queued firings, of one namespace or (NULL) of all
-- (core_tasks.sql unserved_queued). [firings_claim]
CREATE FUNCTION cronwheel_queued_tasks(p_namespace text, p_scan integer)
RETURNS TABLE (task text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN QUERY
    SELECT f.task FROM firings f
    WHERE f.state = 'queued' AND f.scheduled_for >= v_floor
      AND (p_namespace IS NULL OR f.namespace = p_namespace)
    LIMIT p_scan;
END
$fn$;
-- Firings held by workers (claimed or running) per namespace, of one namespace or
-- (NULL) of all (core_quotas.sql quota_held). [firings_held_namespace]
CREATE FUNCTION cronwheel_held_counts(p_namespace text)
RETURNS TABLE (namespace text, n bigint)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_floor timestamptz := (SELECT fl.at FROM firings_floor fl WHERE fl.one);
BEGIN
    RETURN QUERY
    SELECT f.namespace, count(*) FROM firings f
    WHERE f.state IN ('claimed', 'running') AND f.scheduled_for >= v_floor
      AND (p_namespace IS NULL OR f.namespace = p_namespace)
    GROUP BY f.namespace;
END
$fn$;

-- name: migration_32
-- No JIT in cronwheel's functions. A generic plan over a month of day partitions of a
-- million rows each is estimated past jit_above_cost (100,000) however few rows it
-- reads, and PostgreSQL compiles a JIT plan at every execution, not once per plan:
-- status' recent lateness (cronwheel_recent_lateness, 0.3 ms of work) took 193 ms a
-- call on a store of 30 days at 1,000,000 a day, 225 functions compiled each time
-- (docs/benchmarks.md "The soak at the design's rate"). Set on each plpgsql function and
-- each SQL function already not inlined: a transaction pooler passes no session option
-- (cronwheel's direct sessions also start with jit off: postgres/ha.py
-- session_conninfo). A function created or replaced later carries `SET jit = off`
-- itself (tests/contract/test_postgres_jit.py checks every one).
DO $do$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.pronamespace = current_schema()::regnamespace
          AND p.proname LIKE 'cronwheel\_%'
          -- a SQL function without a SET clause may be inlined in its caller's plan
          -- (cronwheel_floor_key is folded to a constant): a SET would prevent that
          AND (l.lanname = 'plpgsql' OR p.proconfig IS NOT NULL)
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET jit = off', v_fn);
    END LOOP;
END
$do$;
