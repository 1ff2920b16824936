-- SQLite queries of SqliteStore. Instants are INTEGER microseconds UTC.

-- name: insert_job
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at, shard,
                  max_concurrency, overlap, max_buffer, cancel_grace_us, start_deadline_us,
                  bounds, remaining_runs)
VALUES (:namespace, :name, :task, :schedule, :payload, :policies, :spec_hash, :priority,
        :max_attempts, :visibility_us, :paused, :next_fire_at, :now, :now, :shard,
        :max_concurrency, :overlap, :max_buffer, :cancel_grace_us, :start_deadline_us,
        :bounds, :remaining_runs)
RETURNING *

-- name: insert_job_bulk
INSERT INTO jobs (namespace, name, task, schedule, payload, policies, spec_hash, priority,
                  max_attempts, visibility_us, paused, next_fire_at, created_at, updated_at, shard,
                  max_concurrency, overlap, max_buffer, cancel_grace_us, start_deadline_us,
                  bounds, remaining_runs)
VALUES (:namespace, :name, :task, :schedule, :payload, :policies, :spec_hash, :priority,
        :max_attempts, :visibility_us, :paused, :next_fire_at, :now, :now, :shard,
        :max_concurrency, :overlap, :max_buffer, :cancel_grace_us, :start_deadline_us,
        :bounds, :remaining_runs)

-- name: update_job_spec
UPDATE jobs
SET task = :task, schedule = :schedule, payload = :payload, policies = :policies,
    spec_hash = :spec_hash, priority = :priority, max_attempts = :max_attempts,
    visibility_us = :visibility_us, next_fire_at = :next_fire_at, updated_at = :now,
    max_concurrency = :max_concurrency, overlap = :overlap, max_buffer = :max_buffer,
    cancel_grace_us = :cancel_grace_us, start_deadline_us = :start_deadline_us,
    remaining_runs = CASE WHEN bounds = :bounds THEN remaining_runs ELSE :remaining_runs END,
    bounds = :bounds
WHERE id = :id
RETURNING *

-- name: bump_jobs_version
INSERT INTO meta (key, value) VALUES ('jobs_version', '1')
ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1

-- name: due_jobs
-- keyset paging on (next_fire_at, id): a page boundary never splits a herd
SELECT * FROM jobs
WHERE paused = 0 AND next_fire_at IS NOT NULL AND next_fire_at <= :horizon
  AND next_fire_at >= :after_at AND (next_fire_at > :after_at OR id > :after_id)
ORDER BY next_fire_at, id
LIMIT :limit

-- name: fence_check
SELECT epoch FROM leases
WHERE name = :name AND holder = :holder AND epoch = :epoch AND expires_at > :now

-- name: advance_job
UPDATE jobs
SET next_fire_at = CASE WHEN remaining_runs IS NOT NULL AND remaining_runs - :runs <= 0
                        THEN NULL ELSE :new_next END,
    remaining_runs = CASE WHEN remaining_runs IS NULL THEN NULL
                          ELSE max(remaining_runs - :runs, 0) END,
    last_fired_at = COALESCE(:last_fired, last_fired_at),
    missed_total = missed_total + :missed
WHERE id = :job_id AND next_fire_at = :expected AND paused = 0

-- name: insert_firing
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at, vdeadline,
                     state, max_attempts, priority, visibility_us, enqueued_at, enqueued_epoch,
                     note, shard)
SELECT id, namespace, name, task, payload, :scheduled_for, :due_at, :vdeadline,
       'queued', max_attempts, priority, visibility_us, :now, :epoch, :note, shard
FROM jobs WHERE id = :job_id
ON CONFLICT (job_id, scheduled_for) DO NOTHING

-- name: insert_event
INSERT INTO job_events (job_id, at, kind, first_at, last_at, count, exact, detail)
VALUES (:job_id, :now, :kind, :first_at, :last_at, :count, :exact, :detail)

-- name: claim
UPDATE firings
SET state = 'running',
    attempt = attempt + 1,
    claim_token = lower(hex(randomblob(16))),
    worker_id = :worker_id,
    lease_until = :now + visibility_us,
    started_at = NULL,
    finished_at = NULL
WHERE id IN (
    SELECT id FROM firings
    WHERE state = 'queued' AND due_at <= :until
      AND task IN (SELECT value FROM json_each(:tasks))
    ORDER BY vdeadline
    LIMIT :limit
)
RETURNING *

-- name: heartbeat
UPDATE firings SET lease_until = :now + visibility_us
WHERE id = :id AND claim_token = :token AND state = 'running'

-- name: complete_successes
-- many successes in one statement: :batch is a JSON array of [id, token, started_at, finished_at]
UPDATE firings
SET state = 'succeeded', started_at = c.started_at, finished_at = c.finished_at,
    lease_until = NULL, error = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS started_at, json_extract(value, '$[3]') AS finished_at
      FROM json_each(:batch)) AS c
