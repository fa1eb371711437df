/* ch11-grammars - reference solution: one small state machine per grammar. */
#include "api.h"
#include <string.h>

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int name_start(char c)
{
    return is_alpha(c) || c == '_';
}

static int name_char(char c)
{
    return name_start(c) || is_digit(c);
}

static int pydef(const char *s, size_t n)
{
    /* 0-2 "def", 3 first space, 4 spaces before the name, 5 in the name, 6 spaces after it,
     * 7 after '(', 8 in a parameter, 9 after a parameter, 11 after ',', 10 after ')', 12 ':' */
    int st = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        switch (st) {
        case 0: case 1: case 2:
            if (c != "def"[st])
                return GR_DEAD;
            st++;
            break;
        case 3: if (c != ' ') return GR_DEAD; st = 4; break;
        case 4: if (c == ' ') break; if (!name_start(c)) return GR_DEAD; st = 5; break;
        case 5:
            if (name_char(c)) break;
            if (c == ' ') { st = 6; break; }
            if (c == '(') { st = 7; break; }
            return GR_DEAD;
        case 6: if (c == ' ') break; if (c != '(') return GR_DEAD; st = 7; break;
        case 7:
            if (c == ' ') break;
            if (c == ')') { st = 10; break; }
            if (!name_start(c)) return GR_DEAD;
            st = 8;
            break;
        case 8: case 9:
            if (st == 8 && name_char(c)) break;
            if (c == ' ') { st = 9; break; }
            if (c == ',') { st = 11; break; }
            if (c == ')') { st = 10; break; }
            return GR_DEAD;
        case 11: if (c == ' ') break; if (!name_start(c)) return GR_DEAD; st = 8; break;
        case 10: if (c == ' ') break; if (c != ':') return GR_DEAD; st = 12; break;
        default: return GR_DEAD;
        }
    }
    return st == 12 ? GR_MATCH : GR_VIABLE;
}

static int email(const char *s, size_t n)
{
    /* 0 start, 1 in the local part, 2 after '@', 3 in the first label, 4 after a dot,
     * 5 in a later label; letters counts the label's letters, -1 once it holds another byte */
    int st = 0, letters = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int local = is_alpha(c) || is_digit(c) || strchr("._+-", c) != NULL;
        int label = is_alpha(c) || is_digit(c) || c == '-';
        if (c == 0)
            return GR_DEAD;
        switch (st) {
        case 0: case 1:
            if (st == 1 && c == '@') { st = 2; break; }
            if (!local) return GR_DEAD;
            st = 1;
            break;
        case 2: if (!label) return GR_DEAD; st = 3; break;
        case 3: case 5:
            if (c == '.') { st = 4; break; }
            if (!label) return GR_DEAD;
            if (st == 5 && letters >= 0)
                letters = is_alpha(c) ? letters + 1 : -1;
            break;
        case 4:
            if (!label) return GR_DEAD;
            st = 5;
            letters = is_alpha(c) ? 1 : -1;
            break;
        }
    }
    return st == 5 && letters >= 2 ? GR_MATCH : GR_VIABLE;
}

static int phone(const char *s, size_t n)
{
    static const char *const forms[] = {"+1-(DDD) DDD-DDDD", "+1-DDD-DDD-DDDD",
                                        "(DDD) DDD-DDDD", "DDD-DDD-DDDD"};
    int best = GR_DEAD;
    for (int f = 0; f < 4; f++) {
        size_t len = strlen(forms[f]), i;
        if (n > len)
            continue;
        for (i = 0; i < n; i++)
            if (forms[f][i] == 'D' ? !is_digit(s[i]) : s[i] != forms[f][i])
                break;
        if (i < n)
            continue;
        int v = n == len ? GR_MATCH : GR_VIABLE;
        best = v > best ? v : best;
    }
    return best;
}

int grammar_check(int grammar, const char *s, size_t n)
{
    switch (grammar) {
    case GR_PYDEF: return pydef(s, n);
    case GR_EMAIL: return email(s, n);
    case GR_PHONE: return phone(s, n);
    }
    return GR_DEAD;
}
