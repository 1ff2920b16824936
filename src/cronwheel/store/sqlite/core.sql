-- SQLite: the queries of the store core's flows (store/core/flows.py). The PostgreSQL
-- engine defines every one of these names in its own core.sql: read them side by side.
-- Instants are INTEGER microseconds UTC; `:now` is the unit of work's clock reading.
-- Each block: what it does; [the index it relies on].

-- name: migration_lock
-- Concurrent migrators: the writer lock (BEGIN IMMEDIATE) already serializes them.
SELECT 1

-- name: create_meta
-- The key/value table that holds the schema version before any migration ran.
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)

-- name: schema_version
-- [meta primary key]
SELECT value FROM meta WHERE key = 'schema_version'

-- name: has_meta
-- Whether the schema has been migrated at all (a new one has no meta table yet).
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta') AS ok

-- name: migrated_version
-- The schema version, once the migration that reached it also wrote the ids' key (a
-- migrate that finds it at the code's last migration takes no lock). [meta primary key]
SELECT value FROM meta WHERE key = 'schema_version'
  AND EXISTS (SELECT 1 FROM meta WHERE key = 'id_key')

-- name: set_schema_version
-- The schema version the migrations reached. [meta primary key]
INSERT INTO meta (key, value) VALUES ('schema_version', :version)
ON CONFLICT (key) DO UPDATE SET value = excluded.value

-- name: insert_id_key
-- The cluster's secret for the ids users see, written once by migrate; a later
-- migrate keeps it (ids shown never change). [meta primary key]
INSERT INTO meta (key, value) VALUES ('id_key', :key)
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
VALUES (:namespace, :name, :task, :schedule, :payload, :policies, :spec_hash, :priority,
        :max_attempts, :visibility_us, :paused, :next_fire_at, :now, :now, :shard,
        :max_concurrency, :overlap, :max_buffer, :cancel_grace_us, :start_deadline_us,
        :bounds, :remaining_runs, :trace_context)
ON CONFLICT (namespace, name) DO NOTHING
RETURNING *

-- name: job_for_update
-- upsert_job's read of the current row (the writer lock is held). [jobs (namespace, name)]
SELECT * FROM jobs WHERE namespace = :namespace AND name = :name

-- name: update_job_spec
-- A changed spec; the cursor moves to :next_fire_at only when the schedule changed,
-- the run budget restarts only when the bounds changed (every SET sees the old row);
-- a trace context is replaced only by another (a write without one keeps it).
UPDATE jobs
SET task = :task, schedule = :schedule, payload = :payload, policies = :policies,
    spec_hash = :spec_hash, priority = :priority, max_attempts = :max_attempts,
    visibility_us = :visibility_us,
    next_fire_at = CASE WHEN schedule = :schedule THEN next_fire_at ELSE :next_fire_at END,
    updated_at = :now,
    max_concurrency = :max_concurrency, overlap = :overlap, max_buffer = :max_buffer,
    cancel_grace_us = :cancel_grace_us, start_deadline_us = :start_deadline_us,
    remaining_runs = CASE WHEN bounds = :bounds THEN remaining_runs ELSE :remaining_runs END,
    bounds = :bounds,
    trace_context = coalesce(:trace_context, trace_context)
WHERE id = :id
RETURNING *

-- name: bump_jobs_version
-- Tells the leader the job set changed (it re-reads due jobs). [meta primary key]
INSERT INTO meta (key, value) VALUES ('jobs_version', '1')
ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1

-- name: jobs_version
-- The job set's version (bump_jobs_version). [meta primary key]
SELECT value FROM meta WHERE key = 'jobs_version'

-- name: get_job
-- [jobs (namespace, name) unique]
SELECT * FROM jobs WHERE namespace = :namespace AND name = :name

-- name: get_job_by_id
-- [jobs primary key]
SELECT * FROM jobs WHERE id = :id

-- name: list_jobs
-- A keyset page of jobs by id, filtered by core/filters.py. [jobs primary key]
SELECT * FROM jobs WHERE /*where*/ ORDER BY id LIMIT :limit

-- name: set_paused
-- [jobs (namespace, name) unique]
UPDATE jobs SET paused = :paused, updated_at = :now
WHERE namespace = :namespace AND name = :name
RETURNING *

-- name: insert_pause_event
-- A pause or resume, recorded for `jobs explain`.
INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
VALUES (:job_id, :now, :kind, NULL, NULL, 0, 1, NULL)

-- name: delete_job
-- The job and, by foreign key cascade, its firings and events; its schedule's kind
-- (the jobs quota counts every job but `now` one-shots).
DELETE FROM jobs WHERE namespace = :namespace AND name = :name
RETURNING json_extract(schedule, '$.kind') AS kind

