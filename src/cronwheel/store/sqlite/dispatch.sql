-- SQLite: the writes that create work (store/sqlite/dispatch.py) and the reaper.
-- Instants are INTEGER microseconds UTC; `:now` is the unit of work's clock reading.
-- Each block: what it does; [the index it relies on].

-- name: now
-- The unit of work's clock reading.
SELECT :now AS now

-- name: insert_now_job
-- enqueue_now: the one-shot job, fired now (no cursor).
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, last_fired_at, created_at,
                  updated_at, shard, max_concurrency, overlap, max_buffer, cancel_grace_us,
                  start_deadline_us, bounds, remaining_runs, trace_context)
VALUES (:namespace, :name, :task, :schedule, :payload, :policies, :spec_hash, :priority,
        :max_attempts, :visibility_us, :paused, NULL, :now, :now, :now, :shard,
        :max_concurrency, :overlap, :max_buffer, :cancel_grace_us, :start_deadline_us,
        :bounds, :remaining_runs, :trace_context)
RETURNING id, last_fired_at

-- name: insert_job_firing
-- enqueue_now and add_firings: a queued firing of a job, outside the leader's
-- enqueue (no epoch). Nothing when the instant has one. [firings (job_id, scheduled_for)]
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at, vdeadline,
                     state, max_attempts, priority, visibility_us, enqueued_at, enqueued_epoch,
                     note, shard, overlap_override)
SELECT id, namespace, name, task, payload, :scheduled_for, :due_at, :vdeadline,
       'queued', max_attempts, priority, visibility_us, :now, NULL, :note, shard, :overlap
FROM jobs WHERE id = :job_id
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING *

-- name: advance_job
-- The cursor compare-and-swap of one job; the run budget shrinks by :runs and the
-- cursor is cleared when it is used up. [jobs primary key]
UPDATE jobs
SET next_fire_at = CASE WHEN remaining_runs IS NOT NULL AND remaining_runs - :runs <= 0
                        THEN NULL ELSE :new_next END,
    remaining_runs = CASE WHEN remaining_runs IS NULL THEN NULL
                          ELSE max(remaining_runs - :runs, 0) END,
    last_fired_at = COALESCE(:last_fired, last_fired_at),
    missed_total = missed_total + :missed
WHERE id = :job_id AND next_fire_at = :expected AND paused = 0

-- name: insert_firing
-- One firing of the leader's enqueue, fenced by its epoch; a duplicate instant is
-- rejected by the unique key. [firings (job_id, scheduled_for)]
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at, vdeadline,
                     state, max_attempts, priority, visibility_us, enqueued_at, enqueued_epoch,
                     note, shard)
SELECT id, namespace, name, task, payload, :scheduled_for, :due_at, :vdeadline,
       'queued', max_attempts, priority, visibility_us, :now, :epoch, :note, shard
FROM jobs WHERE id = :job_id
ON CONFLICT (job_id, scheduled_for) DO NOTHING

-- name: insert_missed_event
-- A range of missed instants, recorded for `jobs explain`.
INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
VALUES (:job_id, :now, 'missed', :first_at, :last_at, :count, :exact, :detail)

-- name: fair_clock
-- A job's namespace, priority and the namespace's virtual clock (core/fair.py).
SELECT j.namespace, j.priority, coalesce(c.vclock, 0) AS vclock
FROM jobs j LEFT JOIN fair_clocks c ON c.namespace = j.namespace
WHERE j.id = :job_id

-- name: save_fair_clock
-- A namespace's virtual clock written back; it never goes back.
INSERT INTO fair_clocks (namespace, vclock) VALUES (:namespace, :vclock)
ON CONFLICT (namespace) DO UPDATE SET vclock = max(vclock, excluded.vclock)

-- name: expired_claims
-- The reaper: held or running firings whose claim lease expired, oldest first.
-- [firings_lease]
SELECT id, state, attempt, worker_id, claimed_at, started_at FROM firings
WHERE state IN ('claimed', 'running') AND lease_until < :now
ORDER BY lease_until
LIMIT :limit

