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
-- every pause and resume is recorded as a job event (explain)
WITH j AS (
    UPDATE jobs SET paused = %(paused)s, updated_at = :now
    WHERE namespace = %(namespace)s AND name = %(name)s
    RETURNING *
),
ev AS (
    INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
    SELECT id, :now, %(kind)s, NULL, NULL, 0, true, NULL FROM j
)
SELECT * FROM j

-- name: due_jobs
-- keyset paging on (next_fire_at, id): a page boundary never splits a herd. Schedule,
-- policies and bounds come back as text: the codec's caches are keyed by that text, so
-- a herd sharing a few schedules costs no JSON parsing (nor re-serializing) per job.
SELECT id, namespace, name, task, schedule::text AS schedule, payload,
       policies::text AS policies, bounds::text AS bounds, paused, next_fire_at,
       last_fired_at, missed_total, remaining_runs, created_at, updated_at
FROM jobs
WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at <= %(horizon)s
  AND next_fire_at >= %(after_at)s AND (next_fire_at > %(after_at)s OR id > %(after_id)s)
ORDER BY next_fire_at, id
LIMIT %(limit)s

-- name: fence_check
-- FOR SHARE: a takeover (acquire_lease updates this row) waits until this enqueue
-- commits or rolls back, and an enqueue that waited behind a takeover re-reads the
-- row and finds the new holder/epoch: the fence and the writes are one atomic step.
SELECT epoch FROM leases
WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > :now
FOR SHARE

-- name: enqueue_advance
-- Step 1 of an enqueue round: CAS every cursor (the run limit shrinks by the number of
-- firings, and the cursor is cleared when it is used up), and lock the fair clocks of
-- the namespaces that get firings. The job rows are locked in id order first, the
-- order claimers lock them in. ON CONFLICT DO UPDATE creates a missing clock row and
-- locks and returns the latest committed one in the same step (READ COMMITTED).
WITH adv AS (
    SELECT * FROM json_to_recordset(%(adv)s::json)
        AS a (job_id bigint, expected timestamptz, new_next timestamptz,
              last_fired timestamptz, missed bigint, runs integer)
),
locked AS MATERIALIZED (
    SELECT id FROM jobs WHERE id IN (SELECT job_id FROM adv) ORDER BY id FOR NO KEY UPDATE
),
moved AS (
    UPDATE jobs j
    SET next_fire_at = CASE WHEN j.remaining_runs IS NOT NULL AND j.remaining_runs - a.runs <= 0
                            THEN NULL ELSE a.new_next END,
        remaining_runs = CASE WHEN j.remaining_runs IS NULL THEN NULL
                              ELSE greatest(j.remaining_runs - a.runs, 0) END,
        last_fired_at = coalesce(a.last_fired, j.last_fired_at),
        missed_total = j.missed_total + a.missed
    FROM adv a
    -- `locked` is referenced as an uncorrelated subquery (an InitPlan: run once, before
    -- the first row is updated), not joined: the planner, guessing 100 rows for each
    -- side, joined them by a nested loop — 1,000,000 comparisons for a batch of 1,000
    -- jobs, 450 ms per batch, which capped a leader at ~2,000 cron jobs/s
    WHERE j.id = a.job_id AND j.next_fire_at = a.expected AND NOT j.paused
      AND (SELECT count(*) FROM locked) >= 0
    RETURNING j.id, j.namespace, j.priority, a.runs
),
clocks AS (
    INSERT INTO fair_clocks AS c (namespace, vclock)
    SELECT DISTINCT namespace, 0 FROM moved WHERE runs > 0 ORDER BY namespace
    ON CONFLICT (namespace) DO UPDATE SET vclock = c.vclock
    RETURNING c.namespace, c.vclock
)
SELECT m.id, m.namespace, m.priority, c.vclock
FROM moved m LEFT JOIN clocks c ON c.namespace = m.namespace

