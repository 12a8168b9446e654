-- 0012: insertion order on PostgreSQL. SQLite numbers every row of runs,
-- receipts and tool_calls in the order it was inserted (rowid), and lists
-- break ties by it. PostgreSQL has no such number, so its 0012 adds one,
-- under the same name, for the same queries; here there is nothing to do.
SELECT 1;
