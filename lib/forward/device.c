/*
 * device.c — device selection and loading of the CUDA plugin. See
 * ss_device.h for the contracts and the search order.
 *
 * The plugin is the only place CUDA lives: libss reaches it through dlopen()
 * (once loaded it stays mapped: RTLD_NODELETE) and one symbol, so a binary linked with libss starts on a machine with no
 * CUDA driver and fails over to the CPU when "auto" is asked.
 * "auto" first asks the driver itself (driver_has_gpu): loading the plugin
 * maps cudart and cuBLAS, about 1 s and 180 MB, which a CPU-only machine
 * must not pay on every call (issue 12).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward/device_plugin.h"

#ifndef SS_LIBDIR
#define SS_LIBDIR "/usr/local/lib"
#endif
#define PLUGIN_NAME "libss_cuda.so"

struct ss_device {
	ss_device_kind kind;
	int index;
	void *dl;
	const ss_cuda_api *api;
	char name[256];
	char path[PATH_MAX];
};

int ss_cuda_api_check(const ss_cuda_api *api, const char *path, char *errmsg)
{
	static const ss_cuda_layout ours[] = SS_CUDA_LAYOUT_INIT;
	const ss_cuda_layout *theirs;
	size_t i;

	if (!api || api->abi != SS_CUDA_ABI || api->size < sizeof(ss_cuda_api)) {
		ss_errf(errmsg, 0, "%s: not a CUDA plugin of ABI %d (rebuild it with this libss)", path,
			SS_CUDA_ABI);
		return SS_ERR_VERSION;
	}
	theirs = api->layout;
	for (i = 0; theirs && ours[i].what; i++) {
		if (!theirs[i].what) {
			ss_errf(errmsg, 0, "%s: built from other headers: its layout list ends before %s "
				"(rebuild the plugin with this libss)", path, ours[i].what);
			return SS_ERR_VERSION;
		}
		if (strcmp(theirs[i].what, ours[i].what)) {
			ss_errf(errmsg, 0, "%s: built from other headers: layout entry %zu is %s in the "
				"plugin, %s in this libss (rebuild the plugin with this libss)", path, i,
				theirs[i].what, ours[i].what);
			return SS_ERR_VERSION;
		}
		if (theirs[i].value != ours[i].value) {
			ss_errf(errmsg, 0, "%s: built from other headers: %s is %llu in the plugin, %llu in "
				"this libss (rebuild the plugin with this libss)", path, ours[i].what,
				(unsigned long long)theirs[i].value, (unsigned long long)ours[i].value);
			return SS_ERR_VERSION;
		}
	}
	if (!theirs || theirs[i].what) {
		ss_errf(errmsg, 0, "%s: built from other headers: %s (rebuild the plugin with this libss)",
			path, theirs ? "its layout list is longer than this libss's" : "no layout list");
		return SS_ERR_VERSION;
	}
	return 0;
}

/* Tries one path. Returns 0 with d->dl/api set, or an SS_ERR_* with errmsg. */
static int try_plugin(ss_device *d, const char *path, char *errmsg)
{
	ss_cuda_plugin_fn entry;
	const ss_cuda_api *api;
	int err;
	/* NODELETE: the CUDA runtime and the C++ runtime it brings are never
	 * unloaded (unloading them under live threads or atexit handlers is
	 * unsafe), and their allocations stay reachable. */
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

	if (!dl) {
		const char *e = dlerror();
		ss_errf(errmsg, 0, "cannot load the CUDA plugin: %s", e ? e : path);
		return SS_ERR_DEVICE;
	}
	*(void **)(&entry) = dlsym(dl, SS_CUDA_PLUGIN_SYMBOL);
	api = entry ? entry(SS_CUDA_ABI) : NULL;
	if ((err = ss_cuda_api_check(api, path, errmsg))) {
		dlclose(dl);
		return err;
	}
	d->dl = dl;
	d->api = api;
	snprintf(d->path, sizeof(d->path), "%s", path);
	return 0;
}

/* Whether the CUDA driver (libcuda.so.1, on the loader's path) loads and
 * reports at least one GPU: cuInit(0) then cuDeviceGetCount, both CUresult
 * 0 on success (CUDA driver API, cuda.h). Without the driver it costs one
 * failed dlopen (well under a millisecond). The driver stays mapped
 * (NODELETE): after cuInit it may hold threads, and cudart loads it again
 * anyway when a GPU is there. Honours CUDA_VISIBLE_DEVICES as cudart does. */
static int driver_has_gpu(void)
{
	int (*cu_init)(unsigned);
	int (*cu_count)(int *);
	int n = 0;
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

	if (!dl)
		return 0;
	*(void **)(&cu_init) = dlsym(dl, "cuInit");
	*(void **)(&cu_count) = dlsym(dl, "cuDeviceGetCount");
	if (!cu_init || !cu_count || cu_init(0) != 0 || cu_count(&n) != 0)
		n = 0;
	dlclose(dl);
	return n > 0;
}

/* The search of ss_device_h: returns 0 or the error of the most telling
 * attempt (a file that exists but does not load beats a missing one). */
