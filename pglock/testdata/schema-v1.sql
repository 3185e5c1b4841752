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
-- owner and granted_at describe the last grant, for listings; held is true
-- from a grant until its release through distlock_release, so that it is
-- still true when a grant ended otherwise (its session was terminated or
-- broke).
--
-- distlock_resource: one row per resource fenced with distlock_admit, with
-- the highest token admitted for it.

CREATE TABLE IF NOT EXISTS distlock_fence (
    key        text PRIMARY KEY,
    token      bigint NOT NULL CHECK (token > 0),
    owner      text NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL DEFAULT now(),
    held       boolean NOT NULL DEFAULT false
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
--
-- If the key's previous grant was not released (its session ended while
-- it held the lock), it waits loss_grace before granting, with the lock
-- held: the server released the lock as it told the previous holder that
-- its session was ending, and the grace lets that holder act on the news
-- before anyone else can write with a newer token.
CREATE OR REPLACE FUNCTION distlock_acquire(lock_key text, wait boolean, lock_owner text, loss_grace interval)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    granted bigint;
    lost    boolean;
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
    SELECT f.held INTO lost FROM distlock_fence f WHERE f.key = lock_key;
    IF lost AND loss_grace > interval '0' THEN
        PERFORM pg_sleep(extract(epoch FROM loss_grace));
    END IF;
    INSERT INTO distlock_fence AS f (key, token, owner, granted_at, held)
    VALUES (lock_key, 1, coalesce(lock_owner, ''), clock_timestamp(), true)
    ON CONFLICT (key) DO UPDATE
        SET token = f.token + 1, owner = EXCLUDED.owner, granted_at = EXCLUDED.granted_at, held = true
    RETURNING f.token INTO granted;
    RETURN granted;
END
$$;

-- distlock_release marks the grant with lock_token released, commits
-- that, and then unlocks lock_key's advisory lock, so that the next holder
-- sees the grant released and does not wait for the loss grace. It sets
-- released to false, and changes nothing, if this session did not hold
-- the lock. It is a procedure (CALL distlock_release(key, token)), for its
-- COMMIT: it must not be called inside a transaction block.
CREATE OR REPLACE PROCEDURE distlock_release(lock_key text, lock_token bigint, INOUT released boolean DEFAULT NULL)
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
            AND mode = 'ExclusiveLock' AND objsubid = 1
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND ((classid::int8 << 32) | objid::int8) = hashtextextended(lock_key, 0)) THEN
        released := false;
        RETURN;
    END IF;
    UPDATE distlock_fence SET held = false WHERE key = lock_key AND token = lock_token;
    COMMIT;
    released := pg_advisory_unlock(hashtextextended(lock_key, 0));
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