-- name: due_jobs
-- Keyset paging on (next_fire_at, id): a page boundary never splits a herd. [jobs_due]
SELECT * FROM jobs
WHERE paused = 0 AND next_fire_at IS NOT NULL AND next_fire_at <= :horizon
  AND next_fire_at >= :after_at AND (next_fire_at > :after_at OR id > :after_id)
ORDER BY next_fire_at, id
LIMIT :limit

-- name: job_events
-- A job's newest events first. [job_events_job]
SELECT * FROM job_events WHERE job_id = :job_id ORDER BY id DESC LIMIT :limit

-- name: job_backlog
-- Queued, held and running firings per job of a namespace, most first. [firings_active]
SELECT job_name, count(*) AS n FROM firings
WHERE namespace = :namespace AND state IN ('queued', 'claimed', 'running')
GROUP BY job_name
ORDER BY n DESC, job_name
LIMIT :limit

-- name: acquire_lease
-- Atomic take-or-renew: a new holder only once the lease expired, with epoch + 1.
INSERT INTO leases (name, holder, epoch, expires_at, acquired_at)
VALUES (:name, :holder, 1, :now + :ttl, :now)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                 THEN leases.epoch ELSE leases.epoch + 1 END,
    acquired_at = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                       THEN leases.acquired_at ELSE :now END,
    expires_at = excluded.expires_at
WHERE leases.expires_at <= :now OR leases.holder = excluded.holder
RETURNING *

-- name: fence_check
-- A leader write's fence (an enqueue, a tz database adoption): this holder and epoch
-- hold an unexpired lease. [leases primary key]
SELECT epoch FROM leases
WHERE name = :name AND holder = :holder AND epoch = :epoch AND expires_at > :now

-- name: release_lease
-- Expires the lease now, if this holder and epoch still hold it.
UPDATE leases SET expires_at = :now WHERE name = :name AND holder = :holder AND epoch = :epoch

-- name: get_lease
-- A lease as stored (holder, epoch, expiry). [leases primary key]
SELECT * FROM leases WHERE name = :name

-- name: idempotency_lock
-- Requests carrying one idempotency key: the writer lock already serializes them.
SELECT 1

-- name: find_idempotency_key
-- The firing a key created, with the hash of the request that created it.
SELECT k.request_hash, f.*
FROM idempotency_keys k JOIN firings f ON f.id = k.firing_id
WHERE k.namespace = :namespace AND k.key_hash = :key_hash

-- name: insert_idempotency_key
-- The firing an idempotency key created. [idempotency_keys primary key]
INSERT INTO idempotency_keys (namespace, key_hash, request_hash, firing_id, created_at)
VALUES (:namespace, :key_hash, :request_hash, :firing_id, :now)

-- name: next_due_at
-- When the earliest queued firing not yet due becomes due (a buffered one is due
-- already: not a hint). INDEXED BY: with no statistics SQLite would otherwise walk
-- all of firings_queued_job. An ordered walk that stops at its first entry, not min()
-- over the range (every firing of a burst queued ahead of its instant). [firings_queued_due]
SELECT due_at AS d FROM firings INDEXED BY firings_queued_due
WHERE state = 'queued' AND buffered_at IS NULL AND due_at > :now
ORDER BY due_at
LIMIT 1

-- name: cancel_requested
-- Which of a worker's claims were asked to stop. [firings primary key]
SELECT id FROM firings
WHERE id IN (SELECT value FROM json_each(:ids)) AND cancel_requested_at IS NOT NULL

-- name: get_firing
-- [firings primary key]
SELECT * FROM firings WHERE id = :id