-- name: enqueue_insert
-- Step 2: the firings (vdeadline from the fair clocks, computed by the caller) and
-- missed-range events of the jobs whose cursor moved, and the clocks written back.
-- The uncorrelated pg_notify subquery is an InitPlan: it runs once, at the first
-- inserted row, and not at all when nothing was inserted (delivered at commit).
WITH f AS (
    SELECT * FROM json_to_recordset(%(firings)s::json)
        AS f (job_id bigint, at timestamptz, due timestamptz, vd timestamptz, note text,
              ord integer)
),
ins AS (
    INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                         vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                         enqueued_epoch, note, shard)
    SELECT j.id, j.namespace, j.name, j.task, j.payload, f.at, f.due, f.vd,
           'queued', j.max_attempts, j.priority, j.visibility_us, :now, %(epoch)s, f.note, j.shard
    FROM f JOIN jobs j ON j.id = f.job_id
    ORDER BY f.ord
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING id
),
ev AS (
    INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
    SELECT e.job_id, :now, 'missed', e.first_at, e.last_at, e.count, e.exact, e.detail
    FROM json_to_recordset(%(events)s::json)
             AS e (job_id bigint, first_at timestamptz, last_at timestamptz, count bigint,
                   exact boolean, detail text, ord integer)
    ORDER BY e.ord
),
clk AS (
    UPDATE fair_clocks c SET vclock = greatest(c.vclock, x.vclock)
    FROM unnest(%(c_ns)s::text[], %(c_clock)s::bigint[]) AS x (namespace, vclock)
    WHERE c.namespace = x.namespace
)
SELECT i.id, (SELECT pg_notify('cronwheel_work', '')::text) AS notified FROM ins i

-- name: insert_now_job
-- enqueue_now step 1: the one-shot job (fired now) and its namespace's fair clock,
-- locked (see enqueue_advance); `now` is the instant its firing is due.
WITH job AS (
    INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                      max_attempts, visibility_us, paused, next_fire_at, last_fired_at,
                      created_at, updated_at, shard, max_concurrency, overlap, max_buffer,
                      cancel_grace_us, start_deadline_us, bounds, remaining_runs)
    VALUES (%(namespace)s, %(name)s, %(task)s, %(schedule)s::jsonb, %(payload)s::json,
            %(policies)s::jsonb, %(spec_hash)s, %(priority)s, %(max_attempts)s,
            %(visibility_us)s, %(paused)s, NULL, :now, :now, :now, %(shard)s,
            %(max_concurrency)s, %(overlap)s, %(max_buffer)s, %(cancel_grace_us)s,
            %(start_deadline_us)s, %(bounds)s::jsonb, %(remaining_runs)s)
    RETURNING id, namespace, priority, created_at
),
clock AS (
    INSERT INTO fair_clocks AS c (namespace, vclock)
    SELECT namespace, 0 FROM job
    ON CONFLICT (namespace) DO UPDATE SET vclock = c.vclock
    RETURNING c.vclock
)
SELECT job.id, job.namespace, job.priority, job.created_at AS now, clock.vclock
FROM job, clock

-- name: insert_now_firing
-- enqueue_now step 2: the firing, the clock written back, and (enqueue_now_once) the
-- idempotency key; the wake-up is sent at commit.
WITH ins AS (
    INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                         vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                         enqueued_epoch, note, shard)
    SELECT id, namespace, name, task, payload, %(at)s, %(at)s, %(vdeadline)s,
           'queued', max_attempts, priority, visibility_us, :now, NULL, NULL, shard
    FROM jobs WHERE id = %(job_id)s
    RETURNING *
),
clk AS (
    UPDATE fair_clocks SET vclock = greatest(vclock, %(vclock)s)
    WHERE namespace = %(namespace)s
),
idem AS (
    INSERT INTO idempotency_keys (namespace, key_hash, request_hash, firing_id, created_at)
    SELECT %(namespace)s, %(key_hash)s::text, %(request_hash)s, id, :now
    FROM ins WHERE %(key_hash)s::text IS NOT NULL
)
SELECT ins.*, (SELECT pg_notify('cronwheel_work', '')::text) AS notified FROM ins

