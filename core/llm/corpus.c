/* corpus.c - the lab's training text, generated from a seed: tiny stories (a few hundred
 * words, past tense, a little dialogue) told beat by beat from the templates below, JSON
 * records (for constrained decoding) and small sums (for rewards). Each document has its own
 * RNG stream, so a document depends only on (seed, split, index). The acceptor that checks
 * text against the same tables is grammar.c. */
#include "llm.h"
#include "grammar_tables.h"
#include "../mlsys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- word classes ---- */
#define N_GIRLS 12
static const char *const names[] = {
    "Lily", "Mia", "Anna", "Lucy", "Sue", "Emma", "Zoe", "Amy", "Ella", "Rosa", "Kate", "Nina",
    "Tom", "Ben", "Sam", "Max", "Tim", "Jack", "Leo", "Bob", "Dan", "Finn", "Jake", "Ned"};
static const char *const pet_names[] = {"Spot", "Fluffy", "Buddy", "Coco", "Pip", "Rex",
                                        "Daisy", "Patch"};
static const char *const animals[] = {"cat", "dog", "bird", "fish", "frog", "rabbit", "duck",
                                      "bear", "mouse", "horse", "puppy", "kitten", "owl", "fox",
                                      "pig", "cow"};
static const char *const toys[] = {"ball", "kite", "box", "hat", "book", "car", "doll", "boat",
                                   "drum", "cup", "flower", "rock", "stick", "shell", "key",
                                   "bike", "train", "robot", "balloon", "sock", "spoon", "bell"};
static const char *const colors[] = {"red", "blue", "green", "yellow", "pink", "purple",
                                     "orange", "white", "black", "brown"};
static const char *const sizes[] = {"big", "small", "shiny", "soft", "old", "new", "little",
                                    "pretty", "round", "funny"};
static const char *const places[] = {"park", "garden", "beach", "forest", "lake", "farm", "shop",
                                     "hill", "zoo", "school", "river", "market"};
static const char *const person_adjs[] = {"little", "kind", "happy", "brave", "funny", "smart",
                                          "shy", "curious"};
static const char *const good_feels[] = {"happy", "glad", "excited", "proud", "surprised"};
static const char *const bad_feels[] = {"sad", "scared", "worried", "upset", "angry", "tired"};
static const char *const likes[] = {"play", "sing", "run", "read", "dance", "draw", "jump",
                                    "swim", "climb", "bake"};
static const char *const acts[] = {"jumped", "ran", "slept", "played", "hid", "danced", "sang"};
static const char *const wheres[] = {"under a tree", "behind the door", "in the grass",
                                     "near the river", "in a box", "on the hill"};
static const char *const foods[] = {"cake", "apples", "cookies", "soup", "pie", "bananas",
                                    "bread", "candy"};
static const char *const lessons[] = {"share", "be kind", "be careful", "help others",
                                      "say sorry", "listen", "be brave"};
static const char *const openers[] = {"One day,", "Then,", "After that,", "Later,",
                                      "The next day,", "Soon,"};
static const char *const weathers[] = {"sunny", "rainy", "windy", "cold", "warm"};
static const char *const waters[] = {"lake", "river", "pond", "mud", "hole"};
static const char *const he_cap[] = {"She", "He"};
static const char *const he_low[] = {"she", "he"};
static const char *const his_cap[] = {"Her", "His"};
static const char *const his_low[] = {"her", "his"};
static const char *const kinds[] = {"girl", "boy"};

#define CLASS(slot, arr) { slot, arr, (int)(sizeof(arr) / sizeof(arr[0])) }
const llm_word_class llm_word_classes[] = {
    CLASS("NAME", names),     CLASS("FRIEND", names),   CLASS("PETNAME", pet_names),
    CLASS("PET", animals),    CLASS("TOY", toys),       CLASS("COLOR", colors),
    CLASS("SIZE", sizes),     CLASS("PLACE", places),   CLASS("PLACE2", places),
    CLASS("PADJ", person_adjs), CLASS("GOOD", good_feels), CLASS("BAD", bad_feels),
    CLASS("LIKE", likes),     CLASS("ACT", acts),       CLASS("WHERE", wheres),
    CLASS("FOOD", foods),     CLASS("LESSON", lessons), CLASS("OPEN", openers),
    CLASS("WEATHER", weathers), CLASS("WATER", waters), CLASS("HE", he_cap),
    CLASS("he", he_low),      CLASS("HIS", his_cap),    CLASS("his", his_low),
    CLASS("KIND", kinds),
};
const int llm_n_word_classes = (int)(sizeof(llm_word_classes) / sizeof(llm_word_classes[0]));

