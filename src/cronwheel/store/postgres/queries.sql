-- PostgreSQL queries of PostgresStore. Parameters are psycopg's %(name)s.
--
-- `:now` is the store's clock, expanded by PostgresStore before a query is sent:
--     (coalesce(%(_pin)s::timestamptz, now()) + %(_off)s::interval)
-- i.e. the server's now() — the start of the current transaction, the same
-- instant for every statement in it — plus a test-only offset (0 in production;
-- _pin is NULL in production and lets the contract suite freeze the clock).
-- Leases, claims and expiry are never judged by a node's clock.

-- name: now
SELECT :now AS now

-- name: insert_job
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at, shard,
                  max_concurrency, overlap, max_buffer, cancel_grace_us, start_deadline_us,
                  bounds, remaining_runs)
VALUES (%(namespace)s, %(name)s, %(task)s, %(schedule)s::jsonb, %(payload)s::json,
        %(policies)s::jsonb, %(spec_hash)s, %(priority)s, %(max_attempts)s, %(visibility_us)s,
        %(paused)s, %(next_fire_at)s, :now, :now, %(shard)s,
        %(max_concurrency)s, %(overlap)s, %(max_buffer)s, %(cancel_grace_us)s,
        %(start_deadline_us)s, %(bounds)s::jsonb, %(remaining_runs)s)
RETURNING *

-- name: insert_job_bulk
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at, shard,
                  max_concurrency, overlap, max_buffer, cancel_grace_us, start_deadline_us,
                  bounds, remaining_runs)
VALUES (%(namespace)s, %(name)s, %(task)s, %(schedule)s::jsonb, %(payload)s::json,
        %(policies)s::jsonb, %(spec_hash)s, %(priority)s, %(max_attempts)s, %(visibility_us)s,
        %(paused)s, %(next_fire_at)s, :now, :now, %(shard)s,
        %(max_concurrency)s, %(overlap)s, %(max_buffer)s, %(cancel_grace_us)s,
        %(start_deadline_us)s, %(bounds)s::jsonb, %(remaining_runs)s)

-- name: insert_job_if_absent
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at, shard,
                  max_concurrency, overlap, max_buffer, cancel_grace_us, start_deadline_us,
                  bounds, remaining_runs)
VALUES (%(namespace)s, %(name)s, %(task)s, %(schedule)s::jsonb, %(payload)s::json,
        %(policies)s::jsonb, %(spec_hash)s, %(priority)s, %(max_attempts)s, %(visibility_us)s,
        %(paused)s, %(next_fire_at)s, :now, :now, %(shard)s,
        %(max_concurrency)s, %(overlap)s, %(max_buffer)s, %(cancel_grace_us)s,
        %(start_deadline_us)s, %(bounds)s::jsonb, %(remaining_runs)s)
ON CONFLICT (namespace, name) DO NOTHING
RETURNING *

-- name: job_for_update
SELECT * FROM jobs WHERE namespace = %(namespace)s AND name = %(name)s FOR UPDATE

-- name: update_job_spec
UPDATE jobs
SET task = %(task)s, schedule = %(schedule)s::jsonb, payload = %(payload)s::json,
    policies = %(policies)s::jsonb, spec_hash = %(spec_hash)s, priority = %(priority)s,
    max_attempts = %(max_attempts)s, visibility_us = %(visibility_us)s,
    next_fire_at = CASE WHEN schedule = %(schedule)s::jsonb THEN next_fire_at
                        ELSE %(next_fire_at)s END,
    updated_at = :now,
    max_concurrency = %(max_concurrency)s, overlap = %(overlap)s, max_buffer = %(max_buffer)s,
    cancel_grace_us = %(cancel_grace_us)s, start_deadline_us = %(start_deadline_us)s,
    -- the run budget restarts only when the bounds changed (every SET sees the old row)
    remaining_runs = CASE WHEN bounds = %(bounds)s::jsonb THEN remaining_runs
                          ELSE %(remaining_runs)s END,
    bounds = %(bounds)s::jsonb