-- name: idempotency_lock
-- Serializes requests carrying one idempotency key (released at commit); the lookup
-- that follows, a new statement, sees whatever the previous holder committed.
SELECT pg_advisory_xact_lock(
    hashtextextended('cronwheel.idempotency:' || %(namespace)s || '/' || %(key_hash)s, 0))

-- name: find_idempotency_key
SELECT k.request_hash, f.*
FROM idempotency_keys k JOIN firings f ON f.id = k.firing_id
WHERE k.namespace = %(namespace)s AND k.key_hash = %(key_hash)s

-- name: add_firings_job
-- add_firings step 1: the job (FOR KEY SHARE: it cannot be deleted under us, and
-- claimers and the leader, which lock it FOR NO KEY UPDATE, are not blocked) and its
-- namespace's fair clock, locked (see enqueue_advance).
WITH j AS (
    SELECT id, namespace, priority FROM jobs
    WHERE namespace = %(namespace)s AND name = %(name)s
    FOR KEY SHARE
),
clock AS (
    INSERT INTO fair_clocks AS c (namespace, vclock)
    SELECT namespace, 0 FROM j
    ON CONFLICT (namespace) DO UPDATE SET vclock = c.vclock
    RETURNING c.vclock
)
SELECT j.id, j.namespace, j.priority, clock.vclock, :now AS now FROM j, clock

-- name: add_firings
WITH f AS (
    SELECT * FROM unnest(%(f_at)s::timestamptz[], %(f_due)s::timestamptz[],
                         %(f_vd)s::timestamptz[])
        WITH ORDINALITY AS f (at, due, vd, ord)
),
ins AS (
    INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                         vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                         enqueued_epoch, note, shard, overlap_override)
    SELECT j.id, j.namespace, j.name, j.task, j.payload, f.at, f.due, f.vd,
           'queued', j.max_attempts, j.priority, j.visibility_us, :now, NULL, %(note)s, j.shard,
           %(overlap)s
    FROM f CROSS JOIN jobs j
    WHERE j.id = %(job_id)s
    ORDER BY f.ord
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING *
),
clk AS (
    UPDATE fair_clocks SET vclock = greatest(vclock, %(vclock)s)
    WHERE namespace = %(namespace)s
)
SELECT ins.*, (SELECT pg_notify('cronwheel_work', '')::text) AS notified FROM ins

-- name: notify_work
SELECT pg_notify('cronwheel_work', '')

