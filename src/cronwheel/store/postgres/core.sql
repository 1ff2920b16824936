-- PostgreSQL: the queries of the store core's flows (store/core/flows.py). The SQLite
-- engine defines every one of these names in its own core.sql: read them side by side.
-- Parameters are psycopg's %(name)s. `:now` is the store's clock, expanded before a
-- query is sent (db.py, NOW_SQL): the server's now() — the start of the transaction,
-- one instant for all its statements — plus a test-only offset (0 in production).
-- Each block: what it does; [the index it relies on].

-- name: migration_lock
-- Concurrent migrators of this schema serialize on a transaction-level advisory lock
-- (released at commit; session-level locks are never used).
SELECT pg_advisory_xact_lock(
    hashtextextended('cronwheel.migrate:' || coalesce(current_schema(), ''), 0))

-- name: create_meta
-- The key/value table that holds the schema version before any migration ran.
CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)

-- name: schema_version
-- [meta primary key]
SELECT value FROM meta WHERE key = 'schema_version'

-- name: has_meta
-- Whether the schema has been migrated at all (a new one has no meta table yet).
SELECT to_regclass('meta') IS NOT NULL AS ok

-- name: migrated_version
-- The schema version, once the migration that reached it also wrote the ids' key (a
-- migrate that finds it at the code's last migration takes no lock). [meta primary key]
SELECT value FROM meta WHERE key = 'schema_version'
  AND EXISTS (SELECT 1 FROM meta WHERE key = 'id_key')

-- name: set_schema_version
-- The schema version the migrations reached. [meta primary key]
INSERT INTO meta (key, value) VALUES ('schema_version', %(version)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value

-- name: insert_id_key
-- The cluster's secret for the ids users see, written once by migrate; a later
-- migrate keeps it (ids shown never change). [meta primary key]
INSERT INTO meta (key, value) VALUES ('id_key', %(key)s)
ON CONFLICT (key) DO NOTHING

-- name: id_key
-- The cluster's secret for the ids users see. [meta primary key]
SELECT value FROM meta WHERE key = 'id_key'

-- name: ping
-- The cheapest round trip: is the store answering?
SELECT 1 AS one

-- name: insert_job
-- A new job; nothing when its namespace has the name. [jobs (namespace, name) unique]
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at, shard,
                  max_concurrency, overlap, max_buffer, cancel_grace_us, start_deadline_us,
                  bounds, remaining_runs, trace_context)
VALUES (%(namespace)s, %(name)s, %(task)s, %(schedule)s::jsonb, %(payload)s::json,
        %(policies)s::jsonb, %(spec_hash)s, %(priority)s, %(max_attempts)s, %(visibility_us)s,
        %(paused)s, %(next_fire_at)s, :now, :now, %(shard)s,
        %(max_concurrency)s, %(overlap)s, %(max_buffer)s, %(cancel_grace_us)s,
        %(start_deadline_us)s, %(bounds)s::jsonb, %(remaining_runs)s, %(trace_context)s)
ON CONFLICT (namespace, name) DO NOTHING
RETURNING *

-- name: job_for_update
-- upsert_job's read of the current row, locked. [jobs (namespace, name) unique]
SELECT * FROM jobs WHERE namespace = %(namespace)s AND name = %(name)s FOR UPDATE

-- name: update_job_spec
-- A changed spec, in the transaction that locked the row: cronwheel_update_job
-- (schema.sql migration_24: the cursor and the run budget move only with their rules).
SELECT * FROM cronwheel_update_job(
    %(id)s::bigint, NULL, %(task)s::text, %(schedule)s::jsonb, %(payload)s::json,
    %(policies)s::jsonb, %(spec_hash)s::text, %(priority)s::float8,
    %(max_attempts)s::integer, %(visibility_us)s::bigint, %(next_fire_at)s::timestamptz,
    %(max_concurrency)s::integer, %(overlap)s::text, %(max_buffer)s::integer,
    %(cancel_grace_us)s::bigint, %(start_deadline_us)s::bigint, %(bounds)s::jsonb,
    %(remaining_runs)s::integer, %(trace_context)s::text, :now)

