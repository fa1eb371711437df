/* main.c - the `mlsys-lab` program: a table of commands (list, run, doctor, bench, worker,
 * help) and the dispatch to them. With no command it opens the lab's front end when the
 * terminal allows, otherwise it prints the chapter list and how to run a lab. */
#include "../job/runner.h"
#include "../exercise/exercise.h"
#include "../ui/ui.h"
#include "cli.h"
#include "../../core/nn/nn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct command {
    const char *name;
    const char *args;
    const char *help;
    int (*fn)(int argc, char **argv);   /* argv[0] is the command name */
    int hidden;
} command;

static int cmd_help(int argc, char **argv);

/* Commands without arguments go through the one flag parser too: --help prints the usage
 * (exit 0, as help does), anything else is refused in one line (exit 2). 1: go on. */
static const lab_flag no_flags[] = {{NULL, 0, 0, NULL, NULL, 0, 0, NULL}};

static int no_args(int argc, char **argv, const char *name, const char *summary)
{
    const lab_command c = {.name = name, .args = "", .summary = summary, .flags = no_flags};
    lab_args a;
    int rc = lab_command_args(&c, argc, argv, &a);
    if (rc >= 0)
        return rc;
    lab_args_free(&a);
    return 1;
}

/* An exercise's status from the progress file: "done", "failed" or "not tried". */
static const char *ex_status(ex_progress *p, const exercise *ex)
{
    ex_progress_entry *e = p ? ex_progress_get(p, ex->id, 0) : NULL;
    return e && e->done ? "done" : e && e->failed_at ? "failed" : "not tried";
}

static void print_list(FILE *out)
{
    ex_context cx;
    ex_progress prog, *p = NULL;
    char msg[1024];
    if (ex_context_init(&cx, msg, sizeof msg) == 0) {
        int rc = ex_progress_load(&prog, cx.progress, msg, sizeof msg);
        if (rc != 0)
            fprintf(stderr, "mlsys-lab: %s\n", msg);
        if (rc >= 0)
            p = &prog;
    }
    int done = 0, total = 0, w = 0;
    /* one column for every id, as wide as the longest (ch07/parallel-strategy-calculator) */
    for (int i = 0; lab_chapters[i]; i++) {
        const chapter *ch = lab_chapters[i];
        for (int k = 0; ch->labs && ch->labs[k]; k++)
            w = (int)strlen(ch->labs[k]->id) > w ? (int)strlen(ch->labs[k]->id) : w;
        for (int k = 0; ch->exercises && ch->exercises[k]; k++)
            w = (int)strlen(ch->exercises[k]->id) > w ? (int)strlen(ch->exercises[k]->id) : w;
    }
    for (int i = 0; lab_chapters[i]; i++) {
        const chapter *ch = lab_chapters[i];
        if (i == 0 || strcmp(ch->part, lab_chapters[i - 1]->part) != 0)
            fprintf(out, "\n%s\n", ch->part);
        fprintf(out, "  Chapter %2d  %s%s\n", ch->number, ch->title,
                ch->text_asset ? "" : "  (text not written yet)");
        for (int k = 0; ch->labs && ch->labs[k]; k++)
            fprintf(out, "      lab  %-*s %s\n", w, ch->labs[k]->id, ch->labs[k]->summary);
        for (int k = 0; ch->exercises && ch->exercises[k]; k++) {
            const exercise *ex = ch->exercises[k];
            const char *st = ex_status(p, ex);
            fprintf(out, "      ex   %-*s %-10s %-9s  %s\n", w, ex->id, ex_kind_name(ex->kind), st,
                    ex->title);
            total++;
            done += !strcmp(st, "done");
        }
    }
    fprintf(out, "\n%d of %d exercises done%s\n", done, total,
            p ? "" : " (progress could not be read)");
    if (p)
        ex_progress_free(p);
}

