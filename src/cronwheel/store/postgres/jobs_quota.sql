-- PostgreSQL: the jobs quota's shards and the job set's version folded
-- (store/postgres/jobs_quota.py, schema.sql migration_20). Each block: what it does;
-- [the index it relies on].

-- name: jobs_version_fold
-- The changes moved into meta's jobs_version, in one transaction: the version stays.
-- A concurrent fold waits for the rows this one deletes and counts only its own.
WITH gone AS (DELETE FROM job_changes RETURNING 1)
INSERT INTO meta (key, value) SELECT 'jobs_version', count(*)::text FROM gone
ON CONFLICT (key) DO UPDATE SET value = (meta.value::bigint + excluded.value::bigint)::text

-- name: quota_jobs_take
-- %(n)s jobs charged to the room of one shard of the namespace's jobs counter that has
-- it and that no other transaction holds (SKIP LOCKED: never waits); no row when none
-- does (then quota_jobs_lock). [quota_jobs primary key]
WITH pick AS (
    SELECT shard FROM quota_jobs
    WHERE namespace = %(namespace)s AND room >= %(n)s
    ORDER BY random() LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE quota_jobs q SET used = q.used + %(n)s, room = q.room - %(n)s
FROM pick WHERE q.namespace = %(namespace)s AND q.shard = pick.shard
RETURNING q.shard

-- name: quota_jobs_take_waiting
-- quota_jobs_take when every shard with the room was held: one of them, its holder
-- waited for (FOR UPDATE checks the room again on the row its holder committed, and
-- passes to another shard without it); no row when no shard has the room (then
-- quota_jobs_lock). Without it, creations that found every shard held locked them all
-- and so kept finding them held. [quota_jobs primary key]
WITH pick AS (
    SELECT shard FROM quota_jobs
    WHERE namespace = %(namespace)s AND room >= %(n)s
    ORDER BY random() LIMIT 1
    FOR UPDATE
)
UPDATE quota_jobs q SET used = q.used + %(n)s, room = q.room - %(n)s
FROM pick WHERE q.namespace = %(namespace)s AND q.shard = pick.shard
RETURNING q.shard

-- name: quota_jobs_give
-- %(n)s jobs given back (deleted) to one free shard that counts as many; no row when
-- none does (then quota_jobs_lock). [quota_jobs primary key]
WITH pick AS (
    SELECT shard FROM quota_jobs
    WHERE namespace = %(namespace)s AND used >= %(n)s
    ORDER BY random() LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE quota_jobs q SET used = q.used - %(n)s, room = q.room + %(n)s
FROM pick WHERE q.namespace = %(namespace)s AND q.shard = pick.shard
RETURNING q.shard

-- name: quota_jobs_give_waiting
-- quota_jobs_give when every shard that counts as many was held: one of them, waited
-- for, as quota_jobs_take_waiting. [quota_jobs primary key]
WITH pick AS (
    SELECT shard FROM quota_jobs
    WHERE namespace = %(namespace)s AND used >= %(n)s
    ORDER BY random() LIMIT 1
    FOR UPDATE
)
UPDATE quota_jobs q SET used = q.used - %(n)s, room = q.room + %(n)s
FROM pick WHERE q.namespace = %(namespace)s AND q.shard = pick.shard
RETURNING q.shard

-- name: quota_jobs_ensure
-- The namespace's %(shards)s shards (those missing made empty). [quota_jobs primary key]
INSERT INTO quota_jobs (namespace, shard, used, room)
SELECT %(namespace)s, s, 0, 0 FROM generate_series(0, %(shards)s - 1) AS s
ON CONFLICT (namespace, shard) DO NOTHING

-- name: quota_jobs_lock
-- Every shard of the namespace, locked in shard order (waits for the transactions that
-- hold one). [quota_jobs primary key]
SELECT shard, used, room FROM quota_jobs WHERE namespace = %(namespace)s
ORDER BY shard FOR UPDATE

-- name: quota_jobs_set
-- The namespace's shards rewritten (under quota_jobs_lock). [quota_jobs primary key]
UPDATE quota_jobs q SET used = v.used, room = v.room
FROM unnest(%(shard)s::int[], %(used)s::bigint[], %(room)s::bigint[]) AS v(shard, used, room)
WHERE q.namespace = %(namespace)s AND q.shard = v.shard

-- name: put_job_one
-- A job created (upsert false) or upserted in one autocommitted call (schema.sql
-- migration_24): its outcome (created; an upsert's unchanged, updated, or decide: the
-- full upsert must) and the job's row; a creation of a name taken: no row; SQLSTATE
-- CW001 (nothing written) when a creation must decide. [jobs (namespace, name)
-- unique, quota_jobs and served_tasks primary keys]
SELECT p.o_outcome AS outcome, (p.o_job).*
FROM cronwheel_put_job(
    %(namespace)s::text, %(name)s::text, %(task)s::text, %(schedule)s::jsonb,
    %(payload)s::json, %(policies)s::jsonb, %(spec_hash)s::text, %(priority)s::float8,
    %(max_attempts)s::integer, %(visibility_us)s::bigint, %(paused)s::boolean,
    %(next_fire_at)s::timestamptz, %(shard)s::smallint, %(max_concurrency)s::integer,
    %(overlap)s::text, %(max_buffer)s::integer, %(cancel_grace_us)s::bigint,
    %(start_deadline_us)s::bigint, %(bounds)s::jsonb, %(remaining_runs)s::integer,
    %(trace_context)s::text, :now, %(gap_us)s::bigint, %(min_interval_us)s::bigint,
    %(counts)s::boolean, %(check_task)s::boolean, %(valid_from)s::timestamptz,
    %(upsert)s::boolean) p

-- name: create_jobs_one
-- put_job_one's creation (upsert false) of many jobs in one autocommitted statement (the
-- API's concurrent creations, store/postgres/aio.py): %(items)s a JSON array of
-- put_job_one's parameters, each with its place (ord); a row per job created, none for
-- a name taken (by another job, or by an earlier one of these). A creation that must
-- decide raises CW001 and the statement writes nothing (each is then made alone).
-- The JSON documents among the parameters come as JSON strings (text), as to
-- put_job_one. [as put_job_one]
SELECT p.ord, o.o_outcome AS outcome, (o.o_job).*
FROM json_to_recordset(%(items)s::json) AS p(
         ord integer, namespace text, name text, task text, schedule text, payload text,
         policies text, spec_hash text, priority float8, max_attempts integer,
         visibility_us bigint, paused boolean, next_fire_at timestamptz, shard smallint,
         max_concurrency integer, overlap text, max_buffer integer, cancel_grace_us bigint,
         start_deadline_us bigint, bounds text, remaining_runs integer, trace_context text,
         gap_us bigint, min_interval_us bigint, counts boolean, check_task boolean,
         valid_from timestamptz),
     LATERAL cronwheel_put_job(
         p.namespace, p.name, p.task, p.schedule::jsonb, p.payload::json, p.policies::jsonb,
         p.spec_hash, p.priority, p.max_attempts, p.visibility_us, p.paused, p.next_fire_at,
         p.shard, p.max_concurrency, p.overlap, p.max_buffer, p.cancel_grace_us,
         p.start_deadline_us, p.bounds::jsonb, p.remaining_runs, p.trace_context, :now,
         p.gap_us, p.min_interval_us, p.counts, p.check_task, p.valid_from, false) o
ORDER BY p.ord