WHERE id = %(id)s
RETURNING *

-- name: bump_jobs_version
INSERT INTO meta (key, value) VALUES ('jobs_version', '1')
ON CONFLICT (key) DO UPDATE SET value = (meta.value::bigint + 1)::text

-- name: set_paused
UPDATE jobs SET paused = %(paused)s, updated_at = :now
WHERE namespace = %(namespace)s AND name = %(name)s
RETURNING *

-- name: due_jobs
SELECT * FROM jobs
WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at <= %(horizon)s
ORDER BY next_fire_at
LIMIT %(limit)s

-- name: fence_check
-- FOR SHARE: a takeover (acquire_lease updates this row) waits until this enqueue
-- commits or rolls back, and an enqueue that waited behind a takeover re-reads the
-- row and finds the new holder/epoch: the fence and the writes are one atomic step.
SELECT epoch FROM leases
WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > :now
FOR SHARE

-- name: enqueue_batch
-- One statement for a whole batch: CAS every cursor, then insert the firings and
-- missed-range events of exactly the jobs whose cursor moved (joined on `moved`).
WITH adv AS (
    SELECT * FROM unnest(%(a_job)s::bigint[], %(a_expected)s::timestamptz[],
                         %(a_new)s::timestamptz[], %(a_last)s::timestamptz[],
                         %(a_missed)s::bigint[])
        AS a (job_id, expected, new_next, last_fired, missed)
),
moved AS (
    UPDATE jobs j
    SET next_fire_at = a.new_next,
        last_fired_at = coalesce(a.last_fired, j.last_fired_at),
        missed_total = j.missed_total + a.missed
    FROM adv a
    WHERE j.id = a.job_id AND j.next_fire_at = a.expected AND NOT j.paused
    RETURNING j.id, j.namespace, j.name, j.task, j.payload, j.priority, j.max_attempts,
              j.visibility_us, j.shard
),
ins AS (
    INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                         vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                         enqueued_epoch, note, shard)
    SELECT m.id, m.namespace, m.name, m.task, m.payload, f.at, f.at,
           f.at + (%(base_latency_us)s / m.priority) * interval '1 microsecond',
           'queued', m.max_attempts, m.priority, m.visibility_us, :now, %(epoch)s, f.note, m.shard
    FROM unnest(%(f_job)s::bigint[], %(f_at)s::timestamptz[], %(f_note)s::text[])
             WITH ORDINALITY AS f (job_id, at, note, ord)
    JOIN moved m ON m.id = f.job_id
    ORDER BY f.ord
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING id, job_id
),
ev AS (
    INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
    SELECT m.id, :now, 'missed', e.first_at, e.last_at, e.count, e.exact, e.detail
    FROM unnest(%(e_job)s::bigint[], %(e_first)s::timestamptz[], %(e_last)s::timestamptz[],
                %(e_count)s::bigint[], %(e_exact)s::boolean[], %(e_detail)s::text[])
             WITH ORDINALITY AS e (job_id, first_at, last_at, count, exact, detail, ord)
    JOIN moved m ON m.id = e.job_id
    ORDER BY e.ord
)
SELECT 'moved' AS kind, id, id AS job_id FROM moved
UNION ALL
SELECT 'inserted', id, job_id FROM ins

-- name: insert_now_firing
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                     vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                     enqueued_epoch, note, shard)
SELECT id, namespace, name, task, payload, :now, :now,
       :now + (%(base_latency_us)s / priority) * interval '1 microsecond',
       'queued', max_attempts, priority, visibility_us, :now, NULL, NULL, shard
FROM jobs WHERE id = %(job_id)s
RETURNING *

-- name: notify_work
SELECT pg_notify('cronwheel_work', '')

