-- Schema of package pglock (github.com/distlock/distlock/pglock), version 9.
--
-- A Backend runs this on first use if the objects are missing or of an
-- earlier version (Migrate does it explicitly); an operator can run it
-- instead with
--     psql -v ON_ERROR_STOP=1 -f schema.sql
-- in the database and schema (the first of the search_path) the Backend's
-- connections use. It is idempotent, and it migrates a schema of an
-- earlier version in place.
--
-- Version 4 makes the schema safe in a schema where other roles may create
-- objects (public, before PostgreSQL 15): every function runs with
-- search_path pg_catalog, pg_temp (the temporary schema is never searched
-- for functions and operators, and last for tables and types), names the schema's own tables and
-- functions with their schema, and types its literals, so that no function
-- or operator that another role created, even an exact match for an
-- argument type where pg_catalog's needs a cast, is ever called; and no
-- table of the session's temporary schema is taken for one of the
-- schema's. The objects are created in one DO block, which puts the name
-- of the schema they are created in (the current schema) where the SQL
-- below says @schema@. A Backend refuses objects, and a schema holding
-- them, owned by a role it does not trust (see the package documentation).
-- Version 4 also adds the tombstones of lease-table mode
-- (distlock_lease_abandoned, distlock_lease_abandon), so that a try that
-- reaches the server after the clean-up of its Acquire does nothing.
-- Version 5 announces the holders of watched keys: every grant, release
-- and change of owner of a key whose row is marked watched (watched_until,
-- a column of distlock_fence and distlock_lease, in the future) sends
-- NOTIFY distlock_holder with the key as the payload, in its own
-- transaction; except, in session mode, a release by distlock_release
-- (that of the first version's Backends), or by a plain unlock (a
-- release whose row names a later grant), which a session-mode watcher
-- learns of from its poll of pg_locks, as of a session that ended. A watcher marks the row of its key, and renews the mark,
-- while it LISTENs; a key nobody watches costs no notification. The mark
-- is a column of the row every such statement already updates, so that
-- the statement reads the mark of the row's latest version, after any
-- mark committed or in progress (an UPDATE waits for a concurrent one and
-- then sees its row), and a watcher's mark waits for a grant in progress:
-- a change is either notified, or committed before the mark, and read by
-- the watcher after it. Version 5 also records the session of each
-- session-mode grant (distlock_fence.pid, with the token of the grant
-- that wrote it, pid_token), so that the holder read is that grant's and
-- not the next one's, in progress.
-- Version 6 adds the permits of counting semaphores, in both modes: the
-- tables distlock_semaphore, distlock_permit and distlock_permit_waiter,
-- and the functions distlock_permit_acquire, distlock_permit_refresh,
-- distlock_permit_release, distlock_permit_leave and
-- distlock_permit_abandon. It changes nothing of the earlier objects, so
-- that Backends of version 5 work beside those of version 6, and an
-- earlier version's Migrate, run again, leaves the permits' objects as
-- they are.
-- Version 7 adds the shared (read) locks of session mode: the table
-- distlock_reader and the function distlock_acquire_shared. A shared
-- grant is pg_advisory_lock_shared on the key's own lock id, which the
-- exclusive grants of distlock_acquire (and psql's pg_advisory_lock of
-- that id) exclude; its token is drawn from the key's row in
-- distlock_fence, as a lock's is. It changes nothing of the earlier
-- objects, so that Backends of version 6 work beside those of version 7
-- (their locks exclude the new readers, in the server's lock queue).
-- Version 8 adds the shared (read) locks of lease-table mode: the table
-- distlock_lease_reader, one row per reader with its own expiry, and the
-- functions distlock_lease_acquire_shared, distlock_lease_refresh_shared,
-- distlock_lease_release_shared and distlock_lease_wake_readers. Readers
-- keep writers out through the key's row of distlock_lease itself: while
-- readers hold the key, the row names no grant (grant_id NULL) and its
-- expires is at least the latest expiry of the live readers, so that
-- every version's exclusive grant, which takes the row only once expires
-- has passed, is refused; the last reader's release puts the row back
-- as released ('-infinity'). The exclusive functions of every earlier
-- version thus exclude readers as they are, also a call of one that
-- began before the migration committed, and after an earlier version's
-- Migrate run again. Version 8 replaces the lease-table functions that
-- release and queue (distlock_lease_wait, distlock_lease_leave,
-- distlock_lease_release, distlock_lease_abandon), with the same
-- arguments, so that a release wakes the readers queued together and an
-- abandoned reader's try is released: without them readers are granted
-- as safely, only woken later (by their polls) or, once abandoned, kept
-- until their TTL. A reader waits in distlock_lease_waiter, in the same
-- line as the writers, under a waiter name that starts with 'shared:'
-- (its grant id).
-- Version 9 reads the server's clock with clock_timestamp() in the
-- functions of lease-table mode and of the permits (distlock_lease_* and
-- distlock_permit_*), which compared expiries with now(), the start of
-- the transaction. A call that waited for a lock (a key's row, the
-- semaphore's row, a grant id's try lock) while the server's wall clock
-- stepped back then read a time from before the step, ahead of the clock
-- by which a grant renewed or made after the step had written its
-- expiry, and took that live grant for expired. Each statement now reads
-- the clock while it runs, after its snapshot and after any row lock it
-- waited for, so a backward step can only make a grant look longer, never
-- shorter. Every version's Backends work beside version 9's: the
-- functions keep their names and arguments, and only the clock they read
-- changes.
--
-- distlock_fence: one row per lock key ever granted or watched, with the
-- key's last token. It is a logged table so that tokens survive a crash
-- and restart.
-- owner and granted_at describe the last grant, for listings; held is true
-- from a grant until its release through distlock_release, so that it is
-- still true when a grant ended otherwise (its session was terminated or
-- broke). watched_until is the end of the watchers' mark (see above);
-- pid is the server pid of the session of the grant with the token
-- pid_token (0 and 0 before any grant of version 5), so that a reader
-- tells the last grant's session from the next grant's, which holds the
-- lock before its token commits (and, after a lost grant, for the loss
-- grace). A reader uses pid only while pid_token is the key's token: a
-- grant through an earlier version's distlock_acquire, which an earlier
-- version's Migrate may put back while Backends of this version run,
-- takes the next token and leaves pid as it was.
--
-- distlock_resource: one row per resource fenced with distlock_admit, with
-- the highest token admitted for it.
--
-- distlock_lease: the locks of lease-table mode, one row per key ever
-- granted in that mode. grant_id is the current grant's unguessable id
-- (NULL once released), which every refresh and release must name;
-- expires is when the grant ends unless refreshed, by the server's clock
-- ('-infinity' once released). A grant's token is taken from the key's
-- row in distlock_fence, so that a key's tokens increase across both
-- modes. watched_until is the end of the watchers' mark; a watcher of a
-- key never granted adds its row, released. A row with no grant_id whose
-- expires has not passed is held by readers (version 8): expires is then
-- no earlier than the expiry of any live reader of the key (see
-- distlock_lease_reader).
--
-- distlock_lease_waiter: the queue of lease-table mode, one row per
-- waiting Acquire (waiter is its grant id), in order of arrival (seq).
-- A waiter's row lives until expires unless the waiter renews it, which it
-- does with each try; a waiter that died is thus passed over once its row
-- expires, and its row is deleted by the next grant of the key.
--
-- distlock_lease_abandoned: the tombstones of lease-table mode, one row per
-- try given up by its Acquire (grant_id is the try's grant id, which also
-- names its waiter), kept until `until`: a try that reaches the server
-- after its clean-up (distlock_lease_abandon) finds it and does nothing.
-- The tries of permits (distlock_permit_abandon) leave theirs here too.
--
-- distlock_semaphore: one row per semaphore ever asked for a permit (key
-- is the semaphore's key), with the limit its permits agree on
-- (max_permits). The row is the semaphore's lock: every grant, release
-- and leave of its permits locks it (SELECT ... FOR UPDATE) until its
-- transaction ends, so that they run one at a time. The limit binds while
-- a permit of the semaphore is live or awaited; when none is, the next
-- asker sets it.
--
-- distlock_permit: the live permits, one row per permit, named by its
-- unguessable grant id, which every refresh and release must name. token
-- is drawn from the semaphore key's row in distlock_fence when the permit
-- is granted, so that it is above every earlier token of the key, a lock's
-- or a permit's; slot is the permit's slot (NULL for a permit asked
-- without one), unique among the semaphore's rows; expires is when the
-- permit ends unless refreshed, by the server's clock. A row whose expires
-- has passed is no permit: the next grant of the semaphore deletes it.
--
-- distlock_permit_waiter: the line of a semaphore, one row per waiting
-- AcquirePermit (waiter is the grant id it will have), in order of arrival
-- (seq). A waiter's row lives until expires unless the waiter renews it,
-- which it does with each try; a waiter that died is passed over once its
-- row expires, and the next try of the semaphore deletes its row.
--
-- distlock_reader: the shared grants of session mode, one row per session
-- (pid, its server pid) that holds a key's shared advisory lock through
-- this package, with the grant's token, owner and time. A row counts only
-- while its session holds the shared lock (pg_locks) and started before
-- the grant (a pid reused by a later session is not the grant's): a
-- release deletes its row, and the next shared grant of the key deletes
-- the rows whose sessions hold no shared lock of it, the rows of sessions
-- that ended.
--
-- distlock_lease_reader: the shared grants of lease-table mode, one row
-- per reader, named by its unguessable grant id (which starts with
-- 'shared:'), which every refresh and release must name, with its token
-- (drawn from the key's row in distlock_fence), owner, grant time and
-- expiry by the server's clock. A row whose expires has passed is no
-- grant: the key's next reader grant, or the reader's own release,
-- deletes it. Every grant, renewal and release of a reader first locks
-- the key's row of distlock_lease FOR UPDATE, and writes that row in the
-- same transaction as the reader's: a grant or renewal raises its expires
-- to the reader's expiry if it is earlier (and clears a grant_id found
-- expired), a release lowers it to the latest expiry of the readers left,
-- '-infinity' when none is. The key's row, whose expires is never before
-- a live reader's, is all an exclusive grant looks at: it is granted only
-- once every reader granted or renewed before it has expired or been
-- released, and a reader granted after it finds its grant_id. A renewal
-- or release finds a reader expired by the clock (clock_timestamp(),
-- read once the key's row is locked), not by the start of its
-- transaction, so that one that waited for the row lock past the
-- reader's expiry, while a writer was granted, fails.

DO $install$
DECLARE
    target pg_catalog.text := pg_catalog.quote_ident(pg_catalog.current_schema());
BEGIN
    IF target IS NULL THEN
        RAISE EXCEPTION 'distlock: schema: the search_path names no schema that exists to create the objects in'
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    EXECUTE pg_catalog.replace($schema$
CREATE TABLE IF NOT EXISTS @schema@.distlock_fence (
    key        text PRIMARY KEY,
    token      bigint NOT NULL CHECK (token > 0),
    owner      text NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    held       boolean NOT NULL DEFAULT false
);

CREATE TABLE IF NOT EXISTS @schema@.distlock_resource (
    resource text PRIMARY KEY,
    token    bigint NOT NULL CHECK (token > 0)
);

CREATE TABLE IF NOT EXISTS @schema@.distlock_lease (
    key        text PRIMARY KEY,
    grant_id   text,
    owner      text NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    expires    timestamptz NOT NULL
);

-- The columns of version 5. Lease-mode statements lock distlock_lease
-- before distlock_fence, and so does the migration, or it could deadlock
-- with them.
ALTER TABLE @schema@.distlock_lease ADD COLUMN IF NOT EXISTS watched_until timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE @schema@.distlock_fence ADD COLUMN IF NOT EXISTS watched_until timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN IF NOT EXISTS pid integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS pid_token bigint NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS @schema@.distlock_lease_waiter (
    key     text NOT NULL,
    waiter  text NOT NULL,
    seq     bigint GENERATED ALWAYS AS IDENTITY,
    expires timestamptz NOT NULL,
    PRIMARY KEY (key, waiter)
);
CREATE INDEX IF NOT EXISTS distlock_lease_waiter_order ON @schema@.distlock_lease_waiter (key, seq);

CREATE TABLE IF NOT EXISTS @schema@.distlock_lease_abandoned (
    key      text NOT NULL,
    grant_id text NOT NULL,
    until    timestamptz NOT NULL,
    PRIMARY KEY (key, grant_id)
);

-- The tables of version 6.
CREATE TABLE IF NOT EXISTS @schema@.distlock_semaphore (
    key         text PRIMARY KEY,
    max_permits integer NOT NULL CHECK (max_permits > 0)
);

CREATE TABLE IF NOT EXISTS @schema@.distlock_permit (
    key        text NOT NULL,
    grant_id   text NOT NULL,
    token      bigint NOT NULL CHECK (token > 0),
    slot       integer CHECK (slot >= 0),
    owner      text NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL,
    expires    timestamptz NOT NULL,
    PRIMARY KEY (key, grant_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS distlock_permit_slot ON @schema@.distlock_permit (key, slot) WHERE slot IS NOT NULL;

CREATE TABLE IF NOT EXISTS @schema@.distlock_permit_waiter (
    key     text NOT NULL,
    waiter  text NOT NULL,
    seq     bigint GENERATED ALWAYS AS IDENTITY,
    expires timestamptz NOT NULL,
    PRIMARY KEY (key, waiter)
);
CREATE INDEX IF NOT EXISTS distlock_permit_waiter_order ON @schema@.distlock_permit_waiter (key, seq);

-- The table of version 7.
CREATE TABLE IF NOT EXISTS @schema@.distlock_reader (
    key        text NOT NULL,
    pid        integer NOT NULL,
    token      bigint NOT NULL CHECK (token > 0),
    owner      text NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL,
    PRIMARY KEY (key, pid)
);

-- The table of version 8.
CREATE TABLE IF NOT EXISTS @schema@.distlock_lease_reader (
    key        text NOT NULL,
    grant_id   text NOT NULL,
    token      bigint NOT NULL CHECK (token > 0),
    owner      text NOT NULL DEFAULT '',
    granted_at timestamptz NOT NULL,
    expires    timestamptz NOT NULL,
    PRIMARY KEY (key, grant_id)
);

-- distlock_acquire takes the session advisory lock of lock_key
-- (pg_advisory_lock(hashtextextended(lock_key, 0)), waiting in the server's
-- lock queue when wait is true, or trying once), then, and only then,
-- increments the key's token and returns it. It returns NULL when a try
-- finds the lock held. The statements of a PL/pgSQL function run in order,
-- each with a snapshot taken when it starts, so the token is never
-- incremented by a session that does not hold the lock, and it is read
-- after the previous holder's release. The lock is a session lock: it
-- outlives the statement and is kept even if the transaction fails, so a
-- caller that gets an error must unlock or close the session.
--
-- If the key's previous grant was not released (its session ended while
-- it held the lock), it waits loss_grace before granting, with the lock
-- held: the server released the lock as it told the previous holder that
-- its session was ending, and the grace lets that holder act on the news
-- before anyone else can write with a newer token. The grace counts from
-- the server's start when the previous grant is older (its session ended
-- by then), and otherwise from now: a waiter queued when the session ended
-- gets the lock at that moment, and PostgreSQL records no session's end
-- for a grant that comes later. The release (releaseSQL
-- in the Go code) marks the row released and unlocks in one transaction,
-- holding the lock at transaction level until that commits, so that the
-- next holder normally finds the mark committed (the one-UPDATE path);
-- for a release that commits after its unlock (an earlier version's), the
-- row lock its UPDATE holds until then makes the SELECT ... FOR UPDATE
-- below wait for that commit, so that a released grant is never mistaken
-- for a lost one. A grant of a watched key is notified (see version 5
-- above).
CREATE OR REPLACE FUNCTION @schema@.distlock_acquire(lock_key text, wait boolean, lock_owner text, loss_grace interval)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    granted bigint;
    lost    boolean;
    lost_at timestamptz;
    watched boolean;
BEGIN
    IF wait THEN
        PERFORM pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended(lock_key, 0::int8));
    ELSIF NOT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended(lock_key, 0::int8)) THEN
        RETURN NULL;
    END IF;
    -- A token must be durable before it is handed out, or a crash could
    -- hand it out again.
    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    -- The common case, a key whose last grant was released: one UPDATE.
    UPDATE @schema@.distlock_fence f
    SET token = f.token + 1, owner = coalesce(lock_owner, ''), granted_at = pg_catalog.clock_timestamp(), held = true,
        pid = pg_catalog.pg_backend_pid(), pid_token = f.token + 1
    WHERE f.key = lock_key AND NOT f.held
    RETURNING f.token, f.watched_until > pg_catalog.now() INTO granted, watched;
    IF FOUND THEN
        IF watched THEN
            PERFORM pg_catalog.pg_notify('distlock_holder', lock_key);
        END IF;
        RETURN granted;
    END IF;
    -- A new key, a lost grant, or a release not yet committed.
    SELECT f.held, f.granted_at INTO lost, lost_at FROM @schema@.distlock_fence f WHERE f.key = lock_key FOR UPDATE;
    IF lost AND loss_grace > interval '0' THEN
        -- The grace counts from the loss where the server knows when that
        -- was: a grant made before the server last started ended, at the
        -- latest, when it started. Otherwise the server keeps no record of
        -- when a session ended, and the grace counts from now.
        lost_at := CASE WHEN lost_at < pg_catalog.pg_postmaster_start_time()
            THEN pg_catalog.pg_postmaster_start_time() ELSE pg_catalog.clock_timestamp() END;
        PERFORM pg_catalog.pg_sleep(greatest(0, least(extract(epoch FROM loss_grace),
            extract(epoch FROM lost_at + loss_grace - pg_catalog.clock_timestamp()))));
    END IF;
    INSERT INTO @schema@.distlock_fence AS f (key, token, owner, granted_at, held, pid, pid_token)
    VALUES (lock_key, 1, coalesce(lock_owner, ''), pg_catalog.clock_timestamp(), true, pg_catalog.pg_backend_pid(), 1)
    ON CONFLICT (key) DO UPDATE
        SET token = f.token + 1, owner = EXCLUDED.owner, granted_at = EXCLUDED.granted_at, held = true, pid = EXCLUDED.pid,
            pid_token = f.token + 1
    RETURNING f.token, f.watched_until > pg_catalog.now() INTO granted, watched;
    IF watched THEN
        PERFORM pg_catalog.pg_notify('distlock_holder', lock_key);
    END IF;
    RETURN granted;
END
$$;

-- distlock_acquire_shared is distlock_acquire for a shared (read) grant:
-- it takes the session advisory lock of lock_key shared
-- (pg_advisory_lock_shared(hashtextextended(lock_key, 0)), waiting in the
-- server's lock queue when wait is true, or trying once), then, and only
-- then, increments the key's token, records the grant in distlock_reader
-- and returns the token; NULL when a try finds the lock held, or awaited,
-- exclusively. The server's lock queue grants a shared request only when
-- it conflicts with no lock held and with no request waiting before it,
-- so that a waiting exclusive request keeps later shared ones out, tries
-- included, and wakes the waiters in order, each shared one that follows
-- the granted ones granted with them. If the key's last exclusive grant
-- was lost (its session ended while it held the lock) it waits
-- loss_grace first, as distlock_acquire does, and marks that grant
-- accounted for (held false), so that the next grant does not wait the
-- grace again: no exclusive grant can be live while this session holds
-- the lock shared. The session lock outlives a failed statement: a caller
-- that gets an error must unlock or close the session.
CREATE OR REPLACE FUNCTION @schema@.distlock_acquire_shared(lock_key text, wait boolean, lock_owner text, loss_grace interval)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lock_id bigint := pg_catalog.hashtextextended(lock_key, 0::int8);
    granted bigint;
    lost    boolean;
    lost_at timestamptz;
BEGIN
    IF wait THEN
        PERFORM pg_catalog.pg_advisory_lock_shared(lock_id);
    ELSIF NOT pg_catalog.pg_try_advisory_lock_shared(lock_id) THEN
        RETURN NULL;
    END IF;
    -- A token must be durable before it is handed out.
    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    UPDATE @schema@.distlock_fence f SET token = f.token + 1
    WHERE f.key = lock_key AND NOT f.held
    RETURNING f.token INTO granted;
    IF NOT FOUND THEN
        -- A new key, or a lost exclusive grant.
        SELECT f.held, f.granted_at INTO lost, lost_at FROM @schema@.distlock_fence f WHERE f.key = lock_key FOR UPDATE;
        IF lost AND loss_grace > interval '0' THEN
            lost_at := CASE WHEN lost_at < pg_catalog.pg_postmaster_start_time()
                THEN pg_catalog.pg_postmaster_start_time() ELSE pg_catalog.clock_timestamp() END;
            PERFORM pg_catalog.pg_sleep(greatest(0, least(extract(epoch FROM loss_grace),
                extract(epoch FROM lost_at + loss_grace - pg_catalog.clock_timestamp()))));
        END IF;
        INSERT INTO @schema@.distlock_fence AS f (key, token) VALUES (lock_key, 1)
        ON CONFLICT (key) DO UPDATE SET token = f.token + 1, held = false
        RETURNING f.token INTO granted;
    END IF;
    -- The rows of sessions that hold no shared lock of the key: ended.
    DELETE FROM @schema@.distlock_reader r
    WHERE r.key = lock_key AND r.pid <> pg_catalog.pg_backend_pid() AND NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ShareLock' AND l.objsubid = 1::int2
            AND l.pid = r.pid
            AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
            AND ((l.classid::int8 << 32) | l.objid::int8) = lock_id);
    INSERT INTO @schema@.distlock_reader AS r (key, pid, token, owner, granted_at)
    VALUES (lock_key, pg_catalog.pg_backend_pid(), granted, coalesce(lock_owner, ''), pg_catalog.clock_timestamp())
    ON CONFLICT (key, pid) DO UPDATE SET token = EXCLUDED.token, owner = EXCLUDED.owner, granted_at = EXCLUDED.granted_at;
    RETURN granted;
END
$$;

-- distlock_release is the release of the schema's first version, which
-- took two commits; it is kept so that Backends of that version keep
-- working on a database migrated by a later one. It marks the grant with
-- lock_token released, commits that, and then unlocks lock_key's advisory
-- lock, so that the next holder sees the grant released and does not wait
-- for the loss grace. It sets
-- released to false, and changes nothing, if this session did not hold
-- the lock. It is a procedure (CALL distlock_release(key, token)), for its
-- COMMIT: it must not be called inside a transaction block. A procedure
-- with a SET clause cannot COMMIT, so its search_path is not pinned as the
-- functions' are: every name in it is qualified, operators included.
CREATE OR REPLACE PROCEDURE @schema@.distlock_release(lock_key text, lock_token bigint, INOUT released boolean DEFAULT NULL)
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks
        WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND granted
            AND mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND objsubid OPERATOR(pg_catalog.=) 1::pg_catalog.int2
            AND database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
            AND ((classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) objid::pg_catalog.int8)
                OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(lock_key, 0::pg_catalog.int8)) THEN
        released := false;
        RETURN;
    END IF;
    UPDATE @schema@.distlock_fence SET held = false WHERE key OPERATOR(pg_catalog.=) lock_key AND token OPERATOR(pg_catalog.=) lock_token;
    COMMIT;
    released := pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended(lock_key, 0::pg_catalog.int8));
END
$$;

-- distlock_lease_acquire grants lock_key in lease-table mode to the grant
-- lock_grant if the key's row is free (released, or expired by the
-- server's clock: expires <= clock_timestamp(), read once the row is
-- locked), for ttl_ms milliseconds from then, and returns its token, taken from the
-- key's counter in distlock_fence once the row is won. Otherwise it
-- returns a NULL token and, in retry_ms, the milliseconds until the
-- current grant expires unless refreshed (at least 1). Two acquirers of
-- one key queue on its row lock; the second then sees the first's grant
-- and is refused. A grant of a watched key is notified. A key that live
-- readers hold is refused as a held one, with retry_ms until the row's
-- expires, which the readers keep no earlier than the latest of their
-- expiries (see distlock_lease_reader); this function is version 9's.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_acquire(lock_key text, lock_grant text, lock_owner text, ttl_ms bigint,
    OUT granted bigint, OUT retry_ms bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_expiry timestamptz;
    watched        boolean;
BEGIN
    IF lock_grant IS NULL OR ttl_ms IS NULL OR ttl_ms <= 0 THEN
        RAISE EXCEPTION 'distlock: lease acquire: a grant id and a positive TTL are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The common case, a key granted before: one UPDATE, which waits for
    -- a concurrent acquirer's transaction and then sees its grant.
    UPDATE @schema@.distlock_lease l
    SET grant_id = lock_grant, owner = coalesce(lock_owner, ''), granted_at = pg_catalog.clock_timestamp(),
        expires = pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond'
    WHERE l.key = lock_key AND l.expires <= pg_catalog.clock_timestamp()
    RETURNING l.watched_until > pg_catalog.clock_timestamp() INTO watched;
    IF NOT FOUND THEN
        INSERT INTO @schema@.distlock_lease (key, grant_id, owner, granted_at, expires)
        VALUES (lock_key, lock_grant, coalesce(lock_owner, ''), pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond')
        ON CONFLICT (key) DO NOTHING;
    END IF;
    IF NOT FOUND THEN
        -- A row that committed since the UPDATE began, a grant's or a
        -- watcher's of a key never granted (see distlock_lease), is taken
        -- if it is free: this statement sees it. (ON CONFLICT DO UPDATE
        -- would lock a held row until this transaction ends.)
        UPDATE @schema@.distlock_lease l
        SET grant_id = lock_grant, owner = coalesce(lock_owner, ''), granted_at = pg_catalog.clock_timestamp(),
            expires = pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond'
        WHERE l.key = lock_key AND l.expires <= pg_catalog.clock_timestamp()
        RETURNING l.watched_until > pg_catalog.clock_timestamp() INTO watched;
        IF NOT FOUND THEN
            -- Released meanwhile ('-infinity') or expired: 1ms.
            SELECT l.expires INTO current_expiry FROM @schema@.distlock_lease l WHERE l.key = lock_key;
            retry_ms := CASE WHEN current_expiry IS NULL OR current_expiry <= pg_catalog.clock_timestamp() THEN 1
                ELSE greatest(1, pg_catalog.ceil(extract(epoch FROM current_expiry - pg_catalog.clock_timestamp()) * 1000))::bigint END;
            RETURN;
        END IF;
    END IF;
    IF watched THEN
        PERFORM pg_catalog.pg_notify('distlock_holder', lock_key);
    END IF;
    -- A token must be durable before it is handed out.
    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    UPDATE @schema@.distlock_fence f SET token = f.token + 1 WHERE f.key = lock_key
    RETURNING f.token INTO granted;
    IF NOT FOUND THEN
        INSERT INTO @schema@.distlock_fence AS f (key, token) VALUES (lock_key, 1)
        ON CONFLICT (key) DO UPDATE SET token = f.token + 1
        RETURNING f.token INTO granted;
    END IF;
END
$$;

-- distlock_lease_wait is distlock_lease_acquire for a waiting Acquire, in
-- the order of arrival: the key is granted to lock_grant only if no live
-- waiter came before it (a waiter's row with an earlier seq that has not
-- expired), and otherwise lock_grant is queued, or its row renewed, to
-- live wait_ms milliseconds from the moment it is written; with wait_ms 0 (a try) it is not
-- queued. Granted, its row is deleted, with
-- the rows of the key's waiters that expired. retry_ms is as in
-- distlock_lease_acquire when the key is held, the time until the head
-- waiter's row expires when the key is free but awaited by earlier
-- waiters, and NULL when it was granted. A try refused while the key is
-- free, for earlier waiters, notifies the head waiter, as a release would.
-- A try whose grant id has a tombstone (see distlock_lease_abandon) does
-- nothing and returns NULL in both.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_wait(lock_key text, lock_grant text, lock_owner text, ttl_ms bigint,
    wait_ms bigint, OUT granted bigint, OUT retry_ms bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mine  bigint;
    ahead timestamptz;
    head  text;
BEGIN
    IF wait_ms IS NULL OR wait_ms < 0 THEN
        RAISE EXCEPTION 'distlock: lease wait: a waiter lifetime of at least 0 is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A try and the clean-up of its grant id exclude each other on this
    -- lock, held until the transaction ends: the clean-up waits for a try
    -- still running, and a try that comes after the clean-up sees its
    -- tombstone (the next statement's snapshot is taken once the lock is
    -- granted). Shared, so that tries whose grant ids' hashes collide do
    -- not wait for each other.
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1685086061::int4, pg_catalog.hashtext(lock_grant));
    IF EXISTS (SELECT 1 FROM @schema@.distlock_lease_abandoned a WHERE a.key = lock_key AND a.grant_id = lock_grant) THEN
        RETURN;
    END IF;
    SELECT w.seq INTO mine FROM @schema@.distlock_lease_waiter w WHERE w.key = lock_key AND w.waiter = lock_grant;
    SELECT pg_catalog.min(w.expires) INTO ahead FROM @schema@.distlock_lease_waiter w
    WHERE w.key = lock_key AND w.waiter <> lock_grant AND w.expires > pg_catalog.clock_timestamp()
        AND (mine IS NULL OR w.seq < mine);
    IF ahead IS NULL THEN
        SELECT a.granted, a.retry_ms INTO granted, retry_ms
        FROM @schema@.distlock_lease_acquire(lock_key, lock_grant, lock_owner, ttl_ms) a;
        IF granted IS NOT NULL THEN
            DELETE FROM @schema@.distlock_lease_waiter w
            WHERE w.key = lock_key AND (w.waiter = lock_grant OR w.expires <= pg_catalog.clock_timestamp());
            RETURN;
        END IF;
    ELSE
        retry_ms := greatest(1, pg_catalog.ceil(extract(epoch FROM ahead - pg_catalog.clock_timestamp()) * 1000))::bigint;
        -- The key is free and an earlier waiter is to have it. A release
        -- names the head it sees, and a waiter's row that committed after
        -- that, with a lower seq than the one named, was not: wake the
        -- head, or it waits for its poll, and this waiter for its row to
        -- expire.
        IF NOT EXISTS (SELECT 1 FROM @schema@.distlock_lease l WHERE l.key = lock_key AND l.expires > pg_catalog.clock_timestamp()) THEN
            SELECT w.waiter INTO head FROM @schema@.distlock_lease_waiter w
            WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp()
            ORDER BY w.seq LIMIT 1;
            IF head IS NOT NULL THEN
                PERFORM pg_catalog.pg_notify('distlock_lease', lock_key || E'\n' || head);
                IF pg_catalog.starts_with(head, 'shared:') THEN
                    PERFORM @schema@.distlock_lease_wake_readers(lock_key, head);
                END IF;
            END IF;
        END IF;
    END IF;
    IF wait_ms = 0 THEN
        RETURN;
    END IF;
    INSERT INTO @schema@.distlock_lease_waiter AS w (key, waiter, expires)
    VALUES (lock_key, lock_grant, pg_catalog.clock_timestamp() + wait_ms * interval '1 millisecond')
    ON CONFLICT (key, waiter) DO UPDATE SET expires = EXCLUDED.expires;
END
$$;

-- distlock_lease_leave takes lock_grant out of lock_key's queue, when its
-- Acquire gives up; if the key is free, the next waiter is notified, as a
-- release would (the one leaving may have been notified last). It first
-- locks the key's row, as a release does: a release that comes first has
-- committed before the leave sees the key free and notifies; one that
-- comes after sees the leaver gone, and names the next waiter itself.
-- Without it a release could name the leaver while the leave, still
-- seeing the key held, named no one.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_leave(lock_key text, lock_grant text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head text;
BEGIN
    PERFORM 1 FROM @schema@.distlock_lease l WHERE l.key = lock_key FOR SHARE;
    DELETE FROM @schema@.distlock_lease_waiter w WHERE w.key = lock_key AND w.waiter = lock_grant;
    -- Only a writer's grant keeps the next waiter asleep: readers holding
    -- the key let a reader behind the leaver in at once (a writer woken
    -- by this is refused and waits again).
    IF NOT FOUND OR EXISTS (SELECT 1 FROM @schema@.distlock_lease l WHERE l.key = lock_key
            AND l.expires > pg_catalog.clock_timestamp() AND l.grant_id IS NOT NULL) THEN
        RETURN;
    END IF;
    SELECT w.waiter INTO head FROM @schema@.distlock_lease_waiter w
    WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp()
    ORDER BY w.seq LIMIT 1;
    IF head IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify('distlock_lease', lock_key || E'\n' || head);
        IF pg_catalog.starts_with(head, 'shared:') THEN
            PERFORM @schema@.distlock_lease_wake_readers(lock_key, head);
        END IF;
    END IF;
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
END
$$;

-- distlock_lease_refresh extends the grant lock_grant of lock_key to
-- ttl_ms milliseconds from the server's clock if it has not expired, and reports
-- whether it did. The extension is committed durably (synchronous_commit
-- at least on), since a holder counts on it: an extension lost in a crash
-- would let the server grant the key while its holder goes on.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_refresh(lock_key text, lock_grant text, ttl_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF ttl_ms IS NULL OR ttl_ms <= 0 THEN
        RAISE EXCEPTION 'distlock: lease refresh: a positive TTL is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    UPDATE @schema@.distlock_lease l SET expires = pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond'
    WHERE l.key = lock_key AND l.grant_id = lock_grant AND l.expires > pg_catalog.clock_timestamp();
    RETURN FOUND;
END
$$;

-- distlock_lease_release frees the grant lock_grant of lock_key if it has
-- not expired, notifies the key's head waiter (the live row of
-- distlock_lease_waiter with the lowest seq) on the channel distlock_lease,
-- with the key, a newline and the waiter as the payload (an empty waiter
-- when none is queued: every waiter of the key may try), and reports
-- whether it freed the grant. Only the head waiter then tries: a
-- release wakes one waiter, not all. The release is committed without
-- waiting for its WAL flush: lost in a crash, it leaves the grant to
-- expire. The release of a watched key is notified on distlock_holder too.
-- When the head waiter is a reader, the readers queued after it up to the
-- first writer are notified too (distlock_lease_wake_readers): they are
-- granted together.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_release(lock_key text, lock_grant text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head    text;
    watched boolean;
BEGIN
    UPDATE @schema@.distlock_lease l SET grant_id = NULL, expires = '-infinity'
    WHERE l.key = lock_key AND l.grant_id = lock_grant AND l.expires > pg_catalog.clock_timestamp()
    RETURNING l.watched_until > pg_catalog.clock_timestamp() INTO watched;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF watched THEN
        PERFORM pg_catalog.pg_notify('distlock_holder', lock_key);
    END IF;
    SELECT w.waiter INTO head FROM @schema@.distlock_lease_waiter w
    WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp()
    ORDER BY w.seq LIMIT 1;
    PERFORM pg_catalog.pg_notify('distlock_lease', lock_key || E'\n' || coalesce(head, ''));
    IF pg_catalog.starts_with(head, 'shared:') THEN
        PERFORM @schema@.distlock_lease_wake_readers(lock_key, head);
    END IF;
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    RETURN true;
END
$$;

-- distlock_lease_abandon cleans up after a try of lock_grant for lock_key
-- that its Acquire gave up without knowing its outcome (its statement
-- failed, or the Acquire's context ended, after the statement may have
-- reached the server, which may then grant the key to lock_grant or queue
-- it). It takes the lock of lock_grant that every try of it holds (see
-- distlock_lease_wait), and so waits for a try that the server is still
-- running; leaves lock_grant's tombstone, kept keep_ms milliseconds, so
-- that a try of it that reaches the server later does nothing; and then
-- releases a grant named lock_grant and takes lock_grant out of the
-- key's queue, waking the next waiter as a release or a leave does. It
-- touches no other grant nor waiter: lock_grant is the try's own,
-- unguessable id. It deletes the key's expired tombstones, so that a key
-- keeps those of its tries abandoned within keep_ms, and one at most
-- besides.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_abandon(lock_key text, lock_grant text, keep_ms bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lock_grant IS NULL OR keep_ms IS NULL OR keep_ms <= 0 THEN
        RAISE EXCEPTION 'distlock: lease abandon: a grant id and a positive tombstone lifetime are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(1685086061::int4, pg_catalog.hashtext(lock_grant));
    DELETE FROM @schema@.distlock_lease_abandoned a WHERE a.key = lock_key AND a.until <= pg_catalog.clock_timestamp();
    INSERT INTO @schema@.distlock_lease_abandoned AS a (key, grant_id, until)
    VALUES (lock_key, lock_grant, pg_catalog.clock_timestamp() + keep_ms * interval '1 millisecond')
    ON CONFLICT (key, grant_id) DO UPDATE SET until = greatest(a.until, EXCLUDED.until);
    IF pg_catalog.starts_with(lock_grant, 'shared:') THEN
        PERFORM @schema@.distlock_lease_release_shared(lock_key, lock_grant);
    ELSE
        PERFORM @schema@.distlock_lease_release(lock_key, lock_grant);
    END IF;
    PERFORM @schema@.distlock_lease_leave(lock_key, lock_grant);
END
$$;

-- distlock_lease_wake_readers notifies, on the channel distlock_lease, the
-- live waiters of lock_key that are readers (their names start with
-- 'shared:') and come before the first waiting writer, but head, which
-- the caller has notified: readers queued together are granted together.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_wake_readers(lock_key text, head text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    first_writer bigint;
BEGIN
    SELECT pg_catalog.min(w.seq) INTO first_writer FROM @schema@.distlock_lease_waiter w
    WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp() AND NOT pg_catalog.starts_with(w.waiter, 'shared:');
    PERFORM pg_catalog.pg_notify('distlock_lease', lock_key || E'\n' || w.waiter)
    FROM @schema@.distlock_lease_waiter w
    WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp() AND pg_catalog.starts_with(w.waiter, 'shared:')
        AND w.waiter <> head AND (first_writer IS NULL OR w.seq < first_writer);
END
$$;

-- distlock_lease_acquire_shared grants lock_key shared, in lease-table
-- mode, to the reader lock_grant (which must start with 'shared:') for
-- ttl_ms milliseconds from the server's clock, and returns its token, drawn from the
-- key's counter in distlock_fence; or a NULL token and, in retry_ms, the
-- milliseconds until the exclusive grant that holds the key expires
-- unless refreshed, or until the row of the first writer waiting before
-- the reader expires unless renewed. A reader is granted when no live
-- exclusive grant holds the key (its row of distlock_lease names no
-- grant, or one that has expired) and no live writer waits before it in
-- distlock_lease_waiter; other readers, holding or waiting, never keep it
-- out. Granted, it raises the row's expires to its own expiry if that is
-- later (and clears a grant_id that expired), so that no exclusive grant
-- of any version takes the row before it has expired or been released;
-- its waiter row is deleted, with the key's expired readers. Refused
-- with wait_ms above 0, it is queued, or its row renewed, to live
-- wait_ms milliseconds, under its grant id; with 0 (a try) it is not.
-- Refused for a writer waiting while nothing holds the key, it notifies
-- the head waiter, as distlock_lease_wait does. It first locks the key's
-- row of distlock_lease FOR UPDATE (creating it, released, for a key
-- never granted), and takes no other lock of it: the grants, renewals
-- and releases of a key's readers run one at a time (their tokens do
-- anyway, on the key's row of distlock_fence), after or before each
-- exclusive grant. A try whose grant id has a tombstone does nothing and
-- returns NULL in both, as distlock_lease_wait's.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_acquire_shared(lock_key text, lock_grant text, lock_owner text, ttl_ms bigint,
    wait_ms bigint, OUT granted bigint, OUT retry_ms bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_expiry timestamptz;
    current_grant  text;
    readers_until  timestamptz;
    mine           bigint;
    ahead          timestamptz;
    head           text;
BEGIN
    IF lock_grant IS NULL OR NOT pg_catalog.starts_with(lock_grant, 'shared:') OR ttl_ms IS NULL OR ttl_ms <= 0
        OR wait_ms IS NULL OR wait_ms < 0 THEN
        RAISE EXCEPTION 'distlock: lease acquire shared: a reader''s grant id, a positive TTL and a waiter lifetime of at least 0 are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1685086061::int4, pg_catalog.hashtext(lock_grant));
    IF EXISTS (SELECT 1 FROM @schema@.distlock_lease_abandoned a WHERE a.key = lock_key AND a.grant_id = lock_grant) THEN
        RETURN;
    END IF;
    -- FOR UPDATE, not FOR SHARE: a reader that shared the lock and then
    -- wrote the row would deadlock with another doing the same.
    SELECT l.expires, l.grant_id INTO current_expiry, current_grant
    FROM @schema@.distlock_lease l WHERE l.key = lock_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @schema@.distlock_lease (key, grant_id, granted_at, expires)
        VALUES (lock_key, NULL, pg_catalog.clock_timestamp(), '-infinity')
        ON CONFLICT (key) DO NOTHING;
        SELECT l.expires, l.grant_id INTO current_expiry, current_grant
        FROM @schema@.distlock_lease l WHERE l.key = lock_key FOR UPDATE;
        IF NOT FOUND THEN
            -- Never: no statement deletes a key's row. A reader granted
            -- without it would keep no writer out.
            RAISE EXCEPTION 'distlock: lease acquire shared: the key''s row of distlock_lease is missing'
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    END IF;
    IF current_grant IS NOT NULL AND current_expiry > pg_catalog.clock_timestamp() THEN
        retry_ms := greatest(1, pg_catalog.ceil(extract(epoch FROM current_expiry - pg_catalog.clock_timestamp()) * 1000))::bigint;
    ELSE
        SELECT w.seq INTO mine FROM @schema@.distlock_lease_waiter w WHERE w.key = lock_key AND w.waiter = lock_grant;
        SELECT pg_catalog.min(w.expires) INTO ahead FROM @schema@.distlock_lease_waiter w
        WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp() AND NOT pg_catalog.starts_with(w.waiter, 'shared:')
            AND (mine IS NULL OR w.seq < mine);
        IF ahead IS NULL THEN
            readers_until := pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond';
            -- An exclusive grant found expired is ended here: its late
            -- refresh or release names a grant the row no longer has.
            UPDATE @schema@.distlock_lease l
            SET grant_id = NULL,
                expires = greatest(CASE WHEN l.grant_id IS NULL THEN l.expires END, readers_until)
            WHERE l.key = lock_key;
            -- A token must be durable before it is handed out, and so must
            -- the row that keeps the writers out.
            IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
                PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
            END IF;
            UPDATE @schema@.distlock_fence f SET token = f.token + 1 WHERE f.key = lock_key
            RETURNING f.token INTO granted;
            IF NOT FOUND THEN
                INSERT INTO @schema@.distlock_fence AS f (key, token) VALUES (lock_key, 1)
                ON CONFLICT (key) DO UPDATE SET token = f.token + 1
                RETURNING f.token INTO granted;
            END IF;
            -- A key's row found free (or naming an ended writer) keeps
            -- no reader: every reader row left was revoked (see the
            -- package doc) or has expired, and must not come back when
            -- this grant raises the row again.
            DELETE FROM @schema@.distlock_lease_reader r WHERE r.key = lock_key
                AND (r.expires <= pg_catalog.clock_timestamp() OR current_grant IS NOT NULL OR current_expiry <= pg_catalog.clock_timestamp());
            INSERT INTO @schema@.distlock_lease_reader (key, grant_id, token, owner, granted_at, expires)
            VALUES (lock_key, lock_grant, granted, coalesce(lock_owner, ''), pg_catalog.clock_timestamp(), readers_until);
            DELETE FROM @schema@.distlock_lease_waiter w WHERE w.key = lock_key AND w.waiter = lock_grant;
            RETURN;
        END IF;
        retry_ms := greatest(1, pg_catalog.ceil(extract(epoch FROM ahead - pg_catalog.clock_timestamp()) * 1000))::bigint;
        -- Nothing holds the key and an earlier writer is to have it: wake
        -- the head waiter, or it waits for its poll (see
        -- distlock_lease_wait). While readers hold the key, the last
        -- one's release wakes it.
        IF current_expiry <= pg_catalog.clock_timestamp() THEN
            SELECT w.waiter INTO head FROM @schema@.distlock_lease_waiter w
            WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp()
            ORDER BY w.seq LIMIT 1;
            IF head IS NOT NULL THEN
                PERFORM pg_catalog.pg_notify('distlock_lease', lock_key || E'\n' || head);
                IF pg_catalog.starts_with(head, 'shared:') THEN
                    PERFORM @schema@.distlock_lease_wake_readers(lock_key, head);
                END IF;
            END IF;
        END IF;
    END IF;
    IF wait_ms = 0 THEN
        RETURN;
    END IF;
    INSERT INTO @schema@.distlock_lease_waiter AS w (key, waiter, expires)
    VALUES (lock_key, lock_grant, pg_catalog.clock_timestamp() + wait_ms * interval '1 millisecond')
    ON CONFLICT (key, waiter) DO UPDATE SET expires = EXCLUDED.expires;
END
$$;

-- distlock_lease_refresh_shared extends the reader lock_grant of lock_key
-- to ttl_ms milliseconds from the server's clock if it has not expired, and reports
-- whether it did; durably, as distlock_lease_refresh. It first locks the
-- key's row of distlock_lease FOR UPDATE, and raises its expires to the
-- reader's new expiry if that is later (see distlock_lease_reader). The
-- reader has expired if, by the clock once that lock is held, its row
-- has, or the key's row has (an operator revoked it), or the key's row
-- names an exclusive grant (taken after the reader expired).
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_refresh_shared(lock_key text, lock_grant text, ttl_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_expiry timestamptz;
    current_grant  text;
    readers_until  timestamptz;
BEGIN
    IF ttl_ms IS NULL OR ttl_ms <= 0 THEN
        RAISE EXCEPTION 'distlock: lease refresh shared: a positive TTL is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT l.expires, l.grant_id INTO current_expiry, current_grant
    FROM @schema@.distlock_lease l WHERE l.key = lock_key FOR UPDATE;
    IF NOT FOUND OR current_grant IS NOT NULL OR current_expiry <= pg_catalog.clock_timestamp() THEN
        RETURN false;
    END IF;
    readers_until := pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond';
    UPDATE @schema@.distlock_lease_reader r SET expires = readers_until
    WHERE r.key = lock_key AND r.grant_id = lock_grant AND r.expires > pg_catalog.clock_timestamp();
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF readers_until > current_expiry THEN
        UPDATE @schema@.distlock_lease l SET expires = readers_until WHERE l.key = lock_key;
    END IF;
    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    RETURN true;
END
$$;

-- distlock_lease_release_shared frees the reader lock_grant of lock_key if
-- it has not expired, and reports whether it did; an expired reader's row
-- is deleted too, and false returned. It first locks the key's row of
-- distlock_lease FOR UPDATE, so that the releases of a key's readers run
-- one at a time, and, while that row names no grant, lowers its expires
-- to the latest expiry of the live readers left (by the clock), or puts
-- it back as released ('-infinity') when none is left (it never raises
-- it, so that a row an operator revoked stays so): then it notifies
-- the key's head waiter (a writer, whom the readers kept out) as
-- distlock_lease_release does. Committed without waiting for its WAL
-- flush: lost in a crash, it leaves the reader, and the key's row, to
-- expire.
CREATE OR REPLACE FUNCTION @schema@.distlock_lease_release_shared(lock_key text, lock_grant text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_grant text;
    readers_until timestamptz;
    live          boolean;
    head          text;
BEGIN
    SELECT l.grant_id INTO current_grant FROM @schema@.distlock_lease l WHERE l.key = lock_key FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    DELETE FROM @schema@.distlock_lease_reader r
    WHERE r.key = lock_key AND r.grant_id = lock_grant
    RETURNING r.expires > pg_catalog.clock_timestamp() INTO live;
    IF NOT FOUND OR NOT live OR current_grant IS NOT NULL THEN
        RETURN false;
    END IF;
    SELECT pg_catalog.max(r.expires) INTO readers_until FROM @schema@.distlock_lease_reader r
    WHERE r.key = lock_key AND r.expires > pg_catalog.clock_timestamp();
    UPDATE @schema@.distlock_lease l SET expires = least(l.expires, coalesce(readers_until, '-infinity')) WHERE l.key = lock_key;
    IF readers_until IS NULL THEN
        SELECT w.waiter INTO head FROM @schema@.distlock_lease_waiter w
        WHERE w.key = lock_key AND w.expires > pg_catalog.clock_timestamp()
        ORDER BY w.seq LIMIT 1;
        IF head IS NOT NULL THEN
            PERFORM pg_catalog.pg_notify('distlock_lease', lock_key || E'\n' || head);
            IF pg_catalog.starts_with(head, 'shared:') THEN
                PERFORM @schema@.distlock_lease_wake_readers(lock_key, head);
            END IF;
        END IF;
    END IF;
    RETURN true;
END
$$;

-- distlock_permit_wake notifies the first live waiter of sem_key's line,
-- if there is one and fewer than the stored limit of permits are live, on
-- the channel distlock_lease with the key, a newline and the waiter as
-- the payload (as distlock_lease_release names a lock's waiter): the
-- listener of the waiter's process wakes that waiter alone. The caller
-- holds the semaphore's lock.
CREATE OR REPLACE FUNCTION @schema@.distlock_permit_wake(sem_key text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head text;
BEGIN
    IF (SELECT pg_catalog.count(*) FROM @schema@.distlock_permit p WHERE p.key = sem_key AND p.expires > pg_catalog.clock_timestamp())
        >= coalesce((SELECT s.max_permits FROM @schema@.distlock_semaphore s WHERE s.key = sem_key), 0) THEN
        RETURN;
    END IF;
    SELECT w.waiter INTO head FROM @schema@.distlock_permit_waiter w
    WHERE w.key = sem_key AND w.expires > pg_catalog.clock_timestamp()
    ORDER BY w.seq LIMIT 1;
    IF head IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify('distlock_lease', sem_key || E'\n' || head);
    END IF;
END
$$;

-- distlock_permit_acquire asks for one of permit_limit permits of the
-- semaphore sem_key for the grant permit_grant, for ttl_ms milliseconds
-- from the server's clock, under the semaphore's lock (its row of distlock_semaphore,
-- locked until the transaction ends). It first deletes the semaphore's
-- expired permits and waiters, but for those another transaction has
-- locked, which count until they are gone. The semaphore's stored limit
-- binds while a permit is live or another waiter is in line: an asker
-- naming another limit then gets no permit, and stored_limit, the stored
-- one; otherwise the asker stores its limit. The permit is granted when fewer than the
-- limit are live and no live waiter came before permit_grant (a waiter's
-- row with an earlier seq); granted is then its token, taken from the
-- key's counter in distlock_fence, and granted_slot, with with_slot, the
-- lowest slot that no row of the semaphore has (NULL without). Otherwise
-- granted is NULL, permit_grant is queued, or its row renewed, to live wait_ms
-- milliseconds from the moment it is written (with wait_ms 0, a try,
-- it is not queued), and
-- retry_ms is the time until the first live permit expires, or, when a
-- permit is free but earlier waiters are to have it, until the first of
-- them lapses; that first waiter is then notified too, as a release would
-- (a release names the first waiter it sees, and one that queued since
-- with an earlier place was not named). A grant that leaves a permit free
-- notifies the next waiter: two permits given back before the first
-- waiter claimed one both named that waiter. A try whose grant id has a
-- tombstone (see distlock_permit_abandon) does nothing and returns NULL in
-- all four.
CREATE OR REPLACE FUNCTION @schema@.distlock_permit_acquire(sem_key text, permit_grant text, permit_owner text, ttl_ms bigint,
    permit_limit integer, with_slot boolean, wait_ms bigint,
    OUT granted bigint, OUT granted_slot integer, OUT stored_limit integer, OUT retry_ms bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mine        bigint;
    live        integer;
    others      integer;
    next_expiry timestamptz;
BEGIN
    IF permit_grant IS NULL OR ttl_ms IS NULL OR ttl_ms <= 0 OR permit_limit IS NULL OR permit_limit < 1
        OR with_slot IS NULL OR wait_ms IS NULL OR wait_ms < 0 THEN
        RAISE EXCEPTION 'distlock: permit acquire: a grant id, a positive TTL and limit, and a waiter lifetime of at least 0 are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A try and the clean-up of its grant id exclude each other, as in
    -- distlock_lease_wait.
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1685086061::int4, pg_catalog.hashtext(permit_grant));
    IF EXISTS (SELECT 1 FROM @schema@.distlock_lease_abandoned a WHERE a.key = sem_key AND a.grant_id = permit_grant) THEN
        RETURN;
    END IF;
    -- A waiter in line whose turn has not come renews its place without
    -- the semaphore's lock, so that waiters that poll do not queue for it
    -- behind one another, and ahead of the releases. Its live row keeps
    -- the stored limit its own, and a permit given back after this read
    -- is notified to the first waiter, whose turn then comes.
    IF wait_ms > 0 THEN
        SELECT w.seq INTO mine FROM @schema@.distlock_permit_waiter w
        WHERE w.key = sem_key AND w.waiter = permit_grant AND w.expires > pg_catalog.clock_timestamp();
        SELECT s.max_permits INTO stored_limit FROM @schema@.distlock_semaphore s WHERE s.key = sem_key;
        SELECT pg_catalog.count(*)::int4, pg_catalog.min(p.expires) INTO live, next_expiry FROM @schema@.distlock_permit p
        WHERE p.key = sem_key AND p.expires > pg_catalog.clock_timestamp();
        IF mine IS NOT NULL AND stored_limit = permit_limit AND live < permit_limit THEN
            -- A permit is free: the first earlier waiter's, if one is
            -- live (it is woken, as below), else this waiter's.
            next_expiry := NULL;
            SELECT w.expires INTO next_expiry FROM @schema@.distlock_permit_waiter w
            WHERE w.key = sem_key AND w.seq < mine AND w.expires > pg_catalog.clock_timestamp()
            ORDER BY w.seq LIMIT 1;
            IF next_expiry IS NOT NULL THEN
                PERFORM @schema@.distlock_permit_wake(sem_key);
            END IF;
        END IF;
        IF mine IS NOT NULL AND stored_limit = permit_limit AND next_expiry IS NOT NULL THEN
            UPDATE @schema@.distlock_permit_waiter w SET expires = pg_catalog.clock_timestamp() + wait_ms * interval '1 millisecond'
            WHERE w.key = sem_key AND w.waiter = permit_grant AND w.expires > pg_catalog.clock_timestamp();
            IF FOUND THEN
                retry_ms := greatest(1, pg_catalog.ceil(extract(epoch FROM next_expiry - pg_catalog.clock_timestamp()) * 1000))::bigint;
                PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
                RETURN;
            END IF;
        END IF;
        mine := NULL;
        next_expiry := NULL;
    END IF;
    -- The semaphore's lock. Each statement below takes its snapshot once
    -- the lock is held, and sees what the previous holder committed.
    SELECT s.max_permits INTO stored_limit FROM @schema@.distlock_semaphore s WHERE s.key = sem_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @schema@.distlock_semaphore AS s (key, max_permits) VALUES (sem_key, permit_limit)
        ON CONFLICT (key) DO NOTHING;
        SELECT s.max_permits INTO stored_limit FROM @schema@.distlock_semaphore s WHERE s.key = sem_key FOR UPDATE;
    END IF;
    -- Rows that a release, a leave or a refresh has locked are left to
    -- it: a release deletes its row before it takes the semaphore's lock
    -- (see distlock_permit_release), and waiting for it here would
    -- deadlock.
    DELETE FROM @schema@.distlock_permit p USING (
        SELECT q.grant_id FROM @schema@.distlock_permit q WHERE q.key = sem_key AND q.expires <= pg_catalog.clock_timestamp()
        FOR UPDATE SKIP LOCKED) x
    WHERE p.key = sem_key AND p.grant_id = x.grant_id;
    DELETE FROM @schema@.distlock_permit_waiter w USING (
        SELECT v.waiter FROM @schema@.distlock_permit_waiter v WHERE v.key = sem_key AND v.expires <= pg_catalog.clock_timestamp()
        FOR UPDATE SKIP LOCKED) x
    WHERE w.key = sem_key AND w.waiter = x.waiter;
    -- Every row left counts, expired or not: one that was skipped is on
    -- its way out (a release, a leave), or being renewed by a refresh
    -- that started before it expired and may commit after this; counting
    -- it grants nothing in its place until it is gone.
    SELECT pg_catalog.count(*)::int4 INTO live FROM @schema@.distlock_permit p WHERE p.key = sem_key;
    SELECT w.seq INTO mine FROM @schema@.distlock_permit_waiter w WHERE w.key = sem_key AND w.waiter = permit_grant;
    SELECT pg_catalog.count(*)::int4 INTO others FROM @schema@.distlock_permit_waiter w
    WHERE w.key = sem_key AND w.waiter <> permit_grant;
    IF live = 0 AND others = 0 THEN
        -- Nothing holds or awaits a permit: this asker sets the limit.
        IF stored_limit <> permit_limit THEN
            UPDATE @schema@.distlock_semaphore s SET max_permits = permit_limit WHERE s.key = sem_key;
            stored_limit := permit_limit;
        END IF;
    ELSIF stored_limit <> permit_limit THEN
        DELETE FROM @schema@.distlock_permit_waiter w WHERE w.key = sem_key AND w.waiter = permit_grant;
        RETURN;
    END IF;
    IF with_slot THEN
        -- A slot is free once its row is gone.
        SELECT pg_catalog.min(g.n) INTO granted_slot FROM pg_catalog.generate_series(0, permit_limit - 1) AS g(n)
        WHERE NOT EXISTS (SELECT 1 FROM @schema@.distlock_permit p WHERE p.key = sem_key AND p.slot = g.n);
    END IF;
    IF live < permit_limit AND (granted_slot IS NOT NULL OR NOT with_slot) AND NOT EXISTS (
        SELECT 1 FROM @schema@.distlock_permit_waiter w
        WHERE w.key = sem_key AND w.waiter <> permit_grant AND (mine IS NULL OR w.seq < mine)) THEN
        -- A token must be durable before it is handed out.
        IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
            PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
        END IF;
        UPDATE @schema@.distlock_fence f SET token = f.token + 1 WHERE f.key = sem_key
        RETURNING f.token INTO granted;
        IF NOT FOUND THEN
            INSERT INTO @schema@.distlock_fence AS f (key, token) VALUES (sem_key, 1)
            ON CONFLICT (key) DO UPDATE SET token = f.token + 1
            RETURNING f.token INTO granted;
        END IF;
        INSERT INTO @schema@.distlock_permit (key, grant_id, token, slot, owner, granted_at, expires)
        VALUES (sem_key, permit_grant, granted, granted_slot, coalesce(permit_owner, ''), pg_catalog.clock_timestamp(),
            pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond');
        DELETE FROM @schema@.distlock_permit_waiter w WHERE w.key = sem_key AND w.waiter = permit_grant;
        PERFORM @schema@.distlock_permit_wake(sem_key);
        RETURN;
    END IF;
    granted_slot := NULL;
    IF live >= permit_limit THEN
        SELECT pg_catalog.min(p.expires) INTO next_expiry FROM @schema@.distlock_permit p
        WHERE p.key = sem_key AND p.expires > pg_catalog.clock_timestamp();
    ELSE
        SELECT w.expires INTO next_expiry FROM @schema@.distlock_permit_waiter w
        WHERE w.key = sem_key AND w.waiter <> permit_grant AND w.expires > pg_catalog.clock_timestamp() ORDER BY w.seq LIMIT 1;
        PERFORM @schema@.distlock_permit_wake(sem_key);
    END IF;
    -- Rows on their way out, all expired (see above): soon.
    next_expiry := coalesce(next_expiry, pg_catalog.clock_timestamp() + interval '10 milliseconds');
    retry_ms := greatest(1, pg_catalog.ceil(extract(epoch FROM next_expiry - pg_catalog.clock_timestamp()) * 1000))::bigint;
    -- A place in line lost in a crash is taken again at the next try.
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    IF wait_ms > 0 THEN
        INSERT INTO @schema@.distlock_permit_waiter AS w (key, waiter, expires)
        VALUES (sem_key, permit_grant, pg_catalog.clock_timestamp() + wait_ms * interval '1 millisecond')
        ON CONFLICT (key, waiter) DO UPDATE SET expires = EXCLUDED.expires;
    END IF;
END
$$;

-- distlock_permit_refresh extends the permit permit_grant of sem_key to
-- ttl_ms milliseconds from the server's clock if it has not expired, and reports
-- whether it did; committed durably, as distlock_lease_refresh is.
CREATE OR REPLACE FUNCTION @schema@.distlock_permit_refresh(sem_key text, permit_grant text, ttl_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF ttl_ms IS NULL OR ttl_ms <= 0 THEN
        RAISE EXCEPTION 'distlock: permit refresh: a positive TTL is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    UPDATE @schema@.distlock_permit p SET expires = pg_catalog.clock_timestamp() + ttl_ms * interval '1 millisecond'
    WHERE p.key = sem_key AND p.grant_id = permit_grant AND p.expires > pg_catalog.clock_timestamp();
    RETURN FOUND;
END
$$;

-- distlock_permit_release gives the permit permit_grant of sem_key back
-- if it has not expired, then, under the semaphore's lock, notifies the
-- first waiter (see distlock_permit_wake), and reports whether it gave it
-- back.
-- Lost in a crash, the release leaves the permit to expire.
CREATE OR REPLACE FUNCTION @schema@.distlock_permit_release(sem_key text, permit_grant text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The permit's row first, while it is live: the semaphore's lock may
    -- be a while coming. A grant meanwhile still sees the row, and counts
    -- the permit; the wake, once the lock is held, sees what that grant
    -- committed (the waiter it queued).
    DELETE FROM @schema@.distlock_permit p
    WHERE p.key = sem_key AND p.grant_id = permit_grant AND p.expires > pg_catalog.clock_timestamp();
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM 1 FROM @schema@.distlock_semaphore s WHERE s.key = sem_key FOR UPDATE;
    PERFORM @schema@.distlock_permit_wake(sem_key);
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    RETURN true;
END
$$;

-- distlock_permit_leave takes permit_grant out of sem_key's line, when its
-- AcquirePermit gives up; then, under the semaphore's lock, the next
-- waiter is notified if a permit is free (the one leaving may have been
-- notified last).
CREATE OR REPLACE FUNCTION @schema@.distlock_permit_leave(sem_key text, permit_grant text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM @schema@.distlock_permit_waiter w WHERE w.key = sem_key AND w.waiter = permit_grant;
    IF FOUND THEN
        PERFORM 1 FROM @schema@.distlock_semaphore s WHERE s.key = sem_key FOR UPDATE;
        PERFORM @schema@.distlock_permit_wake(sem_key);
    END IF;
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
END
$$;

-- distlock_permit_abandon is distlock_lease_abandon for a try of a permit:
-- it waits for a try of permit_grant that the server is still running,
-- leaves permit_grant's tombstone in distlock_lease_abandoned, kept
-- keep_ms milliseconds, so that a later try of it does nothing, and then
-- gives back a permit named permit_grant and takes permit_grant out of
-- the line, waking the next waiter. It touches no other permit nor
-- waiter.
CREATE OR REPLACE FUNCTION @schema@.distlock_permit_abandon(sem_key text, permit_grant text, keep_ms bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF permit_grant IS NULL OR keep_ms IS NULL OR keep_ms <= 0 THEN
        RAISE EXCEPTION 'distlock: permit abandon: a grant id and a positive tombstone lifetime are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(1685086061::int4, pg_catalog.hashtext(permit_grant));
    DELETE FROM @schema@.distlock_lease_abandoned a WHERE a.key = sem_key AND a.until <= pg_catalog.clock_timestamp();
    INSERT INTO @schema@.distlock_lease_abandoned AS a (key, grant_id, until)
    VALUES (sem_key, permit_grant, pg_catalog.clock_timestamp() + keep_ms * interval '1 millisecond')
    ON CONFLICT (key, grant_id) DO UPDATE SET until = greatest(a.until, EXCLUDED.until);
    PERFORM @schema@.distlock_permit_release(sem_key, permit_grant);
    PERFORM @schema@.distlock_permit_leave(sem_key, permit_grant);
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
CREATE OR REPLACE FUNCTION @schema@.distlock_admit(fenced_resource text, fence_token bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    highest bigint;
BEGIN
    IF fenced_resource IS NULL OR fence_token IS NULL OR fence_token <= 0 THEN
        RAISE EXCEPTION 'distlock: fence: resource % with token %: a resource and a positive token are required',
            pg_catalog.quote_nullable(fenced_resource), pg_catalog.quote_nullable(fence_token)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO @schema@.distlock_resource AS r (resource, token)
    VALUES (fenced_resource, fence_token)
    ON CONFLICT (resource) DO UPDATE
        SET token = EXCLUDED.token
        WHERE r.token <= EXCLUDED.token
    RETURNING r.token INTO highest;
    IF NOT FOUND THEN
        SELECT r.token INTO highest FROM @schema@.distlock_resource r WHERE r.resource = fenced_resource;
        RAISE EXCEPTION 'distlock: fence: stale token % for %: % already admitted',
            fence_token, pg_catalog.quote_literal(fenced_resource), highest
            USING ERRCODE = 'DL001', DETAIL = highest::text;
    END IF;
    RETURN highest;
END
$$;
$schema$, '@schema@', target);
END
$install$;
