/* ch02_exercises.c - Chapter 2's exercises: the chain turned into a ring, the even/odd exchange
 * that deadlocks with blocking sends, timing blocking against non-blocking (implement), and
 * predict questions: the chain's final value, whether a pair of programs deadlocks (worked
 * out by simulating synchronous sends), overlap, and the pipeline's traffic. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- implement ---- */

static const int sizes_2_3_4_8[] = {2, 3, 4, 8, 0};
static const int sizes_2[] = {2, 0};

static const char *const relay_hints[] = {
    "Who is the right neighbour of the last rank in a ring?",
    "If every rank, rank 0 included, first waits to receive, who sends the first message?",
    "So which rank must send first and receive last, and what do all the others do?",
    "How many ranks add 10 before the value is back at rank 0?",
    NULL
};

static const ex_implement relay_impl = {
    .function = "ring_relay", .world_sizes = sizes_2_3_4_8, .timeout_ms = 5000,
    .limit_ms = 12000, .master_port = 29501,
};

static const exercise ch02_ring_relay = {
    .id = "ch02-ring-relay",
    .chapter = 2,
    .kind = EX_IMPLEMENT,
    .title = "Turn the chain into a ring",
    .task = "Make the last rank send back to rank 0, every relay adding 10, without a "
            "deadlock; rank 0 returns what comes back.",
    .hints = relay_hints,
    .lab = "ch02/send-recv-basic",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "ring_relay.c",
    .impl = &relay_impl,
};

static const char *const exchange_hints[] = {
    "Both partners call mlsys_send first. When does a synchronous send return, and is anyone "
    "receiving at that moment?",
    "What does mlsys_irecv give back instead of waiting, and when may you look at the buffer?",
    "If each rank posts its receive and its send, then waits for both, can either of them be "
    "stuck waiting for the other?",
    "What must a rank without a partner do, and must it communicate at all?",
    NULL
};

static const ex_implement exchange_impl = {
    .function = "exchange_with_partner", .world_sizes = sizes_2_3_4_8, .timeout_ms = 5000,
    .limit_ms = 12000, .master_port = 29501,
};

static const exercise ch02_even_odd_exchange = {
    .id = "ch02-even-odd-exchange",
    .chapter = 2,
    .kind = EX_IMPLEMENT,
    .title = "Even/odd exchange without a deadlock",
    .task = "Rank r and r XOR 1 swap rank numbers at the same time; the blocking version "
            "deadlocks, fix it with isend/irecv.",
    .hints = exchange_hints,
    .lab = "ch02/send-recv-basic",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "exchange.c",
    .impl = &exchange_impl,
};

static const char *const timing_hints[] = {
    "Which clock should you read before and after each transfer, and how do you turn "
    "nanoseconds into microseconds?",
    "Which rank sends and which receives, and must both ranks use the same tag for one "
    "transfer?",
    "Between mlsys_isend and mlsys_wait, is there any work that could overlap the transfer?",
    NULL
};

static const ex_implement timing_impl = {
    .function = "time_p2p", .world_sizes = sizes_2, .timeout_ms = 5000, .limit_ms = 12000,
};

static const exercise ch02_p2p_timing = {
    .id = "ch02-p2p-timing",
    .chapter = 2,
    .kind = EX_IMPLEMENT,
    .title = "Time blocking against non-blocking transfers",
    .task = "Time a blocking send/recv and an isend/irecv followed at once by wait, on both "
            "ranks.",
    .hints = timing_hints,
    .lab = "ch02/async-communication",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "timing.c",
    .impl = &timing_impl,
};

/* ---- predict ---- */

static void draw_chain(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 64);
    snprintf(q->text, sizeof q->text,
             "send-recv-basic on N = %d ranks: rank 0 sends 42.0 to rank 1; every middle rank "
             "receives, adds 10 and forwards; the last rank only receives. What value does the "
             "last rank print?", n);
    q->answer = 42.0 + 10.0 * (n - 2);
    snprintf(q->explain, sizeof q->explain,
             "Only the N-2 middle ranks (1 ... N-2) add 10: 42 + 10(N-2) = 42 + 10 x %d = %.0f. "
             "(The original script claimed 42 + 10(N-1).)", n - 2, q->answer);
}

