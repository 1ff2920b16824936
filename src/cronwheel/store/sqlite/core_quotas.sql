-- SQLite: per-namespace quotas (store/core/quotas.py). Instants and windows are INTEGER
-- µs; `:now` is the unit of work's clock reading. A window of :window_us = 0 is the
-- counter for ever (`jobs`).
-- Each block: what it does; [the index it relies on].

-- name: quota_get
-- A namespace's own quota record, if it has one. [quotas primary key]
SELECT * FROM quotas WHERE namespace = :namespace

-- name: quota_running_limited
-- The namespaces whose own record limits their running quota (the default does not):
-- the only ones a claim counts and locks for. [quotas primary key: a small table]
SELECT namespace, running FROM quotas WHERE running < :unlimited

-- name: quota_list
-- Every namespace's own quota record. [quotas primary key]
SELECT * FROM quotas ORDER BY namespace

-- name: quota_set
-- Create or replace a namespace's quota record. [quotas primary key]
INSERT INTO quotas (namespace, jobs, firings_per_minute, min_interval_us, running, backfill,
                    backfill_per_day, updated_at)
VALUES (:namespace, :jobs, :firings_per_minute, :min_interval_us, :running, :backfill,
        :backfill_per_day, :now)
ON CONFLICT (namespace) DO UPDATE
SET jobs = excluded.jobs, firings_per_minute = excluded.firings_per_minute,
    min_interval_us = excluded.min_interval_us, running = excluded.running,
    backfill = excluded.backfill, backfill_per_day = excluded.backfill_per_day,
    updated_at = excluded.updated_at
RETURNING *

-- name: quota_charge
-- Add :n to a namespace's counter of this window (created at 0), under the writer
-- lock; the counter after, the window and the clock. [quota_usage primary key]
INSERT INTO quota_usage (namespace, quota, window_start, used)
VALUES (:namespace, :quota,
        CASE WHEN :window_us > 0 THEN (:now / :window_us) * :window_us ELSE 0 END, :n)
ON CONFLICT (namespace, quota, window_start) DO UPDATE SET used = used + excluded.used
RETURNING used, window_start, :now AS now_us

-- name: quota_prune
-- A namespace's counters of this quota from windows before this one.
-- [quota_usage primary key]
DELETE FROM quota_usage
WHERE namespace = :namespace AND quota = :quota
  AND window_start < (:now / :window_us) * :window_us

-- name: quota_usage
-- The counters of the current windows (for ever: jobs and the leader's quota skips;
-- this minute, today), of one namespace
-- or (:namespace NULL) every one. [quota_usage primary key]
SELECT namespace, quota, used FROM quota_usage
WHERE (:namespace IS NULL OR namespace = :namespace)
  AND ((quota IN ('jobs', 'quota_skipped') AND window_start = 0)
       OR (quota = 'firings_per_minute' AND window_start = (:now / :minute_us) * :minute_us)
       OR (quota = 'backfill_per_day' AND window_start = (:now / :day_us) * :day_us))

-- name: quota_held
-- Firings held by workers (claimed or running) per namespace, of one namespace or
-- (:namespace NULL) every one. [firings_held_namespace]
SELECT namespace, count(*) AS n FROM firings
WHERE state IN ('claimed', 'running') AND (:namespace IS NULL OR namespace = :namespace)
GROUP BY namespace

-- name: quota_skip
-- Scheduled firings the leader enqueued over their namespace's firings_per_minute:
-- stored SKIPPED with the reason, never silently dropped. [firings primary key]
UPDATE firings SET state = 'skipped', reason = :reason, finished_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'

-- name: quota_held_of
-- One namespace's held firings (claimed or running), counted up to :cap (its running
-- quota): a claim's check costs at most the quota's index entries.
-- [firings_held_namespace]
SELECT count(*) AS n FROM (
    SELECT 1 FROM firings
    WHERE namespace = :namespace AND state IN ('claimed', 'running') LIMIT :cap
)
