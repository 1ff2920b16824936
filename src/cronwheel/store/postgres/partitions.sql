-- PostgreSQL: the partitions of firings (store/postgres/partitions.py, schema.sql
-- migration_16). `/*part*/` is a partition's name, checked by the caller
-- (firings_legacy or firings_pYYYYMMDD). Each block: what it does; [the index it relies on].

-- name: partitions_list
-- The partitions of firings, and the boundary before which firings_legacy holds every
-- instant. [catalogs]
SELECT c.relname AS name,
       (SELECT value::timestamptz FROM meta WHERE key = 'firings_partitions_from') AS legacy_to
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'firings'::regclass
ORDER BY c.relname

-- name: partition_ensure
-- The partition of the day of %(at)s, created (and attached) if missing.
SELECT cronwheel_firings_partition(%(at)s::timestamptz) AS name

-- name: retention_longest_keep_for
-- The longest keep_for any job overrides with (NULL: none does). [a scan of the jobs,
-- once per pass, as retention_job_bounds]
SELECT max((policies->>'keep_for_s')::float8) AS keep_for_s FROM jobs

-- name: partition_facts
-- Whether a partition holds an unfinished firing [its firings_active], and when its last
-- firing finished [its firings_finished].
SELECT EXISTS (SELECT 1 FROM /*part*/ WHERE state IN ('queued', 'claimed', 'running')) AS active,
       (SELECT max(finished_at) FROM /*part*/ WHERE finished_at IS NOT NULL) AS last_finished

-- name: partition_groups
-- A partition's firings per (job, outcome): how many, their first and last scheduled
-- instants, the last finish, what deciding needs of the job (its overrides, namespace and
-- kind), and how many firings of the job that ended the same way are scheduled at or
-- after the partition's end (up to %(keep_cap)s). [a read of the partition;
-- firings_outcome of the later partitions, pruned by %(hi)s]
SELECT g.job_id, g.state, g.n, g.first_at, g.last_at, g.last_finished, j.namespace,
       (j.policies->>'keep_for_s')::float8 AS keep_for_s,
       (j.policies->>'keep_last')::integer AS keep_last,
       j.schedule->>'kind' AS kind,
       (SELECT count(*) FROM (SELECT 1 FROM firings h
                              WHERE h.job_id = g.job_id AND h.state = g.state
                                AND h.finished_at IS NOT NULL
                                AND h.scheduled_for >= %(hi)s::timestamptz
                              LIMIT %(keep_cap)s) newer_rows) AS newer
FROM (SELECT job_id, state, count(*) AS n, min(scheduled_for) AS first_at,
             max(scheduled_for) AS last_at, max(finished_at) AS last_finished
      FROM /*part*/ GROUP BY job_id, state) g
JOIN jobs j ON j.id = g.job_id

-- name: partition_drop_dependents
-- The attempts and idempotency keys of a partition's firings (what the cascade trigger
-- would delete with them). [a read of the partition; firing_attempts primary key,
-- idempotency_keys_firing]
WITH a AS (DELETE FROM firing_attempts a USING /*part*/ p WHERE a.firing_id = p.id)
DELETE FROM idempotency_keys k USING /*part*/ p WHERE k.firing_id = p.id

-- name: partition_lock_timeout
-- How long a drop waits for the parent's lock (it queues the hot path's statements
-- behind it meanwhile); on timeout the drop is left to the next pass.
SET LOCAL lock_timeout = '200ms'

-- name: partition_detach
-- A partition out of firings (the parent's ACCESS EXCLUSIVE lock, for a catalog change).
ALTER TABLE firings DETACH PARTITION /*part*/

-- name: partition_drop
-- A detached partition's table, gone with its indexes: the O(1) end of a day.
DROP TABLE /*part*/
