-- PostgreSQL: the queries of the served-tasks flows (store/core/tasks.py): which task
-- names workers serve, and which queued firings wait on a task no live worker serves.
-- The SQLite engine defines the same names in its core_tasks.sql.

-- name: record_served_tasks
-- The tasks of worker node %(id)s's info, recorded as served: new ones inserted, known
-- ones' last_seen moved only when older than %(refresh)s (0 on registration, a
-- minute on heartbeat); returns the rows written. Run on registration, and on at most
-- one heartbeat a minute per node and store handle (core/admin.py).
-- [nodes primary key, served_tasks primary key]
INSERT INTO served_tasks (task, first_seen, last_seen)
SELECT DISTINCT t.task, :now, :now
FROM nodes AS n,
     jsonb_array_elements_text(CASE WHEN jsonb_typeof(n.info -> 'tasks') = 'array'
                                    THEN n.info -> 'tasks' ELSE '[]'::jsonb END) AS t (task)
WHERE n.id = %(id)s AND n.kind = 'worker'
ON CONFLICT (task) DO UPDATE SET last_seen = excluded.last_seen
WHERE served_tasks.last_seen <= excluded.last_seen - %(refresh)s::interval
RETURNING last_seen

-- name: list_served_tasks
-- Every task a worker ever served, by name (at most %(limit)s). [served_tasks primary key]
SELECT task, first_seen, last_seen FROM served_tasks ORDER BY task LIMIT %(limit)s

-- name: unserved_queued
-- Queued firings by task (of namespace %(namespace)s, or all when null), for the tasks no worker that heartbeated within %(within)s
-- serves (its info's tasks): at most %(scan)s queued firings counted, at most %(limit)s
-- tasks, most waiting first. The queued firings from the claim's floor on (schema.sql
-- migration_31). [firings_claim; nodes scanned, a few rows]
SELECT g.task, g.n
FROM (SELECT q.task, count(*) AS n
      FROM cronwheel_queued_tasks(%(namespace)s::text, %(scan)s::integer) AS q
      GROUP BY q.task) AS g
WHERE NOT EXISTS (
    SELECT 1 FROM nodes AS n
    WHERE n.kind = 'worker' AND n.heartbeat_at >= :now - %(within)s::interval
      AND jsonb_typeof(n.info -> 'tasks') = 'array' AND (n.info -> 'tasks') ? g.task)
ORDER BY g.n DESC, g.task
LIMIT %(limit)s