static int load_plugin(ss_device *d, char *errmsg)
{
	const char *env = getenv("SS_CUDA_PLUGIN");
	char exe[PATH_MAX], cand[PATH_MAX + 32];
	ssize_t n;
	int err = SS_ERR_DEVICE, found = 0;

	if (env && *env)
		return try_plugin(d, env, errmsg);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;
		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(cand, sizeof(cand), "%s/../lib/%s", exe, PLUGIN_NAME);
			if (access(cand, F_OK) == 0) {
				found = 1;
				err = try_plugin(d, cand, errmsg);
				if (!err)
					return 0;
			}
		}
	}
	snprintf(cand, sizeof(cand), "%s/%s", SS_LIBDIR, PLUGIN_NAME);
	if (access(cand, F_OK) == 0) {
		int e = try_plugin(d, cand, found ? NULL : errmsg);
		if (!e)
			return 0;
		if (!found)
			err = e;
		found = 1;
	}
	{
		char tmp[SS_ERRMSG_MAX];
		int e = try_plugin(d, PLUGIN_NAME, tmp);
		if (!e)
			return 0;
	}
	if (!found)
		ss_errf(errmsg, 0, "no CUDA plugin (%s) next to the executable, in %s, or on the "
			"library path (set SS_CUDA_PLUGIN)", PLUGIN_NAME, SS_LIBDIR);
	return err;
}

static int parse_want(const char *want, ss_device_kind *kind, int *index, int *strict)
{
	char *end;
	long v;

	*index = 0;
	*strict = 0;
	if (!want || strcmp(want, "auto") == 0) {
		*kind = SS_DEVICE_CUDA;
		return 0;
	}
	if (strcmp(want, "cpu") == 0) {
		*kind = SS_DEVICE_CPU;
		return 0;
	}
	if (strncmp(want, "cuda", 4) != 0)
		return SS_ERR_INVALID;
	*kind = SS_DEVICE_CUDA;
	*strict = 1;
	if (want[4] == '\0')
		return 0;
	if (want[4] != ':' || !want[5])
		return SS_ERR_INVALID;
	v = strtol(want + 5, &end, 10);
	if (*end || v < 0 || v > 1024)
		return SS_ERR_INVALID;
	*index = (int)v;
	return 0;
}

int ss_device_open(ss_device **out, const char *want, char *errmsg)
{
	ss_device *d;
	ss_device_kind kind;
	int index, strict, err, count;
	size_t mem = 0;
	char gpu[200] = "";

	if (!out)
		return SS_ERR_INVALID;
	*out = NULL;
	if (parse_want(want, &kind, &index, &strict)) {
		ss_errf(errmsg, 0, "unknown device '%s' (cpu, cuda, cuda:N or auto)", want);
		return SS_ERR_INVALID;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return SS_ERR_NOMEM;
	d->kind = SS_DEVICE_CPU;
	snprintf(d->name, sizeof(d->name), "cpu");
	if (kind == SS_DEVICE_CPU) {
		*out = d;
		return 0;
	}
	/* "auto" loads the plugin only when the driver reports a GPU; "cuda"
	 * always tries it, for the most telling error. */
	if (!strict && !driver_has_gpu()) {
		*out = d;
		return 0;
	}
	err = load_plugin(d, strict ? errmsg : NULL);
	if (err)
		goto fallback;
	count = d->api->device_count();
	if (count <= index) {
		err = SS_ERR_DEVICE;
		if (count == 0)
			ss_errf(strict ? errmsg : NULL, 0, "no CUDA GPU (%s)", d->api->last_error());
		else
			ss_errf(strict ? errmsg : NULL, 0, "no CUDA GPU %d (%d present)", index, count);
		goto fallback;
	}
	if (d->api->device_select(index, gpu, sizeof(gpu), &mem)) {
		err = SS_ERR_DEVICE;
		ss_errf(strict ? errmsg : NULL, 0, "cannot use CUDA GPU %d: %s", index,
			d->api->last_error());
		goto fallback;
	}
	d->kind = SS_DEVICE_CUDA;
	d->index = index;
	snprintf(d->name, sizeof(d->name), "cuda:%d (%s, %.1f GiB)", index, gpu,
		 (double)mem / (1024.0 * 1024.0 * 1024.0));
	*out = d;
	return 0;

fallback:
	if (d->dl)
		dlclose(d->dl);
	d->dl = NULL;
	d->api = NULL;
	d->path[0] = '\0';
	if (strict) {
		free(d);
		return err;
	}
	*out = d;
	return 0;
}

void ss_device_close(ss_device *d)
{
	if (!d)
		return;
	if (d->dl)
		dlclose(d->dl);
	free(d);
}

ss_device_kind ss_device_kind_of(const ss_device *d)
{
	return d ? d->kind : SS_DEVICE_CPU;
}

const char *ss_device_name(const ss_device *d)
{
	return d ? d->name : "cpu";
}

const char *ss_device_plugin_path(const ss_device *d)
{
	return d && d->dl ? d->path : NULL;
}

const ss_cuda_api *ss_device_cuda(const ss_device *d)
{
	return d && d->kind == SS_DEVICE_CUDA ? d->api : NULL;
}

int ss_device_index(const ss_device *d)
{
	return d ? d->index : 0;
}
