/* err.c — the library's error codes as text, and the one-line message helper (ss.h). */
#include <stdarg.h>
#include <stdio.h>

#include "ss.h"

const char *ss_strerror(int err)
{
	switch (err) {
	case SS_OK: return "success";
	case SS_ERR_NOMEM: return "out of memory";
	case SS_ERR_IO: return "input/output error";
	case SS_ERR_FORMAT: return "malformed input";
	case SS_ERR_TRUNCATED: return "truncated input";
	case SS_ERR_TOO_LARGE: return "declared size exceeds the limit";
	case SS_ERR_VERSION: return "unsupported format version";
	case SS_ERR_MISMATCH: return "model or dimension mismatch";
	case SS_ERR_UNSUPPORTED: return "not supported";
	case SS_ERR_INVALID: return "invalid argument";
	case SS_ERR_UTF8: return "invalid UTF-8";
	case SS_ERR_CHECKSUM: return "checksum mismatch (corrupt data)";
	case SS_ERR_NOTFOUND: return "not found";
	case SS_ERR_DEVICE: return "device unavailable";
	}
	return "unknown error";
}

int ss_errf(char *errmsg, int code, const char *fmt, ...)
{
	if (errmsg) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(errmsg, SS_ERRMSG_MAX, fmt, ap);
		va_end(ap);
	}
	return code;
}
