/*
 * compose — how much composing k states costs beyond reading them.
 *
 * Writes k = 10 random states of mamba2-130m shape (24 layers, 24 heads,
 * headdim 64, d_state 128, conv_dim 1792: 18.9 MB each in f32) to a
 * temporary stream, stored as f32, f16, bf16, q8 and q4 in turn (--states FILE:
 * the first k states of FILE instead, e.g. WikiText chunks encoded by a model
 * of that shape, which compress as real states do and random ones do not),
 * then times, each in a fresh child process (so its peak RSS is its own, from
 * wait4):
 *   read      plain read(2) of the file (what `cat > /dev/null` does)
 *   decomp    ss_reader_next over every record: zstd decompression only
 *   meta      ss_reader_next_meta over every record (picaso's first pass)
 *   kernel    the accumulation alone, from arrays already in memory
 *   <mode>    composing all k with ss_compose_run() in one thread:
 *             caso and soup in one streaming pass, picaso-r/-s reading the
 *             decays first (ss_reader_next_meta) and then the states;
 *             "2 thr": ss_compose_run with 2 threads, as ss-compose does
 *   tool      the ss-compose binary end to end (incl. writing its output),
 *             with its defaults (2 threads where 2 CPUs), -j1, -l 3
 * Prints best-of-3 wall time, GB/s of state data (decompressed record
 * bytes), peak RSS, and the ratio to decomp. Figures only, no pass/fail.
 *
 * The last lines of each storage compare the tool (picaso-r with its
 * defaults, with -j1 and at -l 3, and soup) with decompression alone (one
 * thread), -R rounds interleaved (default 5), as min and median of the
 * per-round ratios of wall time and of CPU time (user + system, the tool
 * included); then the tool's defaults against decompression alone run as
 * a process of its own (this program exec'd with --decompress-only FILE),
 * which pays what the tool pays to start and exit. The tool creates its
 * output each round (the last round's is removed untimed): replacing a
 * file adds freeing its blocks, a cost of the file system.
 *
 * Each storage first times memcpy of the bytes a composition produces (k
 * states' arrays in f32) between two touched buffers: memory's speed in the
 * same run, beside which the last table puts the GB/s of states composed
 * (f32 arrays produced) by picaso-r on 1 and 2 threads and by soup.
 *
 * A table gives, per storage dtype, the bytes per document (the
 * record decompressed, and its zstd frame as stored: f16/bf16 byte-shuffled
 * by default, formats/states.md), the frame of the same record written
 * without the shuffle (ss_writer_set_shuffle 0), and compose k time vs
 * decompress-only.
 *
 * usage: compose [-k K] [-r REPS] [-R ROUNDS] [--shape 130m|t1|L,H,P,N,C,K] [--states FILE]
 *                [--dtypes LIST] [--dir DIR]
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "ss.h"
#include "bench.h"

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "bench/compose: %s: %s\n", what, msg);
	exit(1);
}

static uint64_t rng = 42;

static double unif(void)
{
	return (double)(ss_splitmix64(&rng) >> 11) * 0x1.0p-53;
}

/* Writes the first k states of `src` (cycled when it has fewer) to path,
 * stored as dt; shuffle: ss_writer_set_shuffle's. */
static void copy_stream(const char *path, const char *src, ss_dtype dt, int k, int shuffle)
{
	char err[SS_ERRMSG_MAX];
	ss_writer *w;
	ss_reader *r = NULL;
	const ss_record *rec;
	if (ss_writer_open(&w, path, 0, err))
		die(path, err);
	ss_writer_set_shuffle(w, shuffle);
	for (int i = 0; i < k; i++) {
		int rc = r ? ss_reader_next(r, &rec) : 0;
		if (rc == 0) {
			ss_reader_close(r);
			if (ss_reader_open(&r, src, 0, err))
				die(src, err);
			if ((rc = ss_reader_next(r, &rec)) != 1)
				die(src, rc ? ss_reader_error(r) : "no states");
		}
		if (rc < 0)
			die(src, ss_reader_error(r));
		ss_state s;
		if (ss_record_state(rec, &s, err))
			die(src, err);
		s.dtype = dt;
		if (ss_writer_put_state(w, &s, NULL))
			die(path, "write failed");
		ss_state_free(&s);
	}
	ss_reader_close(r);
	if (ss_writer_close(w, err))
		die(path, err);
}

