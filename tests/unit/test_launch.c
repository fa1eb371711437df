/* test_launch.c - the launcher: failure propagation (a rank that segfaults, exits 3, or
 * hangs while others wait for it), stopping a job, cleanup (no process, no fd and no
 * /dev/shm segment left), two jobs at once, torchrun's environment, rank-ordered output,
 * events (pairs match, nothing lost, results unchanged), the step gate, and the graceful
 * stop (rank 0 alone told, the job ending itself or stopped after the grace). */
#include "../../core/mlsys.h"
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int shm_leftovers(void)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, "mlsys") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* Start, wait, and check that nothing of the job remains. Returns the wait result. */
static int run_job(int n, int tmo, int (*fn)(mlsys_comm *, void *), void *arg, char *why,
                   size_t wl, mlsys_rank_status *st)
{
    int fds = count_fds();
    mlsys_launch_opts o = {.world_size = n, .timeout_ms = tmo};
    char err[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, fn, arg, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    int rc = mlsys_job_wait(j, NULL, -1, why, wl);
    pid_t pids[64];
    for (int r = 0; r < n; r++) {
        pids[r] = mlsys_job_status(j, r)->pid;
        if (st)
            st[r] = *mlsys_job_status(j, r);
    }
    mlsys_job_free(j);
    for (int r = 0; r < n; r++)
        ck_assert_msg(kill(pids[r], 0) == -1 && errno == ESRCH, "rank %d (pid %d) still exists",
                      r, (int)pids[r]);
    ck_assert_int_eq(count_fds(), fds);
    ck_assert_int_eq(shm_leftovers(), 0);
    return rc;
}

static int wait_for_rank1(mlsys_comm *c)
{
    int x;
    return mlsys_recv(c, &x, 1, MLSYS_I32, 1, 0) ? 1 : 0;
}

static int segv_rank1(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) == 1) {
        signal(SIGSEGV, SIG_DFL);      /* sanitizer builds catch it otherwise */
        raise(SIGSEGV);
    }
    return wait_for_rank1(c);
}

START_TEST(test_rank_segfaults)
{
    char why[256];
    mlsys_rank_status st[4];
    int rc = run_job(4, 20000, segv_rank1, NULL, why, sizeof why, st);
    ck_assert_int_ne(rc, 0);
    ck_assert_str_eq(why, "rank 1 died by signal 11 (Segmentation fault)");
    ck_assert(!st[1].exited && st[1].code == SIGSEGV);
    ck_assert(st[0].killed_by_us && st[2].killed_by_us);
}
END_TEST

static int exit3_rank2(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) == 2)
        return 3;
    if (mlsys_rank(c) == 1)
        return 0;
    int x;
    return mlsys_recv(c, &x, 1, MLSYS_I32, 2, 0) ? 1 : 0;
}

START_TEST(test_rank_exits_3)
{
    char why[256];
    int rc = run_job(4, 20000, exit3_rank2, NULL, why, sizeof why, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_str_eq(why, "rank 2 exited with status 3");
}
END_TEST

static int hang_rank1(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) == 1)
        for (;;)
            pause();
    int x, rc = mlsys_recv(c, &x, 1, MLSYS_I32, 1, 0);
    char want[64];
    snprintf(want, sizeof want, "rank %d waits in recv from rank 1", mlsys_rank(c));
    if (rc == MLSYS_ERR_TIMEOUT && strstr(mlsys_errmsg(c), want))
        return 9;
    return 1;
}

START_TEST(test_rank_hangs_past_timeout)
{
    char why[256];
    mlsys_rank_status st[3];
    int rc = run_job(3, 400, hang_rank1, NULL, why, sizeof why, st);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(why, "exited with status 9") != NULL, "%s", why);
    ck_assert(st[1].killed_by_us);
}
END_TEST

static int sleep_forever(mlsys_comm *c, void *arg)
{
    (void)c;
    (void)arg;
    for (;;)
        pause();
    return 0;
}

START_TEST(test_stop_job)
{
    mlsys_launch_opts o = {.world_size = 3};
    char err[256], why[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, sleep_forever, NULL, err, sizeof err);
    ck_assert(j != NULL);
    ck_assert_int_eq(mlsys_job_wait(j, NULL, 100, why, sizeof why), 1);   /* still running */
    mlsys_job_stop(j);
    ck_assert_int_ne(mlsys_job_wait(j, NULL, -1, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "interrupted") != NULL, "%s", why);
    pid_t p = mlsys_job_status(j, 2)->pid;
    mlsys_job_free(j);
    ck_assert(kill(p, 0) == -1 && errno == ESRCH);
}
END_TEST

