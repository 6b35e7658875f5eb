-- The limit store's table: one row per counted key, named by HMAC-SHA-256 of
-- the key under the site secret (never the key itself).
CREATE TABLE IF NOT EXISTS limit_store (
    key_hash   BINARY(32) NOT NULL PRIMARY KEY,  -- HMAC-SHA-256 of the key
    generation BIGINT     NOT NULL,              -- fingerprint of the secret it was written under
    value      TEXT       NOT NULL,              -- the entry's JSON, at most 4096 bytes
    expires_at BIGINT     NOT NULL,              -- ms since the epoch, on the database's clock
    -- Sweeping finds expired rows of every generation by this index.
    INDEX limit_store_expires (expires_at),
    -- The bound counts one generation's live rows by this one, without a scan.
    INDEX limit_store_generation (generation, expires_at)
) ENGINE = InnoDB;
