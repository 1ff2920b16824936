-- SQLite: calendars stored by name in a namespace (store/core/calendars.py). Instants
-- are INTEGER µs; `:now` is the unit of work's clock reading.
-- Each block: what it does; [the index it relies on].

-- name: calendar_get
-- A namespace's calendar of that name. [calendars primary key]
SELECT * FROM calendars WHERE namespace = :namespace AND name = :name

-- name: calendar_list
-- A namespace's calendars, by name. [calendars primary key]
SELECT * FROM calendars WHERE namespace = :namespace ORDER BY name

-- name: calendar_set
-- Create or replace a calendar's rules. [calendars primary key]
INSERT INTO calendars (namespace, name, rules, updated_at)
VALUES (:namespace, :name, :rules, :now)
ON CONFLICT (namespace, name) DO UPDATE
SET rules = excluded.rules, updated_at = excluded.updated_at
RETURNING *

-- name: calendar_delete
-- Delete a calendar; its name when there was one. [calendars primary key]
DELETE FROM calendars WHERE namespace = :namespace AND name = :name RETURNING name

-- name: calendar_jobs
-- The namespace's jobs whose schedule names the calendar, by name (under the writer
-- lock when read in a write). [jobs (namespace, name): the namespace's jobs are scanned]
SELECT * FROM jobs
WHERE namespace = :namespace AND json_extract(schedule, '$.calendar') = :name
ORDER BY name

-- name: calendar_job_names
-- The names of the namespace's jobs whose schedule names the calendar, by name (a
-- read: nothing locked). [jobs (namespace, name): the namespace's jobs are scanned]
SELECT name FROM jobs
WHERE namespace = :namespace AND json_extract(schedule, '$.calendar') = :name
ORDER BY name
