-- Values compare as bytes: the optimistic write checks `value = ?`, and under
-- the server's default collation (utf8mb4_general_ci) {"t":"A"} equals
-- {"t":"a"} and {"s":"é"} equals {"s":"e"}, so a write could land on a value
-- its `apply` never saw. utf8mb4_bin compares the bytes.
ALTER TABLE limit_store MODIFY value TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
