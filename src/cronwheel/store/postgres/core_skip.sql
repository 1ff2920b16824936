-- PostgreSQL: skipping occurrences of a job (store/core/skips.py), one transaction per
-- request. `:now` is the server's now().
-- Each block: what it does; [the index it relies on].

-- name: insert_skipped_firing
-- An occurrence skipped ahead of the leader: its firing is born SKIPPED, so the
-- leader's later insert of that instant is a duplicate and it never runs. Nothing when
-- the instant has a firing already. [firings (job_id, scheduled_for)]
INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, due_at, vdeadline,
                     state, max_attempts, priority, visibility_us, enqueued_at, enqueued_epoch,
                     note, shard, finished_at, reason)
SELECT id, namespace, name, task, payload, %(scheduled_for)s, %(scheduled_for)s,
       %(scheduled_for)s, 'skipped', max_attempts, priority, visibility_us, :now, NULL, NULL,
       shard, :now, %(reason)s
FROM jobs WHERE id = %(job_id)s
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id, state

-- name: firing_at
-- The firing of one occurrence of a job. [firings (job_id, scheduled_for)]
SELECT id, state FROM firings WHERE job_id = %(job_id)s AND scheduled_for = %(scheduled_for)s

-- name: skip_unstarted
-- A queued or held firing of the occurrence skipped at once (a CAS like cancel_queued):
-- a held one's `start` then fails, and its worker lets it go on its cancel poll.
-- [firings primary key]
UPDATE firings
SET state = 'skipped', reason = %(reason)s, finished_at = :now, claim_token = NULL,
    lease_until = NULL, cancel_requested_at = CASE WHEN state = 'claimed' THEN :now END
WHERE id = %(id)s AND state IN ('queued', 'claimed')
RETURNING id, state