static int cmd_list(int argc, char **argv)
{
    int rc = no_args(argc, argv, "list", "Chapters, labs and exercises, with your progress.");
    if (rc != 1)
        return rc;
    printf("MLSys Lab %s: chapters, labs and exercises", MLSYS_VERSION);
    print_list(stdout);
    printf("Run a lab:       mlsys-lab run LAB [--world-size N] [flags]   "
           "(flags: mlsys-lab run LAB --help)\n"
           "Do an exercise:  mlsys-lab check ID, mlsys-lab hint ID   (or in the lab: mlsys-lab)\n");
    return 0;
}

static const lab *find_or_complain(const char *id)
{
    const lab *l = id ? lab_find(id) : NULL;
    if (!l)
        fprintf(stderr, "mlsys-lab: unknown lab '%s' (see `mlsys-lab list`)\n", id ? id : "");
    return l;
}

static int cmd_run(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "mlsys-lab: run: which lab? (see `mlsys-lab list`)\n");
        return 2;
    }
    const lab *l = find_or_complain(argv[1]);
    return l ? runner_run(l, argc - 2, argv + 2) : 2;
}

static int cmd_worker(int argc, char **argv)
{
    const lab *l = argc >= 2 ? find_or_complain(argv[1]) : NULL;
    return l && (l->rank_main || l->main) ? runner_worker(l, argc - 2, argv + 2) : 2;
}

static int cmd_bench(int argc, char **argv)
{
    return bench_main(argc, argv);
}

static int cmd_version(int argc, char **argv)
{
    int rc = no_args(argc, argv, "version", "The version of mlsys-lab.");
    if (rc != 1)
        return rc;
    printf("mlsys-lab %s\n", MLSYS_VERSION);
    return 0;
}

static const command commands[] = {
    {"list", "", "chapters, labs and exercises", cmd_list, 0},
    {"run", "LAB [flags]", "run a lab headless (LAB --help shows its flags)", cmd_run, 0},
    {"doctor", "", "what works on this machine, with a real self-test", doctor_main, 0},
    {"bench", "[COLLECTIVE] [flags]", "nccl-tests-style benchmark (all_reduce by default)", cmd_bench, 0},
    {"train", "[flags]", "train the lab's language model across ranks (--help: flags)", train_main, 0},
    {"generate", "[flags]", "text from the lab's model, streamed (--help: flags)", generate_main, 0},
    {"loadgen", "--url URL [flags]", "load an OpenAI-compatible server: TTFT, TPOT, latency, tokens/s", loadgen_main, 0},
    {"model", "info|init FILE", "a model's configuration, loss and quality; or a random one", model_main, 0},
    {"exercises", "[--chapter N]", "the exercises, with what is done", exercises_main, 0},
    {"check", "[ID|--all]", "check an exercise (or answer a predict question)", ex_check_main, 0},
    {"hint", "ID", "the next hint for an exercise, one at a time", ex_hint_main, 0},
    {"watch", "[ID]", "check again whenever an exercise file is saved", ex_watch_main, 0},
    {"reset", "ID|--all", "put the starter back (the old file is kept as .bak)", ex_reset_main, 0},
    {"solution", "ID [--force]", "the reference solution, once the exercise passes", ex_solution_main, 0},
    {"dev-check", "", "prove the exercises consistent (every starter fails, every solution passes)", ex_dev_check_main, 1},
    {"ui", "[--no-color] [--ascii] [--no-mouse]", "open the lab (what no command does in a terminal)", ui_main, 0},
    {"replay", "FILE [--no-color] ...", "play a trace written with --trace in the lab's views", replay_main, 0},
    {"version", "", "print the version", cmd_version, 0},
    {"help", "[flags]", "this text; flags: the short flags of every command", cmd_help, 0},
    {"worker", "LAB [flags]", "one rank of a job (started by the launcher)", cmd_worker, 1},
    {NULL, NULL, NULL, NULL, 0},
};

