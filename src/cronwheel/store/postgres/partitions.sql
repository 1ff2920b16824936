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

-- name: floor_raise
-- The claim's floor raised to the oldest partition holding an unfinished firing, at
-- most today's start; false (unchanged) while a writer holds its lock (schema.sql
-- migration_29). [each older partition's firings_active]
SELECT cronwheel_raise_floor(:now) IS NOT NULL AS raised

-- name: floor_read
-- The claim's floor; NULL for none ('-infinity': every partition is read).
SELECT nullif(at, '-infinity') AS at FROM firings_floor

-- name: retention_longest_keep_for
-- The longest keep_for any job overrides with (NULL: none does). [the jobs that
-- override, by jobs_retention_override]
SELECT max((policies->>'keep_for_s')::float8) AS keep_for_s FROM jobs
WHERE policies ? 'keep_for_s' OR policies ? 'keep_last'

-- name: partition_facts
-- Whether a partition holds an unfinished firing [its firings_active], and when its last
-- firing finished [its firings_finished].
SELECT EXISTS (SELECT 1 FROM /*part*/ WHERE state IN ('queued', 'claimed', 'running')) AS active,
       (SELECT max(finished_at) FROM /*part*/ WHERE finished_at IS NOT NULL) AS last_finished

-- name: partition_groups_chunk
-- The next %(scan)s firings of a partition, by id after %(after_id)s, per group: a
-- recurring job's (job, outcome), or the one-shot jobs' (namespace, overrides, kind,
-- outcome) together (each goes whole with its job: no count of newer firings is
-- theirs); how many, their first and last instants, the last finish, what deciding
-- needs of the job (its overrides, namespace and kind). What the chunk read: its last
-- id, how many. A step of the decision (a day of 1,000,000 firings, 200,000 of them
-- one-shot jobs, was one read of 2.4 s in the leader's step before). [the partition's
-- firings_id_at; jobs primary key]
WITH c AS (SELECT p.id, p.job_id, p.state, p.scheduled_for, p.finished_at FROM /*part*/ p
           WHERE p.id > %(after_id)s ORDER BY p.id LIMIT %(scan)s),
g AS (SELECT job_id, state, count(*) AS n, min(scheduled_for) AS first_at,
             max(scheduled_for) AS last_at, max(finished_at) AS last_finished
      FROM c GROUP BY job_id, state),
k AS (SELECT CASE WHEN j.schedule->>'kind' IN ('at', 'now') THEN NULL ELSE g.job_id END
               AS job_id,
             g.state, g.n, g.first_at, g.last_at, g.last_finished, j.namespace,
             (j.policies->>'keep_for_s')::float8 AS keep_for_s,
             (j.policies->>'keep_last')::integer AS keep_last, j.schedule->>'kind' AS kind
      FROM g JOIN jobs j ON j.id = g.job_id)
SELECT (SELECT max(id) FROM c) AS last_id, (SELECT count(*) FROM c) AS scanned,
       k.job_id, k.state, sum(k.n)::bigint AS n, min(k.first_at) AS first_at,
       max(k.last_at) AS last_at, max(k.last_finished) AS last_finished, k.namespace,
       k.keep_for_s, k.keep_last, k.kind
FROM (SELECT 1) one LEFT JOIN k ON true
GROUP BY k.job_id, k.state, k.namespace, k.keep_for_s, k.keep_last, k.kind

-- name: partition_newer
-- For each (job, outcome) of %(job_ids)s and %(states)s (a recurring job's group of a
-- partition), how many firings of the job that ended the same way are scheduled at or
-- after the partition's end %(hi)s, up to %(keep_cap)s: the last step of a decision.
-- [firings_outcome of the later partitions, pruned by %(hi)s]
SELECT g.job_id, g.state,
       (SELECT count(*) FROM (SELECT 1 FROM firings h
                              WHERE h.job_id = g.job_id AND h.state = g.state
                                AND h.finished_at IS NOT NULL
                                AND h.scheduled_for >= %(hi)s::timestamptz
                              LIMIT %(keep_cap)s) newer_rows) AS newer
FROM unnest(%(job_ids)s::bigint[], %(states)s::text[]) AS g(job_id, state)

-- name: partition_one_shots_chunk
-- The next firings of a partition decided droppable, by id after %(after_id)s: up to
-- %(scan)s, or up to the %(jobs)s-th of a one-shot job. Those one-shot jobs are deleted
-- with their history (by cascade: the firing, its attempts and keys), each unless a
-- firing of it is unfinished or finished at/after %(decided_at)s (a change since the
-- decision; the drop will then be abandoned too). A job's delete costs about 0.2 ms
-- (the cascade's statement on the partitioned firings), whatever the partitions: the
-- step is bounded by its jobs. What the chunk read (its last id, how many, its
-- one-shot firings), and what it deleted: per namespace and kind, per state of the
-- deleted firings. [the partition's firings_id_at, jobs primary key, firings_job_id
-- of every partition]
WITH c AS (SELECT p.id, p.job_id, p.state FROM /*part*/ p
           WHERE p.id > %(after_id)s ORDER BY p.id LIMIT %(scan)s),
o AS (SELECT c.id, c.job_id, c.state FROM c JOIN jobs j ON j.id = c.job_id
      WHERE j.schedule->>'kind' IN ('at', 'now') ORDER BY c.id LIMIT %(jobs)s),
r AS (SELECT CASE WHEN (SELECT count(*) FROM o) = %(jobs)s THEN (SELECT max(id) FROM o)
                  ELSE (SELECT max(id) FROM c) END AS last_id),
gone AS (DELETE FROM jobs j USING o
         WHERE j.id = o.job_id
           -- a scalar subquery, probed per job: as NOT EXISTS the planner made it a hash
           -- anti join over a sequential scan of every partition (8.8 s for 100 jobs on
           -- 30 days of 1,000,000 a day; 118 ms so)
           AND NOT (SELECT EXISTS (SELECT 1 FROM firings f WHERE f.job_id = j.id
                           AND (f.state NOT IN ('succeeded', 'dead', 'cancelled', 'skipped',
                                                'missed')
                                OR f.finished_at IS NULL OR f.finished_at >= %(decided_at)s)))
         RETURNING j.namespace, j.schedule->>'kind' AS kind, o.state)
SELECT r.last_id, (SELECT count(*) FROM c WHERE c.id <= r.last_id) AS scanned,
       (SELECT count(*) FROM o) AS one_shots, g.namespace, g.kind, g.state, count(g.*) AS n
FROM r LEFT JOIN gone g ON true
GROUP BY r.last_id, g.namespace, g.kind, g.state

-- name: partition_dependents_chunk
-- The next %(scan)s firings of a partition decided droppable, by id after %(after_id)s,
-- and the attempts and idempotency keys of those still finished before %(decided_at)s
-- deleted: the drop's own deletion of them (partition_drop_dependents), a chunk per
-- step, so that the drop's transaction holds none of that work (a day of 66,559
-- firings: one step of 842 ms and 19.7 MB of WAL before). A firing re-driven since the
-- decision keeps its own (the drop will then be abandoned). What the chunk read: its
-- last id, how many, and how many of them are a one-shot job's (the one-shot chunks
-- before left none, or the drop is abandoned: a job it kept). [the partition's
-- firings_id_at; firing_attempts primary key, idempotency_keys_firing; jobs primary
-- key]
WITH c AS (SELECT p.id, p.job_id, p.state, p.finished_at FROM /*part*/ p
           WHERE p.id > %(after_id)s ORDER BY p.id LIMIT %(scan)s),
