-- SQLite: a firing's recorded attempts (store/core/flows.py, list_attempts). The
-- PostgreSQL engine defines the same names in its core_attempts.sql.

-- name: list_attempts
-- A firing's recorded attempts (failed, lease expired), in order; its current one is
-- its row (domain/attempts.py). [firing_attempts primary key]
SELECT attempt, worker_id, claimed_at, started_at, finished_at, outcome, error
FROM firing_attempts WHERE firing_id = :id
ORDER BY attempt
