-- PostgreSQL: the worker's side (store/postgres/claims.py). Parameters are psycopg's
-- %(name)s; `:now` is the store's clock (see core.sql). Each block: what it does;
-- [the index it relies on].

-- name: claim_fast
-- The claim in one statement, taken when no candidate needs a policy decision (no
-- capped job, no overlap override, no passed start deadline): cronwheel_claim_fast
-- (schema.sql migration_17: the statement, planned once per session), its firing rows
-- spread into columns. Otherwise it claims nothing, `simple` is false, and the caller
-- runs the planned claim (claim_candidates ... claim_apply).
-- `limited`: the namespaces whose own record limits their running quota, as JSON
-- (quota_running_limited's answer, read in the claim's snapshot: a claim with completions
-- checks the quota in its transaction without a round trip of its own).
SELECT c.simple, (c.f).*, c.job_policies, c.job_trace,
       (SELECT coalesce(json_object_agg(q.namespace, q.running), '{}')::text
        FROM quotas q WHERE q.running < %(unlimited)s) AS limited
FROM cronwheel_claim_fast(%(tasks)s::text[], %(prefetch)s::interval, %(scan)s::integer,
                          %(limit)s::integer, %(start)s::integer, %(worker_id)s::text,
                          :now) c

-- name: claim_candidates
-- The planned claim (one transaction), step 1: candidates, locked as in claim_fast,
-- with what store/claiming.py needs to know about each.
SELECT s.id, s.job_id, s.scheduled_for, s.overlap_override, s.max_concurrency, s.overlap,
       s.max_buffer,
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
    WHERE job_id = ANY (%(jobs)s::bigint[]) AND state IN ('claimed', 'running')
    GROUP BY job_id
)
SELECT j.id AS job_id, coalesce(r.n, 0) AS running,
       coalesce((SELECT array_agg(d.id ORDER BY d.scheduled_for) FROM due d
                 WHERE d.job_id = j.id), '{}') AS due,
       coalesce((SELECT array_agg(d.scheduled_for ORDER BY d.scheduled_for) FROM due d
                 WHERE d.job_id = j.id), '{}') AS due_at
FROM unnest(%(jobs)s::bigint[]) AS j (id) LEFT JOIN run r ON r.job_id = j.id

-- name: claim_fates
-- Step 4, the plan, as up to three statements on disjoint rows, each run only when
-- the plan has any of its part (a statement over firings is planned for every
-- partition it may touch, even for a part with no rows). The `_at` arrays are the
-- instants of the firings named (from the scan and the facts), which confine the
-- statement to their day partitions; NULL: every partition.
-- Fates of unrun firings (skipped, missed).
UPDATE firings f
SET state = x.state, reason = x.reason, finished_at = :now, claim_token = NULL,
    lease_until = NULL
FROM unnest(%(fate_ids)s::bigint[], %(fate_states)s::text[], %(fate_reasons)s::text[])
    AS x (id, state, reason)
WHERE f.id = ANY (%(fate_ids)s::bigint[]) AND (%(fate_at)s::timestamptz[] IS NULL OR f.scheduled_for = ANY (%(fate_at)s::timestamptz[]))
  AND f.id = x.id AND f.state = 'queued'

-- name: claim_stop
-- The RUNNING firings of cancel_other jobs asked to stop and of terminate_other jobs
-- revoked, locked in id order (this may wait for a worker's heartbeat or completion,
-- which take no job locks). Held firings may be in any partition.
WITH run AS MATERIALIZED (
    SELECT id, job_id FROM firings
    WHERE job_id = ANY (%(stop_jobs)s::bigint[]) AND state IN ('claimed', 'running')
    ORDER BY id
    FOR UPDATE
),
cancel AS (
    -- running: asked to stop; held (claimed), never started: cancelled at once
    UPDATE firings f
    SET state = CASE WHEN f.state = 'claimed' THEN 'cancelled' ELSE f.state END,
        finished_at = CASE WHEN f.state = 'claimed' THEN :now ELSE f.finished_at END,
        claim_token = CASE WHEN f.state = 'claimed' THEN NULL ELSE f.claim_token END,
        lease_until = CASE WHEN f.state = 'claimed' THEN NULL ELSE f.lease_until END,
        cancel_requested_at = coalesce(f.cancel_requested_at, :now),
        reason = coalesce(f.reason, %(cancel_reason)s)
    FROM run r
    WHERE f.id = r.id AND f.state IN ('claimed', 'running')
      AND r.job_id = ANY (%(cancel_jobs)s::bigint[])
)
UPDATE firings f
SET state = 'cancelled', reason = %(terminate_reason)s, finished_at = :now,
    claim_token = NULL, lease_until = NULL,
    cancel_requested_at = coalesce(f.cancel_requested_at, :now)
