-- SQLite: history retention (store/core/retention.py). Instants are INTEGER µs UTC;
-- `:now` is the unit of work's clock reading. Pruning reads its candidates in a read
-- transaction and deletes them in short write transactions, a batch at a time.
-- Each block: what it does; [the index it relies on].

-- name: retention_get
-- A namespace's own retention policy, if it has one. [retention primary key]
SELECT * FROM retention WHERE namespace = :namespace

-- name: retention_list
-- Every namespace's own retention policy. [retention primary key: a small table]
SELECT * FROM retention ORDER BY namespace

-- name: retention_set
-- Create or replace a namespace's retention policy. [retention primary key]
INSERT INTO retention (namespace, keep_for_us, keep_last, updated_at)
VALUES (:namespace, :keep_for_us, :keep_last, :now)
ON CONFLICT (namespace) DO UPDATE
SET keep_for_us = excluded.keep_for_us, keep_last = excluded.keep_last,
    updated_at = excluded.updated_at
RETURNING *

-- name: retention_reset
-- A namespace back on the default policy.
DELETE FROM retention WHERE namespace = :namespace

-- name: retention_namespaces
-- The namespaces that have jobs (every firing has its job): whose policies are in use.
-- [a skip scan of the (namespace, name) unique index, one probe per namespace]
WITH RECURSIVE ns (namespace) AS (
    SELECT min(namespace) FROM jobs
    UNION ALL
    SELECT (SELECT min(j.namespace) FROM jobs j WHERE j.namespace > ns.namespace)
    FROM ns WHERE ns.namespace IS NOT NULL
)
SELECT namespace FROM ns WHERE namespace IS NOT NULL ORDER BY namespace

-- name: retention_job_bounds
-- The shortest keep_for and the longest keep_last any job overrides with (once per
-- pruning pass). [jobs_retention_override: only the jobs that override]
SELECT min(json_extract(policies, '$.keep_for_s')) AS keep_for_s,
       max(json_extract(policies, '$.keep_last')) AS keep_last
FROM jobs
WHERE json_extract(policies, '$.keep_for_s') IS NOT NULL
   OR json_extract(policies, '$.keep_last') IS NOT NULL

-- name: prune_candidates
-- The next finished firings of a pass in (finished_at, id) order after the cursor,
-- finished before :until, with what deciding needs: the job's overrides and kind, and
-- how many newer firings of the job ended the same way (up to :keep_cap).
-- [firings_finished, jobs primary key, firings_outcome]
SELECT f.id, f.job_id, f.namespace, f.state, f.scheduled_for, f.finished_at,
       json_extract(j.policies, '$.keep_for_s') AS keep_for_s,
       json_extract(j.policies, '$.keep_last') AS keep_last,
       json_extract(j.schedule, '$.kind') AS kind,
       (SELECT count(*) FROM (SELECT 1 FROM firings g
                              WHERE g.job_id = f.job_id AND g.state = f.state
                                AND g.finished_at IS NOT NULL
                                AND g.scheduled_for > f.scheduled_for
                              LIMIT :keep_cap)) AS newer
FROM firings f JOIN jobs j ON j.id = f.job_id
WHERE f.finished_at IS NOT NULL AND f.finished_at < :until
  AND f.finished_at >= :after_at AND (f.finished_at > :after_at OR f.id > :after_id)
  AND f.state IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
  AND (:namespace IS NULL OR f.namespace = :namespace)
ORDER BY f.finished_at, f.id
LIMIT :limit

-- name: prune_firings
-- Firings chosen by a pass, deleted (their attempts and idempotency keys by cascade)
-- only while still finished no later than when they were chosen: a firing re-driven
-- since is left alone. [firings primary key]
DELETE FROM firings
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
  AND finished_at <= :finished_before
RETURNING id, job_id, state, scheduled_for

-- name: prune_one_shot_jobs
-- Finished one-shot jobs of a batch with their history (cascade), each unless it has a
-- firing that is not finished or finished at/after :cutoff. [jobs primary key,
-- firings_job_id]
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND json_extract(schedule, '$.kind') IN ('at', 'now')
  AND NOT EXISTS (SELECT 1 FROM firings f WHERE f.job_id = jobs.id
                  AND (f.state NOT IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
                       OR f.finished_at IS NULL OR f.finished_at >= :cutoff))
RETURNING id, namespace, json_extract(schedule, '$.kind') AS kind

-- name: pruned_events_get
-- Jobs' `pruned` events (what pruning removed, summed: one a job), of :job_ids.
-- [job_events_job]
SELECT * FROM job_events
WHERE job_id IN (SELECT value FROM json_each(:job_ids)) AND kind = 'pruned'

