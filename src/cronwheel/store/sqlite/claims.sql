-- SQLite: the worker's side (store/sqlite/claims.py). Instants are INTEGER microseconds
-- UTC; `:now` is the unit of work's clock reading. Each block: what it does; [the index
-- it relies on].

-- name: claim_candidates
-- Claim candidates in virtual deadline order with what store/claiming.py needs
-- to decide each; firings a cap holds back (buffered while the job is at its cap) are
-- passed over, and so are the namespaces at their running quota (:full, a JSON array).
-- [firings_claim]
SELECT f.id, f.job_id, f.namespace, f.vdeadline, f.due_at, f.overlap_override,
       j.max_concurrency, j.overlap, j.max_buffer,
       (j.start_deadline_us IS NOT NULL AND f.due_at + j.start_deadline_us < :now) AS deadline_passed,
       -- no overlap policy to apply (store/claiming.py `capped`, and no override)
       (f.overlap_override IS NULL AND (j.max_concurrency IS NULL OR j.overlap = 'allow')) AS unpolicied
FROM firings f JOIN jobs j ON j.id = f.job_id
WHERE f.state = 'queued' AND f.due_at <= :until
  AND f.task IN (SELECT value FROM json_each(:tasks))
  AND f.namespace NOT IN (SELECT value FROM json_each(:full))
  AND NOT (f.buffered_at IS NOT NULL AND j.max_concurrency IS NOT NULL
           AND (SELECT count(*) FROM firings r
                WHERE r.job_id = f.job_id AND r.state IN ('claimed', 'running'))
               >= j.max_concurrency)
ORDER BY f.vdeadline
LIMIT :scan

-- name: claim_ids
-- The chosen firings claimed, in plan order (the JSON array's keys): a fresh claim
-- token and a visibility lease each. The first :start of them, if due, start at once
-- (RUNNING: the worker calls their handlers as this returns); the others are held
-- (CLAIMED) until `start`. The attempt is counted at the claim (a held firing whose
-- lease expires gives it back: expire_claim).
UPDATE firings
SET state = CASE WHEN c.key < :start AND firings.due_at <= :now THEN 'running'
                 ELSE 'claimed' END,
    started_at = CASE WHEN c.key < :start AND firings.due_at <= :now THEN :now END,
    attempt = attempt + 1, claim_token = lower(hex(randomblob(16))),
    worker_id = :worker_id, lease_until = :now + visibility_us, claimed_at = :now,
    finished_at = NULL, buffered_at = NULL  -- a retry of it is hinted again (next_due_at)
FROM json_each(:ids) AS c
WHERE firings.id = c.value AND firings.state = 'queued'
RETURNING *

-- name: job_policies
-- The stored policies (and trace context) of the claimed firings' jobs. [jobs primary key]
SELECT id, policies, trace_context FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: running_count
-- A capped job's held firings (claimed or running): what its cap counts. [firings_held_job]
SELECT count(*) AS n FROM firings WHERE job_id = :job_id AND state IN ('claimed', 'running')

-- name: due_queued_of_job
-- A capped job's due queued firings, oldest first. [firings_queued_job]
SELECT id FROM firings
WHERE job_id = :job_id AND state = 'queued' AND due_at <= :now
ORDER BY scheduled_for

-- name: finish_unrun
-- A queued firing the plan decided not to run: skipped or missed.
UPDATE firings
SET state = :state, reason = :reason, finished_at = :now, claim_token = NULL, lease_until = NULL
WHERE id = :id AND state = 'queued'

-- name: mark_buffered
-- Due firings kept waiting by their job's overlap policy: claim scans pass over
-- them while the job stays at its cap (store/claiming.py, ClaimPlan.buffered).
UPDATE firings SET buffered_at = coalesce(buffered_at, :now)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'

-- name: cancel_running_of_job
-- cancel_other: the job's running firings asked to stop; its held (claimed) ones,
-- never started, cancelled at once. [firings_held_job]
UPDATE firings
SET state = CASE WHEN state = 'claimed' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'claimed' THEN :now ELSE finished_at END,
    claim_token = CASE WHEN state = 'claimed' THEN NULL ELSE claim_token END,
    lease_until = CASE WHEN state = 'claimed' THEN NULL ELSE lease_until END,
    cancel_requested_at = coalesce(cancel_requested_at, :now),
    reason = coalesce(reason, :reason)
WHERE job_id = :job_id AND state IN ('claimed', 'running')

-- name: terminate_running_of_job
-- terminate_other: the job's held and running firings ended cancelled, their leases
-- revoked (a late result is rejected). [firings_held_job]
UPDATE firings
SET state = 'cancelled', reason = :reason, finished_at = :now, claim_token = NULL,
    lease_until = NULL, cancel_requested_at = coalesce(cancel_requested_at, :now)
WHERE job_id = :job_id AND state IN ('claimed', 'running')

-- name: heartbeat
-- A held or running claim's lease renewed, if this claim token still holds it.
-- [firings primary key]
UPDATE firings SET lease_until = :now + visibility_us
WHERE id = :id AND claim_token = :token AND state IN ('claimed', 'running')

-- name: complete_successes
-- Many successes in one statement: :batch is a JSON array of
-- [id, token, started_at, finished_at]; each a CAS on (running, claim token).
UPDATE firings
SET state = 'succeeded', started_at = c.started_at, finished_at = c.finished_at,
    lease_until = NULL, error = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS started_at, json_extract(value, '$[3]') AS finished_at
      FROM json_each(:batch)) AS c
WHERE firings.id = c.id AND firings.claim_token = c.token AND firings.state = 'running'
RETURNING firings.id, firings.claim_token

-- name: complete_failure
-- A failure: queued again at :retry_at while attempts are left, else dead; a firing
-- whose cancel was requested is not retried (cancelled). A CAS on (running, claim token).
UPDATE firings
SET state = CASE WHEN :retry_at IS NULL OR attempt >= max_attempts THEN 'dead'
                 WHEN cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'queued' END,
    vdeadline = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts
                          AND cancel_requested_at IS NULL
                     THEN :retry_at + (vdeadline - due_at) ELSE vdeadline END,
    due_at = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts
                       AND cancel_requested_at IS NULL THEN :retry_at ELSE due_at END,
    finished_at = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts
                            AND cancel_requested_at IS NULL THEN NULL ELSE :finished_at END,
    reason = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts
                       AND cancel_requested_at IS NOT NULL
                  THEN coalesce(reason, 'cancel requested; the attempt failed and is not retried')
                  ELSE reason END,
    started_at = :started_at, claim_token = NULL, lease_until = NULL, error = :error
WHERE id = :id AND claim_token = :token AND state = 'running'
RETURNING attempt, worker_id, claimed_at

-- name: complete_cancelled
-- A handler that stopped on a cancellation request: cancelled.
UPDATE firings
SET state = 'cancelled', started_at = :started_at, finished_at = :finished_at,
    lease_until = NULL, claim_token = NULL, reason = coalesce(reason, 'cancelled: the handler stopped'),
    error = :error
WHERE id = :id AND claim_token = :token AND state = 'running'
RETURNING attempt

-- name: start_peek
-- `start`'s rows read, before the instant: the held start's warm-up (claims.py).
SELECT firings.id, firings.state
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:batch)) AS c
JOIN firings ON firings.id = c.id AND firings.claim_token = c.token