-- name: bump_jobs_version
-- Tells the leader the job set changed (it re-reads due jobs): a row of job_changes,
-- no lock another transaction waits for (schema.sql migration_20).
INSERT INTO job_changes DEFAULT VALUES

-- name: jobs_version
-- The job set's version: meta's jobs_version plus the changes not folded into it yet
-- (how many: `pending`). [meta primary key, a read of job_changes: kept small by
-- jobs_version_fold]
SELECT coalesce((SELECT value::bigint FROM meta WHERE key = 'jobs_version'), 0)
       + (SELECT count(*) FROM job_changes) AS value,
       (SELECT count(*) FROM job_changes) AS pending

-- name: get_job
-- [jobs (namespace, name) unique]
SELECT * FROM jobs WHERE namespace = %(namespace)s AND name = %(name)s

-- name: get_job_by_id
-- [jobs primary key]
SELECT * FROM jobs WHERE id = %(id)s

-- name: list_jobs
-- A keyset page of jobs by id, filtered by core/filters.py. [jobs primary key]
-- Schedule, policies and bounds as text, as due_jobs: the codec's caches are keyed by
-- it, so a page read again (the dashboard's jobs page, /metrics' per-job series) costs
-- no JSON parsing per job (measured: search_jobs of 101 jobs 4.6 -> 2.0 ms).
SELECT id, namespace, name, task, schedule::text AS schedule, payload,
       policies::text AS policies, bounds::text AS bounds, paused, next_fire_at,
       last_fired_at, missed_total, remaining_runs, created_at, updated_at
FROM jobs WHERE /*where*/ ORDER BY id LIMIT %(limit)s

-- name: set_paused
-- [jobs (namespace, name) unique]
UPDATE jobs SET paused = %(paused)s, updated_at = :now
WHERE namespace = %(namespace)s AND name = %(name)s
RETURNING *

-- name: insert_pause_event
-- A pause or resume, recorded for `jobs explain`.
INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
VALUES (%(job_id)s, :now, %(kind)s, NULL, NULL, 0, true, NULL)

-- name: delete_job
-- The job and, by foreign key cascade, its firings and events; its schedule's kind
-- (the jobs quota counts every job but `now` one-shots).
DELETE FROM jobs WHERE namespace = %(namespace)s AND name = %(name)s
RETURNING schedule->>'kind' AS kind

-- name: due_jobs
-- Keyset paging on (next_fire_at, id): a page boundary never splits a herd. Schedule,
-- policies and bounds come back as text: the codec's caches are keyed by that text, so
-- a herd sharing a few schedules costs no JSON parsing (nor re-serializing) per job.
-- [jobs_due]
SELECT id, namespace, name, task, schedule::text AS schedule, payload,
       policies::text AS policies, bounds::text AS bounds, paused, next_fire_at,
       last_fired_at, missed_total, remaining_runs, created_at, updated_at
FROM jobs
WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at <= %(horizon)s
  AND next_fire_at >= %(after_at)s AND (next_fire_at > %(after_at)s OR id > %(after_id)s)
ORDER BY next_fire_at, id
LIMIT %(limit)s

-- name: job_events
-- A job's newest events first. [job_events_job]
SELECT * FROM job_events WHERE job_id = %(job_id)s ORDER BY id DESC LIMIT %(limit)s

-- name: job_backlog
-- Queued, held and running firings per job of a namespace, most first. [firings_active]
SELECT job_name, count(*) AS n FROM firings
WHERE namespace = %(namespace)s AND state IN ('queued', 'claimed', 'running')
GROUP BY job_name
ORDER BY n DESC, job_name
LIMIT %(limit)s

