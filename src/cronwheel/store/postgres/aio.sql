-- PostgreSQL only: the API's concurrent reads awaited on its event loop, each sent as
-- one statement for all the keys asked together (store/postgres/aio.py,
-- store/coalesced.py). SQLite's API reads on its loop one at a time.

-- name: firings_with_attempts
-- firing_with_attempts for many firings at once (the API's concurrent reads of firings,
-- store/coalesced.py): their rows by firing, each firing's attempts in order.
-- [firings primary key, firing_attempts primary key]
SELECT f.*, a.attempt AS a_attempt, a.worker_id AS a_worker_id, a.claimed_at AS a_claimed_at,
       a.started_at AS a_started_at, a.finished_at AS a_finished_at, a.outcome AS a_outcome,
       a.error AS a_error
FROM firings f LEFT JOIN firing_attempts a ON a.firing_id = f.id
WHERE f.id = ANY(%(ids)s::bigint[])
ORDER BY f.id, a.attempt

-- name: get_jobs_by_names
-- get_job for many (namespace, name) at once (the API's concurrent reads of jobs by name,
-- store/coalesced.py). The LIMIT keeps each lookup a walk of the unique index (a
-- subquery not flattened into a join the planner could hash over the whole table).
-- [jobs (namespace, name) unique]
SELECT j.*
FROM unnest(%(namespaces)s::text[], %(names)s::text[]) AS k(namespace, name),
     LATERAL (SELECT * FROM jobs
              WHERE jobs.namespace = k.namespace AND jobs.name = k.name LIMIT 1) j
