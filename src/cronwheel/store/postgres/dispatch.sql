-- PostgreSQL: the writes that create work (store/postgres/dispatch.py) and the reaper.
-- Parameters are psycopg's %(name)s; `:now` is the store's clock (see core.sql).
-- Each block: what it does; [the index it relies on].

-- name: now
-- The store's clock.
SELECT :now AS now

-- name: notify_work
-- Wakes the workers listening on cronwheel_work (delivered at commit).
SELECT pg_notify('cronwheel_work', '')

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
    RETURNING id, namespace
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
SELECT i.id, i.namespace, (SELECT pg_notify('cronwheel_work', '')::text) AS notified FROM ins i

-- name: enqueue_now_one
-- An immediate enqueue in one statement (schema.sql migration_25): the one-shot job
-- (fired now), its namespace's fair clock moved on by this firing's quantum (locked
-- until commit: the clock's upsert computes the new value, the greater of the stored
-- one and the due instant plus the quantum, so the firing's virtual deadline is that
-- start plus its base latency, as domain.policies.fair_deadline), the firing due now,
-- its namespace's firings_per_minute charged (after the inserts, as the leader's
-- enqueue: one lock order), the workers woken at commit. %(base_us)s and
-- %(quantum_us)s are the priority's steps (domain.policies.fair_steps); %(refuse)s:
-- over the rate, CW001 (autocommitted: nothing stays), else the charge is answered.
WITH job AS (
    INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                      max_attempts, visibility_us, paused, next_fire_at, last_fired_at,
                      created_at, updated_at, shard, max_concurrency, overlap, max_buffer,
                      cancel_grace_us, start_deadline_us, bounds, remaining_runs,
                      trace_context)
    VALUES (%(namespace)s, %(name)s, %(task)s, %(schedule)s::jsonb, %(payload)s::json,
            %(policies)s::jsonb, %(spec_hash)s, %(priority)s, %(max_attempts)s,
            %(visibility_us)s, %(paused)s, NULL, :now, :now, :now, %(shard)s,
            %(max_concurrency)s, %(overlap)s, %(max_buffer)s, %(cancel_grace_us)s,
            %(start_deadline_us)s, %(bounds)s::jsonb, %(remaining_runs)s,
            %(trace_context)s)
    RETURNING *
),
due AS (
    SELECT (extract(epoch FROM :now) * 1000000)::bigint AS us
),
clock AS (
    INSERT INTO fair_clocks AS c (namespace, vclock)
    SELECT job.namespace, due.us + %(quantum_us)s::bigint FROM job, due
    ON CONFLICT (namespace) DO UPDATE
    SET vclock = greatest(c.vclock, excluded.vclock - %(quantum_us)s::bigint)
                 + %(quantum_us)s::bigint
    RETURNING c.vclock
),
ins AS (
    INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                         vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                         enqueued_epoch, note, shard)
    SELECT job.id, job.namespace, job.name, job.task, job.payload, :now, :now,
           timestamptz 'epoch'
           + (clock.vclock - %(quantum_us)s::bigint + %(base_us)s::bigint)
             * interval '1 microsecond',
           'queued', job.max_attempts, job.priority, job.visibility_us, :now, NULL, NULL,
           job.shard
    FROM job, clock
    RETURNING *
)
SELECT ins.*, ch.o_used AS charged, ch.o_limit AS charge_limit,
       ch.o_window_start AS charge_window, ch.o_now_us AS charge_now_us,
       (SELECT pg_notify('cronwheel_work', '')::text) AS notified
FROM ins
CROSS JOIN LATERAL cronwheel_charge_firings(ins.namespace, 1, %(default_rate)s::bigint,
                                            %(refuse)s::boolean, :now) ch

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
-- add_firings step 2: the firings (ON CONFLICT: an instant the job has is a duplicate),
-- the clock written back, the wake-up. [firings (job_id, scheduled_for)]
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

