/*
 * ss_device.h — where the forward pass runs: the CPU, or a GPU through the
 * CUDA plugin libss_cuda.so (part of libss; include "ss.h").
 * Public: part of libss's interface (ss.h says what that means).
 *
 * libss and the tools never link CUDA. ss_device_open("cuda"|"auto")
 * dlopen()s the plugin, which links cudart and cuBLAS, and asks it whether a
 * GPU is there; "cpu" never touches it. So every binary runs on a machine
 * without the CUDA driver, and tools that do not run the model (ss-compose,
 * ss-retrieve) never load it.
 *
 * Plugin search, first hit wins:
 *   1. $SS_CUDA_PLUGIN (a path to the .so; when set, only this one);
 *   2. <directory of the executable>/../lib/libss_cuda.so (build/bin → build/lib,
 *      and BINDIR → LIBDIR after `make install`);
 *   3. SS_LIBDIR/libss_cuda.so (the install LIBDIR, compiled in);
 *   4. libss_cuda.so through the dynamic loader's own path (LD_LIBRARY_PATH).
 *
 * The plugin exports one C symbol returning a table of function pointers
 * (its contract is internal: lib/forward/device_plugin.h). A plugin built against
 * another ABI, or compiled with other layouts of the structs it reads
 * (ss_model, ss_state, ss_forward_seq...: a stale plugin), is refused
 * (SS_ERR_VERSION, errmsg names the first difference).
 * ref: docs/DESIGN.md §5; docs/STYLE.md (kernels/ built into a plugin loaded at run time).
 */
#ifndef SS_DEVICE_H
#define SS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	SS_DEVICE_CPU = 0,
	SS_DEVICE_CUDA = 1,
} ss_device_kind;

typedef struct ss_device ss_device;

/* Opens a device. want: "cpu", "cuda" (the first GPU; "cuda:N" for GPU N)
 * or "auto" (a GPU when the plugin loads and reports one, else the CPU,
 * silently; the plugin is loaded only after the driver, libcuda.so.1, loads
 * and cuDeviceGetCount reports a GPU, so auto costs a CPU-only machine one
 * failed dlopen). NULL means "auto".
 * Returns 0 and sets *out (close with ss_device_close); SS_ERR_INVALID
 * (unknown name), SS_ERR_DEVICE ("cuda" asked and no plugin, no driver or no
 * GPU: errmsg says which, in one line), SS_ERR_VERSION (plugin of another
 * ABI or layout), SS_ERR_NOMEM. "auto" never fails for want of a GPU. */
int ss_device_open(ss_device **out, const char *want, char *errmsg);
/* Unloads the plugin if this device loaded it. NULL is a no-op. Close a
 * device only after every context made on it is freed. */
void ss_device_close(ss_device *d);
ss_device_kind ss_device_kind_of(const ss_device *d);
/* "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)". Owned by d. */
const char *ss_device_name(const ss_device *d);
/* Path of the loaded plugin, or NULL (CPU device). Owned by d. */
const char *ss_device_plugin_path(const ss_device *d);
/* The GPU index a CUDA device was opened on (0 for the CPU). */
int ss_device_index(const ss_device *d);

#ifdef __cplusplus
}
#endif
#endif /* SS_DEVICE_H */