/* A job started with stop_grace_ms: a stop is rank 0's SIGUSR1 alone, and rank 0 ends the
 * job (it tells the others, which wait for it without a timeout); ready: rank 0's handler is
 * in place. mode 0: it drains; 1: it ignores the signal; 2: it has no handler (dies by it). */
typedef struct graceful { volatile int ready, usr1_seen[3]; } graceful;
static graceful *g_grace;
static volatile sig_atomic_t g_usr1;
static void on_usr1(int sig) { (void)sig; g_usr1 = 1; }

static int graceful_rank(mlsys_comm *c, void *arg)
{
    int mode = *(int *)arg, r = mlsys_rank(c), stop = 0;
    if (r == 0) {
        if (mode == 0)
            signal(SIGUSR1, on_usr1);
        else if (mode == 1)
            signal(SIGUSR1, SIG_IGN);
        g_grace->ready = 1;
        while (!g_usr1)
            pause();
        g_grace->usr1_seen[0] = 1;
        stop = 1;
        return mlsys_broadcast(c, &stop, 1, MLSYS_I32, 0) ? 1 : 0;
    }
    signal(SIGUSR1, on_usr1);       /* a rank but 0 must never get it under shm */
    mlsys_set_timeout_ms(c, 0);
    int rc = mlsys_broadcast(c, &stop, 1, MLSYS_I32, 0);
    g_grace->usr1_seen[r] = g_usr1;
    return rc || stop != 1 ? 1 : 0;
}