FROM run r
WHERE f.id = r.id AND f.state IN ('claimed', 'running')
  AND r.job_id = ANY (%(terminate_jobs)s::bigint[])

-- name: claim_take
-- The chosen firings claimed, in plan order (the first %(start)s due ones RUNNING, the
-- rest CLAIMED); each token carries its firing's instant (params.token_instant).
UPDATE firings f
SET state = CASE WHEN x.ord <= %(start)s AND f.due_at <= :now THEN 'running'
                 ELSE 'claimed' END,
    started_at = CASE WHEN x.ord <= %(start)s AND f.due_at <= :now THEN :now END,
    attempt = f.attempt + 1,
    claim_token = cronwheel_claim_token(f.scheduled_for),
    worker_id = %(worker_id)s,
    lease_until = :now + f.visibility_us * interval '1 microsecond',
    claimed_at = :now,
    finished_at = NULL,
    buffered_at = NULL  -- a retry of it is hinted again (next_due_at)
FROM jobs j, unnest(%(claim_ids)s::bigint[]) WITH ORDINALITY AS x (id, ord)
WHERE f.id = ANY (%(claim_ids)s::bigint[]) AND (%(claim_at)s::timestamptz[] IS NULL OR f.scheduled_for = ANY (%(claim_at)s::timestamptz[]))
  AND f.id = x.id AND f.state = 'queued' AND j.id = f.job_id
RETURNING f.*, j.policies::text AS job_policies, j.trace_context AS job_trace

-- name: mark_buffered
-- Due firings kept waiting by their job's overlap policy: claim scans pass over them
-- while the job stays at its cap (see store/claiming.py, ClaimPlan.buffered).
UPDATE firings f SET buffered_at = coalesce(f.buffered_at, :now)
WHERE f.id = ANY (%(ids)s::bigint[]) AND (%(at)s::timestamptz[] IS NULL OR f.scheduled_for = ANY (%(at)s::timestamptz[])) AND f.state = 'queued'

