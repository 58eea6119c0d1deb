/* chime's stats, each counter written once: the fields of a table's, a
 * stream's and the server's stats as the Stats call reports them. The
 * public structs (chime_table_stats_t, chime_stream_stats_t, chime_stats_t
 * in chime.h), the server's snapshot, the mapping to and from the wire on
 * both ends, the Python dicts, the Prometheus endpoint and chimectl are
 * all made from these lists, so this is where each field is documented.
 *
 * One line per field: X(type, name, kind, unit, help)
 *   type  its C type: uint64_t or uint32_t, int for a flag
 *   name  the field in the C struct and in proto/chime.proto's message
 *         (spelled the same: the mapping is a macro), the key of the
 *         Python dicts and of `chimectl --json stats`
 *   kind  COUNTER (only grows), GAUGE (goes up and down) or NONE (not a
 *         Prometheus metric)
 *   unit  COUNT, NS (nanoseconds; Prometheus shows seconds), BYTES or
 *         FLAG (0 or 1: a bool in Python and JSON)
 *   help  one line: the metric's HELP text, and this field's meaning
 *
 * A metric is named chime_table_<name>, chime_stream_<name> or
 * chime_<name> in Prometheus' way: an NS field's _ns becomes _seconds, a
 * BYTES field ends in _bytes, a gauge drops a trailing _total and a
 * counter gains one (sampler_wait_ns: chime_table_sampler_wait_seconds_total;
 * ring_bytes_total: chime_ring_bytes). Adding a field is one line here plus
 * its field in proto/chime.proto (docs/architecture.md, "Adding a
 * counter"); a field is appended at the end of its list, so the structs
 * keep their layout. */
#ifndef CHIME_STATS_H
#define CHIME_STATS_H

/* Per table; inserts counts every sample an insert took (a key each), those
 * a remover picked at once included: they count as left too, so inserts -
 * left is the size (less items given back, which are un-left). */
#define CHIME_TABLE_STATS_FIELDS(X)                                            \
  X(uint64_t, size, GAUGE, COUNT, "Items in the table.")                       \
  X(uint64_t, capacity, GAUGE, COUNT, "Items the table holds at most.")        \
  X(uint64_t, inserts, COUNTER, COUNT, "Items inserted.")                      \
  X(uint64_t, samples, COUNTER, COUNT, "Items sampled into batches.")          \
  X(uint64_t, sampler_wait_ns, COUNTER, NS, "Time samplers waited for items.") \
  X(uint64_t, insert_wait_ns, COUNTER, NS, "Time inserts waited for room.")    \
  X(uint64_t, returned, COUNTER, COUNT,                                        \
    "Items given back by streams that ended.")                                 \
  X(uint64_t, rate_insert_wait_ns, COUNTER, NS,                                \
    "Time inserts waited on the rate limiter.")                                \
  X(uint64_t, rate_sample_wait_ns, COUNTER, NS,                                \
    "Time samplers waited on the rate limiter.")                               \
  X(uint32_t, inserts_waiting_rate, GAUGE, COUNT,                              \
    "Inserts waiting on the rate limiter now.")                                \
  X(uint32_t, samplers_waiting_rate, GAUGE, COUNT,                             \
    "Samplers waiting on the rate limiter now.")                               \
  X(uint32_t, samplers_waiting_items, GAUGE, COUNT,                            \
    "Samplers waiting for items now.")                                         \
  X(uint64_t, left, COUNTER, COUNT,                                            \
    "Items that left the table (sampled out, evicted, deleted).")              \
  X(uint64_t, left_times_sampled, COUNTER, COUNT,                              \
    "Times the items that left were sampled, in all.")                         \
  X(uint64_t, steps, GAUGE, COUNT, "Steps stored now (sequence tables).")      \
  X(uint64_t, steps_inserted, COUNTER, COUNT,                                  \
    "Steps appended (sequence tables).")                                       \
  X(uint64_t, episodes_open, GAUGE, COUNT,                                     \
    "Episodes open now (sequence tables).")                                    \
  X(uint64_t, step_bytes, GAUGE, BYTES,                                        \
    "Bytes of step storage (sequence tables).")                                \
  X(uint64_t, removed_stale, COUNTER, COUNT,                                   \
    "Items that left for being more than max_staleness versions behind.")      \
  X(uint64_t, newest_version, GAUGE, COUNT,                                    \
    "The newest policy version the table knows (items' and learners').")       \
  X(uint64_t, raw_bytes, GAUGE, BYTES,                                         \
    "Bytes of the items held, as inserted (plain tables).")                    \
  X(uint64_t, stored_bytes, GAUGE, BYTES,                                      \
    "Bytes the table keeps for them, compressed leaves as stored.")            \
  X(uint64_t, leaves_stored_raw, COUNTER, COUNT,                               \
    "Compressed leaves' values kept raw: compression did not shrink them.")    \
  X(uint64_t, dropped_zero_variance, COUNTER, COUNT,                           \
    "Groups a zero_variance filter dropped at insert (group tables).")         \
  X(uint64_t, dropped_mean_outside, COUNTER, COUNT,                            \
    "Groups a mean_outside filter dropped at insert (group tables).")          \
  X(uint64_t, disk_bytes, GAUGE, BYTES,                                        \
    "Bytes the table's files hold on disk (allocated blocks; 0 in memory).")   \
  X(uint64_t, pace_wait_ns, COUNTER, NS,                                       \
    "Time inserts waited on pacing (producers held back).")                    \
  X(uint64_t, paced_inserts, COUNTER, COUNT,                                   \
    "Insert requests that waited on pacing.")                                  \
  X(uint32_t, inserts_waiting_pace, GAUGE, COUNT,                              \
    "Inserts waiting on pacing now.")                                          \
  X(uint64_t, pace_ahead, GAUGE, COUNT,                                        \
    "Samples written ahead of the learner's progress (pacing).")