static int graceful_job(int mode, int grace_ms, char *why, size_t n, mlsys_rank_status *st)
{
    mlsys_launch_opts o = {.world_size = 3, .stop_grace_ms = grace_ms};
    char err[256];
    memset((void *)g_grace, 0, sizeof *g_grace);
    mlsys_job *j = mlsys_job_start(&o, NULL, graceful_rank, &mode, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    for (int i = 0; i < 6000 && !g_grace->ready; i++)      /* 60 s at most */
        ck_assert_int_eq(mlsys_job_wait(j, NULL, 10, why, n), 1);
    ck_assert(g_grace->ready);
    mlsys_job_stop(j);
    int rc = mlsys_job_wait(j, NULL, -1, why, n);
    for (int r = 0; r < 3; r++)
        st[r] = *mlsys_job_status(j, r);
    mlsys_job_free(j);
    return rc;
}

START_TEST(test_graceful_stop)
{
    char why[256];
    mlsys_rank_status st[3];
    /* rank 0 drains: the job ends by itself, nobody killed, only rank 0 signalled */
    ck_assert_msg(graceful_job(0, 60000, why, sizeof why, st) == 0, "%s", why);
    for (int r = 0; r < 3; r++)
        ck_assert(st[r].exited && st[r].code == 0 && !st[r].killed_by_us);
    ck_assert(g_grace->usr1_seen[0] && !g_grace->usr1_seen[1] && !g_grace->usr1_seen[2]);
    /* rank 0 ignores it: after the grace every rank is stopped */
    ck_assert_int_ne(graceful_job(1, 300, why, sizeof why, st), 0);
    ck_assert_msg(strstr(why, "interrupted") != NULL, "%s", why);
    ck_assert(st[0].killed_by_us && st[1].killed_by_us);
    /* rank 0 has no handler yet: it dies by the signal, which is a stop, not a failure */
    ck_assert_int_ne(graceful_job(2, 60000, why, sizeof why, st), 0);
    ck_assert_msg(strstr(why, "interrupted") != NULL, "%s", why);
    ck_assert(!st[0].exited && st[0].code == SIGUSR1);
}
END_TEST

static int ring_sum(mlsys_comm *c, void *arg)
{
    int rounds = arg ? *(int *)arg : 50;
    int r = mlsys_rank(c), n = mlsys_size(c), v = r, acc = r;
    for (int k = 0; k < rounds; k++) {
        int in;
        if (mlsys_sendrecv(c, &v, 1, (r + 1) % n, 0, &in, 1, (r - 1 + n) % n, 0, MLSYS_I32))
            return 1;
        v = in;
        acc += in;
    }
    /* after rounds = multiple of n, acc = rounds/n * n(n-1)/2 + r */
    return acc == (rounds / n) * n * (n - 1) / 2 + r ? 0 : 5;
}

START_TEST(test_two_jobs_at_once)
{
    mlsys_launch_opts o = {.world_size = 4, .timeout_ms = 20000};
    char err[256], why1[256], why2[256];
    int rounds = 400;
    mlsys_job *a = mlsys_job_start(&o, NULL, ring_sum, &rounds, err, sizeof err);
    mlsys_job *b = mlsys_job_start(&o, NULL, ring_sum, &rounds, err, sizeof err);
    ck_assert(a && b);
    int ra = 1, rb = 1;
    while (ra == 1 || rb == 1) {
        if (ra == 1)
            ra = mlsys_job_wait(a, NULL, 20, why1, sizeof why1);
        if (rb == 1)
            rb = mlsys_job_wait(b, NULL, 20, why2, sizeof why2);
    }
    ck_assert_msg(ra == 0, "%s", why1);
    ck_assert_msg(rb == 0, "%s", why2);
    mlsys_job_free(a);
    mlsys_job_free(b);
}
END_TEST

static int check_env(mlsys_comm *c, void *arg)
{
    (void)arg;
    const char *names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
    char want[5][32];
    snprintf(want[0], 32, "%d", mlsys_rank(c));
    snprintf(want[1], 32, "%d", mlsys_size(c));
    snprintf(want[2], 32, "%d", mlsys_rank(c));
    snprintf(want[3], 32, "127.0.0.1");
    snprintf(want[4], 32, "29503");
    for (int i = 0; i < 5; i++) {
        const char *v = getenv(names[i]);
        if (!v || strcmp(v, want[i])) {
            fprintf(stderr, "%s=%s, want %s\n", names[i], v ? v : "(unset)", want[i]);
            return 1;
        }
    }
    return 0;
}

START_TEST(test_torchrun_env)
{
    mlsys_launch_opts o = {.world_size = 3, .master_port = 29503};
    char err[256], why[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, check_env, NULL, err, sizeof err);
    ck_assert(j);
    ck_assert_msg(mlsys_job_wait(j, NULL, -1, why, sizeof why) == 0, "%s", why);
    mlsys_job_free(j);
}
END_TEST

typedef struct lines { char text[64][64]; int n; } lines;

static void keep_line(void *u, int rank, int is_err, const char *s)
{
    lines *l = u;
    (void)rank;
    if (!is_err && l->n < 64)
        snprintf(l->text[l->n++], 64, "%s", s);
}

static int ordered(mlsys_comm *c, void *arg)
{
    (void)arg;
    usleep((useconds_t)(mlsys_size(c) - mlsys_rank(c)) * 20000);   /* late ranks start first */
    for (int k = 0; k < 2; k++)
        if (mlsys_print_ordered(c, "pass %d rank %d\n", k, mlsys_rank(c)))
            return 1;
    return 0;
}

START_TEST(test_ordered_print)
{
    mlsys_launch_opts o = {.world_size = 5, .capture_output = 1};
    char err[256], why[256];
    lines l = {.n = 0};
    mlsys_job_sink sink = {keep_line, NULL, &l};
    mlsys_job *j = mlsys_job_start(&o, NULL, ordered, NULL, err, sizeof err);
    ck_assert(j);
    ck_assert_msg(mlsys_job_wait(j, &sink, -1, why, sizeof why) == 0, "%s", why);
    mlsys_job_free(j);
    ck_assert_int_eq(l.n, 10);
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 5; r++) {
            char want[64];
            snprintf(want, sizeof want, "pass %d rank %d", k, r);
            ck_assert_str_eq(l.text[k * 5 + r], want);
        }
}
END_TEST

typedef struct evlog { mlsys_event ev[20000]; size_t n; } evlog;

static void keep_events(void *u, const mlsys_event *ev, size_t n)
{
    evlog *l = u;
    for (size_t i = 0; i < n && l->n < 20000; i++)
        l->ev[l->n++] = ev[i];
}