WHERE firings.id = c.id AND firings.claim_token = c.token AND firings.state = 'running'
RETURNING firings.id, firings.claim_token

-- name: complete_failure
UPDATE firings
SET state = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts THEN 'queued' ELSE 'dead' END,
    vdeadline = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts
                     THEN :retry_at + (vdeadline - due_at) ELSE vdeadline END,
    due_at = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts THEN :retry_at ELSE due_at END,
    finished_at = CASE WHEN :retry_at IS NOT NULL AND attempt < max_attempts THEN NULL ELSE :finished_at END,
    started_at = :started_at, claim_token = NULL, lease_until = NULL, error = :error
WHERE id = :id AND claim_token = :token AND state = 'running'
RETURNING attempt, worker_id

-- name: insert_attempt
INSERT OR REPLACE INTO firing_attempts (firing_id, attempt, worker_id, started_at, finished_at, outcome, error)
VALUES (:firing_id, :attempt, :worker_id, :started_at, :finished_at, :outcome, :error)

-- name: expired_claims
SELECT id, attempt, max_attempts, worker_id, started_at FROM firings
WHERE state = 'running' AND lease_until < :now
ORDER BY lease_until
LIMIT :limit

-- name: expire_claim
UPDATE firings
SET state = CASE WHEN attempt >= max_attempts THEN 'dead' ELSE 'queued' END,
    finished_at = CASE WHEN attempt >= max_attempts THEN :now ELSE NULL END,
    vdeadline = :now + (vdeadline - due_at),
    due_at = CASE WHEN attempt >= max_attempts THEN due_at ELSE :now END,
    claim_token = NULL, lease_until = NULL,
    error = 'lease expired: worker ' || coalesce(worker_id, '?') || ' stopped heartbeating'
WHERE id = :id AND state = 'running' AND lease_until < :now

-- name: acquire_lease
INSERT INTO leases (name, holder, epoch, expires_at, acquired_at)
VALUES (:name, :holder, 1, :expires_at, :now)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                 THEN leases.epoch ELSE leases.epoch + 1 END,
    acquired_at = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > :now
                       THEN leases.acquired_at ELSE :now END,
    expires_at = excluded.expires_at
WHERE leases.expires_at <= :now OR leases.holder = excluded.holder
RETURNING *

-- name: status_counts
SELECT 'queued' AS state, count(*) AS n FROM firings WHERE state = 'queued'
UNION ALL
SELECT 'running', count(*) FROM firings WHERE state = 'running'
UNION ALL
SELECT state, count(*) FROM firings
WHERE finished_at IS NOT NULL AND finished_at >= :since
GROUP BY state

-- name: recent_lateness
SELECT started_at - scheduled_for AS lateness_us FROM firings
WHERE finished_at IS NOT NULL AND finished_at >= :since AND state = 'succeeded'
ORDER BY finished_at DESC
LIMIT :limit

-- name: redrive
UPDATE firings
SET state = 'queued', due_at = :now, vdeadline = :now + (vdeadline - due_at),
    max_attempts = attempt + (SELECT max_attempts FROM jobs WHERE jobs.id = firings.job_id),
    finished_at = NULL, claim_token = NULL, lease_until = NULL
WHERE id = :id AND state = 'dead'
RETURNING *

-- name: register_node
INSERT INTO nodes (id, kind, hostname, pid, started_at, heartbeat_at, wake_addr, info)
VALUES (:id, :kind, :hostname, :pid, :started_at, :now, :wake_addr, :info)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = excluded.heartbeat_at, wake_addr = excluded.wake_addr, info = excluded.info

-- name: cancel_queued
UPDATE firings
SET state = 'cancelled', finished_at = :now, claim_token = NULL, lease_until = NULL
WHERE id = :id AND state IN ('scheduled', 'queued')
RETURNING *

-- name: cancel_running
UPDATE firings SET cancel_requested_at = coalesce(cancel_requested_at, :now)
WHERE id = :id AND state = 'running'
RETURNING *

-- name: insert_token
INSERT INTO api_tokens (namespace, role, label, secret_hash, created_at)
VALUES (:namespace, :role, :label, :secret_hash, :now)
RETURNING *

-- name: revoke_token
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now)
WHERE id = :id
RETURNING *

-- name: insert_job_firing
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at, vdeadline,
                     state, max_attempts, priority, visibility_us, enqueued_at, enqueued_epoch,
                     note, shard, overlap_override)
SELECT id, namespace, name, task, payload, :scheduled_for, :due_at, :vdeadline,
       'queued', max_attempts, priority, visibility_us, :now, NULL, :note, shard, :overlap