/* k random states (the same for every dt) stored as dt. */
static void make_stream(const char *path, const ss_state_dims *d, ss_dtype dt, int k, int shuffle)
{
	char err[SS_ERRMSG_MAX], id[32];
	ss_writer *w;
	ss_state s;
	rng = 42;
	if (ss_writer_open(&w, path, 0, err))
		die(path, err);
	ss_writer_set_shuffle(w, shuffle);
	if (ss_state_alloc(&s, d))
		die(path, "out of memory");
	strcpy(s.fingerprint, "bench");
	s.dtype = dt;
	s.id = id;
	for (int i = 0; i < k; i++) {
		snprintf(id, sizeof id, "doc%d", i);
		s.n_tokens = 500;
		/* state-like values: a few significant digits of spread */
		for (size_t e = 0; e < ss_state_ssm_len(d); e++)
			s.ssm[e] = (float)((2 * unif() - 1) * 0.3);
		for (size_t e = 0; e < ss_state_conv_len(d); e++)
			s.conv[e] = (float)(2 * unif() - 1);
		for (size_t e = 0; e < ss_state_logdecay_len(d); e++)
			s.logdecay[e] = (float)(-200 * unif());
		if (ss_writer_put_state(w, &s, NULL))
			die(path, "write failed");
	}
	s.id = NULL;
	ss_state_free(&s);
	if (ss_writer_close(w, err))
		die(path, err);
}

/* ------------------------------------------------------------ the jobs */

enum { J_READ, J_DECOMP, J_META, J_KERNEL, J_COMPOSE, J_TOOL, J_DECOMP_EXEC, J_MEMCPY };

/* This program's path: J_DECOMP_EXEC runs it as a process of its own. */
static const char *self;

typedef struct {
	int job;
	ss_compose_mode mode;
	const char *path, *tool, *out;
	double secs;
	uint64_t bytes;
	double rss_mb;    /* J_TOOL: the tool's own peak RSS */
	const char *level; /* J_TOOL: its -l, or NULL for its default */
	int threads;       /* J_COMPOSE: ss_compose_run's; J_TOOL: its -j (0: its default) */
} job_t;

static void job_read(job_t *j)
{
	int fd = open(j->path, O_RDONLY);
	if (fd < 0)
		die(j->path, "open");
	static char buf[1 << 20];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0)
		j->bytes += (uint64_t)n;
	close(fd);
}

/* Reads every record of j's stream with next (ss_reader_next: decompress
 * all; ss_reader_next_meta: the metadata only), counting record bytes. */
static void job_records(job_t *j, int (*next)(ss_reader *, const ss_record **))
{
	ss_reader *r;
	const ss_record *rec;
	char err[SS_ERRMSG_MAX];
	if (ss_reader_open(&r, j->path, 0, err))
		die(j->path, err);
	int rc;
	while ((rc = next(r, &rec)) == 1)
		j->bytes += ss_record_size(rec);
	if (rc < 0)
		die(j->path, ss_reader_error(r));
	ss_reader_close(r);
}

/* The accumulation alone: the records' arrays are first copied to memory
 * (untimed), then composed from there. Returns the seconds of that part. */
