# scripts/api-rename.sed: the public API's renames of issue 34 item 6 (docs/api.md has the table).
# Apply to code written against the older names:
#   git grep -lE 'kvq_|WorkQueueMetrics' -- . ':!scripts/api-rename.sed' ':!docs/api.md' \
#       | xargs sed -i -E -f scripts/api-rename.sed
# Not renames, so not here (fix such calls by hand; docs/api.md): kvq_workq_lease_format takes
# (out, cap, &len, lease); seven predicates return bool; 31 more functions are KVQ_NODISCARD.
# Getters: kvq_<object>_get_<noun>.
s/\bkvq_queue_prefix\b/kvq_queue_get_prefix/g
s/\bkvq_db_engine\b/kvq_db_get_engine/g
s/\bkvq_txn_retries\b/kvq_txn_get_retries/g
s/\bkvq_subspace_prefix\b/kvq_subspace_get_prefix/g
s/\bkvq_tuple_count\b/kvq_tuple_get_count/g
s/\bkvq_tuple_at\b/kvq_tuple_get_elem/g
# One word for counts read from an object: stats.
s/\bkvq_workq_get_metrics\b/kvq_workq_get_stats/g
s/\bkvq_workq_metrics\b/kvq_workq_stats/g
s/\bWorkQueueMetrics\b/WorkQueueStats/g
s/\b(wq|self|w|workq)\.metrics\(\)/\1.stats()/g
# Byte-string helpers in the kvq_<object>_<verb> scheme.
s/\bkvq_printable\b/kvq_bytes_format/g
s/\bkvq_strinc\b/kvq_bytes_strinc/g