-- name: acquire_lease
-- Atomic take-or-renew: ON CONFLICT DO UPDATE locks the row (waiting for an enqueue
-- holding it FOR SHARE) and re-checks the WHERE against the committed row. The epoch is
-- (timeline << 32) + term, the timeline of the WAL this primary writes: a takeover, or a
-- renewal on a newer timeline than the epoch's (a failover happened), starts a term
-- above every epoch of an older timeline, even one the new primary never received.
WITH tl AS (
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint AS id
)
INSERT INTO leases (name, holder, epoch, expires_at, acquired_at)
SELECT %(name)s, %(holder)s, (tl.id << 32) + 1, :now + %(ttl)s::interval, :now FROM tl
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                      AND leases.epoch >> 32 = excluded.epoch >> 32
                 THEN leases.epoch ELSE greatest(leases.epoch + 1, excluded.epoch) END,
    acquired_at = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                            AND leases.epoch >> 32 = excluded.epoch >> 32
                       THEN leases.acquired_at ELSE :now END,
    expires_at = excluded.expires_at
WHERE leases.expires_at <= :now OR leases.holder = excluded.holder
RETURNING *

-- name: fence_check
-- A leader write's fence (an enqueue, a tz database adoption). FOR SHARE: a takeover
-- (acquire_lease updates this row) waits until this write commits or rolls back, and
-- a write that waited behind a takeover re-reads the row and finds the new
-- holder/epoch: the fence and the writes are one atomic step. The epoch must be of
-- this primary's timeline: after a failover the holder renews into a new term first.
SELECT epoch FROM leases
WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > :now
  AND epoch >> 32
      = ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
FOR SHARE

-- name: release_lease
-- Expires the lease now, if this holder and epoch still hold it.
UPDATE leases SET expires_at = :now
WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s

-- name: get_lease
-- A lease as stored (holder, epoch, expiry). [leases primary key]
SELECT * FROM leases WHERE name = %(name)s

-- name: idempotency_lock
-- Serializes requests carrying one idempotency key (released at commit); the lookup
-- that follows, a new statement, sees whatever the previous holder committed.
SELECT pg_advisory_xact_lock(
    hashtextextended('cronwheel.idempotency:' || %(namespace)s || '/' || %(key_hash)s, 0))

-- name: find_idempotency_key
-- The firing a key created, with the hash of the request that created it.
SELECT k.request_hash, f.*
FROM idempotency_keys k JOIN firings f ON f.id = k.firing_id
WHERE k.namespace = %(namespace)s AND k.key_hash = %(key_hash)s

-- name: insert_idempotency_key
-- The firing an idempotency key created. [idempotency_keys primary key]
INSERT INTO idempotency_keys (namespace, key_hash, request_hash, firing_id, created_at)
VALUES (%(namespace)s, %(key_hash)s, %(request_hash)s, %(firing_id)s, :now)

-- name: next_due_at
-- When the earliest queued firing not yet due becomes due (a buffered one is due
-- already: not a hint). Written as an ordered walk that stops at its first entry:
-- min() lets the planner, with stale statistics, aggregate over every matching entry
-- (thousands when a burst is queued ahead of its instant). From the claim's floor on
-- (schema.sql migration_30). [firings_queued_due]
SELECT cronwheel_next_due(:now) AS d

-- name: cancel_requested
-- Which of a worker's claims were asked to stop. [firings primary key]
SELECT id FROM firings WHERE id = ANY (%(ids)s::bigint[]) AND cancel_requested_at IS NOT NULL

-- name: get_firing
-- [firings primary key]
SELECT * FROM firings WHERE id = %(id)s

