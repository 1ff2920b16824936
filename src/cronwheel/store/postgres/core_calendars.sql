-- PostgreSQL: calendars stored by name in a namespace (store/core/calendars.py). `:now`
-- is the server's clock.
-- Each block: what it does; [the index it relies on].

-- name: calendar_get
-- A namespace's calendar of that name. [calendars primary key]
SELECT * FROM calendars WHERE namespace = %(namespace)s AND name = %(name)s

-- name: calendar_list
-- A namespace's calendars, by name. [calendars primary key]
SELECT * FROM calendars WHERE namespace = %(namespace)s ORDER BY name

-- name: calendar_set
-- Create or replace a calendar's rules; the upsert locks its row until commit, so two
-- writers of one calendar re-plan its jobs one after the other. [calendars primary key]
INSERT INTO calendars (namespace, name, rules, updated_at)
VALUES (%(namespace)s, %(name)s, %(rules)s::jsonb, :now)
ON CONFLICT (namespace, name) DO UPDATE
SET rules = excluded.rules, updated_at = excluded.updated_at
RETURNING *

-- name: calendar_delete
-- Delete a calendar; its name when there was one. [calendars primary key]
DELETE FROM calendars WHERE namespace = %(namespace)s AND name = %(name)s RETURNING name

-- name: calendar_jobs
-- The namespace's jobs whose schedule names the calendar, by name, locked (a write
-- rewrites them). [jobs (namespace, name): the namespace's jobs are scanned]
SELECT * FROM jobs
WHERE namespace = %(namespace)s AND schedule->>'calendar' = %(name)s
ORDER BY name
FOR UPDATE

-- name: calendar_job_names
-- The names of the namespace's jobs whose schedule names the calendar, by name (a
-- read: nothing locked). [jobs (namespace, name): the namespace's jobs are scanned]
SELECT name FROM jobs
WHERE namespace = %(namespace)s AND schedule->>'calendar' = %(name)s
ORDER BY name