/* Per open stream, beside its stream_id, table and mode. */
#define CHIME_STREAM_STATS_FIELDS(X)                                           \
  X(uint64_t, batches, COUNTER, COUNT,                                         \
    "Batches delivered (shm: published, stream: sent).")                       \
  X(uint64_t, bytes, COUNTER, BYTES, "Bytes of batches delivered.")            \
  X(uint64_t, producer_wait_ns, COUNTER, NS,                                   \
    "Time the sampler waited for a free slot.")                                \
  X(uint64_t, consumer_wait_ns, COUNTER, NS,                                   \
    "Time the learner waited for a batch.")                                    \
  X(uint64_t, ring_bytes, GAUGE, BYTES, "Bytes of the stream's ring.")         \
  X(uint32_t, leases, GAUGE, COUNT, "Batches the learner holds now.")          \
  X(uint32_t, max_leases, NONE, COUNT,                                         \
    "The most batches the learner held at once.")                              \
  X(int, pinned, NONE, FLAG, "Whether the server page-locked the ring.")

/* The server's, beside its tables and streams. */
#define CHIME_SERVER_STATS_FIELDS(X)                                           \
  X(uint64_t, ring_bytes_total, GAUGE, BYTES,                                  \
    "Bytes of rings charged to the budget now.")                               \
  X(uint64_t, pinned_bytes, GAUGE, BYTES, "Bytes of rings page-locked now.")   \
  X(uint64_t, staged_insert_bytes, GAUGE, BYTES,                               \
    "Bytes of insert requests staged to wait for room.")                       \
  X(uint64_t, staged_insert_budget, GAUGE, BYTES,                              \
    "The budget of staged insert bytes.")                                      \
  X(uint32_t, insert_calls_parked, GAUGE, COUNT,                               \
    "Insert calls not read while the staging budget is spent.")                \
  X(uint64_t, staged_insert_reserved, GAUGE, BYTES,                            \
    "Staging budget held for Insert messages asked of gRPC, not yet read.")    \
  X(uint32_t, insert_reads_reserved, GAUGE, COUNT,                             \
    "Insert reads in the works that hold a part of the staging budget.")       \
  X(uint64_t, staged_insert_peak, GAUGE, BYTES,                                \
    "The most staged and reserved insert bytes at once since start.")

#endif