const llm_word_class *llm_find_class(const char *slot, int len)
{
    for (int i = 0; i < llm_n_word_classes; i++)
        if ((int)strlen(llm_word_classes[i].slot) == len &&
            memcmp(llm_word_classes[i].slot, slot, (size_t)len) == 0)
            return &llm_word_classes[i];
    return NULL;
}

/* ---- the story, beat by beat ---- */
static const char *const intro[] = {
    "Once upon a time, there was a {PADJ} {KIND} named {NAME}.",
    "Once upon a time, there was a {KIND} named {NAME}.",
    "{NAME} was a {PADJ} {KIND} who loved to {LIKE}.",
    "There once was a {PADJ} {KIND} named {NAME}.",
};
static const char *const setting[] = {
    "{HE} lived in a {SIZE} house near the {PLACE}.",
    "{HE} had a {PET} named {PETNAME}.",
    "{HIS} best friend was {FRIEND}.",
    "{HE} had a {COLOR} {TOY} that {he} loved very much.",
    "It was a {WEATHER} day.",
};
static const char *const event[] = {
    "One day, {NAME} went to the {PLACE} with {FRIEND}.",
    "{OPEN} {NAME} saw a {COLOR} {TOY} {WHERE}.",
    "{OPEN} {he} found a {SIZE} {COLOR} {TOY}.",
    "The {PET} {ACT} in the {PLACE}.",
    "{NAME} and {FRIEND} played with the {TOY} all day.",
    "{NAME} wanted to {LIKE} with {FRIEND}.",
};
static const char *const dialogue[] = {
    "{NAME} said, \"Look at the {COLOR} {TOY}!\"",
    "{FRIEND} asked, \"Can I play with your {TOY}?\"",
    "{NAME} said, \"Yes, we can play together!\"",
    "{NAME} said, \"Let us go to the {PLACE2}!\"",
    "{FRIEND} said, \"I am so {GOOD}!\"",
    "{NAME} asked, \"Do you want to {LIKE}?\"",
};
static const char *const problem[] = {
    "But then, the {TOY} fell into the {WATER}.",
    "Suddenly, the {TOY} was gone.",
    "The {PET} took the {TOY} and ran away.",
    "{NAME} was very {BAD}.",
    "{HE} began to cry.",
};
static const char *const resolution[] = {
    "{FRIEND} helped {NAME} find the {TOY}.",
    "They looked {WHERE} and found it.",
    "The {PET} brought the {TOY} back.",
    "{NAME} said, \"Thank you, {FRIEND}!\"",
    "{HE} felt {GOOD} again.",
};
static const char *const ending[] = {
    "In the end, {NAME} and {FRIEND} were best friends.",
    "From that day on, they played together every day.",
    "{NAME} learned to {LESSON}.",
    "{HE} went home and ate some {FOOD}.",
    "They were very {GOOD}.",
};
#define BEAT(name, arr, lo, hi) { name, arr, (int)(sizeof(arr) / sizeof(arr[0])), lo, hi }
const llm_beat llm_beats[] = {
    BEAT("intro", intro, 1, 1),       BEAT("setting", setting, 1, 2),
    BEAT("event", event, 1, 2),       BEAT("dialogue", dialogue, 1, 2),
    BEAT("problem", problem, 1, 2),   BEAT("resolution", resolution, 1, 2),
    BEAT("ending", ending, 1, 1),
};
const int llm_n_beats = (int)(sizeof(llm_beats) / sizeof(llm_beats[0]));

const llm_json_key llm_json_keys[] = {
    {"name", LLM_JV_NAME, 1},    {"age", LLM_JV_AGE, 1},     {"pet", LLM_JV_ANIMAL, 0},
    {"toy", LLM_JV_TOY, 0},      {"color", LLM_JV_COLOR, 0}, {"active", LLM_JV_BOOL, 0},
    {"friends", LLM_JV_NAMES, 0},
};
const int llm_n_json_keys = (int)(sizeof(llm_json_keys) / sizeof(llm_json_keys[0]));

/* ---- generation ---- */
typedef struct gen {
    mlsys_rng rng;
    char *out;
    size_t len, cap;
    /* the story's cast and props, fixed for the whole story */
    int girl, name, friend_, pet, pet_name, toy, color, place;
} gen;

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int pick(gen *g, int n)
{
    return (int)(mlsys_rng_u64(&g->rng) % (uint64_t)n);
}

static void put(gen *g, const char *s, size_t n)
{
    if (g->len + n + 1 > g->cap)   /* cannot happen within LLM_DOC_MAX; truncate defensively */
        n = g->cap - g->len - 1;
    memcpy(g->out + g->len, s, n);
    g->len += n;
    g->out[g->len] = '\0';
}

static void puts_(gen *g, const char *s)
{
    put(g, s, strlen(s));
}