static double job_kernel(job_t *j)
{
	ss_reader *r;
	const ss_record *rec;
	char err[SS_ERRMSG_MAX];
	ss_state meta[64];
	void *ssm[64], *conv[64];
	size_t n = 0, H = 0;
	float *dec = NULL;
	int rc;
	if (ss_reader_open(&r, j->path, 0, err))
		die(j->path, err);
	while (n < 64 && (rc = ss_reader_next(r, &rec)) == 1) {
		const void *sm, *cv;
		int rc2 = ss_record_state_view(rec, &meta[n], &cv, &sm, err);
		if (rc2 == SS_ERR_UNSUPPORTED) { /* byte-shuffled: the kernel reads an f32 copy */
			if (ss_record_state(rec, &meta[n], err))
				die(j->path, err);
			meta[n].dtype = SS_DTYPE_F32;
			cv = meta[n].conv;
			sm = meta[n].ssm;
		} else if (rc2) {
			die(j->path, err);
		}
		const ss_dtype t = meta[n].dtype;
		size_t ssm_bytes = ss_dtype_row_size(t, ss_state_ssm_len(&meta[n].dims)),
		       conv_bytes = ss_dtype_row_size(t, ss_state_conv_len(&meta[n].dims));
		ssm[n] = malloc(ssm_bytes);
		conv[n] = malloc(conv_bytes);
		memcpy(ssm[n], sm, ssm_bytes);
		memcpy(conv[n], cv, conv_bytes);
		H = ss_state_logdecay_len(&meta[n].dims);
		dec = realloc(dec, (n + 1) * H * sizeof *dec);
		memcpy(dec + n * H, meta[n].logdecay, H * sizeof *dec);
		j->bytes += ss_record_size(rec);
		n++;
	}
	ss_reader_close(r);
	double t0 = bench_now();
	ss_composer *c;
	ss_compose_opts o = {j->mode, 0, SS_COMPOSE_CONV_MEAN};
	if (ss_composer_new(&c, &o, n, H, dec, err))
		die("composer", err);
	for (size_t k = 0; k < n; k++) {
		const ss_dtype t = meta[k].dtype;
		meta[k].shuffle = 0;
		if (ss_composer_begin(c, &meta[k], err) ||
		    ss_composer_fold(c, 1, 0, ssm[k], ss_dtype_row_size(t, ss_state_ssm_len(&meta[k].dims)), err) ||
		    ss_composer_fold(c, 0, 0, conv[k], ss_dtype_row_size(t, ss_state_conv_len(&meta[k].dims)), err) ||
		    ss_composer_end(c, err))
			die("add", err);
	}
	ss_state out;
	if (ss_composer_finish(c, &out, err))
		die("finish", err);
	double t = bench_now() - t0;
	ss_state_free(&out);
	ss_composer_free(c);
	for (size_t k = 0; k < n; k++) {
		free(ssm[k]);
		free(conv[k]);
		ss_state_free(&meta[k]);
	}
	free(dec);
	return t;
}

/* memcpy of j->bytes bytes between two buffers touched first (untimed):
 * the machine's memory speed in this run, beside which the composition's
 * is read. Returns the seconds of the copy. */
static double job_memcpy(job_t *j)
{
	size_t n = (size_t)j->bytes;
	unsigned char *a = malloc(n), *b = malloc(n);
	if (!a || !b)
		die("memcpy", "out of memory");
	memset(a, 1, n);
	memset(b, 2, n);
	double t0 = bench_now();
	memcpy(b, a, n);
	double t = bench_now() - t0;
	if (b[n / 2] != 1)
		die("memcpy", "copy lost");
	free(a);
	free(b);
	return t;
}

static void job_compose(job_t *j)
{
	ss_compose_opts o = {j->mode, 0, SS_COMPOSE_CONV_MEAN};
	const char *paths[1] = {j->path};
	char err[SS_ERRMSG_MAX];
	ss_compose_run_opts r = {.paths = paths, .n_paths = 1, .threads = j->threads};
	ss_compose_result res;
	if (ss_compose_run(&o, &r, &res, err))
		die(j->path, err);
	j->bytes = res.bytes_in;
	ss_state_free(&res.state);
}

/* Runs argv (argv[0] a path, NULL-terminated) and waits for it; dies
 * unless it exits 0. Returns its peak RSS in MB. */