-- name: pruned_events_update
-- Jobs' `pruned` events with what a batch removed added, in one statement: :events a
-- JSON array of [event id, job id, first_at, last_at (epoch µs), count, detail]; the
-- rows without an event id are pruned_events_insert's. [job_events primary key]
UPDATE job_events
SET at = :now, first_at = json_extract(e.value, '$[2]'), last_at = json_extract(e.value, '$[3]'),
    count = json_extract(e.value, '$[4]'), detail = json_extract(e.value, '$[5]')
FROM json_each(:events) AS e
WHERE json_type(e.value, '$[0]') = 'integer' AND job_events.id = json_extract(e.value, '$[0]')

-- name: pruned_events_insert
-- The first `pruned` event of each job of :events (pruned_events_update's array) that
-- has none.
INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
SELECT json_extract(e.value, '$[1]'), :now, 'pruned', json_extract(e.value, '$[2]'),
       json_extract(e.value, '$[3]'), json_extract(e.value, '$[4]'), 1,
       json_extract(e.value, '$[5]')
FROM json_each(:events) AS e
WHERE json_type(e.value, '$[0]') = 'null'

-- name: prune_quota_windows
-- Quota counters of windows that ended before :before_us (per minute, per day): only the
-- current window is ever read. [quota_usage primary key]
DELETE FROM quota_usage WHERE window_start > 0 AND window_start < :before_us

-- name: prune_finished_counts
-- Finish counters of minutes before :before_minute (status reads the last hour's only).
-- [finished_counts primary key]
DELETE FROM finished_counts WHERE minute < :before_minute

-- name: load_history
-- The soak benchmark's history (bench/soak.py), generated in the engine: :count
-- finished firings of the jobs :first_job .. :first_job + :jobs - 1 (consecutive ids of
-- one bulk registration), the i-th scheduled at :start + i * :step_us, started 10 ms and
-- finished 60 ms later, one in a hundred DEAD. [jobs primary key]
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                     vdeadline, state, attempt, max_attempts, priority, visibility_us,
                     worker_id, enqueued_at, started_at, finished_at, shard, claimed_at)
SELECT j.id, j.namespace, j.name, j.task, j.payload, t, t, t,
       CASE WHEN n.i % 100 = 99 THEN 'dead' ELSE 'succeeded' END, 1, j.max_attempts,
       j.priority, j.visibility_us, 'soak', t - 500000, t + 10000, t + 60000, j.shard, t
FROM (SELECT i, :start + i * :step_us AS t FROM n) n
JOIN jobs j ON j.id = :first_job + n.i % :jobs

-- name: load_history_one_shots
-- The soak benchmark's immediate jobs (``app.enqueue``): a `now` one-shot job per firing
-- of history loaded since :first_firing, each a copy of the row of job :template named
-- by the firing (the firings then move to them: move_to_one_shots). [firings primary
-- key]
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at,
                  shard, max_concurrency, overlap, max_buffer, cancel_grace_us,
                  start_deadline_us, bounds, remaining_runs)
SELECT t.namespace, 'once-' || f.id, t.task, '{"kind": "now"}', t.payload, t.policies,
       t.spec_hash, t.priority, t.max_attempts, t.visibility_us, 0, NULL, f.enqueued_at,
       f.enqueued_at, t.shard, t.max_concurrency, t.overlap, t.max_buffer, t.cancel_grace_us,
       t.start_deadline_us, t.bounds, 1
FROM firings f JOIN jobs t ON t.id = :template
WHERE f.id >= :first_firing

-- name: move_to_one_shots
-- The firings load_history_one_shots made jobs for, each moved to its job.
-- [jobs (namespace, name) unique]
UPDATE firings SET job_id = (SELECT j.id FROM jobs j
                             WHERE j.namespace = firings.namespace
                               AND j.name = 'once-' || firings.id),
                   job_name = 'once-' || id
WHERE id >= :first_firing

-- name: max_firing_id
-- The highest firing id (0: none). [firings primary key]
SELECT coalesce(max(id), 0) AS id FROM firings

-- name: database_size
-- The file's size in bytes (pages in use and free), for the soak benchmark.
SELECT p.page_count * s.page_size AS bytes FROM pragma_page_count() p, pragma_page_size() s

-- name: count_job_rows
-- Every job row, one-shot jobs' included (the soak benchmark's measure of the
-- one-shot jobs the retention pass deleted).
SELECT count(*) AS n FROM jobs

-- name: count_finished_before
-- Finished firings that finished before :before (the soak benchmark's measure of
-- what the retention pass deleted). [firings_finished]
SELECT count(*) AS n FROM firings WHERE finished_at IS NOT NULL AND finished_at < :before
