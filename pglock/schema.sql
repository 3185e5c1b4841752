-- Schema of package pglock (github.com/distlock/distlock/pglock), version 1.
--
-- A Backend runs this on first use if the objects are missing (Migrate does
-- it explicitly); an operator can run it instead with
--     psql -v ON_ERROR_STOP=1 -f schema.sql
-- in the database and schema (the first of the search_path) the Backend's
-- connections use. It is idempotent.
--
-- distlock_fence: one row per lock key ever granted, with the key's last
-- token. It is a logged table so that tokens survive a crash and restart.
-- owner and granted_at describe the last grant, for listings.
--
-- distlock_resource: one row per resource fenced with distlock_admit, with
-- the highest token admitted for it.

CREATE TABLE IF NOT EXISTS distlock_fence (
    key        text PRIMARY KEY,
    token      bigint NOT NULL CHECK (token > 0),
    owner      text NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS distlock_resource (
    resource text PRIMARY KEY,
    token    bigint NOT NULL CHECK (token > 0)
);

-- distlock_acquire takes the session advisory lock of lock_key
-- (pg_advisory_lock(hashtextextended(lock_key, 0)), waiting in the server's
-- lock queue when wait is true, or trying once), then, and only then,
-- increments the key's token and returns it. It returns NULL when a try
-- finds the lock held. The statements of a PL/pgSQL function run in order,
-- so the token is never incremented by a session that does not hold the
-- lock. The lock is a session lock: it outlives the statement and is kept
-- even if the transaction fails, so a caller that gets an error must
-- unlock or close the session.
CREATE OR REPLACE FUNCTION distlock_acquire(lock_key text, wait boolean, lock_owner text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    granted bigint;
BEGIN
    IF wait THEN
        PERFORM pg_advisory_lock(hashtextextended(lock_key, 0));
    ELSIF NOT pg_try_advisory_lock(hashtextextended(lock_key, 0)) THEN
        RETURN NULL;
    END IF;
    -- A token must be durable before it is handed out, or a crash could
    -- hand it out again.
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    INSERT INTO distlock_fence AS f (key, token, owner, granted_at)
    VALUES (lock_key, 1, coalesce(lock_owner, ''), now())
    ON CONFLICT (key) DO UPDATE
        SET token = f.token + 1, owner = EXCLUDED.owner, granted_at = EXCLUDED.granted_at
    RETURNING f.token INTO granted;
    RETURN granted;
END
$$;

-- distlock_admit admits fence_token for fenced_resource if it is at least
-- the highest token admitted so far, and records it; otherwise it raises
-- SQLSTATE 'DL001' (its DETAIL is the highest token admitted), which aborts
-- the transaction, writes and all. The admitted row stays locked until the
-- transaction ends, so the check and the transaction's writes are one
-- atomic step: a stale writer cannot commit after a newer one has
-- admitted its token. Call it in the transaction that writes the resource,
-- from any client, or from a trigger.
CREATE OR REPLACE FUNCTION distlock_admit(fenced_resource text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    highest bigint;
BEGIN
    IF fenced_resource IS NULL OR fence_token IS NULL OR fence_token <= 0 THEN
        RAISE EXCEPTION 'distlock: fence: resource % with token %: a resource and a positive token are required',
            quote_nullable(fenced_resource), quote_nullable(fence_token)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO distlock_resource AS r (resource, token)
    VALUES (fenced_resource, fence_token)
    ON CONFLICT (resource) DO UPDATE
        SET token = EXCLUDED.token
        WHERE r.token <= EXCLUDED.token
    RETURNING r.token INTO highest;
    IF NOT FOUND THEN
        SELECT r.token INTO highest FROM distlock_resource r WHERE r.resource = fenced_resource;
        RAISE EXCEPTION 'distlock: fence: stale token % for %: % already admitted',
            fence_token, quote_literal(fenced_resource), highest
            USING ERRCODE = 'DL001', DETAIL = highest::text;
    END IF;
    RETURN highest;
END
$$;