static const char *const chain_hints[] = {
    "Which ranks add 10: rank 0? the middle ones? the last one?",
    "How many middle ranks are there in a chain of N?",
    NULL
};

static const exercise ch02_predict_chain = {
    .id = "ch02-predict-chain",
    .chapter = 2,
    .kind = EX_PREDICT,
    .title = "The chain relay's final value",
    .task = "Predict what the last rank of send-recv-basic prints for a given N.",
    .hints = chain_hints,
    .lab = "ch02/send-recv-basic",
    .draw = draw_chain,
};

/* Two ranks, each with one send to and one receive from the other, each blocking or not,
 * in either order, then a wait for the non-blocking ones. Simulated with the runtime's rules:
 * a send completes once the peer has posted the matching receive, and the other way round;
 * a blocking call stops its rank until it completes. */
typedef struct p2p_op {
    int is_send, blocking;
} p2p_op;

static int simulate_deadlock(const p2p_op prog[2][2])
{
    int pc[2] = {0, 0};                     /* 0, 1: the ops; 2: the wait; 3: finished */
    int posted[2][2] = {{0, 0}, {0, 0}};    /* [rank][op] */
    int done[2][2] = {{0, 0}, {0, 0}};
    for (int round = 0; round < 16; round++) {
        int moved = 0;
        for (int r = 0; r < 2; r++) {
            if (pc[r] < 2 && !posted[r][pc[r]]) {
                posted[r][pc[r]] = 1;
                moved = 1;
            }
        }
        /* match: rank a's send with rank b's receive, both posted */
        for (int a = 0; a < 2; a++)
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) {
                    int b = 1 - a;
                    if (prog[a][i].is_send && !prog[b][j].is_send && posted[a][i] &&
                        posted[b][j] && !done[a][i]) {
                        done[a][i] = done[b][j] = 1;
                        moved = 1;
                    }
                }
        for (int r = 0; r < 2; r++) {
            if (pc[r] < 2 && posted[r][pc[r]] && (!prog[r][pc[r]].blocking || done[r][pc[r]])) {
                pc[r]++;
                moved = 1;
            } else if (pc[r] == 2 && done[r][0] && done[r][1]) {
                pc[r] = 3;
                moved = 1;
            }
        }
        if (pc[0] == 3 && pc[1] == 3)
            return 0;
        if (!moved)
            return 1;
    }
    return 1;
}

static void describe(char *out, size_t n, int r, const p2p_op prog[2])
{
    size_t k = 0;
    k += (size_t)snprintf(out + k, n - k, "rank %d:", r);
    int waits = 0;
    for (int i = 0; i < 2 && k < n; i++) {
        const char *call = prog[i].is_send ? (prog[i].blocking ? "mlsys_send" : "mlsys_isend")
                                           : (prog[i].blocking ? "mlsys_recv" : "mlsys_irecv");
        k += (size_t)snprintf(out + k, n - k, "%s %s(%s rank %d)", i ? "," : "", call,
                              prog[i].is_send ? "to" : "from", 1 - r);
        waits |= !prog[i].blocking;
    }
    if (waits && k < n)
        snprintf(out + k, n - k, ", then mlsys_wait for the request%s",
                 (!prog[0].blocking && !prog[1].blocking) ? "s" : "");
}

