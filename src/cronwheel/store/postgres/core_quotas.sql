-- PostgreSQL: per-namespace quotas (store/core/quotas.py). Windows are bigint µs since
-- the epoch of the store's clock (`:now`, the server's now()). A window of
-- %(window_us)s = 0 is the counter for ever (`jobs`).
-- Each block: what it does; [the index it relies on].

-- name: quota_get
-- A namespace's own quota record, if it has one. [quotas primary key]
SELECT * FROM quotas WHERE namespace = %(namespace)s

-- name: quota_running_limited
-- The namespaces whose own record limits their running quota (the default does not):
-- the only ones a claim counts and locks for. [quotas primary key: a small table]
SELECT namespace, running FROM quotas WHERE running < %(unlimited)s

-- name: quota_list
-- Every namespace's own quota record. [quotas primary key]
SELECT * FROM quotas ORDER BY namespace

-- name: quota_set
-- Create or replace a namespace's quota record. [quotas primary key]
INSERT INTO quotas (namespace, jobs, firings_per_minute, min_interval_us, running, backfill,
                    backfill_per_day, updated_at)
VALUES (%(namespace)s, %(jobs)s, %(firings_per_minute)s, %(min_interval_us)s, %(running)s,
        %(backfill)s, %(backfill_per_day)s, :now)
ON CONFLICT (namespace) DO UPDATE
SET jobs = excluded.jobs, firings_per_minute = excluded.firings_per_minute,
    min_interval_us = excluded.min_interval_us, running = excluded.running,
    backfill = excluded.backfill, backfill_per_day = excluded.backfill_per_day,
    updated_at = excluded.updated_at
RETURNING *

-- name: quota_charge
-- Add %(n)s to a namespace's counter of this window (created at 0). The upsert locks
-- the counter row until commit: a second transaction charging it waits, then adds to
-- the committed count, so two servers cannot both pass a check. The counter after,
-- the window and the clock in µs. [quota_usage primary key]
WITH clock AS (
    SELECT (extract(epoch FROM :now) * 1000000)::bigint AS now_us
)
INSERT INTO quota_usage AS u (namespace, quota, window_start, used)
SELECT %(namespace)s, %(quota)s,
       CASE WHEN %(window_us)s::bigint > 0
            THEN (clock.now_us / %(window_us)s::bigint) * %(window_us)s::bigint ELSE 0 END,
       %(n)s
FROM clock
ON CONFLICT (namespace, quota, window_start) DO UPDATE SET used = u.used + excluded.used
RETURNING u.used, u.window_start, (SELECT now_us FROM clock) AS now_us

-- name: quota_prune
-- A namespace's counters of this quota from windows before this one.
-- [quota_usage primary key]
DELETE FROM quota_usage
WHERE namespace = %(namespace)s AND quota = %(quota)s
  AND window_start < ((extract(epoch FROM :now) * 1000000)::bigint / %(window_us)s::bigint)
                     * %(window_us)s::bigint

-- name: quota_usage
-- The counters of the current windows (for ever: jobs and the leader's quota skips;
-- this minute, today), of one namespace
-- or (namespace NULL) every one; the jobs counter is the sum of its shards.
-- [quota_jobs and quota_usage primary keys]
WITH clock AS (
    SELECT (extract(epoch FROM :now) * 1000000)::bigint AS now_us
)
SELECT q.namespace, 'jobs' AS quota, sum(q.used) AS used FROM quota_jobs q
WHERE (%(namespace)s::text IS NULL OR q.namespace = %(namespace)s::text)
GROUP BY q.namespace
UNION ALL
SELECT u.namespace, u.quota, u.used FROM quota_usage u, clock
WHERE (%(namespace)s::text IS NULL OR u.namespace = %(namespace)s::text)
  AND ((u.quota = 'quota_skipped' AND u.window_start = 0)
       OR (u.quota = 'firings_per_minute'
           AND u.window_start = (clock.now_us / %(minute_us)s::bigint) * %(minute_us)s::bigint)
       OR (u.quota = 'backfill_per_day'
           AND u.window_start = (clock.now_us / %(day_us)s::bigint) * %(day_us)s::bigint))

-- name: quota_held
-- Firings held by workers (claimed or running) per namespace, of one namespace or
-- (namespace NULL) every one, from the claim's floor on (schema.sql migration_31).
-- [firings_held_namespace]
SELECT namespace, n FROM cronwheel_held_counts(%(namespace)s::text)

-- name: quota_skip
-- Scheduled firings the leader enqueued over their namespace's firings_per_minute:
-- stored SKIPPED with the reason, never silently dropped. [firings primary key]
UPDATE firings SET state = 'skipped', reason = %(reason)s, finished_at = :now
WHERE id = ANY (%(ids)s::bigint[]) AND state = 'queued'

-- name: quota_held_of
-- One namespace's held firings (claimed or running), counted up to %(cap)s (its running
-- quota): a claim's check costs at most the quota's index entries.
-- [firings_held_namespace]
SELECT count(*) AS n FROM (
    SELECT 1 FROM firings
    WHERE namespace = %(namespace)s AND state IN ('claimed', 'running') LIMIT %(cap)s
) held
