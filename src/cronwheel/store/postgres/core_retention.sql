-- PostgreSQL: history retention (store/core/retention.py). `:now` is the server's
-- now(). Pruning reads its candidates in one transaction and deletes them in short
-- ones, a batch at a time.
-- Each block: what it does; [the index it relies on].

-- name: retention_get
-- A namespace's own retention policy, if it has one. [retention primary key]
SELECT * FROM retention WHERE namespace = %(namespace)s

-- name: retention_list
-- Every namespace's own retention policy. [retention primary key: a small table]
SELECT * FROM retention ORDER BY namespace

-- name: retention_set
-- Create or replace a namespace's retention policy. [retention primary key]
INSERT INTO retention (namespace, keep_for_us, keep_last, updated_at)
VALUES (%(namespace)s, %(keep_for_us)s, %(keep_last)s, :now)
ON CONFLICT (namespace) DO UPDATE
SET keep_for_us = excluded.keep_for_us, keep_last = excluded.keep_last,
    updated_at = excluded.updated_at
RETURNING *

-- name: retention_reset
-- A namespace back on the default policy.
DELETE FROM retention WHERE namespace = %(namespace)s

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
SELECT min((policies->>'keep_for_s')::float8) AS keep_for_s,
       max((policies->>'keep_last')::integer) AS keep_last
FROM jobs
WHERE policies ? 'keep_for_s' OR policies ? 'keep_last'

-- name: prune_candidates
-- The next finished firings of a pass in (finished_at, id) order after the cursor,
-- finished before %(until)s, with what deciding needs: the job's overrides and kind, and
-- how many newer firings of the job ended the same way (up to %(keep_cap)s).
-- [firings_finished, jobs primary key, firings_outcome]
SELECT f.id, f.job_id, f.namespace, f.state, f.scheduled_for, f.finished_at,
       (j.policies->>'keep_for_s')::float8 AS keep_for_s,
       (j.policies->>'keep_last')::integer AS keep_last,
       j.schedule->>'kind' AS kind,
       (SELECT count(*) FROM (SELECT 1 FROM firings g
                              WHERE g.job_id = f.job_id AND g.state = f.state
                                AND g.finished_at IS NOT NULL
                                AND g.scheduled_for > f.scheduled_for
                              LIMIT %(keep_cap)s) newer_rows) AS newer
FROM firings f JOIN jobs j ON j.id = f.job_id
WHERE f.finished_at IS NOT NULL AND f.finished_at < %(until)s
  AND f.finished_at >= %(after_at)s AND (f.finished_at > %(after_at)s OR f.id > %(after_id)s)
  AND f.state IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
  AND (%(namespace)s::text IS NULL OR f.namespace = %(namespace)s::text)
ORDER BY f.finished_at, f.id
LIMIT %(limit)s

-- name: prune_firings
-- Firings chosen by a pass, deleted (their attempts and idempotency keys by cascade)
-- only while still finished no later than when they were chosen: a firing re-driven
-- since is left alone. [firings primary key]
DELETE FROM firings
WHERE id = ANY (%(ids)s::bigint[])
  AND state IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
  AND finished_at <= %(finished_before)s
RETURNING id, job_id, state, scheduled_for

-- name: prune_one_shot_jobs
-- Finished one-shot jobs of a batch with their history (cascade), each unless it has a
-- firing that is not finished or finished at/after %(cutoff)s. [jobs primary key,
-- firings_job_id]
DELETE FROM jobs
WHERE id = ANY (%(ids)s::bigint[]) AND schedule->>'kind' IN ('at', 'now')
  AND NOT EXISTS (SELECT 1 FROM firings f WHERE f.job_id = jobs.id
                  AND (f.state NOT IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
                       OR f.finished_at IS NULL OR f.finished_at >= %(cutoff)s))
RETURNING id, namespace, schedule->>'kind' AS kind

-- name: pruned_events_get
-- Jobs' `pruned` events (what pruning removed, summed: one a job), of %(job_ids)s.
-- [job_events_job]
SELECT * FROM job_events WHERE job_id = ANY (%(job_ids)s::bigint[]) AND kind = 'pruned'

-- name: pruned_events_update
-- Jobs' `pruned` events with what a batch or a day removed added, in one statement:
-- %(events)s a JSON array of [event id, job id, first_at, last_at (epoch µs), count,
-- detail]; the rows without an event id are pruned_events_insert's. [job_events
-- primary key]
UPDATE job_events j
SET at = :now, first_at = timestamptz 'epoch' + (e.v->>2)::bigint * interval '1 microsecond',
    last_at = timestamptz 'epoch' + (e.v->>3)::bigint * interval '1 microsecond',
    count = (e.v->>4)::bigint, detail = e.v->>5