FROM jobs WHERE id = :job_id
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING *

-- name: find_idempotency_key
SELECT request_hash, firing_id FROM idempotency_keys
WHERE namespace = :namespace AND key_hash = :key_hash

-- name: insert_idempotency_key
INSERT INTO idempotency_keys (namespace, key_hash, request_hash, firing_id, created_at)
VALUES (:namespace, :key_hash, :request_hash, :firing_id, :now)

-- name: job_backlog
SELECT job_name, count(*) AS n FROM firings
WHERE namespace = :namespace AND state IN ('queued', 'running')
GROUP BY job_name
ORDER BY n DESC, job_name
LIMIT :limit

-- name: claim_candidates
SELECT f.id, f.job_id, f.due_at, f.overlap_override,
       j.max_concurrency, j.overlap, j.max_buffer,
       (j.start_deadline_us IS NOT NULL AND f.due_at + j.start_deadline_us < :now) AS deadline_passed,
       -- no overlap policy to apply (store/claiming.py `capped`, and no override)
       (f.overlap_override IS NULL AND (j.max_concurrency IS NULL OR j.overlap = 'allow')) AS unpolicied
FROM firings f JOIN jobs j ON j.id = f.job_id
WHERE f.state = 'queued' AND f.due_at <= :until
  AND f.task IN (SELECT value FROM json_each(:tasks))
  AND NOT (f.buffered_at IS NOT NULL AND j.max_concurrency IS NOT NULL
           AND (SELECT count(*) FROM firings r
                WHERE r.job_id = f.job_id AND r.state = 'running') >= j.max_concurrency)
ORDER BY f.vdeadline
LIMIT :scan

-- name: claim_ids
UPDATE firings
SET state = 'running', attempt = attempt + 1, claim_token = lower(hex(randomblob(16))),
    worker_id = :worker_id, lease_until = :now + visibility_us, started_at = NULL,
    finished_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'
RETURNING *

-- name: running_count
SELECT count(*) AS n FROM firings WHERE job_id = :job_id AND state = 'running'

-- name: due_queued_of_job
SELECT id FROM firings
WHERE job_id = :job_id AND state = 'queued' AND due_at <= :now
ORDER BY scheduled_for

-- name: finish_unrun
UPDATE firings
SET state = :state, reason = :reason, finished_at = :now, claim_token = NULL, lease_until = NULL
WHERE id = :id AND state = 'queued'

-- name: cancel_running_of_job
UPDATE firings SET cancel_requested_at = coalesce(cancel_requested_at, :now),
                   reason = coalesce(reason, :reason)
WHERE job_id = :job_id AND state = 'running'

-- name: terminate_running_of_job
UPDATE firings
SET state = 'cancelled', reason = :reason, finished_at = :now, claim_token = NULL,
    lease_until = NULL, cancel_requested_at = coalesce(cancel_requested_at, :now)
WHERE job_id = :job_id AND state = 'running'

-- name: next_due_at
-- (named: with no statistics, SQLite otherwise walks all of firings_queued_job)
SELECT min(due_at) AS d FROM firings INDEXED BY firings_queued_due
WHERE state = 'queued' AND buffered_at IS NULL AND due_at > :now

-- name: fair_clock
SELECT j.namespace, j.priority, coalesce(c.vclock, 0) AS vclock
FROM jobs j LEFT JOIN fair_clocks c ON c.namespace = j.namespace
WHERE j.id = :job_id

-- name: save_fair_clock
INSERT INTO fair_clocks (namespace, vclock) VALUES (:namespace, :vclock)
ON CONFLICT (namespace) DO UPDATE SET vclock = max(vclock, excluded.vclock)

-- name: complete_cancelled
UPDATE firings
SET state = 'cancelled', started_at = :started_at, finished_at = :finished_at,
    lease_until = NULL, claim_token = NULL, reason = coalesce(reason, 'cancelled: the handler stopped'),
    error = :error
WHERE id = :id AND claim_token = :token AND state = 'running'
RETURNING attempt

-- name: cancel_deadline_passed
UPDATE firings
SET state = 'cancelled', finished_at = :now, claim_token = NULL, lease_until = NULL,
    reason = 'cancel grace expired: lease revoked, a late result will be rejected'
WHERE id IN (
    SELECT f.id FROM firings f JOIN jobs j ON j.id = f.job_id
    WHERE f.state = 'running' AND f.cancel_requested_at IS NOT NULL
      AND f.cancel_requested_at + j.cancel_grace_us < :now
    LIMIT :limit
)

-- name: start_deadline_passed
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

-- name: mark_buffered
UPDATE firings SET buffered_at = coalesce(buffered_at, :now) WHERE id = :id AND state = 'queued'