/* One name of a list, wrapped at 96 columns under an indent of 8. */
static void list_name(int *col, int *n, const char *name)
{
    int len = (int)strlen(name) + 2;
    if (*n && *col + len > 96) {
        printf(",\n        ");
        *col = 8;
    } else if (*n) {
        printf(", ");
    }
    printf("%s", name);
    *col += len;
    (*n)++;
}

/* `mlsys-lab help flags`: the reserved short flags, one meaning each in every lab and command,
 * and the commands and labs that have each one. */
static void help_flags(void)
{
    printf("Reserved short flags: each means one thing in every lab and command that has it.\n");
    for (const lab_short_flag *r = lab_short_flags; r->letter; r++) {
        char names[128], *p = names;
        snprintf(names, sizeof names, "%s", r->names);
        while ((p = strchr(p, '|')))
            *p = '/';
        printf("\n  -%c  --%s\n        ", r->letter, names);
        int n = 0, col = 8;
        for (int i = 0; cli_declared[i]; i++)
            for (const lab_flag *f = cli_declared[i]->flags; f->name; f++)
                if (f->short_name == r->letter)
                    list_name(&col, &n, cli_declared[i]->name);
        for (int i = 0; lab_chapters[i]; i++)
            for (int k = 0; lab_chapters[i]->labs && lab_chapters[i]->labs[k]; k++)
                for (const lab_flag *f = lab_chapters[i]->labs[k]->flags; f->name; f++)
                    if (f->short_name == r->letter)
                        list_name(&col, &n, lab_chapters[i]->labs[k]->id);
        for (const lab_flag *f = lab_common_flags; !n && f->name; f++)
            if (f->short_name == r->letter)
                printf("every lab%s", r->letter == 'h' ? " and every command" : "");
        for (const lab_flag *f = lab_rank_flags; f->name; f++)
            if (f->short_name == r->letter)
                printf("%severy lab that runs on ranks", n ? ", " : "");
        printf("\n");
        if (r->was) {                   /* word-wrapped at 96 columns under the list */
            int col = printf("        changed:");
            for (const char *w = r->was; *w;) {
                int len = (int)strcspn(w, " ");
                if (col + 1 + len > 96)
                    col = printf("\n                ") - 1;
                col += printf(" %.*s", len, w);
                w += len + (w[len] == ' ');
            }
            printf("\n");
        }
    }
    printf("\nOther letters are a lab's or a command's own (see its --help). A reserved letter "
           "typed\nwhere its flag does not exist says what it means; the old long names all "
           "stay.\n");
}

static int cmd_help(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "flags")) {
        help_flags();
        return 0;
    }
    printf("usage: mlsys-lab [COMMAND] [ARGS]\n\n"
           "With no command, opens the lab. Commands:\n");
    for (const command *c = commands; c->name; c++)
        if (!c->hidden)
            printf("  %-8s %-22s %s\n", c->name, c->args, c->help);
    printf("\nExit status: 0 done (a check passed), 1 a job or a check failed, 2 a usage "
           "error or\nsomething the lab could not do, 130 stopped with Ctrl-C (every command)\n"
           "Reserved short flags mean the same everywhere: mlsys-lab help flags\n");
    return 0;
}

int main(int argc, char **argv)
{
    nn_gemm_start(argv);    /* BLAS threads and the GEMM kernel, once, before anything else */
    if (argc < 2 || ui_is_flag(argv[1]))
        return ui_is_terminal() ? ui_main(argc, argv) : cmd_list(1, argv);
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h"))
        name = "help";
    if (!strcmp(name, "--version"))
        name = "version";
    for (const command *c = commands; c->name; c++)
        if (!strcmp(c->name, name))
            return c->fn(argc - 1, argv + 1);
    fprintf(stderr, "mlsys-lab: unknown command '%s' (try `mlsys-lab help`)\n", argv[1]);
    return 2;
}