static void draw_deadlock(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    p2p_op prog[2][2];
    int risky = (int)ex_draw_int(&g, 0, 1);   /* half the draws put blocking calls first */
    for (int r = 0; r < 2; r++) {
        int send_first = (int)ex_draw_int(&g, 0, 1);
        prog[r][0].is_send = send_first;
        prog[r][1].is_send = !send_first;
        prog[r][0].blocking = risky ? 1 : (int)ex_draw_int(&g, 0, 1);
        prog[r][1].blocking = (int)ex_draw_int(&g, 0, 1);
    }
    int dead = simulate_deadlock(prog);
    char a[200], b[200];
    describe(a, sizeof a, 0, prog[0]);
    describe(b, sizeof b, 1, prog[1]);
    snprintf(q->text, sizeof q->text,
             "Two ranks run these calls (send is synchronous: it returns once the receiver has "
             "the data):\n  %s\n  %s\nDoes the program deadlock?", a, b);
    static const char *const yes_no[2][2] = {{"no", "yes"}, {"yes", "no"}};
    const char *texts[2] = {yes_no[dead][0], yes_no[dead][1]};
    ex_set_choices(q, &g, texts, 2);
    if (dead)
        snprintf(q->explain, sizeof q->explain,
                 "Yes: both ranks start with a blocking call of the same kind (both send, or "
                 "both receive), so each waits for an operation the other has not posted yet, "
                 "and never will. The runtime's watchdog reports \"deadlock suspected\".");
    else
        snprintf(q->explain, sizeof q->explain,
                 "No: at every moment one rank's blocking call finds the other's matching call "
                 "posted (a non-blocking call is posted at once and the rank moves on), so both "
                 "transfers complete. A deadlock needs both ranks to block first on calls of "
                 "the same kind.");
}

static const char *const deadlock_hints[] = {
    "What is each rank doing at its first call, and does that call return before the other "
    "rank does something?",
    "Does a non-blocking call ever stop its rank? What does it leave behind for the other "
    "rank to match?",
    NULL
};

static const exercise ch02_predict_deadlock = {
    .id = "ch02-predict-deadlock",
    .chapter = 2,
    .kind = EX_PREDICT,
    .title = "Deadlock or not?",
    .task = "Given the calls of two ranks, say whether they deadlock under synchronous sends.",
    .hints = deadlock_hints,
    .lab = "ch02/send-recv-basic",
    .draw = draw_deadlock,
};

static void draw_overlap(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int variant = (int)ex_draw_int(&g, 0, 1);
    if (variant == 0) {
        int mib = 1 << ex_draw_int(&g, 0, 6);
        snprintf(q->text, sizeof q->text,
                 "Rank 0 sends %d MiB to rank 1 with mlsys_isend and calls mlsys_wait right "
                 "after, with nothing in between. Compared with a blocking mlsys_send of the "
                 "same buffer, how long does rank 0 take?", mib);
        static const char *const texts[] = {"about the same time",
                                            "about half the time",
                                            "almost no time: isend returns at once",
                                            "about twice as long"};
        ex_set_choices(q, &g, texts, 4);
        snprintf(q->explain, sizeof q->explain,
                 "About the same: isend only returns early; the bytes still have to move, and "
                 "mlsys_wait is where rank 0 sits while they do. Non-blocking calls gain time "
                 "only when other work runs before the wait.");
    } else {
        int d = (int)ex_draw_int(&g, 2, 40), t = (int)ex_draw_int(&g, 2, 40);
        if (t == d)
            t++;
        char texts_buf[4][64];
        int mx = d > t ? d : t, mn = d < t ? d : t;
        snprintf(texts_buf[0], sizeof texts_buf[0], "about %d ms", mx);
        snprintf(texts_buf[1], sizeof texts_buf[1], "about %d ms", d + t);
        snprintf(texts_buf[2], sizeof texts_buf[2], "about %d ms", mn);
        snprintf(texts_buf[3], sizeof texts_buf[3], "about %d ms", d + t + mn);
        const char *texts[4] = {texts_buf[0], texts_buf[1], texts_buf[2], texts_buf[3]};
        snprintf(q->text, sizeof q->text,
                 "On its own, a transfer from rank 0 to rank 1 takes %d ms and a computation on "
                 "rank 0 takes %d ms. Rank 0 posts mlsys_isend, runs the computation, then calls "
                 "mlsys_wait; rank 1 is already waiting in mlsys_recv. About how long does rank "
                 "0 take, if the transfer progresses while it computes?", d, t);
        ex_set_choices(q, &g, texts, 4);
        snprintf(q->explain, sizeof q->explain,
                 "The two overlap, so rank 0 takes about the longer of the two, max(%d, %d) = "
                 "%d ms, instead of the sum %d ms. (In our runtime the receiver copies straight "
                 "from the sender's buffer, so the transfer does move while rank 0 computes: "
                 "that is also why the send buffer must not change before wait.)", d, t, mx, d + t);
    }
}

