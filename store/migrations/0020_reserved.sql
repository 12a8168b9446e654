-- 0020 is another branch's (subagents, issue 29): this empty stand-in
-- keeps the numbers whole until that branch is merged, which replaces it.
SELECT 1;