-- name: claim
-- SKIP LOCKED: concurrent claimers pass over each other's rows instead of queueing
-- behind them; the MATERIALIZED pick runs once, so LIMIT bounds the batch.
WITH picked AS MATERIALIZED (
    SELECT id FROM firings
    WHERE state = 'queued' AND due_at <= :now + %(prefetch)s::interval
      AND task = ANY (%(tasks)s::text[])
    ORDER BY vdeadline
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE firings f
SET state = 'running',
    attempt = f.attempt + 1,
    claim_token = replace(gen_random_uuid()::text, '-', ''),
    worker_id = %(worker_id)s,
    lease_until = :now + f.visibility_us * interval '1 microsecond',
    started_at = NULL,
    finished_at = NULL
FROM picked p, jobs j
WHERE f.id = p.id AND j.id = f.job_id
RETURNING f.*, j.policies AS job_policies

-- name: heartbeat
UPDATE firings f SET lease_until = :now + f.visibility_us * interval '1 microsecond'
FROM unnest(%(ids)s::bigint[], %(tokens)s::text[]) AS c (id, token)
WHERE f.id = c.id AND f.claim_token = c.token AND f.state = 'running'
RETURNING f.id

-- name: cancel_requested
SELECT id FROM firings WHERE id = ANY (%(ids)s::bigint[]) AND cancel_requested_at IS NOT NULL

-- name: complete_batch
-- Outcomes for a batch of claims, each a CAS on (state running, claim token).
-- A failure with retry_at and attempts left goes back to queued, else dead; every
-- failure records its attempt.
WITH c AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::text[], %(ok)s::boolean[],
                         %(started)s::timestamptz[], %(finished)s::timestamptz[],
                         %(errors)s::text[], %(retry_at)s::timestamptz[])
        AS c (id, token, ok, started_at, finished_at, error, retry_at)
),
upd AS (
    UPDATE firings f
    SET state = CASE WHEN c.ok THEN 'succeeded'
                     WHEN c.retry_at IS NOT NULL AND f.attempt < f.max_attempts THEN 'queued'
                     ELSE 'dead' END,
        vdeadline = CASE WHEN NOT c.ok AND c.retry_at IS NOT NULL AND f.attempt < f.max_attempts
                         THEN c.retry_at + (f.vdeadline - f.due_at) ELSE f.vdeadline END,
        due_at = CASE WHEN NOT c.ok AND c.retry_at IS NOT NULL AND f.attempt < f.max_attempts
                      THEN c.retry_at ELSE f.due_at END,
        finished_at = CASE WHEN NOT c.ok AND c.retry_at IS NOT NULL AND f.attempt < f.max_attempts
                           THEN NULL ELSE c.finished_at END,
        started_at = c.started_at,
        claim_token = CASE WHEN c.ok THEN f.claim_token ELSE NULL END,
        lease_until = NULL,
        error = CASE WHEN c.ok THEN NULL ELSE c.error END
    FROM c
    WHERE f.id = c.id AND f.claim_token = c.token AND f.state = 'running'
    RETURNING f.id, f.attempt, f.worker_id, c.ok, c.started_at, c.finished_at, c.error
),
att AS (
    INSERT INTO firing_attempts (firing_id, attempt, worker_id, started_at, finished_at,
                                 outcome, error)
    SELECT id, attempt, worker_id, started_at, finished_at, 'failed', error
    FROM upd WHERE NOT ok
    ON CONFLICT (firing_id, attempt) DO UPDATE
    SET worker_id = excluded.worker_id, started_at = excluded.started_at,
        finished_at = excluded.finished_at, outcome = excluded.outcome, error = excluded.error
)
SELECT id FROM upd