-- name: expire_claim
-- One expired claim. Held, never started: back to queued as it was, its attempt given
-- back. Running and asked to stop: cancelled, never run again. Otherwise back to
-- queued (due now), or dead when its attempts are used up. Every SET sees the old row.
UPDATE firings
SET state = CASE WHEN state = 'claimed' THEN 'queued'
                 WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                 WHEN attempt >= max_attempts THEN 'dead' ELSE 'queued' END,
    attempt = CASE WHEN state = 'claimed' THEN attempt - 1 ELSE attempt END,
    finished_at = CASE WHEN state = 'running'
                            AND (cancel_requested_at IS NOT NULL OR attempt >= max_attempts)
                       THEN :now END,
    vdeadline = CASE WHEN state = 'claimed' THEN vdeadline
                     ELSE :now + (vdeadline - due_at) END,
    due_at = CASE WHEN state = 'claimed' OR attempt >= max_attempts
                       OR cancel_requested_at IS NOT NULL THEN due_at ELSE :now END,
    claim_token = NULL, lease_until = NULL, claimed_at = NULL,
    error = CASE WHEN state = 'claimed' THEN error
                 ELSE 'lease expired: worker ' || coalesce(worker_id, '?')
                      || ' stopped heartbeating' END,
    reason = CASE WHEN state = 'running' AND cancel_requested_at IS NOT NULL
                  THEN coalesce(reason, 'cancel requested; the worker stopped heartbeating')
                  ELSE reason END
WHERE id = :id AND state IN ('claimed', 'running') AND lease_until < :now

-- name: insert_attempt
-- One attempt's record (expired, failed). [firing_attempts primary key]
INSERT OR REPLACE INTO firing_attempts (firing_id, attempt, worker_id, claimed_at, started_at,
                                        finished_at, outcome, error)
VALUES (:firing_id, :attempt, :worker_id, :claimed_at, :started_at, :finished_at, :outcome,
        :error)

-- name: cancel_deadline_passed
-- The reaper: running firings asked to stop longer than their job's cancel grace
-- ago end cancelled, the lease revoked (a late result is rejected). [firings_held_job:
-- its predicate written out, so that the reaper's pass reads only the held firings]
UPDATE firings
SET state = 'cancelled', finished_at = :now, claim_token = NULL, lease_until = NULL,
    reason = 'cancel grace expired: lease revoked, a late result will be rejected'
WHERE id IN (
    SELECT f.id FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state IN ('claimed', 'running') AND f.state = 'running'
      AND f.cancel_requested_at IS NOT NULL
      AND f.cancel_requested_at + j.cancel_grace_us < :now
    LIMIT :limit
)

-- name: start_deadline_passed
-- The reaper: queued firings past their job's start deadline end missed.
-- [jobs_start_deadline, firings_queued_job]
UPDATE firings
SET state = 'missed', finished_at = :now,
    reason = 'start deadline passed before a worker could start it'
WHERE id IN (
    -- from the jobs that have a start deadline (jobs_start_deadline: usually few), each
    -- one's queued firings by index; not a walk of every queued firing once a second
    -- (CROSS JOIN: in SQLite, the order written is the loop order, jobs outside)
    SELECT f.id FROM jobs j INDEXED BY jobs_start_deadline
    CROSS JOIN firings f
    WHERE f.job_id = j.id AND j.start_deadline_us IS NOT NULL AND f.state = 'queued'
      AND f.due_at < :now - j.start_deadline_us
    LIMIT :limit
)

-- name: jobs_max_id
-- Bulk registration: the highest job id so far (AUTOINCREMENT: every new one is higher).
SELECT coalesce(max(id), 0) AS id FROM jobs

-- name: jobs_after_id
-- Bulk registration: the jobs just inserted under the writer lock (ids above the
-- highest before). [jobs primary key]
SELECT id, namespace, name, created_at FROM jobs WHERE id > :after_id ORDER BY id

-- name: freelist_count
-- Free pages in the file (pruning frees them; see incremental_vacuum).
SELECT freelist_count AS n FROM pragma_freelist_count()

-- name: incremental_vacuum
-- One free page returned to the file system (auto_vacuum=INCREMENTAL). One page per
-- statement: the pragma yields a row per page, and Python's sqlite3 steps a statement
-- without result columns once, so the caller repeats it.
PRAGMA incremental_vacuum(1)
