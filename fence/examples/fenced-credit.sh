#!/bin/sh
# A shell job writing to PostgreSQL behind the fence, run under a lock:
#
#   ydb-coord lock /local/app ledger -- ./fenced-credit.sh
#
# `ydb-coord lock` gives the command its fencing token as YDB_COORD_FENCE_TOKEN (64 hex
# digits, as the fence stores it); psql takes the server from PGHOST, PGPORT, PGUSER and
# PGDATABASE. fence_check raises the mark of "ledger" to the token, or, if a newer holder has
# written since, fails, which aborts the transaction: the UPDATE cannot commit, and psql exits
# with status 3. The fence's tables and functions come from PgFence::setup (Rust).
set -eu
psql -X -q -v ON_ERROR_STOP=1 -v token="${YDB_COORD_FENCE_TOKEN:?run under ydb-coord lock}" <<'SQL'
BEGIN;
SELECT fence_check('ledger', :'token') \g /dev/null
UPDATE accounts SET balance = balance + 10 WHERE id = 1;
COMMIT;
SQL