START_TEST(test_events_pair_up)
{
    int rounds = 60;
    mlsys_launch_opts o = {.world_size = 3, .trace_capacity = 64};   /* small: back-pressure */
    char err[256], why[256];
    static evlog l;
    l.n = 0;
    mlsys_job_sink sink = {NULL, keep_events, &l};
    mlsys_job *j = mlsys_job_start(&o, NULL, ring_sum, &rounds, err, sizeof err);
    ck_assert(j);
    ck_assert_msg(mlsys_job_wait(j, &sink, -1, why, sizeof why) == 0, "%s", why);  /* same result */
    ck_assert_int_eq(mlsys_job_events_lost(j), 0);
    mlsys_job_free(j);
    /* each rank: rounds sends and rounds receives, each a begin and an end */
    size_t per_kind[MLSYS_EV_KIND_COUNT] = {0};
    for (size_t i = 0; i < l.n; i++)
        per_kind[l.ev[i].kind]++;
    ck_assert_int_eq(per_kind[MLSYS_EV_SEND_BEGIN], 3 * rounds);
    ck_assert_int_eq(per_kind[MLSYS_EV_SEND_END], 3 * rounds);
    ck_assert_int_eq(per_kind[MLSYS_EV_RECV_END], 3 * rounds);
    /* every receive end names a message some send began, from the rank it says */
    for (size_t i = 0; i < l.n; i++) {
        if (l.ev[i].kind != MLSYS_EV_RECV_END)
            continue;
        int found = 0;
        for (size_t k = 0; k < l.n && !found; k++)
            found = l.ev[k].kind == MLSYS_EV_SEND_BEGIN && l.ev[k].msg_id == l.ev[i].msg_id &&
                    l.ev[k].rank == l.ev[i].peer && l.ev[k].peer == l.ev[i].rank;
        ck_assert_msg(found, "receive %zu has no matching send", i);
    }
}
END_TEST

static int stepper(mlsys_comm *c, void *arg)
{
    (void)arg;
    for (int s = 0; s < 3; s++)
        if (mlsys_step(c, s, "step"))
            return 1;
    return 0;
}

START_TEST(test_gate_holds_ranks)
{
    mlsys_launch_opts o = {.world_size = 2, .gated = 1};
    char err[256], why[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, stepper, NULL, err, sizeof err);
    ck_assert(j);
    for (int s = 0; s < 3; s++) {
        /* wait until both ranks sit at step s, then check they stay there */
        for (int tries = 0; tries < 500; tries++) {
            ck_assert_int_eq(mlsys_job_wait(j, NULL, 10, why, sizeof why), 1);
            if (mlsys_job_gate_step(j, 0) == s && mlsys_job_gate_step(j, 1) == s)
                break;
        }
        ck_assert_int_eq(mlsys_job_gate_step(j, 0), s);
        ck_assert_int_eq(mlsys_job_gate_step(j, 1), s);
        ck_assert_int_eq(mlsys_job_wait(j, NULL, 50, why, sizeof why), 1);
        ck_assert_int_eq(mlsys_job_gate_step(j, 0), s);
        mlsys_job_grant_step(j);
    }
    ck_assert_msg(mlsys_job_wait(j, NULL, -1, why, sizeof why) == 0, "%s", why);
    mlsys_job_free(j);
}
END_TEST

START_TEST(test_bad_world_size)
{
    char err[256];
    for (int n = -1; n <= 0; n++) {
        mlsys_launch_opts o = {.world_size = n};
        ck_assert(mlsys_job_start(&o, NULL, ring_sum, NULL, err, sizeof err) == NULL);
        ck_assert_msg(strstr(err, "world size must be from 1 to 64") != NULL, "%s", err);
    }
    mlsys_launch_opts o = {.world_size = 100000};
    ck_assert(mlsys_job_start(&o, NULL, ring_sum, NULL, err, sizeof err) == NULL);
}
END_TEST

/* ---- the runner sleeps until a rank exits; it does not poll for exits ---- */

static int sleep_then_exit(mlsys_comm *c, void *arg)
{
    (void)c;
    (void)arg;
    usleep(1000000);
    return 0;
}