static void fill_slot(gen *g, const char *slot, int len)
{
    const llm_word_class *c = llm_find_class(slot, len);
    int pronoun = g->girl ? 0 : 1;
    if (!c)
        return;
    if (c->words == names) {
        puts_(g, names[strcmp(c->slot, "NAME") == 0 ? g->name : g->friend_]);
    } else if (c->words == he_cap || c->words == he_low || c->words == his_cap ||
               c->words == his_low || c->words == kinds) {
        puts_(g, c->words[pronoun]);
    } else if (c->words == pet_names) {
        puts_(g, pet_names[g->pet_name]);
    } else if (strcmp(c->slot, "PET") == 0) {
        puts_(g, animals[g->pet]);
    } else if (c->words == toys) {
        puts_(g, toys[g->toy]);
    } else if (c->words == colors) {
        puts_(g, colors[g->color]);
    } else if (strcmp(c->slot, "PLACE") == 0) {
        puts_(g, places[g->place]);
    } else if (strcmp(c->slot, "PLACE2") == 0) {
        int p = pick(g, c->n - 1);
        puts_(g, places[p >= g->place ? p + 1 : p]);   /* somewhere else */
    } else {
        puts_(g, c->words[pick(g, c->n)]);
    }
}

static void expand(gen *g, const char *t)
{
    while (*t) {
        const char *open = strchr(t, '{');
        if (!open) {
            puts_(g, t);
            return;
        }
        put(g, t, (size_t)(open - t));
        const char *close = strchr(open, '}');
        fill_slot(g, open + 1, (int)(close - open - 1));
        t = close + 1;
    }
}

static int gen_story(gen *g)
{
    int units = 0;
    g->girl = pick(g, 2) == 0;
    g->name = g->girl ? pick(g, N_GIRLS) : N_GIRLS + pick(g, N_GIRLS);
    int f = pick(g, (int)(sizeof(names) / sizeof(names[0])) - 1);
    g->friend_ = f >= g->name ? f + 1 : f;
    g->pet = pick(g, (int)(sizeof(animals) / sizeof(animals[0])));
    g->pet_name = pick(g, (int)(sizeof(pet_names) / sizeof(pet_names[0])));
    g->toy = pick(g, (int)(sizeof(toys) / sizeof(toys[0])));
    g->color = pick(g, (int)(sizeof(colors) / sizeof(colors[0])));
    g->place = pick(g, (int)(sizeof(places) / sizeof(places[0])));
    for (int b = 0; b < llm_n_beats; b++) {
        const llm_beat *bt = &llm_beats[b];
        int k = bt->min + pick(g, bt->max - bt->min + 1);
        int chosen[16] = {0}, idx[16];
        for (int i = 0; i < bt->n; i++)
            idx[i] = i;
        for (int i = 0; i < k; i++) {          /* k distinct templates, told in table order */
            int j = i + pick(g, bt->n - i);
            int tmp = idx[i];
            idx[i] = idx[j];
            idx[j] = tmp;
            chosen[idx[i]] = 1;
        }
        for (int i = 0; i < bt->n; i++) {
            if (!chosen[i])
                continue;
            if (units++)
                puts_(g, " ");
            expand(g, bt->templates[i]);
        }
    }
    return units;
}

static void put_int(gen *g, int v)
{
    char b[16];
    put(g, b, (size_t)snprintf(b, sizeof b, "%d", v));
}

static void put_quoted(gen *g, const char *s)
{
    puts_(g, "\"");
    puts_(g, s);
    puts_(g, "\"");
}

static int gen_json(gen *g)
{
    int lines = 1 + pick(g, 3);
    for (int l = 0; l < lines; l++) {
        if (l)
            puts_(g, "\n");
        int nnames = (int)(sizeof(names) / sizeof(names[0]));
        int who = pick(g, nnames);
        puts_(g, "{\"name\": ");
        put_quoted(g, names[who]);
        puts_(g, ", \"age\": ");
        put_int(g, LLM_AGE_MIN + pick(g, LLM_AGE_MAX - LLM_AGE_MIN + 1));
        for (int k = 2; k < llm_n_json_keys; k++) {
            const llm_json_key *jk = &llm_json_keys[k];
            int odds = jk->type == LLM_JV_NAMES ? 3 : 2;   /* friends a little rarer */
            if (pick(g, 5) >= odds)
                continue;
            puts_(g, ", \"");
            puts_(g, jk->key);
            puts_(g, "\": ");
            switch (jk->type) {
            case LLM_JV_ANIMAL: put_quoted(g, animals[pick(g, (int)(sizeof(animals) / sizeof(animals[0])))]); break;
            case LLM_JV_TOY:
                put_quoted(g, toys[pick(g, (int)(sizeof(toys) / sizeof(toys[0])))]);
                break;
            case LLM_JV_COLOR:
                put_quoted(g, colors[pick(g, (int)(sizeof(colors) / sizeof(colors[0])))]);
                break;
            case LLM_JV_BOOL: puts_(g, pick(g, 2) ? "true" : "false"); break;
            case LLM_JV_NAMES: {
                int nf = 1 + pick(g, LLM_FRIENDS_MAX), used[LLM_FRIENDS_MAX + 1];
                int nu = 0;
                used[nu++] = who;
                puts_(g, "[");
                for (int i = 0; i < nf; i++) {
                    int fr, again;
                    do {                               /* distinct, and not the person */
                        fr = pick(g, nnames);
                        again = 0;
                        for (int j = 0; j < nu; j++)
                            again |= used[j] == fr;
                    } while (again);
                    used[nu++] = fr;
                    if (i)
                        puts_(g, ", ");
                    put_quoted(g, names[fr]);
                }
                puts_(g, "]");
                break;
            }
            default: break;
            }
        }
        puts_(g, "}");
    }
    return lines;
}