-- name: list_firings
-- A keyset page of firings, newest first, filtered by core/filters.py.
-- [firings_job_id for a job's firings, else the primary key]
SELECT * FROM firings WHERE /*where*/ ORDER BY id DESC LIMIT :limit

-- name: list_firings_page
-- A keyset page of every firing between two ids, newest first: the list with no
-- filter but these (the scrape's walk of new firings). [the primary key]
SELECT * FROM firings
WHERE id > coalesce(:after_id, -1) AND id < coalesce(:before_id, 9223372036854775807)
ORDER BY id DESC LIMIT :limit

-- name: list_active_page
-- A keyset page of the firings in some of the live states (:states, a JSON array of a
-- subset of queued, claimed and running), of one namespace or all, between two ids,
-- newest first (the scrape's walk of the active firings). [firings_active]
SELECT * FROM firings
WHERE state IN ('queued', 'claimed', 'running')
  AND state IN (SELECT value FROM json_each(:states))
  AND (:namespace IS NULL OR namespace = :namespace)
  AND id > coalesce(:after_id, -1) AND id < coalesce(:before_id, 9223372036854775807)
ORDER BY id DESC LIMIT :limit

-- name: start
-- Held firings start: CLAIMED -> RUNNING, each a CAS on (claimed, claim token); a
-- cancel since the claim makes it fail, and the handler is never called.
-- :batch is a JSON array of [id, token]. [firings primary key]
UPDATE firings
SET state = 'running', started_at = :now, lease_until = :now + visibility_us
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:batch)) AS c
WHERE firings.id = c.id AND firings.claim_token = c.token AND firings.state = 'claimed'
RETURNING firings.id

-- name: cancel_queued
-- A firing not yet started (queued, or held by a worker): cancelled at once; a held
-- one's `start` then fails, so its handler is never called.
UPDATE firings
SET state = 'cancelled', finished_at = :now, claim_token = NULL, lease_until = NULL,
    -- a held one's worker learns it from its cancel_requested poll and lets it go
    cancel_requested_at = CASE WHEN state = 'claimed' THEN :now END
WHERE id = :id AND state IN ('scheduled', 'queued', 'claimed')
RETURNING *

-- name: cancel_running
-- A running firing: asked to stop (the handler sees it; the reaper enforces the grace).
UPDATE firings SET cancel_requested_at = coalesce(cancel_requested_at, :now)
WHERE id = :id AND state = 'running'
RETURNING *

-- name: redrive
-- A dead firing queued again, due now, with its job's attempts again.
UPDATE firings
SET state = 'queued', due_at = :now, vdeadline = :now + (vdeadline - due_at),
    max_attempts = attempt + (SELECT max_attempts FROM jobs WHERE jobs.id = firings.job_id),
    finished_at = NULL, claim_token = NULL, lease_until = NULL, claimed_at = NULL,
    cancel_requested_at = NULL  -- an old attempt's cancel request is not this one's
WHERE id = :id AND state = 'dead'
RETURNING *

-- name: register_node
-- A node (scheduler, worker, api) announces itself, or re-announces, with the tz
-- database it computes instants with and its clock's offset to the store's (NULLs: not
-- measured yet). [nodes primary key]
INSERT INTO nodes (id, kind, hostname, pid, started_at, heartbeat_at, wake_addr, info,
                   tz_source, tz_version, clock_offset, clock_uncertainty, clock_flag)
VALUES (:id, :kind, :hostname, :pid, :started_at, :now, :wake_addr,
        :info, :tz_source, :tz_version, :clock_offset, :clock_uncertainty,
        :clock_flag)
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
SET heartbeat_at = :now, clock_offset = :clock_offset,
    clock_uncertainty = :clock_uncertainty, clock_flag = :clock_flag
WHERE id = :id RETURNING kind, heartbeat_at

-- name: remove_node
-- A node that stopped cleanly. [nodes primary key]
DELETE FROM nodes WHERE id = :id

-- name: list_nodes
-- Every node known, by kind.
SELECT * FROM nodes ORDER BY kind, id

-- name: list_nodes_alive
-- Nodes that heartbeated within :within microseconds.
SELECT * FROM nodes WHERE heartbeat_at >= :now - :within ORDER BY kind, id

-- name: status_counts
-- Queued, claimed and running now (partial indexes: bounded by the live work).
-- [firings_claim, firings_lease]
SELECT 'queued' AS state, count(*) AS n FROM firings WHERE state = 'queued'
UNION ALL
SELECT state, count(*) FROM firings WHERE state IN ('claimed', 'running') GROUP BY state

-- name: status_finished
-- The finishes of the minutes within :window, counted as they happened (finished_counts,
-- at most 60 minutes of rows however long the history). [finished_counts primary key]
SELECT state, sum(n) AS n FROM finished_counts WHERE minute >= (:now - :window) / 60000000
GROUP BY state

-- name: status_jobs
-- Registered jobs (the jobs quota's counters: every job but immediate one-shots), paused
-- jobs, the oldest queued firing's due instant, and the clock: no scan of the jobs,
-- which hold a one-shot per `app.enqueue` until retention prunes it.
-- [quota_usage, jobs_paused, firings_claim]
SELECT (SELECT coalesce(sum(used), 0) FROM quota_usage
        WHERE quota = 'jobs' AND window_start = 0) AS n,
       (SELECT count(*) FROM jobs WHERE paused = 1) AS p,
       (SELECT min(due_at) FROM firings WHERE state = 'queued') AS oldest,
       :now AS now

-- name: recent_lateness
-- Start lateness (ms) of the firings that succeeded within :window at their first
-- attempt (a retried one's row holds its last start, not its lateness). [firings_finished]
SELECT (started_at - scheduled_for) / 1000.0 AS lateness_ms FROM firings
WHERE finished_at IS NOT NULL AND finished_at >= :now - :window AND state = 'succeeded'
  AND attempt = 1
ORDER BY finished_at DESC
LIMIT :limit

-- name: status_counts_of_namespace
-- status_counts of one namespace's firings (what a namespace token may see).
-- [firings_claim, firings_held_namespace]
SELECT 'queued' AS state, count(*) AS n FROM firings WHERE state = 'queued' AND namespace = :namespace
UNION ALL
SELECT state, count(*) FROM firings
WHERE state IN ('claimed', 'running') AND namespace = :namespace GROUP BY state

-- name: status_finished_of_namespace
-- status_finished of one namespace. [finished_counts primary key]
SELECT state, sum(n) AS n FROM finished_counts
WHERE minute >= (:now - :window) / 60000000 AND namespace = :namespace
GROUP BY state

-- name: status_jobs_of_namespace
-- status_jobs of one namespace. [quota_usage primary key, jobs_paused, firings_claim]
SELECT (SELECT coalesce(sum(used), 0) FROM quota_usage
        WHERE namespace = :namespace AND quota = 'jobs' AND window_start = 0) AS n,
       (SELECT count(*) FROM jobs WHERE paused = 1 AND namespace = :namespace) AS p,
       (SELECT min(due_at) FROM firings WHERE state = 'queued' AND namespace = :namespace) AS oldest,
       :now AS now

-- name: recent_lateness_of_namespace
-- recent_lateness of one namespace's firings. [firings_finished]
SELECT (started_at - scheduled_for) / 1000.0 AS lateness_ms FROM firings
WHERE finished_at IS NOT NULL AND finished_at >= :now - :window
  AND state = 'succeeded' AND attempt = 1 AND namespace = :namespace
ORDER BY finished_at DESC
LIMIT :limit

-- name: insert_token
-- A new API token (its secret stored hashed only).
INSERT INTO api_tokens (namespace, role, label, secret_hash, created_at)
VALUES (:namespace, :role, :label, :secret_hash, :now)
RETURNING *

-- name: get_token
-- A token by id (auth looks tokens up by id). [api_tokens primary key]
SELECT * FROM api_tokens WHERE id = :id

-- name: list_tokens
-- Every token, oldest first.
SELECT * FROM api_tokens ORDER BY id

-- name: list_tokens_of_namespace
-- A namespace's tokens, oldest first.
SELECT * FROM api_tokens WHERE namespace = :namespace ORDER BY id

-- name: revoke_token
-- A token revoked (idempotent: the first revocation instant stays). [api_tokens primary key]
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now)
WHERE id = :id
RETURNING *

-- name: recent_runs
-- Each job's newest :sample firings in one statement (store/core/flows.py
-- recent_runs), newest by scheduled instant (unique per job): the first-attempt
-- lateness in microseconds (JSON array) of its newest ones in a started state
-- (succeeded, dead, cancelled) that started at attempt 1, newest first; its last
-- outcome, the newest non-open firing among its newest of any state. Each subquery is
-- a backward walk of the (job_id, scheduled_for) unique index stopped at the LIMIT;
-- the last outcome's bound (the instant of the job's sample-th newest firing) reads
-- the covering index only, and its walk stops at its first non-open row (a subquery
-- ordered after its LIMIT sorted the hundred rows it read: 5x slower).
SELECT j.value AS job_id,
       (SELECT json_group_array(s.late_us) FROM (
            SELECT f.started_at - f.scheduled_for AS late_us, f.attempt
            FROM firings f
            WHERE f.job_id = j.value AND f.state IN ('succeeded', 'dead', 'cancelled')
            ORDER BY f.scheduled_for DESC
            LIMIT :sample) s
        WHERE s.attempt = 1 AND s.late_us IS NOT NULL) AS late_us,
       l.id AS last_id, l.state AS last_state
FROM json_each(:ids) j
LEFT JOIN firings l ON l.id = (
    SELECT f.id FROM firings f
    WHERE f.job_id = j.value AND f.state NOT IN ('queued', 'claimed', 'running')
      AND f.scheduled_for >= (SELECT min(w.scheduled_for) FROM (
                       SELECT scheduled_for FROM firings WHERE job_id = j.value
                       ORDER BY scheduled_for DESC LIMIT :sample) w)
    ORDER BY f.scheduled_for DESC
    LIMIT 1)
