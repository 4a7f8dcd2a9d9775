/* Seeds of the randomized tests: one per run, from --seed N or $KVQ_TEST_SEED or random, always
 * printed with the command that replays the run. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kvq_test.h"

static uint64_t run_seed;
static const char *prog = "test";
static int ready;

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof(s), 0) == (ssize_t)sizeof(s))
        return s;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
           ((uint64_t)getpid() << 32);
}

void kt_seed_setup(int argc, char **argv)
{
    if (argc > 0 && argv != NULL && argv[0] != NULL)
        prog = argv[0];
    const char *s = getenv("KVQ_TEST_SEED");
    for (int i = 1; argv != NULL && i + 1 < argc; i++)
        if (strcmp(argv[i], "--seed") == 0)
            s = argv[i + 1];
    run_seed = s != NULL && s[0] != '\0' ? strtoull(s, NULL, 0) : random_seed();
    ready = 1;
    /* The replay lines of kt_seed_print name one test. */
    const char *filter = getenv("KVQ_TEST_FILTER");
    if (filter != NULL && filter[0] != '\0')
        cmocka_set_test_filter(filter);
}

uint64_t kt_seed_init(int argc, char **argv)
{
    kt_seed_setup(argc, argv);
    printf("# seed %" PRIu64 " (replay: KVQ_TEST_SEED=%" PRIu64 " %s)\n", run_seed, run_seed, prog);
    fflush(stdout);
    return run_seed;
}

uint64_t kt_seed(void)
{
    if (!ready)
        kt_seed_setup(0, NULL);
    return run_seed;
}

const char *kt_prog(void)
{
    return prog;
}

uint64_t kt_seed_for(const char *name)
{
    uint64_t h = kt_seed();
    for (const char *p = name; p != NULL && *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
    return h;
}

uint64_t kt_seed_print(const char *test)
{
    uint64_t s = kt_seed();
    const char *url = getenv("KVQ_TEST_URL");
    int with_url = url != NULL && url[0] != '\0';
    printf("# %s: seed %" PRIu64 " (replay: KVQ_TEST_SEED=%" PRIu64 " KVQ_TEST_FILTER=%s%s%s %s)\n",
           test, s, s, test, with_url ? " KVQ_TEST_URL=" : "", with_url ? url : "", prog);
    fflush(stdout);
    return s;
}

unsigned kt_campaign_seed(const char *name, int cycles)
{
    uint64_t h = kt_seed_for(name);
    printf("# %s: %d cycles, seed %" PRIu64 " (replay: KVQ_TEST_SEED=%" PRIu64 " %s)\n", name,
           cycles, kt_seed(), kt_seed(), prog);
    fflush(stdout);
    return (unsigned)(h ^ (h >> 32));
}
