/* ch11-grammars - can a partial output still become a match? (see api.h)
 *
 * A constrained decoder asks, after every token, whether the text so far can still be
 * completed: a token after which it cannot is masked. Write grammar_check() for three
 * grammars - a Python function header, an e-mail address, a US phone number - answering
 * GR_DEAD, GR_VIABLE (a prefix of some match) or GR_MATCH. A state machine per grammar,
 * fed byte by byte, answers all three at once.
 *
 * The check (one rank): the curriculum's lists ("def f(a, b):" matches, "def (a):" is dead;
 * "alice@example.com" matches, "alice@" is viable, "@x.com" dead, "a@b.c" only viable;
 * "+1-555-123-4567" and "(555) 123-4567" match, "555-12" is viable), every prefix of every
 * accepted string viable, then per grammar 400 seeded matches and mutations of them (a byte
 * replaced, deleted or inserted) compared prefix by prefix with the reference. A failure names
 * the grammar, the input and both verdicts. The seed is printed.
 *
 *   mlsys-lab check ch11-grammars      mlsys-lab hint ch11-grammars */
#include "api.h"
#include <string.h>

int grammar_check(int grammar, const char *s, size_t n)
{
    (void)grammar;
    (void)s;
    (void)n;
    /* TODO: one state machine per grammar; a byte with no transition makes the input dead;
     * at the end, the state says whether it is a match or still viable */
    return GR_VIABLE;
}
