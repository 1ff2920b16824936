-- PostgreSQL: the worker's side (store/postgres/claims.py). Parameters are psycopg's
-- %(name)s; `:now` is the store's clock (see core.sql). Each block: what it does;
-- [the index it relies on].

-- name: claim_fast
-- The claim in one statement, taken when no candidate needs a policy decision (no
-- capped job, no overlap override, no passed start deadline): cronwheel_claim_fast
-- (schema.sql migration_17: the statement, planned once per session), its firing rows
-- spread into columns. Otherwise it claims nothing, `simple` is false, and the caller
-- runs the planned claim (claim_candidates ... claim_take).
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
-- instants of the firings named (from the scan and the facts): constants of a plan
-- made for each call, they confine it to their day partitions.
-- Fates of unrun firings (skipped, missed).
UPDATE firings f
SET state = x.state, reason = x.reason, finished_at = :now, claim_token = NULL,
    lease_until = NULL
FROM unnest(%(fate_ids)s::bigint[], %(fate_states)s::text[], %(fate_reasons)s::text[])
    AS x (id, state, reason)
WHERE f.id = ANY (%(fate_ids)s::bigint[]) AND f.scheduled_for = ANY (%(fate_at)s::timestamptz[])
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
WHERE f.id = ANY (%(claim_ids)s::bigint[]) AND f.scheduled_for = ANY (%(claim_at)s::timestamptz[])
  AND f.id = x.id AND f.state = 'queued' AND j.id = f.job_id
RETURNING f.*, j.policies::text AS job_policies, j.trace_context AS job_trace

-- name: mark_buffered
-- Due firings kept waiting by their job's overlap policy: claim scans pass over them
-- while the job stays at its cap (see store/claiming.py, ClaimPlan.buffered).
UPDATE firings f SET buffered_at = coalesce(f.buffered_at, :now)
WHERE f.id = ANY (%(ids)s::bigint[]) AND f.scheduled_for = ANY (%(at)s::timestamptz[]) AND f.state = 'queued'

-- name: start_at
-- Held firings start at their instant, %(at)s on the store's clock: the server waits
-- for it (schema.sql migration_28: at most 5 ms, none on a pinned clock), then runs
-- core.sql's start with started_at the time of the write.
SELECT s.o_id AS id
FROM cronwheel_start_at(%(batch)s::json, %(instants)s::timestamptz[], %(at)s::timestamptz,
                        %(_pin)s::timestamptz, %(_off)s::interval) s

-- name: heartbeat
-- A worker's held firings' leases renewed (schema.sql migration_18: the statement;
-- %(instants)s from the claim tokens, params.claim_instants).
SELECT h.o_id AS id
FROM cronwheel_heartbeat(%(ids)s::bigint[], %(tokens)s::text[], %(instants)s::timestamptz[],
                         :now) h

-- name: complete_batch
-- Outcomes for a batch of claims (schema.sql migration_18: the statement): the batch as
-- one JSON array (params.complete_params), %(instants)s from the claim tokens.
SELECT c.o_id AS id FROM cronwheel_complete(%(batch)s::json, %(instants)s::timestamptz[]) c

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

-- name: warm_up
-- Run once on each new pooled connection (planning.py warm_up, the pool's configure):
-- the statements a firing waits on, the claim, a held firing's start and the outcome's
-- write, planned in this session now rather than at a firing's instant or in the first
-- batch of a drain. A session plans a function's statements at their first call, for
-- every day partition of firings: with a month of them, 29 ms for cronwheel_start, 33
-- ms for cronwheel_claim_fast and 18 ms for cronwheel_complete, then 0.35-1.4 ms a
-- call. Every call matches nothing: firing id 0 does not exist (ids start at 1), and
-- the claim scans and takes at most 0 firings of a task named '' (a task has a name).
-- The start goes through cronwheel_start_at (an instant passed: no wait), which plans
-- cronwheel_start too.
SELECT (SELECT count(*)
        FROM cronwheel_start_at('[[0, ""]]'::json, ARRAY[now()]::timestamptz[],
                                now() - interval '1 hour', NULL, interval '0')) AS started,
       (SELECT count((c.f).id)
        FROM cronwheel_claim_fast(ARRAY['']::text[], interval '0', 0, 0, 0, '', now()) c
       ) AS claimed,
       (SELECT count(*)
        FROM cronwheel_complete('[{"id": 0, "token": "", "ok": true, "cancelled": false}]'::json,
                                ARRAY[now()]::timestamptz[])) AS completed
