-- PostgreSQL: a firing's recorded attempts (store/core/flows.py, list_attempts and
-- firing_with_attempts). The SQLite engine defines the same names in its core_attempts.sql.

-- name: list_attempts
-- A firing's recorded attempts (failed, lease expired), in order; its current one is
-- its row (domain/attempts.py). [firing_attempts primary key]
SELECT attempt, worker_id, claimed_at, started_at, finished_at, outcome, error
FROM firing_attempts WHERE firing_id = %(id)s
ORDER BY attempt

-- name: firing_with_attempts
-- A firing and its recorded attempts in one statement: one row per attempt (a_* columns),
-- or one row with a_attempt NULL when it has none; no row when there is no such firing.
-- [firings primary key, firing_attempts primary key]
SELECT f.*, a.attempt AS a_attempt, a.worker_id AS a_worker_id, a.claimed_at AS a_claimed_at,
       a.started_at AS a_started_at, a.finished_at AS a_finished_at, a.outcome AS a_outcome,
       a.error AS a_error
FROM firings f LEFT JOIN firing_attempts a ON a.firing_id = f.id
WHERE f.id = %(id)s
ORDER BY a.attempt
