/* kill -9 at each step of the leased consumer's piggybacked ack (issue 30 item 5): a worker acks
 * the item it finished in the transaction of its next receive. A child process consumes three
 * items with one worker and dies by SIGKILL at one of these points:
 *   work       in the handler of item 0, after its work, before it answered
 *   before     just before the commit of "ack item 0 + receive item 1"
 *   inside     just after that commit, before the worker learned of it
 *   after      in the handler of item 1 (the commit returned)
 * (the last two by a crash point of kvq/testing.h that stops the process with SIGSTOP, then the
 * parent's SIGKILL). The parent then drains the queue with a correct consumer, once the dead
 * worker's lease has ended, and checks: every item acked exactly once in the end (none lost), and
 * an item delivered again exactly when its ack had not committed: item 0 at "work" and "before",
 * item 1 (received by the commit that the dead worker never learned of, or was working on) at
 * "inside" and "after". Each case runs on the storage the environment picks (KVQ_STORAGE). */
#include "kvq_test.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "util/util.h"

#define ITEMS    3
#define LEASE_MS 400

enum { AT_WORK, AT_BEFORE, AT_INSIDE, AT_AFTER };

static char dir[256];

static int open_wq(kvq_db **db, kvq_queue **q, kvq_workq **w)
{
    int rc = kvq_db_open(db, dir, NULL);
    if (rc == 0)
        rc = kvq_queue_open(q, *db, KVQ_QUEUE_DURABLE, NULL, NULL);
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.lease_ms = LEASE_MS;
    o.max_deliveries = 0;
    if (rc == 0)
        rc = kvq_workq_open(w, *q, &o);
    return rc;
}

typedef struct child_ctx {
    int at;
} child_ctx;

static int child_handler(kvq_bytes v, const kvq_workq_lease *lease, int worker, void *payload)
{
    (void)worker;
    (void)lease;
    child_ctx *c = payload;
    int item = v.len == 1 ? v.data[0] - '0' : -1;
    if (c->at == AT_WORK && item == 0)
        raise(SIGKILL); /* the work is done; the answer never comes */
    if (c->at == AT_AFTER && item == 1)
        raise(SIGKILL);
    return KVQ_WORKQ_ACK;
}

static void child_main(int at)
{
    kvq_db *db;
    kvq_queue *q;
    kvq_workq *w;
    if (open_wq(&db, &q, &w) != 0)
        _exit(10);
    unsigned flags = at == AT_BEFORE   ? KVQ_WORKQ_TEST_STOP_BEFORE_ACK_RECEIVE
                     : at == AT_INSIDE ? KVQ_WORKQ_TEST_STOP_AFTER_ACK_RECEIVE
                                       : 0u;
    if (kvq_testing_workq_flags(w, flags) != 0)
        _exit(11);
    child_ctx c = { at };
    kvq_workq_consumer_options o = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.lease_ms = LEASE_MS;
    kvq_workq_consumer *cons;
    if (kvq_workq_consumer_start(&cons, w, child_handler, &c, &o) != 0)
        _exit(12);
    /* The consumer runs until this process is killed; reaching the end is a failure. */
    int joined = kvq_workq_consumer_join(cons);
    _exit(joined == 0 ? 13 : 14);
}

static void crash_case(int at, const char *name, const uint32_t expect[ITEMS])
{
    assert_int_equal(kt_mkdtemp(dir, sizeof(dir), "wqack"), 0);
    kvq_db *db;
    kvq_queue *q;
    kvq_workq *w;
    assert_int_equal(open_wq(&db, &q, &w), 0);
    for (int i = 0; i < ITEMS; i++) {
        uint8_t v = (uint8_t)('0' + i);
        assert_int_equal(kvq_workq_push(NULL, w, &v, 1, NULL), 0);
    }
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child_main(at);
    int status;
    assert_int_equal(waitpid(pid, &status, WUNTRACED), pid);
    if (at == AT_BEFORE || at == AT_INSIDE) {
        if (!WIFSTOPPED(status))
            fail_msg("%s: the child did not stop at its crash point (status 0x%x)", name, status);
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &status, 0), pid);
    }
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        fail_msg("%s: the child ended other than by SIGKILL (status 0x%x)", name, status);

    /* Drain: the dead worker's lease ends within LEASE_MS of database time. */
    assert_int_equal(open_wq(&db, &q, &w), 0);
    uint32_t deliveries[ITEMS] = { 0 };
    int acked_here = 0;
    kvq_buf b = KVQ_BUF_INIT;
    for (;;) {
        kvq_workq_stats m;
        assert_int_equal(kvq_workq_get_stats(&m, w), 0);
        if (m.ready == 0 && m.inflight == 0 && m.delayed == 0)
            break;
        kvq_workq_lease l;
        int rc = kvq_workq_receive_wait(&b, &l, w, 60000, 60000);
        if (rc == KVQ_ENOTFOUND)
            continue;
        assert_int_equal(rc, 0);
        assert_int_equal(b.len, 1);
        int item = b.data[0] - '0';
        assert_true(item >= 0 && item < ITEMS);
        if (deliveries[item] != 0)
            fail_msg("%s: item %d drained twice", name, item);
        deliveries[item] = l.deliveries;
        assert_int_equal(kvq_workq_ack(w, &l), 0);
        acked_here++;
    }
    kvq_buf_dispose(&b);
    kvq_workq_stats m;
    assert_int_equal(kvq_workq_get_stats(&m, w), 0);
    uint64_t len = 1;
    assert_int_equal(kvq_queue_len(&len, q), 0);
    printf("# %s: deliveries in the drain %u %u %u (0: acked by the killed worker); acked %lld "
           "in all\n",
           name, deliveries[0], deliveries[1], deliveries[2], (long long)m.acked);
    /* Nothing lost, nothing acked twice: every item acked once, by one side or the other. */
    assert_int_equal(len, 0);
    assert_int_equal(m.acked, ITEMS);
    assert_int_equal(m.dead, 0);
    for (int i = 0; i < ITEMS; i++)
        if (deliveries[i] != expect[i])
            fail_msg("%s: item %d was delivery %u in the drain, expected %u", name, i,
                     deliveries[i], expect[i]);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    assert_int_equal(kt_rm_rf(dir), 0);
}

/* Expected delivery numbers in the drain: 0 for an item the killed worker acked; 2 for one it
 * held (its ack did not commit); 1 for one it never received. */
static void test_kill_after_work(void **state)
{
    (void)state;
    static const uint32_t e[ITEMS] = { 2, 1, 1 };
    crash_case(AT_WORK, "after the work", e);
}

static void test_kill_before_commit(void **state)
{
    (void)state;
    static const uint32_t e[ITEMS] = { 2, 1, 1 };
    crash_case(AT_BEFORE, "before the ack+receive commit", e);
}

static void test_kill_inside_commit(void **state)
{
    (void)state;
    static const uint32_t e[ITEMS] = { 0, 2, 1 };
    crash_case(AT_INSIDE, "inside the ack+receive commit", e);
}

static void test_kill_after_commit(void **state)
{
    (void)state;
    static const uint32_t e[ITEMS] = { 0, 2, 1 };
    crash_case(AT_AFTER, "after the ack+receive commit", e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_after_work),
        cmocka_unit_test(test_kill_before_commit),
        cmocka_unit_test(test_kill_inside_commit),
        cmocka_unit_test(test_kill_after_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
