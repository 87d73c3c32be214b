/*
 * bench/device.c — what `--device auto` costs a model tool on this machine
 * over `--device cpu` (issue 12: goal ≤ +10 ms and ≤ +5 MB where there is no
 * GPU, even when the CUDA plugin was built).
 *
 * Runs `ss-decode --model DIR --no-state --prompt-tokens 15496 --max-tokens 1
 * --ids --device auto|cpu` as child processes, interleaved (auto, cpu, auto, cpu,
 * ... -r rounds), on a t1-shape random model written to $TMPDIR (token ids in
 * and out, so that no tokenizer is needed). Prints min and median wall time and
 * the median peak RSS (wait4's ru_maxrss) of each, and the median of the
 * per-round differences. Figures only, no pass/fail.
 *
 * ss-decode is $SS_TOP/$SS_BUILD/bin/ss-decode (bench/run sets both), else
 * build/bin/ss-decode; the plugin it would load sits in ../lib beside it.
 *
 * usage: device [-r ROUNDS]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ss.h"
#include "bench.h"
#include "gen/model.h"

/* Runs exe with the device; returns its wall time (s) and peak RSS (KB). */
static int run_once(const char *exe, const char *model, const char *dev, double *sec, long *rss_kb)
{
	struct rusage ru;
	int status;
	double t;
	pid_t pid;

	fflush(stdout);
	t = bench_now();
	pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		freopen("/dev/null", "w", stdout);
		execl(exe, exe, "--model", model, "--no-state", "--prompt-tokens", "15496", "--max-tokens", "1", "--ids",
		      "--device", dev, (char *)NULL);
		_exit(127);
	}
	if (wait4(pid, &status, 0, &ru) != pid)
		return -1;
	*sec = bench_now() - t;
	*rss_kb = ru.ru_maxrss;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const char *top = getenv("SS_TOP"), *build = getenv("SS_BUILD"), *tmp = getenv("TMPDIR");
	char exe[4096], plugin[4200], dir[4096], path[4200], errmsg[SS_ERRMSG_MAX] = "";
	double *t[2], *rss[2], *dwall_s, *drss;
	const char *devs[2] = { "auto", "cpu" };
	ss_mkmodel_opts o;
	int rounds = 11, r, k, ok = 1;

	if (argc == 3 && !strcmp(argv[1], "-r"))
		rounds = atoi(argv[2]);
	if (rounds < 1 || (argc != 1 && argc != 3)) {
		fprintf(stderr, "usage: device [-r ROUNDS]\n");
		return 2;
	}
	snprintf(exe, sizeof(exe), "%s/%s/bin/ss-decode", top ? top : ".", build ? build : "build");
	snprintf(plugin, sizeof(plugin), "%s/%s/lib/libss_cuda.so", top ? top : ".", build ? build : "build");
	snprintf(dir, sizeof(dir), "%s/ss-bench-device-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "device: %s: cannot create\n", dir);
		return 1;
	}
	ss_mkmodel_defaults(&o);
	if (ss_mkmodel_write(dir, &o, errmsg)) {
		fprintf(stderr, "device: %s\n", errmsg);
		return 1;
	}
	for (k = 0; k < 2; k++) {
		t[k] = calloc((size_t)rounds, sizeof(double));
		rss[k] = calloc((size_t)rounds, sizeof(double));
	}
	dwall_s = calloc((size_t)rounds, sizeof(double));
	drss = calloc((size_t)rounds, sizeof(double));
	printf("ss-decode --no-state --prompt-tokens 15496 --max-tokens 1 --ids, t1-shape model; %s\n", exe);
	printf("CUDA plugin %s: %s; CUDA driver libcuda.so.1: %s\n", plugin,
	       access(plugin, R_OK) == 0 ? "built" : "absent (auto cannot load it)",
	       dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) ? "loads" : "absent");
	for (r = 0; r < rounds && ok; r++)
		for (k = 0; k < 2 && ok; k++) {
			long kb = 0;
			if (run_once(exe, dir, devs[k], &t[k][r], &kb)) {
				fprintf(stderr, "device: %s --device %s failed\n", exe, devs[k]);
				ok = 0;
			}
			rss[k][r] = kb / 1e3;
		}
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	unlink(path);
	rmdir(dir);
	if (!ok)
		return 1;
	for (r = 0; r < rounds; r++) {
		dwall_s[r] = t[0][r] - t[1][r];
		drss[r] = rss[0][r] - rss[1][r];
	}
	for (k = 0; k < 2; k++) {
		const double best = bench_min(t[k], rounds);
		printf("--device %-4s  wall min %7.1f ms  median %7.1f ms   peak RSS median %6.1f MB   (%d rounds)\n",
		       devs[k], best * 1e3, bench_median(t[k], rounds) * 1e3, bench_median(rss[k], rounds), rounds);
	}
	printf("auto - cpu:    wall median %+7.1f ms, peak RSS median %+6.1f MB (goal <= +10 ms, <= +5 MB without a GPU)\n",
	       bench_median(dwall_s, rounds) * 1e3, bench_median(drss, rounds));
	return 0;
}
