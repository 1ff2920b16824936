-- SQLite: the cluster's tz database (store/core/tzdata.py). Instants are INTEGER
-- microseconds UTC; `:now` is the unit of work's clock reading.
-- Each block: what it does; [the index it relies on].

-- name: get_tzdata
-- The cluster's tz database as its leader recorded it (JSON). [meta primary key]
SELECT value FROM meta WHERE key = 'tzdata'

-- name: set_tzdata
-- The leader records the tz database it adopted (JSON). [meta primary key]
INSERT INTO meta (key, value) VALUES ('tzdata', :value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value

-- name: get_tzdata_files
-- The compiled zone files of the recorded tz database (JSON), read when a leader
-- adopts another version: the old rules, to re-resolve cursors by wall time.
-- [meta primary key]
SELECT value FROM meta WHERE key = 'tzdata_files'

-- name: set_tzdata_files
-- The compiled zone files of the tz database the leader adopted (JSON).
-- [meta primary key]
INSERT INTO meta (key, value) VALUES ('tzdata_files', :value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value

-- name: tz_zone_jobs
-- A page (by id) of the cron jobs with a cursor whose zone is one of :zones, paused or
-- not, each with the last instant a misfire policy dropped (its newest 'missed' event).
-- [jobs primary key; job_events_job]
SELECT j.*, (SELECT max(e.last_at) FROM job_events e
             WHERE e.job_id = j.id AND e.kind = 'missed') AS last_missed_at
FROM jobs j
WHERE j.id > :after_id AND j.next_fire_at IS NOT NULL
  AND json_extract(j.schedule, '$.kind') = 'cron'
  AND json_extract(j.schedule, '$.tz') IN (SELECT value FROM json_each(:zones))
ORDER BY j.id
LIMIT :limit

-- name: move_cursor
-- A cursor re-resolved under the new tz database: compare-and-swap on the stored one,
-- paused or not. [jobs primary key]
UPDATE jobs SET next_fire_at = :new_next WHERE id = :job_id AND next_fire_at = :expected

-- name: insert_tz_event
-- A firing moved by a tz database change, both instants kept, for `jobs explain`.
INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
VALUES (:job_id, :now, 'tz_moved', :first_at, :last_at, 1, 1, :detail)