/* Operands are small (0-9 more often than 10-49) so a 1M-parameter model can learn some. */
static int operand(gen *g)
{
    return pick(g, 10) < 6 ? pick(g, 10) : 10 + pick(g, LLM_SUM_MAX_OPERAND - 9);
}

static int gen_sums(gen *g)
{
    int lines = 2 + pick(g, 4);
    for (int l = 0; l < lines; l++) {
        if (l)
            puts_(g, "\n");
        int a = operand(g), b = operand(g), plus = pick(g, 3) != 0;
        if (!plus && b > a) {
            int t = a;
            a = b;
            b = t;
        }
        char line[64];
        put(g, line, (size_t)snprintf(line, sizeof line, "%d %c %d = %d", a, plus ? '+' : '-',
                                      b, plus ? a + b : a - b));
    }
    return lines;
}

size_t llm_corpus_doc(uint64_t seed, llm_split split, uint64_t index, char *out, size_t cap,
                      llm_doc_info *info)
{
    gen g;
    memset(&g, 0, sizeof g);
    mlsys_rng_seed(&g.rng, mix64(seed ^ mix64(index * 2 + (uint64_t)split + 0x5eed)));
    g.out = out;
    g.cap = cap;
    if (cap)
        out[0] = '\0';
    if (cap < LLM_DOC_MAX)
        return 0;
    int r = pick(&g, 100), units;
    llm_doc_kind kind;
    if (r < 70) {
        kind = LLM_DOC_STORY;
        units = gen_story(&g);
    } else if (r < 85) {
        kind = LLM_DOC_JSON;
        units = gen_json(&g);
    } else {
        kind = LLM_DOC_SUMS;
        units = gen_sums(&g);
    }
    if (info) {
        info->kind = kind;
        info->units = units;
    }
    return g.len;
}

int llm_corpus_generate(llm_corpus *c, uint64_t seed, llm_split split, size_t max_docs,
                        size_t max_bytes)
{
    memset(c, 0, sizeof *c);
    if (max_docs == 0 && max_bytes == 0)
        return -1;
    size_t cap = 1 << 16, ocap = 1024;
    c->text = mlsys_xmalloc(cap);
    c->off = mlsys_xmalloc(ocap * sizeof(size_t));
    c->off[0] = 0;
    char doc[LLM_DOC_MAX];
    for (uint64_t i = 0;; i++) {
        if (max_docs && c->ndocs >= max_docs)
            break;
        if (max_bytes && c->len >= max_bytes)
            break;
        llm_doc_info info;
        size_t n = llm_corpus_doc(seed, split, i, doc, sizeof doc, &info);
        while (c->len + n + 3 > cap) {
            cap *= 2;
            c->text = realloc(c->text, cap);
            if (!c->text) {
                fprintf(stderr, "corpus: out of memory at %zu bytes\n", cap);
                exit(1);
            }
        }
        if (c->ndocs + 2 > ocap) {
            ocap *= 2;
            c->off = realloc(c->off, ocap * sizeof(size_t));
            if (!c->off) {
                fprintf(stderr, "corpus: out of memory for %zu documents\n", ocap);
                exit(1);
            }
        }
        memcpy(c->text + c->len, doc, n);
        memcpy(c->text + c->len + n, "\n\n", 2);
        c->len += n + 2;
        c->text[c->len] = '\0';
        c->off[++c->ndocs] = c->len;
        c->kind_docs[info.kind]++;
    }
    return 0;
}

void llm_corpus_free(llm_corpus *c)
{
    free(c->text);
    free(c->off);
    memset(c, 0, sizeof *c);
}

int llm_corpus_write(const char *path, const llm_corpus *c, char *err, size_t errlen)
{
    const void *parts[1] = {c->text};
    size_t sizes[1] = {c->len};
    return llm_write_atomic(path, parts, sizes, 1, err, errlen);
}