static const char *const overlap_hints[] = {
    "Does \"non-blocking\" make the bytes move faster, or only let the caller do something "
    "else meanwhile?",
    "If two things run at the same time, is the total their sum or the longer of the two?",
    NULL
};

static const exercise ch02_predict_overlap = {
    .id = "ch02-predict-overlap",
    .chapter = 2,
    .kind = EX_PREDICT,
    .title = "What non-blocking calls buy you",
    .task = "Predict the time of isend + wait, with and without work in between.",
    .hints = overlap_hints,
    .lab = "ch02/async-communication",
    .draw = draw_overlap,
};

static void draw_pipeline(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int p = (int)ex_draw_int(&g, 2, 8), m = (int)ex_draw_int(&g, 1, 16);
    static const int bs[] = {8, 16, 32, 64}, hs[] = {64, 128, 256, 1024};
    int b = bs[ex_draw_int(&g, 0, 3)], h = hs[ex_draw_int(&g, 0, 3)];
    int bytes = (int)ex_draw_int(&g, 0, 1);
    long long msgs = (long long)(p - 1) * m;
    char a[32];
    if (bytes) {
        snprintf(q->text, sizeof q->text,
                 "pipeline-simulation with P = %d stages, M = %d micro-batches of B = %d rows "
                 "and hidden size H = %d (float32 activations, forward only). How many bytes "
                 "cross stage boundaries in all?", p, m, b, h);
        q->answer = (double)msgs * b * h * 4;
        snprintf(q->unit, sizeof q->unit, "bytes");
        snprintf(q->explain, sizeof q->explain,
                 "Each of the P-1 = %d boundaries carries M = %d messages of B x H x 4 = %d "
                 "bytes: %lld x %d = %s bytes.", p - 1, m, b * h * 4, msgs, b * h * 4,
                 ex_fmt_int(a, sizeof a, (long long)q->answer));
    } else {
        snprintf(q->text, sizeof q->text,
                 "pipeline-simulation with P = %d stages and M = %d micro-batches (forward "
                 "only). How many point-to-point messages are sent in all?", p, m);
        q->answer = (double)msgs;
        snprintf(q->unit, sizeof q->unit, "messages");
        snprintf(q->explain, sizeof q->explain,
                 "Every micro-batch crosses each of the P-1 boundaries once: (P-1) x M = %d x %d "
                 "= %lld. The last stage sends nothing.", p - 1, m, msgs);
    }
}

static const char *const pipeline_hints[] = {
    "How many boundaries between stages are there with P stages?",
    "How many times does each micro-batch cross each boundary, and how big is it?",
    NULL
};

static const exercise ch02_predict_pipeline = {
    .id = "ch02-predict-pipeline",
    .chapter = 2,
    .kind = EX_PREDICT,
    .title = "Traffic of a forward pipeline",
    .task = "Predict the messages or bytes that pipeline-simulation sends.",
    .hints = pipeline_hints,
    .lab = "ch02/pipeline-simulation",
    .draw = draw_pipeline,
};

const exercise *const ch02_exercises[] = {
    &ch02_predict_chain,
    &ch02_ring_relay,
    &ch02_predict_deadlock,
    &ch02_even_odd_exchange,
    &ch02_p2p_timing,
    &ch02_predict_overlap,
    &ch02_predict_pipeline,
    NULL
};