-- name: claim_fast
-- The claim in one statement, taken when no candidate needs a policy decision (no
-- capped job, no overlap override, no passed start deadline): candidates in virtual
-- deadline order (cronwheel_claim_scan: locked with SKIP LOCKED, so concurrent
-- claimers pass over each other's rows), the first `limit` of them claimed. Otherwise
-- it claims nothing, `simple` is false, and the caller runs the planned claim
-- (claim_candidates ... claim_apply).
WITH cand AS MATERIALIZED (
    SELECT s.id, s.vdeadline,
           (s.overlap_override IS NOT NULL
            OR (s.max_concurrency IS NOT NULL AND s.overlap <> 'allow')
            OR (s.start_deadline_us IS NOT NULL
                AND s.due_at + s.start_deadline_us * interval '1 microsecond' < :now))
               AS planned
    FROM cronwheel_claim_scan(%(tasks)s::text[], :now + %(prefetch)s::interval, %(scan)s) s
),
simple AS (
    SELECT NOT coalesce(bool_or(planned), false) AS ok FROM cand
),
upd AS (
    UPDATE firings f
    SET state = 'running',
        attempt = f.attempt + 1,
        claim_token = replace(gen_random_uuid()::text, '-', ''),
        worker_id = %(worker_id)s,
        lease_until = :now + f.visibility_us * interval '1 microsecond',
        started_at = NULL,
        finished_at = NULL
    FROM jobs j
    WHERE f.id = ANY (ARRAY(SELECT c.id FROM cand c WHERE (SELECT ok FROM simple)
                            ORDER BY c.vdeadline LIMIT %(limit)s))
      AND j.id = f.job_id
    RETURNING f.*, j.policies::text AS job_policies
)
SELECT s.ok AS simple, u.* FROM simple s LEFT JOIN upd u ON true

-- name: claim_candidates
-- The planned claim (one transaction), step 1: candidates, locked as in claim_fast,
-- with what store/claiming.py needs to know about each.
SELECT s.id, s.job_id, s.overlap_override, s.max_concurrency, s.overlap, s.max_buffer,
       (s.start_deadline_us IS NOT NULL
        AND s.due_at + s.start_deadline_us * interval '1 microsecond' < :now) AS deadline_passed,
       s.due_at > :now AS early
FROM cronwheel_claim_scan(%(tasks)s::text[], :now + %(prefetch)s::interval, %(scan)s) s
ORDER BY s.vdeadline

-- name: claim_lock_jobs
-- Step 2: the capped jobs among them, locked in id order. Every claimer deciding for a
-- job holds this lock, so their decisions (and the RUNNING count they rest on) are
-- serialized. NO KEY UPDATE: the FOR KEY SHARE that inserting a firing takes on its
-- job is not blocked.
SELECT id FROM jobs WHERE id = ANY (%(jobs)s::bigint[]) ORDER BY id FOR NO KEY UPDATE

-- name: claim_facts
-- Step 3, a new statement and so (READ COMMITTED) a snapshot that includes the claims
-- committed by the claimers waited for in step 2: per job, its RUNNING count and its
-- due QUEUED firings oldest first, those held by other claimers skipped (waiting for
-- them could deadlock: they may be waiting for our job lock).
WITH due AS MATERIALIZED (
    -- job by job (LATERAL): an index lookup per job. As one scan with job_id = ANY, the
    -- planner — with statistics that had not seen a burst — walked every queued firing
    -- and filtered them (50,000 rows for 64 jobs, ~75 ms per claim: the bound on a
    -- minute's burst of cron jobs)
    SELECT d.id, d.job_id, d.scheduled_for
    FROM unnest(%(jobs)s::bigint[]) AS j (id)
    CROSS JOIN LATERAL (
        SELECT f.id, f.job_id, f.scheduled_for FROM firings f
        WHERE f.job_id = j.id AND f.state = 'queued' AND f.due_at <= :now
        FOR UPDATE OF f SKIP LOCKED
    ) d
),
run AS (
    SELECT job_id, count(*) AS n FROM firings
    WHERE job_id = ANY (%(jobs)s::bigint[]) AND state = 'running'
    GROUP BY job_id
)
SELECT j.id AS job_id, coalesce(r.n, 0) AS running,
       coalesce((SELECT array_agg(d.id ORDER BY d.scheduled_for) FROM due d
                 WHERE d.job_id = j.id), '{}') AS due
FROM unnest(%(jobs)s::bigint[]) AS j (id) LEFT JOIN run r ON r.job_id = j.id

-- name: claim_apply
-- Step 4: the plan. Fates of unrun firings (skipped, missed); the RUNNING firings of
-- cancel_other jobs asked to stop and of terminate_other jobs revoked (locked in id
-- order; this may wait for a worker's heartbeat or completion, which take no job
-- locks); the chosen firings claimed. The parts touch disjoint rows.
WITH fate AS (
    UPDATE firings f
    SET state = x.state, reason = x.reason, finished_at = :now, claim_token = NULL,
        lease_until = NULL
    FROM unnest(%(fate_ids)s::bigint[], %(fate_states)s::text[], %(fate_reasons)s::text[])
        AS x (id, state, reason)
    WHERE f.id = x.id AND f.state = 'queued'
),
run AS MATERIALIZED (
    SELECT id, job_id FROM firings
    WHERE job_id = ANY (%(stop_jobs)s::bigint[]) AND state = 'running'
    ORDER BY id
    FOR UPDATE
),
cancel AS (
    UPDATE firings f
    SET cancel_requested_at = coalesce(f.cancel_requested_at, :now),
        reason = coalesce(f.reason, %(cancel_reason)s)
    FROM run r
    WHERE f.id = r.id AND f.state = 'running' AND r.job_id = ANY (%(cancel_jobs)s::bigint[])
),
term AS (
    UPDATE firings f
    SET state = 'cancelled', reason = %(terminate_reason)s, finished_at = :now,
        claim_token = NULL, lease_until = NULL,
        cancel_requested_at = coalesce(f.cancel_requested_at, :now)
    FROM run r
    WHERE f.id = r.id AND f.state = 'running' AND r.job_id = ANY (%(terminate_jobs)s::bigint[])
)
UPDATE firings f
SET state = 'running',
    attempt = f.attempt + 1,
    claim_token = replace(gen_random_uuid()::text, '-', ''),
    worker_id = %(worker_id)s,
    lease_until = :now + f.visibility_us * interval '1 microsecond',
    started_at = NULL,
    finished_at = NULL
FROM jobs j
WHERE f.id = ANY (%(claim_ids)s::bigint[]) AND f.state = 'queued' AND j.id = f.job_id
RETURNING f.*, j.policies::text AS job_policies

-- name: heartbeat
-- By primary key, the state test kept off the partial indexes (see complete_batch).
UPDATE firings f SET lease_until = :now + f.visibility_us * interval '1 microsecond'
FROM unnest(%(ids)s::bigint[], %(tokens)s::text[]) AS c (id, token)
WHERE f.id = ANY (%(ids)s::bigint[])
  AND f.id = c.id AND f.claim_token = c.token AND (f.state = 'running') IS NOT FALSE
RETURNING f.id

-- name: cancel_requested
SELECT id FROM firings WHERE id = ANY (%(ids)s::bigint[]) AND cancel_requested_at IS NOT NULL

-- name: complete_batch
-- Outcomes for a batch of claims, each a CAS on (state running, claim token).
-- A handler that stopped on a cancellation request ends CANCELLED; a failure with
-- retry_at and attempts left goes back to queued, else dead; every failure records
-- its attempt.
-- The batch is one JSON array of objects (params.complete_params): encoding it is one
-- C call in the worker, where eight parameter arrays cost ~20 µs per completion.
WITH c AS (
    SELECT * FROM json_to_recordset(%(batch)s::json)
        AS c (id bigint, token text, ok boolean, cancelled boolean, started_at timestamptz,
              finished_at timestamptz, error text, retry_at timestamptz)
),
upd AS (
    UPDATE firings f
    SET state = CASE WHEN c.cancelled THEN 'cancelled'
                     WHEN c.ok THEN 'succeeded'
                     WHEN c.retry_at IS NOT NULL AND f.attempt < f.max_attempts THEN 'queued'
                     ELSE 'dead' END,
        vdeadline = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                              AND f.attempt < f.max_attempts
                         THEN c.retry_at + (f.vdeadline - f.due_at) ELSE f.vdeadline END,
        due_at = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                           AND f.attempt < f.max_attempts
                      THEN c.retry_at ELSE f.due_at END,
        finished_at = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                                AND f.attempt < f.max_attempts
                           THEN NULL ELSE c.finished_at END,
        started_at = c.started_at,
        claim_token = CASE WHEN c.ok AND NOT c.cancelled THEN f.claim_token ELSE NULL END,
        lease_until = NULL,
        error = CASE WHEN c.ok AND NOT c.cancelled THEN NULL ELSE c.error END,
        reason = CASE WHEN c.cancelled THEN coalesce(f.reason, 'cancelled: the handler stopped')
                      ELSE f.reason END
    FROM c
    -- The rows are found by primary key, the ids passed again as an array. The state
    -- test is spelled so that it does not match the partial indexes on state: the
    -- planner otherwise chose to scan every RUNNING firing, cluster-wide (dead index
    -- entries included), for each batch. (state is NOT NULL: IS NOT FALSE is "=")
    WHERE f.id = ANY (ARRAY(SELECT c.id FROM c))
      AND f.id = c.id AND f.claim_token = c.token AND (f.state = 'running') IS NOT FALSE
    RETURNING f.id, f.attempt, f.worker_id, c.ok, c.cancelled, c.started_at, c.finished_at,
              c.error
),
att AS (
    INSERT INTO firing_attempts (firing_id, attempt, worker_id, started_at, finished_at,
                                 outcome, error)
    SELECT id, attempt, worker_id, started_at, finished_at, 'failed', error
    FROM upd WHERE NOT ok AND NOT cancelled
    ON CONFLICT (firing_id, attempt) DO UPDATE
    SET worker_id = excluded.worker_id, started_at = excluded.started_at,
        finished_at = excluded.finished_at, outcome = excluded.outcome, error = excluded.error
)
SELECT id FROM upd

-- name: requeue_expired
-- The reaper, one statement; each part is bounded by `limit` and passes over rows
-- another transaction holds (SKIP LOCKED: it never waits, so it is never part of a
-- lock cycle, and a later round picks the rows up).
-- 1. RUNNING firings whose claim lease expired: back to QUEUED, or DEAD when their
--    attempts are used up; the attempt is recorded as expired.
-- 2. RUNNING firings whose cancellation was requested longer than their job's
--    cancel grace ago: CANCELLED, the lease revoked (a late result is rejected).
-- 3. QUEUED firings past their job's start deadline: MISSED.
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
),
graced AS MATERIALIZED (
    SELECT f.id FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state = 'running' AND f.cancel_requested_at IS NOT NULL
      AND f.cancel_requested_at + j.cancel_grace_us * interval '1 microsecond' < :now
      AND f.id NOT IN (SELECT id FROM expired)
    LIMIT %(limit)s
    FOR UPDATE OF f SKIP LOCKED
),
revoked AS (
    UPDATE firings f
    SET state = 'cancelled', finished_at = :now, claim_token = NULL, lease_until = NULL,
        reason = 'cancel grace expired: lease revoked, a late result will be rejected'
    FROM graced g
    WHERE f.id = g.id AND f.state = 'running'
    RETURNING f.id
),
late AS MATERIALIZED (
    -- from the jobs that have a start deadline, not a walk of every queued firing once
    -- a second (schema: cronwheel_late_firings)
    SELECT id FROM cronwheel_late_firings(:now, %(limit)s) AS id
),
missed AS (
    UPDATE firings f
    SET state = 'missed', finished_at = :now,
        reason = 'start deadline passed before a worker could start it'
    -- by primary key; the state test spelled so that it cannot match a partial index
    -- (a bitmap scan of every queued firing otherwise; see complete_batch)
    WHERE f.id = ANY (ARRAY(SELECT id FROM late)) AND (f.state = 'queued') IS NOT FALSE
    RETURNING f.id
)
SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM revoked)
       + (SELECT count(*) FROM missed) AS n

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

-- name: next_due_at
-- (a firing held back by its job's cap, buffered_at set, is due already: not a hint)
SELECT min(due_at) AS d FROM firings
WHERE state = 'queued' AND buffered_at IS NULL AND due_at > :now

-- name: insert_token
INSERT INTO api_tokens (namespace, role, label, secret_hash, created_at)
VALUES (%(namespace)s, %(role)s, %(label)s, %(secret_hash)s, :now)
RETURNING *

-- name: revoke_token
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now)
WHERE id = %(id)s
RETURNING *

-- name: job_backlog
SELECT job_name, count(*) AS n FROM firings
WHERE namespace = %(namespace)s AND state IN ('queued', 'running')
GROUP BY job_name
ORDER BY n DESC, job_name
LIMIT %(limit)s

-- name: mark_buffered
-- Due firings kept waiting by their job's overlap policy: claim scans pass over them
-- while the job stays at its cap (see store/claiming.py, ClaimPlan.buffered).
UPDATE firings SET buffered_at = coalesce(buffered_at, :now)
WHERE id = ANY (%(ids)s::bigint[]) AND state = 'queued'
