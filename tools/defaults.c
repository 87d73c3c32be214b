/* defaults.c — the tools' one lookup of the model and the tokenizer; see defaults.h. */
#include "defaults.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#ifndef SS_DATADIR
#define SS_DATADIR "/usr/local/share/ss"
#endif

static int readable(const char *path)
{
	return access(path, R_OK) == 0;
}

/* TREE/data of the source tree the program was built in, or NULL. */
static const char *tree_data(void)
{
	static char data[PATH_MAX + 16];
	static int done;
	if (done)
		return data[0] ? data : NULL;
	done = 1;
	char dir[PATH_MAX], probe[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
	if (n <= 0)
		return NULL;
	dir[n] = 0;
	for (int up = 0; up <= 3; up++) {
		char *slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			break;
		*slash = 0; /* up 0: the program's directory; then its parents */
		if (up == 0)
			continue;
		snprintf(probe, sizeof probe, "%s/lib/ss.h", dir);
		if (!readable(probe))
			continue;
		snprintf(probe, sizeof probe, "%s/data", dir);
		if (access(probe, X_OK) == 0) {
			snprintf(data, sizeof data, "%s", probe);
			return data;
		}
	}
	return NULL;
}

/* The first of DATADIR/rel, TREE/data/rel that exists, into buf; or NULL. */
static const char *bundled(const char *rel, const char *probe_rel, char *buf, size_t cap)
{
	const char *dirs[2] = { SS_DATADIR, tree_data() };
	char probe[PATH_MAX + 64];
	for (int i = 0; i < 2; i++) {
		if (!dirs[i])
			continue;
		snprintf(probe, sizeof probe, "%s/%s%s", dirs[i], rel, probe_rel);
		if (readable(probe)) {
			snprintf(buf, cap, "%s/%s", dirs[i], rel);
			return buf;
		}
	}
	return NULL;
}

const char *cli_model_dir(const char *opt, const char *usage)
{
	static char buf[PATH_MAX + 16];
	if (opt && *opt)
		return opt;
	const char *env = getenv("SS_MODEL");
	if (env && *env)
		return env;
	const char *dir = bundled("model", "/config.json", buf, sizeof buf);
	if (!dir && usage)
		cli_usage(usage, "no model: use --model DIR or set SS_MODEL (no default model in "
		          SS_DATADIR "/model%s)", tree_data() ? " or the source tree's data/model" : "");
	return dir;
}

ss_tokenizer *cli_tokenizer(const char *opt, const char *model_dir)
{
	char buf[PATH_MAX + 32];
	const char *path = opt && *opt ? opt : getenv("SS_TOKENIZER");
	struct stat sb;
	if ((!path || !*path) && model_dir && stat(model_dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
		path = model_dir; /* a GGUF holds its tokenizer */
	if ((!path || !*path) && model_dir) {
		snprintf(buf, sizeof buf, "%s/tokenizer.json", model_dir);
		if (readable(buf))
			path = buf;
	}
	if (!path || !*path)
		path = bundled("tokenizer.json", "", buf, sizeof buf);
	if (!path)
		cli_die("no tokenizer.json found: use --tokenizer FILE or set SS_TOKENIZER (looked in "
		        "%s%s" SS_DATADIR "%s)", model_dir ? model_dir : "", model_dir ? ", " : "",
		        tree_data() ? " and the source tree's data/" : "");
	ss_tokenizer *tok;
	char err[SS_ERRMSG_MAX] = "";
	int rc = ss_tokenizer_load(&tok, path, err);
	if (rc)
		cli_die("%s: %s", path, err[0] ? err : ss_strerror(rc));
	return tok;
}

void cli_defaults_help(void)
{
	printf("Defaults (the first that exists is used; an option or variable is taken as given):\n"
	       "  model      --model DIR, $SS_MODEL, " SS_DATADIR "/model,\n"
	       "             data/model of the source tree (when run from its build tree)\n"
	       "  tokenizer  --tokenizer FILE, $SS_TOKENIZER, the model's tokenizer.json\n"
	       "             (a GGUF model: its own tokenizer.ggml.* metadata),\n"
	       "             " SS_DATADIR "/tokenizer.json, data/tokenizer.json of the source tree\n");
}