-- name: requeue_expired
-- The reaper, one statement; each part is bounded by `limit` and passes over rows
-- another transaction holds (SKIP LOCKED: it never waits, so it is never part of a
-- lock cycle, and a later round picks the rows up).
-- 1. Held or running firings whose claim lease expired. Held (CLAIMED), never
--    started: back to QUEUED as they were, the attempt given back. Running and asked
--    to stop: CANCELLED, never run again. Otherwise back to QUEUED, or DEAD when their
--    attempts are used up; a running attempt is recorded as expired.
-- 2. RUNNING firings whose cancellation was requested longer than their job's
--    cancel grace ago: CANCELLED, the lease revoked (a late result is rejected).
-- 3. QUEUED firings past their job's start deadline: MISSED.
WITH expired AS MATERIALIZED (
    SELECT id, state, cancel_requested_at IS NOT NULL AS stop, claimed_at FROM firings
    WHERE state IN ('claimed', 'running') AND lease_until < :now
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
upd AS (
    UPDATE firings f
    SET state = CASE WHEN e.state = 'claimed' THEN 'queued'
                     WHEN e.stop THEN 'cancelled'
                     WHEN f.attempt >= f.max_attempts THEN 'dead' ELSE 'queued' END,
        attempt = CASE WHEN e.state = 'claimed' THEN f.attempt - 1 ELSE f.attempt END,
        finished_at = CASE WHEN e.state = 'running' AND (e.stop OR f.attempt >= f.max_attempts)
                           THEN :now END,
        vdeadline = CASE WHEN e.state = 'claimed' THEN f.vdeadline
                         ELSE :now + (f.vdeadline - f.due_at) END,
        due_at = CASE WHEN e.state = 'claimed' OR e.stop OR f.attempt >= f.max_attempts
                      THEN f.due_at ELSE :now END,
        claim_token = NULL, lease_until = NULL, claimed_at = NULL,
        error = CASE WHEN e.state = 'claimed' THEN f.error
                     ELSE 'lease expired: worker ' || coalesce(f.worker_id, '?')
                          || ' stopped heartbeating' END,
        reason = CASE WHEN e.state = 'running' AND e.stop
                      THEN coalesce(f.reason, 'cancel requested; the worker stopped heartbeating')
                      ELSE f.reason END
    FROM expired e
    WHERE f.id = e.id
    RETURNING f.id, e.state AS held, f.attempt, f.worker_id, e.claimed_at, f.started_at
),
att AS (
    INSERT INTO firing_attempts (firing_id, attempt, worker_id, claimed_at, started_at,
                                 finished_at, outcome, error)
    SELECT id, attempt, worker_id, claimed_at, started_at, :now, 'lease_expired',
           'lease expired'
    FROM upd WHERE held = 'running' -- a held firing never ran: no attempt
    ON CONFLICT (firing_id, attempt) DO UPDATE
    SET worker_id = excluded.worker_id, claimed_at = excluded.claimed_at,
        started_at = excluded.started_at, finished_at = excluded.finished_at,
        outcome = excluded.outcome, error = excluded.error
),
graced AS MATERIALIZED (
    SELECT f.id FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state IN ('claimed', 'running') AND f.state = 'running'
      AND f.cancel_requested_at IS NOT NULL
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

-- name: bulk_jobs_table
-- Bulk registration step 1: a temporary table (dropped at commit) shaped like the
-- new rows of jobs, with each item's place (`ord`), for COPY.
CREATE TEMPORARY TABLE bulk_jobs ON COMMIT DROP AS
SELECT 0::integer AS ord, namespace, name, task, schedule, payload, policies, spec_hash,
       priority, max_attempts, visibility_us, paused, shard, max_concurrency, overlap,
       max_buffer, cancel_grace_us, start_deadline_us, bounds, remaining_runs, trace_context,
       next_fire_at, last_fired_at
FROM jobs WITH NO DATA

-- name: bulk_jobs_copy
-- Bulk registration step 2: the items, by COPY (the columns of bulk_jobs_table, in
-- order: store/postgres/dispatch.py writes its rows in this order).
COPY bulk_jobs (ord, namespace, name, task, schedule, payload, policies, spec_hash, priority,
                max_attempts, visibility_us, paused, shard, max_concurrency, overlap,
                max_buffer, cancel_grace_us, start_deadline_us, bounds, remaining_runs,
                trace_context, next_fire_at, last_fired_at) FROM STDIN

-- name: bulk_jobs_insert
-- Bulk registration step 3: the jobs, in the items' order; a name its namespace has
-- (or that an earlier item of the batch took) is passed over, so the caller reports it
-- as the item's conflict. [jobs (namespace, name) unique]
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, shard, max_concurrency, overlap,
                  max_buffer, cancel_grace_us, start_deadline_us, bounds, remaining_runs,
                  trace_context, next_fire_at, last_fired_at, created_at, updated_at)
SELECT namespace, name, task, schedule, payload, policies, spec_hash, priority,
       max_attempts, visibility_us, paused, shard, max_concurrency, overlap, max_buffer,
       cancel_grace_us, start_deadline_us, bounds, remaining_runs, trace_context,
       next_fire_at, last_fired_at, :now, :now
FROM bulk_jobs ORDER BY ord
ON CONFLICT (namespace, name) DO NOTHING
RETURNING id, namespace, name, priority, created_at

-- name: bulk_jobs_drop
-- Bulk registration step 4: the temporary table dropped now, not at commit: a caller's
-- transaction (transactional enqueue) may hold another batch before it commits.
DROP TABLE bulk_jobs

-- name: bulk_lock_clocks
-- enqueue_now_batch: the fair clocks of the batch's namespaces, created if missing and
-- locked, in name order (as enqueue_advance locks them).
INSERT INTO fair_clocks AS c (namespace, vclock)
SELECT DISTINCT n, 0 FROM unnest(%(ns)s::text[]) AS n ORDER BY n
ON CONFLICT (namespace) DO UPDATE SET vclock = c.vclock
RETURNING c.namespace, c.vclock

-- name: bulk_now_firings
-- enqueue_now_batch: each new one-shot job's firing, due now (vdeadline from the fair
-- clocks, computed by the caller), the clocks written back, one wake-up for the batch
-- (the uncorrelated pg_notify subquery runs once; delivered at commit).
WITH f AS (
    SELECT * FROM unnest(%(f_job)s::bigint[], %(f_vd)s::timestamptz[])
        WITH ORDINALITY AS f (job_id, vd, ord)
),
ins AS (
    INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                         vdeadline, state, max_attempts, priority, visibility_us, enqueued_at,
                         enqueued_epoch, note, shard)
    SELECT j.id, j.namespace, j.name, j.task, j.payload, %(at)s, %(at)s, f.vd,
           'queued', j.max_attempts, j.priority, j.visibility_us, :now, NULL, NULL, j.shard
    FROM f JOIN jobs j ON j.id = f.job_id
    ORDER BY f.ord
    RETURNING *
),
clk AS (
    UPDATE fair_clocks c SET vclock = greatest(c.vclock, x.vclock)
    FROM unnest(%(c_ns)s::text[], %(c_clock)s::bigint[]) AS x (namespace, vclock)
    WHERE c.namespace = x.namespace
)
SELECT ins.*, (SELECT pg_notify('cronwheel_work', '')::text) AS notified FROM ins
