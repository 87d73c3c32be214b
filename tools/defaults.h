/*
 * defaults.h — where every ss-* tool finds what the user did not give: the
 * model directory and the tokenizer.json. One lookup, one order, for every
 * tool (and stated by cli_defaults_help() in every --help and in the man
 * pages); the first candidate that exists is taken:
 *
 *   model:     --model DIR > $SS_MODEL > DATADIR/model > TREE/data/model
 *   tokenizer: --tokenizer FILE > $SS_TOKENIZER > MODEL/tokenizer.json >
 *              DATADIR/tokenizer.json > TREE/data/tokenizer.json
 *
 * An option or a variable is taken as given (a missing file is then an error
 * naming it, not a fall-through). MODEL is the model directory the tool uses
 * (for ss-tokenize: $SS_MODEL or the default model). DATADIR is the installed
 * data directory, compiled in from config.mk (default $(PREFIX)/share/ss,
 * filled by `make install`). TREE is the source checkout the running program
 * was built in: found from /proc/self/exe, up to 3 directories above the
 * program (build/bin, build/san/bin), as the first one holding lib/ss.h and
 * data/; so a build tree works wherever it is moved or copied, and an
 * installed program never looks there.
 */
#ifndef SS_DEFAULTS_H
#define SS_DEFAULTS_H

#include "ss.h"

/* The model directory by the order above: opt itself, the environment's
 * string, or a static buffer (valid until the next call); not to be freed.
 * When none is found: NULL if usage is NULL, else a usage error (exit 2)
 * naming the places looked. */
const char *cli_model_dir(const char *opt, const char *usage);

/* Loads the tokenizer found by the order above (model_dir may be NULL: no
 * MODEL step). Dies (exit 1) naming the file when it fails to load, or
 * naming the places looked when none is found. Owned by the caller
 * (ss_tokenizer_free). */
ss_tokenizer *cli_tokenizer(const char *opt, const char *model_dir);

/* Prints the lookup order (with this build's DATADIR) as a paragraph of
 * --help, to stdout. */
void cli_defaults_help(void);

#endif /* SS_DEFAULTS_H */
