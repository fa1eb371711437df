/* api.h - ch11-grammars: recognisers for three small grammars that answer what a constrained
 * decoder needs to know about a partial output - can it still become a match? - the function
 * the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include <stddef.h>

enum { GR_PYDEF, GR_EMAIL, GR_PHONE };

#define GR_DEAD 0       /* no continuation of s can match */
#define GR_VIABLE 1     /* s does not match, but some continuation of it does ("" is viable) */
#define GR_MATCH 2      /* s matches (it may also be the start of a longer match) */

/* The verdict on the n bytes at s (not NUL-terminated) for one grammar. NAME is
 * [A-Za-z_][A-Za-z0-9_]*, D a digit 0-9, ' ' one space, x* zero or more, x+ one or more:
 *   GR_PYDEF  def ' '+ NAME ' '* ( ' '* [ NAME ' '* { , ' '* NAME ' '* } ] ) ' '* :
 *             ("def f(a, b):", "def  go( ) :"; not "def (a):", "deff(a):", "def f(a,):")
 *   GR_EMAIL  LOCAL @ LABEL { . LABEL } . TLD   with LOCAL [A-Za-z0-9._+-]+,
 *             LABEL [A-Za-z0-9-]+, TLD [A-Za-z]{2,}, so at least one dot after the @
 *             ("alice@example.com", "a.b+c@x-1.y.org"; not "a@b.c", "a@b", "@x.com")
 *   GR_PHONE  [ +1- ] ( (DDD) ' ' | DDD- ) DDD-DDDD
 *             ("+1-555-123-4567", "(555) 123-4567", "555-123-4567"; not "555-1234567")
 * Any other byte, anywhere, makes the input dead. */
int grammar_check(int grammar, const char *s, size_t n);

#endif