d AS (SELECT c.id FROM c
      WHERE c.state IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
        AND c.finished_at < %(decided_at)s),
a AS (DELETE FROM firing_attempts a USING d WHERE a.firing_id = d.id),
k AS (DELETE FROM idempotency_keys k USING d WHERE k.firing_id = d.id)
SELECT (SELECT max(id) FROM c) AS last_id, (SELECT count(*) FROM c) AS scanned,
       (SELECT count(*) FROM c JOIN jobs j ON j.id = c.job_id
        WHERE j.schedule->>'kind' IN ('at', 'now')) AS one_shots

-- name: partition_drop_dependents
-- The attempts and idempotency keys of a partition's firings after %(after_id)s (what
-- the cascade trigger would delete with them), in the drop's transaction: of a firing
-- written after the chunks passed (partition_dependents_chunk). A firing the chunks
-- read and left (re-driven) is unfinished or finished since the decision, so the drop
-- is abandoned anyway: a read of the whole partition here (1,000,000 firings: most of
-- a 390 ms step) found nothing. [the partition's firings_id_at; firing_attempts primary
-- key, idempotency_keys_firing]
WITH p AS (SELECT id FROM /*part*/ WHERE id > %(after_id)s),
a AS (DELETE FROM firing_attempts a USING p WHERE a.firing_id = p.id)
DELETE FROM idempotency_keys k USING p WHERE k.firing_id = p.id