-- name: heartbeat
-- By primary key, the state test kept off the partial indexes (see complete_batch);
-- %(instants)s: the firings' partitions, from their claim tokens (see complete_batch).
-- The rows are locked in id order first (`lk`), the order every writer of a worker's
-- claims takes them in (start, completions): an UPDATE over a join takes its rows in
-- the join's order, and a heartbeat of a crowd's thousands of held claims deadlocked
-- with the starts of the same claims (PostgreSQL's 1 s deadlock timeout, then a retry).
WITH lk AS MATERIALIZED (
    SELECT f.id FROM firings f WHERE f.id = ANY (%(ids)s::bigint[]) AND (%(instants)s::timestamptz[] IS NULL OR f.scheduled_for = ANY (%(instants)s::timestamptz[]))
    ORDER BY f.id FOR NO KEY UPDATE
)
UPDATE firings f SET lease_until = :now + f.visibility_us * interval '1 microsecond'
FROM unnest(%(ids)s::bigint[], %(tokens)s::text[]) AS c (id, token)
WHERE f.id = ANY (ARRAY(SELECT id FROM lk)) AND (%(instants)s::timestamptz[] IS NULL OR f.scheduled_for = ANY (%(instants)s::timestamptz[]))
  AND f.id = c.id AND f.claim_token = c.token
  AND (f.state IN ('claimed', 'running')) IS NOT FALSE
RETURNING f.id

-- name: complete_batch
-- Outcomes for a batch of claims, each a CAS on (state running, claim token).
-- A handler that stopped on a cancellation request ends CANCELLED; a failure with
-- retry_at and attempts left goes back to queued, else dead; every failure records
-- its attempt.
-- The batch is one JSON array of objects (params.complete_params): encoding it is one
-- C call in the worker, where eight parameter arrays cost ~20 µs per completion.
-- %(instants)s: the firings' scheduled instants, read from their claim tokens
-- (params.token_instant), as a parameter: the statement is planned for the day
-- partitions they name. By id alone it is planned for every partition, a few hundred
-- microseconds each (an update by id: 13 ms with 41 partitions, 1 ms with them named).
-- NULL (a token without one) probes every partition.
WITH c AS (
    SELECT * FROM json_to_recordset(%(batch)s::json)
        AS c (id bigint, token text, ok boolean, cancelled boolean, started_at timestamptz,
              finished_at timestamptz, error text, retry_at timestamptz)
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
                              AND f.attempt < f.max_attempts AND f.cancel_requested_at IS NULL
                         THEN c.retry_at + (f.vdeadline - f.due_at) ELSE f.vdeadline END,
        due_at = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                           AND f.attempt < f.max_attempts AND f.cancel_requested_at IS NULL
                      THEN c.retry_at ELSE f.due_at END,
        finished_at = CASE WHEN NOT c.cancelled AND NOT c.ok AND c.retry_at IS NOT NULL
                                AND f.attempt < f.max_attempts AND f.cancel_requested_at IS NULL
                           THEN NULL ELSE c.finished_at END,
        started_at = c.started_at,
        claim_token = CASE WHEN c.ok AND NOT c.cancelled THEN f.claim_token ELSE NULL END,
        lease_until = NULL,
        error = CASE WHEN c.ok AND NOT c.cancelled THEN NULL ELSE c.error END,
        reason = CASE WHEN c.cancelled THEN coalesce(f.reason, 'cancelled: the handler stopped')
                      WHEN NOT c.ok AND c.retry_at IS NOT NULL AND f.attempt < f.max_attempts
                           AND f.cancel_requested_at IS NOT NULL
                      THEN coalesce(f.reason,
                                    'cancel requested; the attempt failed and is not retried')
                      ELSE f.reason END
    FROM c
    -- The rows are found by primary key, the ids passed again as an array. The state
    -- test is spelled so that it does not match the partial indexes on state: the
    -- planner otherwise chose to scan every RUNNING firing, cluster-wide (dead index
    -- entries included), for each batch. (state is NOT NULL: IS NOT FALSE is "=")
    WHERE f.id = ANY (ARRAY(SELECT c.id FROM c)) AND (%(instants)s::timestamptz[] IS NULL OR f.scheduled_for = ANY (%(instants)s::timestamptz[]))
      AND f.id = c.id AND f.claim_token = c.token AND (f.state = 'running') IS NOT FALSE
    RETURNING f.id, f.attempt, f.worker_id, f.claimed_at, c.ok, c.cancelled, c.started_at,
              c.finished_at, c.error
),
att AS (
    INSERT INTO firing_attempts (firing_id, attempt, worker_id, claimed_at, started_at,
                                 finished_at, outcome, error)
    SELECT id, attempt, worker_id, claimed_at, started_at, finished_at, 'failed', error
    FROM upd WHERE NOT ok AND NOT cancelled
    ON CONFLICT (firing_id, attempt) DO UPDATE
    SET worker_id = excluded.worker_id, claimed_at = excluded.claimed_at,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at, outcome = excluded.outcome, error = excluded.error
)
SELECT id FROM upd

-- name: quota_lock_namespace
-- The running quota's check after a claim: claimers of one namespace take this
-- transaction-level lock in namespace order, then count (a new statement: its snapshot
-- includes what the claimers waited for committed), so they cannot both pass.
SELECT pg_advisory_xact_lock(hashtextextended('cronwheel.running:' || %(namespace)s, 0))

-- name: quota_unclaim
-- Firings this claim took over their namespace's running quota, given back as they
-- were (QUEUED, the attempt not counted) in the claim's own transaction: they wait for
-- the namespace's held firings to finish. [firings primary key]
UPDATE firings
SET state = 'queued', attempt = attempt - 1, claim_token = NULL, worker_id = NULL,
    lease_until = NULL, claimed_at = NULL, started_at = NULL
WHERE id = ANY (%(ids)s::bigint[]) AND worker_id = %(worker_id)s
  AND state IN ('claimed', 'running')
