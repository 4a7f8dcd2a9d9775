/**
 * @file kvq/testing.h
 * @brief For tests only: injected commit faults, and knobs that deliberately break kvq.
 *
 * Nothing here belongs in production code, and kvq/kvq.h does not include this header.
 *
 * **Injected commit faults** let an application test its own retry and idempotency handling:
 * a chosen share of commits fails as FoundationDB's commits can fail (1020 not committed; 1021
 * committed or not; 1031 committed or not), chosen by a seeded generator so that a run can be
 * replayed. The queue layers' convenience forms must, and do, still push and pop exactly as they
 * promise under them.
 *
 * **KVQ_TEST_* flags** break a guarantee on purpose (skip the conflict check, acknowledge before
 * the disk sync, ...), so that kvq's own tests can show that their checkers catch the breakage.
 */
#ifndef KVQ_TESTING_H
#define KVQ_TESTING_H

#include "common.h"
#include "db.h"
#include "workq.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kinds of injected commit faults (kvq_testing_options.fault_kinds). */
enum {
    /** The commit is not applied and fails with 1020. */
    KVQ_FAULT_NOT_COMMITTED = 1u << 0,
    /** The commit is applied but reports 1021. */
    KVQ_FAULT_UNKNOWN_COMMITTED = 1u << 1,
    /** The commit is not applied and reports 1021. */
    KVQ_FAULT_UNKNOWN_NOT_COMMITTED = 1u << 2,
    /** The 1020 and 1021 kinds above. */
    KVQ_FAULT_ALL = 7u,
    /** The commit is applied but reports 1031, as a FoundationDB commit does when the
     * transaction's timeout passes while the commit is in flight. */
    KVQ_FAULT_TIMED_OUT_COMMITTED = 1u << 3,
    /** The commit is not applied and reports 1031 from the commit. */
    KVQ_FAULT_TIMED_OUT_NOT_COMMITTED = 1u << 4,
};

/** Knobs (kvq_testing_options.flags) that deliberately break the engine or the layers. */
enum {
    /** Skip the read-conflict check at commit (commits never fail with 1020). */
    KVQ_TEST_SKIP_CONFLICT_CHECK = 1u << 0,
    /** The queue layers' convenience forms neither read nor honour their idempotency markers,
     * so a retry after a 1021 that had committed pushes twice or pops twice. */
    KVQ_TEST_DROP_IDEMPOTENCY_MARKER = 1u << 1,
    /** Embedded engine: commits are applied without waiting for the disk (as KVQ_DB_RELAXED)
     * while the database claims to be durable, so a commit is acknowledged before its WAL
     * frames are synced. */
    KVQ_TEST_ACK_BEFORE_SYNC = 1u << 2,
    /** Embedded engine: a storage error while committing (a failed WAL write or sync, after
     * which the commit may or may not survive) is reported as the definite KVQ_EIO instead of
     * KVQ_ECOMMIT_UNKNOWN_RESULT. */
    KVQ_TEST_IOERR_AS_DEFINITE = 1u << 3,
    /** Embedded engine, a crash point rather than a broken guarantee: this handle's next
     * commit leader waits (up to 10 s) until another process has queued a batch in the shared
     * commit queue, takes it into its own batch, and stops its process with SIGSTOP just before
     * the storage commit, holding the commit lock, so that a test can kill it there. */
    KVQ_TEST_LEADER_STOP_BEFORE_COMMIT = 1u << 4,
    /** As KVQ_TEST_LEADER_STOP_BEFORE_COMMIT, but the process stops just after the storage
     * commit, before the other process's batch learns its outcome. */
    KVQ_TEST_LEADER_STOP_AFTER_COMMIT = 1u << 5,
    /** Embedded engine, not a broken guarantee: every transaction of the handle reads early, as
     * only kvq's own pops do when early reads are on ($KVQ_EARLY_READ=1, docs/engine.md): its
     * first read may see commits written but not yet synced, and its commit (or, if it writes
     * nothing, its return from commit) waits for them. The serializability oracle runs with it
     * so that early reads meet transactions of every shape. */
    KVQ_TEST_EARLY_READ_ALL = 1u << 6,
};

#define KVQ_TESTING_OPTIONS_VERSION 1

/** What kvq_db_open_testing adds; initialise with KVQ_TESTING_OPTIONS_INIT. */
typedef struct kvq_testing_options {
    unsigned int version; /**< KVQ_TESTING_OPTIONS_VERSION */
    /** The probability that a commit gets an injected fault, 0 (off) to 1. */
    double fault_rate;
    /** Which KVQ_FAULT_* kinds (one is picked at random per fault); at least one if the rate
     * is above 0. */
    unsigned int fault_kinds;
    /** The seed of the fault generator (the same seed gives the same choices in one thread). */
    uint64_t fault_seed;
    /** KVQ_TEST_* flags. */
    unsigned int flags;
} kvq_testing_options;

#define KVQ_TESTING_OPTIONS_INIT                  \
    {                                             \
        KVQ_TESTING_OPTIONS_VERSION, 0.0, 0, 0, 0 \
    }

/**
 * kvq_db_open with injected faults and test knobs.
 * @param testing  NULL is kvq_db_open
 * @return as kvq_db_open; KVQ_EINVAL also for a bad testing version, a fault rate outside
 *         [0, 1], an unknown fault kind or none with a rate, an unknown flag.
 */
KVQ_API KVQ_NODISCARD int kvq_db_open_testing(kvq_db **out,
                                              const char *url,
                                              const kvq_db_options *opts,
                                              const kvq_testing_options *testing);

/** Knobs of kvq_testing_workq_flags. */
enum {
    /** Upkeep (kvq_workq_recover, and the pass before each kvq_workq_receive) returns every
     * in-flight item to the queue, whether its lease has ended or not: an item is delivered
     * again while a consumer still holds a valid lease on it. */
    KVQ_WORKQ_TEST_IGNORE_LEASES = 1u << 0,
    /** Crash points of the leased consumer runtime, whose worker acks its finished item in the
     * transaction of its next receive: the process stops itself with SIGSTOP just before that
     * transaction's commit, or just after it committed (before the worker learns of it), so
     * that a test can kill it there. */
    KVQ_WORKQ_TEST_STOP_BEFORE_ACK_RECEIVE = 1u << 1,
    KVQ_WORKQ_TEST_STOP_AFTER_ACK_RECEIVE = 1u << 2,
};

/** Sets a work queue handle's KVQ_WORKQ_TEST_* flags (0 clears them). Call it before the handle
 * is shared. @return 0; KVQ_EINVAL (NULL, an unknown flag). */
KVQ_API KVQ_NODISCARD int kvq_testing_workq_flags(kvq_workq *w, unsigned int flags);

/** What the long polls (kvq_workq_receive_wait, the consumer runtime) through a work queue
 * handle have done so far: how many times they looked for an item (a receive each) and how
 * many times they went to sleep. Either pointer may be NULL. @return 0; KVQ_EINVAL (NULL w). */
KVQ_API KVQ_NODISCARD int
kvq_testing_workq_wait_counts(uint64_t *looks, uint64_t *sleeps, kvq_workq *w);

/** How many of those sleeps a watch ended (the others ended at a deadline, a due time, a lease
 * end or a stop). @return 0; KVQ_EINVAL (NULL w or wakes). */
KVQ_API KVQ_NODISCARD int kvq_testing_workq_wait_wakes(uint64_t *wakes, kvq_workq *w);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_TESTING_H */