START_TEST(test_wait_sleeps_until_exit)
{
    /* no output pipes, no event rings: nothing but the ranks' exits can wake the runner. A
     * runner that looks every 20 ms wakes about 50 times in the second the ranks sleep; one
     * that waits on the ranks themselves wakes a few times (its 100 ms safety net) */
    mlsys_launch_opts o = {.world_size = 2, .timeout_ms = 20000};
    char err[256], why[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, sleep_then_exit, NULL, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    ck_assert_int_eq(mlsys_job_wait(j, NULL, -1, why, sizeof why), 0);
    getrusage(RUSAGE_SELF, &r1);
    long wakeups = r1.ru_nvcsw - r0.ru_nvcsw;
    ck_assert_msg(wakeups < 30, "the runner woke %ld times while the ranks slept 1 s", wakeups);
    mlsys_job_free(j);
}
END_TEST

/* ---- what the ranks leave running is ended with the job ---- */

static int g_report_fd = -1, g_ack[2] = {-1, -1};

static int fork_and_leave(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) != 1)
        return 0;
    for (int k = 0; k < 3; k++) {
        pid_t p = fork();
        if (p == 0) {
            if (k == 1)
                setsid();                   /* out of the job's process group */
            if (k == 2 && fork() != 0)      /* a double fork: the middle one exits */
                _exit(0);
            pid_t me = getpid();
            char one = 1;
            if (write(g_report_fd, &me, sizeof me) != sizeof me || write(g_ack[1], &one, 1) != 1)
                _exit(1);
            close(1);
            close(2);
            sleep(30);
            _exit(0);
        }
    }
    char got[3];
    for (size_t n = 0; n < sizeof got;) {     /* every child is there before we return */
        ssize_t k = read(g_ack[0], got + n, sizeof got - n);
        if (k <= 0)
            return 1;
        n += (size_t)k;
    }
    return 0;
}

START_TEST(test_strays_killed_at_job_end)
{
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    g_report_fd = pfd[1];
    ck_assert_int_eq(pipe(g_ack), 0);
    mlsys_launch_opts o = {.world_size = 2, .timeout_ms = 20000, .capture_output = 1};
    char err[256], why[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, fork_and_leave, NULL, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    close(pfd[1]);
    close(g_ack[0]);
    close(g_ack[1]);
    ck_assert_int_eq(mlsys_job_wait(j, NULL, -1, why, sizeof why), 0);
    int rank = -2;
    ck_assert_int_ge(mlsys_job_strays(j, &rank), 3);   /* 4 if the middle one had not exited */
    ck_assert_int_eq(rank, -1);         /* fn ranks are not exec'd: no RANK to read */
    mlsys_job_free(j);
    pid_t kids[3];
    size_t have = 0;
    for (ssize_t k; have < sizeof kids && (k = read(pfd[0], (char *)kids + have,
                                                   sizeof kids - have)) > 0;)
        have += (size_t)k;
    ck_assert_int_eq(have, sizeof kids);
    close(pfd[0]);
    for (int k = 0; k < 3; k++)
        ck_assert_msg(kill(kids[k], 0) == -1 && errno == ESRCH, "process %d (%s) still runs",
                      (int)kids[k], k == 0 ? "forked" : k == 1 ? "setsid" : "double fork");
}
END_TEST

/* ---- a rank stopped by SIGSTOP is the one named ---- */

static int stop_rank3(mlsys_comm *c, void *arg)
{
    (void)arg;
    int x = 0;
    if (mlsys_rank(c) == 3)
        raise(SIGSTOP);
    else if (mlsys_rank(c) == 2)
        return mlsys_recv(c, &x, 1, MLSYS_I32, 3, 0) ? 7 : 0;
    else
        return mlsys_recv(c, &x, 1, MLSYS_I32, 2, 0) ? 1 : 0;
    return 0;
}

START_TEST(test_stopped_rank_blamed)
{
    char why[256];
    mlsys_rank_status st[4];
    int rc = run_job(4, 400, stop_rank3, NULL, why, sizeof why, st);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(!strncmp(why, "rank 3 was stopped", 18), "%s", why);
    ck_assert_msg(strstr(why, "then rank ") != NULL, "%s", why);   /* who gave up first */
    ck_assert(st[3].killed_by_us);
}
END_TEST

static Suite *launch_suite(void)
{
    Suite *s = suite_create("launch");
    TCase *t = tcase_create("fork");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_rank_segfaults);
    tcase_add_test(t, test_rank_exits_3);
    tcase_add_test(t, test_rank_hangs_past_timeout);
    tcase_add_test(t, test_stop_job);
    tcase_add_test(t, test_two_jobs_at_once);
    tcase_add_test(t, test_torchrun_env);
    tcase_add_test(t, test_ordered_print);
    tcase_add_test(t, test_events_pair_up);
    tcase_add_test(t, test_gate_holds_ranks);
    tcase_add_test(t, test_bad_world_size);
    tcase_add_test(t, test_wait_sleeps_until_exit);
    tcase_add_test(t, test_strays_killed_at_job_end);
    tcase_add_test(t, test_stopped_rank_blamed);
    tcase_add_test(t, test_graceful_stop);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    g_grace = mmap(NULL, sizeof *g_grace, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (g_grace == MAP_FAILED)
        return 1;
    SRunner *sr = srunner_create(launch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