static double spawn(const char *const *argv)
{
	pid_t p = fork();
	if (p == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (p < 0 || wait4(p, &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die(argv[0], "failed");
	return ru.ru_maxrss / 1024.0;
}

static void job_tool(job_t *j)
{
	char jobs[16];
	snprintf(jobs, sizeof jobs, "-j%d", j->threads);
	const char *argv[12] = {j->tool, "--mode", ss_compose_mode_name(j->mode), "-o", j->out};
	int n = 5;
	if (j->level)
		argv[n++] = "-l", argv[n++] = j->level;
	if (j->threads)
		argv[n++] = jobs;
	argv[n++] = j->path;
	j->rss_mb = spawn(argv);
}

/* Decompression only, as a process of its own (this program, exec'd with
 * --decompress-only FILE): what a tool pays besides (exec, loading the
 * libraries, exit), which the in-process J_DECOMP does not. */
static void job_decomp_exec(job_t *j)
{
	const char *argv[4] = {self, "--decompress-only", j->path, NULL};
	spawn(argv);
}

/* Runs j in a child; returns its wall seconds, bytes and peak RSS (MB), and
 * the CPU seconds (user + system) of the child and what it waited for (the
 * tool): the figure a shared machine disturbs least. */
static double last_cpu;
static void run_child(job_t *j, double *secs, uint64_t *bytes, double *rss_mb)
{
	int fds[2];
	if (pipe(fds))
		die("pipe", "failed");
	fflush(stdout); /* else a child that dies (exit) prints our buffer again */
	/* The tool creates its output, as in a pipeline's first run: replacing
	 * the last round's would add freeing its blocks to the rename (~1 ms
	 * per MB here, with online discard), a cost of the file system, not of
	 * writing. */
	if (j->job == J_TOOL)
		unlink(j->out);
	pid_t p = fork();
	if (p == 0) {
		close(fds[0]);
		double t0 = bench_now(), kt = -1;
		switch (j->job) {
		case J_READ: job_read(j); break;
		case J_DECOMP: job_records(j, ss_reader_next); break;
		case J_DECOMP_EXEC: job_decomp_exec(j); break;
		case J_META: job_records(j, ss_reader_next_meta); break;
		case J_KERNEL: kt = job_kernel(j); break;
		case J_MEMCPY: kt = job_memcpy(j); break;
		case J_COMPOSE: job_compose(j); break;
		default: job_tool(j); break;
		}
		j->secs = kt >= 0 ? kt : bench_now() - t0;
		if (write(fds[1], j, sizeof *j) != (ssize_t)sizeof *j)
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	job_t res;
	ssize_t got = read(fds[0], &res, sizeof res);
	close(fds[0]);
	int st;
	struct rusage ru;
	if (p < 0 || wait4(p, &st, 0, &ru) < 0 || got != (ssize_t)sizeof res || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		die("child", "failed");
	*secs = res.secs;
	*bytes = res.bytes;
	*rss_mb = j->job == J_TOOL ? res.rss_mb : ru.ru_maxrss / 1024.0;
	last_cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* The goal's figure: ss-compose (picaso-r, file to file) over decompression
 * alone, interleaved round by round (D T T1 T3 S D T ...; T with its
 * defaults, T1 with -j1 (one thread), T3 at -l 3, S soup), as min and median
 * of the per-round ratios of wall and of CPU time. */
static void tool_vs_decomp(const char *path, const char *tool, const char *out, int rounds)
{
	enum { NV = 4 };
	static const struct { ss_compose_mode mode; const char *level; int threads; const char *name; } v_of[NV] = {
		{ SS_COMPOSE_PICASO_R, NULL, 0, "picaso-r" }, { SS_COMPOSE_PICASO_R, NULL, 1, "picaso-r -j1" },
		{ SS_COMPOSE_PICASO_R, "3", 0, "picaso-r -l 3" }, { SS_COMPOSE_SOUP, NULL, 0, "soup" } };
	double rw[NV][64], rc[NV][64], xw[NV][64], xc[NV][64];
	uint64_t bytes;
	double rss;

	for (int r = 0; r < rounds; r++) {
		job_t d = {J_DECOMP, 0, path, tool, out, 0, 0, 0, NULL, 0};
		job_t dx = {J_DECOMP_EXEC, 0, path, tool, out, 0, 0, 0, NULL, 0};
		double dwall, dcpu, xwall, xcpu;
		run_child(&d, &dwall, &bytes, &rss);
		dcpu = last_cpu;
		run_child(&dx, &xwall, &bytes, &rss);
		xcpu = last_cpu;
		for (int v = 0; v < NV; v++) {
			job_t t = {J_TOOL, v_of[v].mode, path, tool, out, 0, 0, 0, v_of[v].level, v_of[v].threads};
			double twall;
			run_child(&t, &twall, &bytes, &rss);
			rw[v][r] = twall / dwall;
			rc[v][r] = last_cpu / dcpu;
			xw[v][r] = twall / xwall;
			xc[v][r] = last_cpu / xcpu;
		}
	}
	for (int v = 0; v < NV; v++)
		printf("  tool %-14s / decompress only, %d rounds interleaved: wall min %.2f median %.2f, "
		       "CPU min %.2f median %.2f%s\n",
		       v_of[v].name, rounds, bench_min(rw[v], rounds), bench_median(rw[v], rounds),
		       bench_min(rc[v], rounds), bench_median(rc[v], rounds),
		       v_of[v].level || v_of[v].threads ? "" : " (goal <= 1.2)");
	for (int v = 0; v < NV; v++)
		if (!v_of[v].level && !v_of[v].threads)
			printf("  tool %-14s / decompress only as a process (exec, exit), same rounds: wall min %.2f "
			       "median %.2f, CPU min %.2f median %.2f\n",
			       v_of[v].name, bench_min(xw[v], rounds), bench_median(xw[v], rounds),
			       bench_min(xc[v], rounds), bench_median(xc[v], rounds));
}

static double bench(job_t *j, int reps, uint64_t *bytes, double *rss)
{
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		double s, r;
		run_child(j, &s, bytes, &r);
		if (s < best)
			best = s;
		*rss = r;
	}
	return best;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--decompress-only")) { /* J_DECOMP_EXEC */
		job_t j = {J_DECOMP, 0, argv[2], NULL, NULL, 0, 0, 0, NULL, 0};
		job_records(&j, ss_reader_next);
		return 0;
	}
	static char exe[4096];
	ssize_t n_exe = readlink("/proc/self/exe", exe, sizeof exe - 1);
	self = n_exe > 0 ? (exe[n_exe] = 0, exe) : argv[0];
	int k = 10, reps = 3, rounds = 5;
	ss_state_dims d = {"mamba2", 24, 24, 64, 128, 1792, 4};
	const char *states = NULL, *dtypes = "f32,f16,bf16,q8,q4";
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-k") && i + 1 < argc)
			k = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-r") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-R") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--states") && i + 1 < argc)
			states = argv[++i];
		else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc)
			dtypes = argv[++i];
		else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
			const char *v = argv[++i];
			if (!strcmp(v, "t1"))
				d = (ss_state_dims){"mamba2", 2, 8, 16, 16, 160, 4};
			else if (strcmp(v, "130m") &&
				 sscanf(v, "%d,%d,%d,%d,%d,%d", &d.n_layer, &d.nheads, &d.headdim, &d.d_state,
					&d.conv_dim, &d.d_conv) != 6)
				die("--shape", v);
		} else {
			fprintf(stderr, "usage: compose [-k K] [-r REPS] [-R ROUNDS] [--shape 130m|t1|L,H,P,N,C,K] "
				"[--states FILE] [--dtypes LIST] [--dir DIR]\n");
			return 2;
		}
	}
	if (rounds < 1 || rounds > 64 || reps < 1) {
		fprintf(stderr, "compose: -r and -R take 1..64\n");
		return 2;
	}
	ss_dtype dts[8];
	int n_dt = 0;
	char dl[64];
	snprintf(dl, sizeof dl, "%s", dtypes);
	for (char *save = NULL, *t = strtok_r(dl, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (n_dt == 8 || ss_dtype_parse_for(t, SS_DTYPE_STATES, &dts[n_dt++], NULL))
			die("--dtypes", t);
	if (states) { /* the dims are the file's */
		ss_reader *r;
		const ss_record *rec;
		ss_state m;
		char err[SS_ERRMSG_MAX];
		if (ss_reader_open(&r, states, 0, err) || ss_reader_next_meta(r, &rec) != 1 ||
		    ss_record_state_meta(rec, &m, err))
			die(states, "not a state stream");
		d = m.dims;
		ss_state_free(&m);
		ss_reader_close(r);
	}
	struct { double stored, zstd, plain, decomp, picaso, picaso2, soup, tool, memcpy; } sum[8] = {{0}};
	/* The tool sits next to this binary's directory: build/bench → build/bin. */
	char tool[4096];
	snprintf(tool, sizeof tool, "%s", argv[0]);
	char *slash = strrchr(tool, '/');
	if (slash)
		snprintf(slash, sizeof tool - (size_t)(slash - tool), "/../bin/ss-compose");
	int have_tool = slash && access(tool, X_OK) == 0;

	char tmpl[4096];
	snprintf(tmpl, sizeof tmpl, "%s/ss-bench-compose.XXXXXX", dir);
	if (!mkdtemp(tmpl))
		die(tmpl, "mkdtemp failed");
	size_t state_bytes = (ss_state_ssm_len(&d) + ss_state_conv_len(&d)) * 4;
	printf("compose: k = %d states, dims %d,%d,%d,%d,%d,%d (%.1f MB each in f32), %s, best of %d, %ld CPUs\n",
	       k, d.n_layer, d.nheads, d.headdim, d.d_state, d.conv_dim, d.d_conv, state_bytes / 1e6,
	       states ? states : "random values", reps, sysconf(_SC_NPROCESSORS_ONLN));
	for (int t = 0; t < n_dt; t++) {
		char path[4200], out[4200];
		snprintf(path, sizeof path, "%s/in-%s.ss", tmpl, ss_dtype_name(dts[t]));
		snprintf(out, sizeof out, "%s/out.ss", tmpl);
		double t0 = bench_now();
		if (states)
			copy_stream(path, states, dts[t], k, 1);
		else
			make_stream(path, &d, dts[t], k, 1);
		long long fsize = 0;
		FILE *f = fopen(path, "rb");
		if (f) {
			fseek(f, 0, SEEK_END);
			fsize = ftell(f);
			fclose(f);
		}
		printf("\nstorage %s: stream %.1f MB on disk (written in %.2f s)\n", ss_dtype_name(dts[t]),
		       fsize / 1e6, bench_now() - t0);
		printf("  %-16s %9s %9s %9s %8s\n", "what", "ms", "GB/s", "RSS MB", "x decomp");
		job_t warm = {J_READ, 0, path, tool, out, 0, 0, 0, NULL, 0};
		double s, rss;
		uint64_t bytes;
		bench(&warm, 1, &bytes, &rss); /* page cache */
		double base = 0;
		/* memory's speed now, over the bytes the composition produces
		 * (k states' arrays in f32) */
		job_t mc = {J_MEMCPY, 0, path, tool, out, 0, (uint64_t)k * state_bytes, 0, NULL, 0};
		s = bench(&mc, reps, &bytes, &rss);
		sum[t].memcpy = (double)k * state_bytes / s;
		printf("  %-16s %9.1f %9.2f %9s %8s  (the k states' f32 arrays, buffer to buffer)\n", "memcpy", s * 1e3,
		       sum[t].memcpy / 1e9, "-", "-");
		struct { int job; ss_compose_mode mode; const char *name; const char *level; int threads; } rows[] = {
			{J_READ, 0, "read file (cat)", NULL, 0},
			{J_DECOMP, 0, "decompress only", NULL, 0},
			{J_META, 0, "meta pass only", NULL, 0},
			{J_KERNEL, SS_COMPOSE_SOUP, "kernel soup", NULL, 0},
			{J_KERNEL, SS_COMPOSE_CASO, "kernel caso", NULL, 0},
			{J_KERNEL, SS_COMPOSE_PICASO_R, "kernel picaso-r", NULL, 0},
			{J_COMPOSE, SS_COMPOSE_SOUP, "soup", NULL, 1},
			{J_COMPOSE, SS_COMPOSE_CASO, "caso", NULL, 1},
			{J_COMPOSE, SS_COMPOSE_PICASO_R, "picaso-r", NULL, 1},
			{J_COMPOSE, SS_COMPOSE_PICASO_S, "picaso-s", NULL, 1},
			{J_COMPOSE, SS_COMPOSE_PICASO_R, "picaso-r 2 thr", NULL, 2},
			{J_TOOL, SS_COMPOSE_PICASO_R, "tool picaso-r", NULL, 0},
			{J_TOOL, SS_COMPOSE_PICASO_R, "tool ... -j1", NULL, 1},
			{J_TOOL, SS_COMPOSE_PICASO_R, "tool ... -l 3", "3", 0},
		};
		for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
			if (rows[i].job == J_TOOL && !have_tool)
				continue;
			job_t j = {rows[i].job, rows[i].mode, path, tool, out, 0, 0, 0, rows[i].level, rows[i].threads};
			s = bench(&j, reps, &bytes, &rss);
			if (rows[i].job == J_DECOMP)
				base = s, sum[t].decomp = s, sum[t].stored = (double)bytes / k;
			if (rows[i].job == J_COMPOSE && rows[i].mode == SS_COMPOSE_PICASO_R && rows[i].threads == 1)
				sum[t].picaso = s;
			if (rows[i].job == J_COMPOSE && rows[i].mode == SS_COMPOSE_PICASO_R && rows[i].threads == 2)
				sum[t].picaso2 = s;
			if (rows[i].job == J_COMPOSE && rows[i].mode == SS_COMPOSE_SOUP)
				sum[t].soup = s;
			if (rows[i].job == J_TOOL && !rows[i].level && !rows[i].threads)
				sum[t].tool = s;
			if (rows[i].job == J_KERNEL)
				printf("  %-16s %9.1f %9.2f %9s %8.2f  (arrays in memory: accumulation alone)\n",
				       rows[i].name, s * 1e3, bytes / s / 1e9, "-", base > 0 ? s / base : 0);
			else if (rows[i].job == J_META)
				printf("  %-16s %9.1f %9s %9.1f %8.2f\n", rows[i].name, s * 1e3, "-", rss,
				       base > 0 ? s / base : 0);
			else if (rows[i].job == J_TOOL)
				printf("  %-16s %9.1f %9s %9.1f %8.2f  (incl. writing the output)\n", rows[i].name,
				       s * 1e3, "-", rss, base > 0 ? s / base : 0);
			else
				printf("  %-16s %9.1f %9.2f %9.1f %8.2f\n", rows[i].name, s * 1e3,
				       bytes / s / 1e9, rss, base > 0 ? s / base : 0);
		}
		if (have_tool)
			tool_vs_decomp(path, tool, out, rounds);
		sum[t].zstd = (double)fsize / k;
		if (states)
			copy_stream(path, states, dts[t], k, 0);
		else
			make_stream(path, &d, dts[t], k, 0);
		if ((f = fopen(path, "rb")) != NULL) {
			fseek(f, 0, SEEK_END);
			sum[t].plain = (double)ftell(f) / k;
			fclose(f);
		}
		remove(path);
		remove(out);
	}
	rmdir(tmpl);
	printf("\nper document, k = %d (%s): MB stored = the record decompressed, zstd = its frame on\n"
	       "disk as written (f16/bf16 byte-shuffled), unshuffled = its frame without the shuffle;\n"
	       "ms to decompress all k, to compose them (picaso-r, library and tool)\n",
	       k, states ? states : "random values");
	printf("  %-6s %9s %9s %11s %8s %10s %10s %8s %10s\n", "dtype", "stored", "zstd", "unshuffled", "gain",
	       "decomp ms", "picaso-r", "x decomp", "tool ms");
	for (int t = 0; t < n_dt; t++)
		printf("  %-6s %9.3f %9.3f %11.3f %7.1f%% %10.1f %10.1f %8.2f %10.1f\n", ss_dtype_name(dts[t]),
		       sum[t].stored / 1e6, sum[t].zstd / 1e6, sum[t].plain / 1e6,
		       sum[t].plain > 0 ? 100 * (1 - sum[t].zstd / sum[t].plain) : 0, sum[t].decomp * 1e3,
		       sum[t].picaso * 1e3, sum[t].decomp > 0 ? sum[t].picaso / sum[t].decomp : 0, sum[t].tool * 1e3);
	/* issue 54's goals: 10 f32 states in <= 60 ms on 2 threads; f16, bf16
	 * and q8 at >= 3 GB/s of arrays produced */
	printf("\nstates composed, k = %d: GB/s of f32 arrays produced (k x %.1f MB) by picaso-r (ss_compose_run,\n"
	       "1 and 2 threads) and soup (1 thread), beside memcpy of as many bytes in the same run\n",
	       k, state_bytes / 1e6);
	printf("  %-6s %10s %10s %10s %10s %10s %10s %12s\n", "dtype", "1 thr ms", "2 thr ms", "GB/s 1", "GB/s 2",
	       "soup GB/s", "memcpy", "2 thr/memcpy");
	for (int t = 0; t < n_dt; t++) {
		double made = (double)k * state_bytes;
		printf("  %-6s %10.1f %10.1f %10.2f %10.2f %10.2f %10.2f %12.2f\n", ss_dtype_name(dts[t]),
		       sum[t].picaso * 1e3, sum[t].picaso2 * 1e3, made / sum[t].picaso / 1e9, made / sum[t].picaso2 / 1e9,
		       made / sum[t].soup / 1e9, sum[t].memcpy / 1e9, made / sum[t].picaso2 / sum[t].memcpy);
	}
	return 0;
}