-- name: requeue_expired
WITH expired AS MATERIALIZED (
    SELECT id FROM firings
    WHERE state = 'running' AND lease_until < :now
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
upd AS (
    UPDATE firings f
    SET state = CASE WHEN f.attempt >= f.max_attempts THEN 'dead' ELSE 'queued' END,
        finished_at = CASE WHEN f.attempt >= f.max_attempts THEN :now ELSE NULL END,
        vdeadline = :now + (f.vdeadline - f.due_at),
        due_at = CASE WHEN f.attempt >= f.max_attempts THEN f.due_at ELSE :now END,
        claim_token = NULL, lease_until = NULL,
        error = 'lease expired: worker ' || coalesce(f.worker_id, '?') || ' stopped heartbeating'
    FROM expired e
    WHERE f.id = e.id
    RETURNING f.id, f.attempt, f.worker_id, f.started_at
),
att AS (
    INSERT INTO firing_attempts (firing_id, attempt, worker_id, started_at, finished_at,
                                 outcome, error)
    SELECT id, attempt, worker_id, started_at, :now, 'lease_expired', 'lease expired'
    FROM upd
    ON CONFLICT (firing_id, attempt) DO UPDATE
    SET worker_id = excluded.worker_id, started_at = excluded.started_at,
        finished_at = excluded.finished_at, outcome = excluded.outcome, error = excluded.error
)
SELECT count(*) AS n FROM upd

-- name: acquire_lease
-- Atomic take-or-renew: ON CONFLICT DO UPDATE locks the row (waiting for an enqueue
-- holding it FOR SHARE) and re-checks the WHERE against the committed row.
INSERT INTO leases (name, holder, epoch, expires_at, acquired_at)
VALUES (%(name)s, %(holder)s, 1, :now + %(ttl)s::interval, :now)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                 THEN leases.epoch ELSE leases.epoch + 1 END,
    acquired_at = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                       THEN leases.acquired_at ELSE :now END,
    expires_at = excluded.expires_at
WHERE leases.expires_at <= :now OR leases.holder = excluded.holder
RETURNING *

-- name: release_lease
UPDATE leases SET expires_at = :now
WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s

-- name: cancel_queued
UPDATE firings SET state = 'cancelled', finished_at = :now, claim_token = NULL, lease_until = NULL
WHERE id = %(id)s AND state IN ('scheduled', 'queued')
RETURNING *

-- name: cancel_running
UPDATE firings SET cancel_requested_at = coalesce(cancel_requested_at, :now)
WHERE id = %(id)s AND state = 'running'
RETURNING *

-- name: redrive
UPDATE firings
SET state = 'queued', due_at = :now, vdeadline = :now + (vdeadline - due_at),
    max_attempts = attempt + (SELECT max_attempts FROM jobs WHERE jobs.id = firings.job_id),
    finished_at = NULL, claim_token = NULL, lease_until = NULL
WHERE id = %(id)s AND state = 'dead'
RETURNING *

-- name: register_node
INSERT INTO nodes (id, kind, hostname, pid, started_at, heartbeat_at, wake_addr, info)
VALUES (%(id)s, %(kind)s, %(hostname)s, %(pid)s, %(started_at)s, :now, %(wake_addr)s,
        %(info)s::jsonb)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = excluded.heartbeat_at, wake_addr = excluded.wake_addr, info = excluded.info

-- name: heartbeat_node
UPDATE nodes SET heartbeat_at = :now WHERE id = %(id)s

-- name: list_nodes_alive
SELECT * FROM nodes WHERE heartbeat_at >= :now - %(within)s::interval ORDER BY kind, id

-- name: status_counts
SELECT 'queued' AS state, count(*) AS n FROM firings WHERE state = 'queued'
UNION ALL
SELECT 'running', count(*) FROM firings WHERE state = 'running'
UNION ALL
SELECT state, count(*) FROM firings
WHERE finished_at IS NOT NULL AND finished_at >= :now - interval '1 hour'
GROUP BY state

-- name: status_jobs
SELECT count(*) AS n, count(*) FILTER (WHERE paused) AS p,
       (SELECT min(due_at) FROM firings WHERE state = 'queued') AS oldest,
       :now AS now
FROM jobs

-- name: recent_lateness
SELECT extract(epoch FROM started_at - scheduled_for) * 1000 AS lateness_ms FROM firings
WHERE finished_at IS NOT NULL AND finished_at >= :now - interval '1 hour' AND state = 'succeeded'
ORDER BY finished_at DESC
LIMIT %(limit)s