-- name: partition_lock_timeout
-- How long a drop waits for the parent's lock (it queues the hot path's statements
-- behind it meanwhile); on timeout the drop is left to the next pass.
SET LOCAL lock_timeout = '200ms'

-- name: partition_detach
-- A partition out of firings (the parent's ACCESS EXCLUSIVE lock, for a catalog change).
ALTER TABLE firings DETACH PARTITION /*part*/

-- name: partition_drop
-- A detached partition's table, gone with its indexes: the O(1) end of a day, in a
-- transaction after the DETACH's. Its commit unlinks the files (a day of 1,000,000
-- firings, 469 MB: 100-170 ms), which under the DETACH's lock on the parent would hold
-- every claim and insert of firings as long.
DROP TABLE /*part*/

-- name: partition_orphans
-- Tables of ours detached from firings and not dropped (a leader stopped between the
-- two transactions): dropped at the next pass. A partition is created and attached in
-- one transaction (cronwheel_firings_partition), so no other table is named so. [catalogs]
SELECT c.relname AS name FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
  AND (c.relname ~ '^firings_p[0-9]{8}$' OR c.relname = 'firings_legacy')
  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)

-- name: prep_lock
-- The online first step of migration 16 (PgPartitions.prepare_partitioning), one
-- migrator at a time: a session lock on its own connection (not a pooled one).
SELECT pg_advisory_lock(hashtextextended('cronwheel.partition-prep:' || current_schema(), 0))

-- name: prep_unlock
-- The first step's lock released.
SELECT pg_advisory_unlock(hashtextextended('cronwheel.partition-prep:' || current_schema(), 0))

-- name: prep_state
-- Where the first step stands: the schema version, the boundary chosen, whether the
-- CHECK exists and is validated, whether the unique index exists and is valid.
SELECT (SELECT value FROM meta WHERE key = 'schema_version') AS version,
       (SELECT value::timestamptz FROM meta WHERE key = 'firings_partitions_from') AS boundary,
       (SELECT convalidated FROM pg_constraint WHERE conrelid = 'firings'::regclass
          AND conname = 'firings_partition_bound') AS check_valid,
       (SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'firings'::regclass AND c.relname = 'firings_id_at') AS index_valid

-- name: prep_boundary
-- The boundary: the UTC midnight two days ahead, or the day after the latest instant
-- held (a scan, without locking writers out), recorded.
INSERT INTO meta (key, value)
SELECT 'firings_partitions_from',
       greatest(date_trunc('day', now(), 'UTC') + interval '2 days',
                date_trunc('day', max(scheduled_for), 'UTC') + interval '1 day')::text
FROM firings
ON CONFLICT (key) DO UPDATE SET value = excluded.value
RETURNING value::timestamptz AS boundary

-- name: prep_check_add
-- The CHECK the legacy partition's range is proved from, added NOT VALID (a catalog
-- change: new rows are checked, old ones not yet). `/*boundary*/`: the boundary, as the
-- server printed it.
ALTER TABLE firings ADD CONSTRAINT firings_partition_bound
CHECK (scheduled_for < '/*boundary*/'::timestamptz) NOT VALID

-- name: prep_check_validate
-- The CHECK validated: a scan under SHARE UPDATE EXCLUSIVE (writers go on).
ALTER TABLE firings VALIDATE CONSTRAINT firings_partition_bound

-- name: prep_index_drop
-- An invalid unique index left by an interrupted concurrent build.
DROP INDEX CONCURRENTLY firings_id_at

-- name: prep_index_build
-- The unique index the parent's key adopts, built without blocking writers.
CREATE UNIQUE INDEX CONCURRENTLY firings_id_at ON firings (id, scheduled_for)