-- name: list_firings
-- A keyset page of firings, newest first, filtered by core/filters.py.
-- [firings_job_id for a job's firings, else the primary key]
SELECT * FROM firings WHERE /*where*/ ORDER BY id DESC LIMIT %(limit)s

-- name: list_firings_page
-- A keyset page of every firing between two ids, newest first: the list with no filter
-- but these (the scrape's walk of new firings). A function planned once (schema.sql
-- migration_30): as a statement it was planned afresh at each call (its bounds and
-- LIMIT, parameters, made the generic plan look costlier), 2.2 ms with 32 day
-- partitions. [each partition's primary key]
SELECT * FROM cronwheel_firings_page(%(after_id)s::bigint, %(before_id)s::bigint,
                                     %(limit)s::integer)

-- name: list_active_page
-- A keyset page of the firings in some of the live states (%(states)s, a subset of
-- queued, claimed and running), of one namespace or all, between two ids, newest first
-- (the scrape's walk of the active firings): from the claim's floor on, planned once
-- (schema.sql migration_31). [firings_active]
SELECT * FROM cronwheel_active_page(%(states)s::text[], %(namespace)s::text,
                                    %(after_id)s::bigint, %(before_id)s::bigint,
                                    %(limit)s::integer)

-- name: start
-- Held firings start: CLAIMED -> RUNNING (schema.sql migration_18: the statement).
-- %(batch)s: a JSON array of [id, token]; %(instants)s from the tokens.
SELECT s.o_id AS id FROM cronwheel_start(%(batch)s::json, %(instants)s::timestamptz[], :now) s

-- name: cancel_queued
-- A firing not yet started (queued, or held by a worker): cancelled at once; a held
-- one's `start` then fails, so its handler is never called.
UPDATE firings
SET state = 'cancelled', finished_at = :now, claim_token = NULL, lease_until = NULL,
    -- a held one's worker learns it from its cancel_requested poll and lets it go
    cancel_requested_at = CASE WHEN state = 'claimed' THEN :now END
WHERE id = %(id)s AND state IN ('scheduled', 'queued', 'claimed')
RETURNING *

-- name: cancel_running
-- A running firing: asked to stop (the handler sees it; the reaper enforces the grace).
UPDATE firings SET cancel_requested_at = coalesce(cancel_requested_at, :now)
WHERE id = %(id)s AND state = 'running'
RETURNING *

-- name: redrive
-- A dead firing queued again, due now, with its job's attempts again.
UPDATE firings
SET state = 'queued', due_at = :now, vdeadline = :now + (vdeadline - due_at),
    max_attempts = attempt + (SELECT max_attempts FROM jobs WHERE jobs.id = firings.job_id),
    finished_at = NULL, claim_token = NULL, lease_until = NULL, claimed_at = NULL,
    cancel_requested_at = NULL  -- an old attempt's cancel request is not this one's
WHERE id = %(id)s AND state = 'dead'
RETURNING *

-- name: register_node
-- A node (scheduler, worker, api) announces itself, or re-announces, with the tz
-- database it computes instants with and its clock's offset to the store's (NULLs: not
-- measured yet). [nodes primary key]
INSERT INTO nodes (id, kind, hostname, pid, started_at, heartbeat_at, wake_addr, info,
                   tz_source, tz_version, clock_offset, clock_uncertainty, clock_flag)
VALUES (%(id)s, %(kind)s, %(hostname)s, %(pid)s, %(started_at)s, :now, %(wake_addr)s,
        %(info)s::jsonb, %(tz_source)s, %(tz_version)s, %(clock_offset)s, %(clock_uncertainty)s,
        %(clock_flag)s)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = excluded.heartbeat_at, wake_addr = excluded.wake_addr, info = excluded.info,
    tz_source = excluded.tz_source, tz_version = excluded.tz_version,
    clock_offset = excluded.clock_offset, clock_uncertainty = excluded.clock_uncertainty,
    clock_flag = excluded.clock_flag

-- name: heartbeat_node
-- A node is alive: its kind and new heartbeat (a worker's served tasks are refreshed
-- from them, core/admin.py), with its clock's offset to the store's, its uncertainty
-- and its flag (NULL: not measured). [nodes primary key]
UPDATE nodes
SET heartbeat_at = :now, clock_offset = %(clock_offset)s,
    clock_uncertainty = %(clock_uncertainty)s, clock_flag = %(clock_flag)s
WHERE id = %(id)s RETURNING kind, heartbeat_at

-- name: remove_node
-- A node that stopped cleanly. [nodes primary key]
DELETE FROM nodes WHERE id = %(id)s

-- name: list_nodes
-- Every node known, by kind.
SELECT * FROM nodes ORDER BY kind, id

-- name: list_nodes_alive
-- Nodes that heartbeated within the interval %(within)s.
SELECT * FROM nodes WHERE heartbeat_at >= :now - %(within)s::interval ORDER BY kind, id

-- name: status_counts
-- Queued, claimed and running now (partial indexes: bounded by the live work, and by
-- the claim's floor: schema.sql migration_30). No parameter: planned once per session
-- (a prepared statement without parameters keeps its generic plan), where planning it
-- afresh cost 18-22 ms with 32 day partitions. [firings_claim, firings_lease]
SELECT state, n FROM cronwheel_live_counts(NULL)

-- name: status_finished
-- The finishes of the minutes within %(window)s, counted as they happened
-- (finished_counts, at most 60 minutes of rows however long the history).
-- [finished_counts primary key]
SELECT state, sum(n) AS n FROM finished_counts
WHERE minute >= floor(extract(epoch FROM :now - %(window)s::interval) / 60)::bigint
GROUP BY state

-- name: status_jobs
-- Registered jobs (the jobs quota's counters: every job but immediate one-shots), paused
-- jobs, the oldest queued firing's due instant, and the clock: no scan of the jobs,
-- which hold a one-shot per `app.enqueue` until retention prunes it. The oldest from
-- the claim's floor on (schema.sql migration_30). [quota_jobs, jobs_paused, firings_claim]
SELECT (SELECT coalesce(sum(used), 0) FROM quota_jobs) AS n,
       (SELECT count(*) FROM jobs WHERE paused) AS p,
       cronwheel_oldest_queued(NULL) AS oldest,
       :now AS now

-- name: recent_lateness
-- Start lateness (ms) of the firings that succeeded within %(window)s at their first
-- attempt (a retried one's row holds its last start, not its lateness): a function
-- planned once per session (schema.sql migration_19). [firings_finished]
SELECT lateness_ms FROM cronwheel_recent_lateness(:now - %(window)s::interval, NULL, %(limit)s)

-- name: status_counts_of_namespace
-- status_counts of one namespace's firings (what a namespace token may see).
-- [firings_claim, firings_lease]
SELECT state, n FROM cronwheel_live_counts(%(namespace)s)

-- name: status_finished_of_namespace
-- status_finished of one namespace. [finished_counts primary key]
SELECT state, sum(n) AS n FROM finished_counts
WHERE minute >= floor(extract(epoch FROM :now - %(window)s::interval) / 60)::bigint
  AND namespace = %(namespace)s
GROUP BY state

-- name: status_jobs_of_namespace
-- status_jobs of one namespace. [quota_jobs primary key, jobs_paused, firings_claim]
SELECT (SELECT coalesce(sum(used), 0) FROM quota_jobs WHERE namespace = %(namespace)s) AS n,
       (SELECT count(*) FROM jobs WHERE paused AND namespace = %(namespace)s) AS p,
       cronwheel_oldest_queued(%(namespace)s) AS oldest,
       :now AS now

-- name: recent_lateness_of_namespace
-- recent_lateness of one namespace's firings. [firings_finished]
SELECT lateness_ms
FROM cronwheel_recent_lateness(:now - %(window)s::interval, %(namespace)s, %(limit)s)

-- name: insert_token
-- A new API token (its secret stored hashed only).
INSERT INTO api_tokens (namespace, role, label, secret_hash, created_at)
VALUES (%(namespace)s, %(role)s, %(label)s, %(secret_hash)s, :now)
RETURNING *

-- name: get_token
-- A token by id (auth looks tokens up by id). [api_tokens primary key]
SELECT * FROM api_tokens WHERE id = %(id)s

-- name: list_tokens
-- Every token, oldest first.
SELECT * FROM api_tokens ORDER BY id

-- name: list_tokens_of_namespace
-- A namespace's tokens, oldest first.
SELECT * FROM api_tokens WHERE namespace = %(namespace)s ORDER BY id

-- name: revoke_token
-- A token revoked (idempotent: the first revocation instant stays). [api_tokens primary key]
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now)
WHERE id = %(id)s
RETURNING *

-- name: recent_runs
-- Each job's newest %(sample)s firings by scheduled instant (unique per job), in one
-- statement (store/core/flows.py recent_runs): a function planned once per session
-- (schema.sql migration_21, where the statement and its walks are described).
-- [firings (job_id, scheduled_for) unique]
SELECT job_id, late_us, last_id, last_state
FROM cronwheel_recent_runs(%(ids)s::bigint[], %(sample)s)
