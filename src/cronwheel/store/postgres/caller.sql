-- PostgreSQL: the statements around a write on a caller's own connection
-- (store/postgres/caller.py). The store's writes themselves are the usual blocks.

-- name: caller_settings
-- The session settings a write on a caller's connection changes for its own statements
-- (and puts back before it returns): the schema search path and the time zone.
SELECT current_setting('search_path') AS search_path, current_setting('TimeZone') AS timezone

-- name: caller_enter
-- Inside the write's savepoint: the store's search path and UTC, for this transaction
-- only (set_config's is_local; undone by a rollback to the savepoint).
SELECT set_config('search_path', %(search_path)s, true) AS search_path,
       set_config('TimeZone', 'UTC', true) AS timezone

-- name: caller_restore
-- Before the write's savepoint is released: the caller's values again.
SELECT set_config('search_path', %(search_path)s, true) AS search_path,
       set_config('TimeZone', %(timezone)s, true) AS timezone