FROM json_array_elements(%(events)s::json) AS e (v)
WHERE json_typeof(e.v->0) = 'number' AND j.id = (e.v->>0)::bigint

-- name: pruned_events_insert
-- The first `pruned` event of each job of %(events)s (pruned_events_update's array)
-- that has none.
INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
SELECT (e.v->>1)::bigint, :now, 'pruned',
       timestamptz 'epoch' + (e.v->>2)::bigint * interval '1 microsecond',
       timestamptz 'epoch' + (e.v->>3)::bigint * interval '1 microsecond',
       (e.v->>4)::bigint, true, e.v->>5
FROM json_array_elements(%(events)s::json) AS e (v)
WHERE json_typeof(e.v->0) = 'null'

-- name: prune_quota_windows
-- Quota counters of windows that ended before %(before_us)s (per minute, per day): only
-- the current window is ever read. [quota_usage primary key]
DELETE FROM quota_usage WHERE window_start > 0 AND window_start < %(before_us)s

-- name: prune_finished_counts
-- Finish counters of minutes before %(before_minute)s (status reads the last hour's only).
-- [finished_counts primary key]
DELETE FROM finished_counts WHERE minute < %(before_minute)s

-- name: load_history
-- The soak benchmark's history (bench/soak.py), generated in the server: %(count)s
-- finished firings of the jobs %(first_job)s .. + %(jobs)s - 1 (consecutive ids of one
-- bulk registration), the i-th scheduled at %(start)s + i * %(step_us)s µs, started
-- 10 ms and finished 60 ms later, one in a hundred DEAD. [jobs primary key]
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at,
                     vdeadline, state, attempt, max_attempts, priority, visibility_us,
                     worker_id, enqueued_at, started_at, finished_at, shard, claimed_at)
SELECT j.id, j.namespace, j.name, j.task, j.payload, n.t, n.t, n.t,
       CASE WHEN n.i %% 100 = 99 THEN 'dead' ELSE 'succeeded' END, 1, j.max_attempts,
       j.priority, j.visibility_us, 'soak', n.t - interval '500 ms', n.t + interval '10 ms',
       n.t + interval '60 ms', j.shard, n.t
FROM (SELECT i, %(start)s::timestamptz + (i::bigint * %(step_us)s::bigint) * interval '1 microsecond' AS t
      FROM generate_series(0, %(count)s - 1) i) n
JOIN jobs j ON j.id = %(first_job)s + n.i %% %(jobs)s

-- name: load_history_one_shots
-- The soak benchmark's immediate jobs (``app.enqueue``): a `now` one-shot job per firing
-- of history loaded since %(first_firing)s, each a copy of the row of job %(template)s
-- named by the firing (the firings then move to them: move_to_one_shots). [firings
-- primary key]
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at,
                  shard, max_concurrency, overlap, max_buffer, cancel_grace_us,
                  start_deadline_us, bounds, remaining_runs)
SELECT t.namespace, 'once-' || f.id, t.task, '{"kind": "now"}', t.payload, t.policies,
       t.spec_hash, t.priority, t.max_attempts, t.visibility_us, false, NULL, f.enqueued_at,
       f.enqueued_at, t.shard, t.max_concurrency, t.overlap, t.max_buffer, t.cancel_grace_us,
       t.start_deadline_us, t.bounds, 1
FROM firings f JOIN jobs t ON t.id = %(template)s
WHERE f.id >= %(first_firing)s

-- name: move_to_one_shots
-- The firings load_history_one_shots made jobs for, each moved to its job.
-- [jobs (namespace, name) unique]
UPDATE firings f SET job_id = j.id, job_name = j.name
FROM jobs j
WHERE f.id >= %(first_firing)s
  AND j.namespace = f.namespace AND j.name = 'once-' || f.id

-- name: max_firing_id
-- The highest firing id (0: none). [firings primary key]
SELECT coalesce(max(id), 0) AS id FROM firings

-- name: database_size
-- The database's size in bytes, for the soak benchmark.
SELECT pg_database_size(current_database()) AS bytes

-- name: count_job_rows
-- Every job row, one-shot jobs' included (the soak benchmark's measure of the
-- one-shot jobs the retention pass deleted).
SELECT count(*) AS n FROM jobs

-- name: count_finished_before
-- Finished firings that finished before %(before)s (the soak benchmark's measure of
-- what the retention pass deleted). [firings_finished]
SELECT count(*) AS n FROM firings WHERE finished_at IS NOT NULL AND finished_at < %(before)s
