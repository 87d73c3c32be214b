/* Fuzz target: a state stream (q8, q4, byte-shuffled f16, any key order)
 * decoded fully and composed (PICASO-R, one thread and two) into a q8
 * record (a q4 one for inputs of odd size), and the readers' agreement (issue 32 items 9 and 13): the record
 * validator (ss_record_check) says what the full decoder says; a
 * composition of records the decoder refuses fails, one of records it
 * accepts fails only for what composition adds (dims, decays, overflow),
 * never as a damaged input; one and two threads give the same result; a
 * q8 output that was written reads back. Any disagreement aborts. */
#include "fuzz.h"
#include "ss.h"

enum { MAX_RECORDS = 8 };

/* Composes path into out_path as dtype dt with t threads: the composer's
 * rc, *out the result (freed by the caller) when 0. */
static int compose(const char *path, const char *out_path, int t, ss_dtype dt, ss_state *out, char *err)
{
	const char *paths[1] = {path};
	ss_compose_opts o = {SS_COMPOSE_PICASO_R, 0, SS_COMPOSE_CONV_MEAN};
	ss_writer *w;
	if (ss_writer_open(&w, out_path, 1, err))
		abort();
	ss_compose_run_opts ro = {.paths = paths, .n_paths = 1, .threads = t, .max_record = 1u << 20, .w = w,
				  .set_dtype = 1, .dtype = dt};
	ss_compose_result res;
	int rc = ss_compose_run(&o, &ro, &res, err);
	*out = res.state;
	if (rc) {
		ss_writer_abort(w);
		return rc;
	}
	if (ss_writer_close(w, err))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = fuzz_file("in.states", data, size);
	char err[SS_ERRMSG_MAX], err2[SS_ERRMSG_MAX];
	ss_reader *r;
	const ss_record *rec;
	if (ss_reader_open(&r, p, 1u << 20, err))
		abort();
	/* decoded: every record the decoder accepts, and whether all were */
	int n = 0, all_good = 1, rc;
	while (n < MAX_RECORDS + 1 && (rc = ss_reader_next(r, &rec)) == 1) {
		n++;
		ss_state s;
		int drc = strcmp(ss_record_format(rec), SS_FORMAT_STATES) ? SS_ERR_FORMAT : ss_record_state(rec, &s, err);
		if (!strcmp(ss_record_format(rec), SS_FORMAT_STATES) && (ss_record_check(rec, err2) != 0) != (drc != 0))
			abort(); /* the validator and the decoder disagree */
		if (drc == 0)
			ss_state_free(&s);
		all_good &= drc == 0;
	}
	all_good &= rc >= 0;
	ss_reader_close(r);
	if (n == 0 || n > MAX_RECORDS) /* nothing to compose, or more than the harness allows time for */
		return 0;
	ss_state a, b;
	const ss_dtype dt = size % 2 ? SS_DTYPE_Q4 : SS_DTYPE_Q8;
	int ra = compose(p, fuzz_path("out1.states"), 1, dt, &a, err);
	int rb = compose(p, fuzz_path("out2.states"), 2, dt, &b, err2);
	if (ra != rb)
		abort(); /* one thread and two disagree */
	if (!all_good && ra == 0)
		abort(); /* a record the decoder refuses was composed */
	if (all_good && (ra == SS_ERR_FORMAT || ra == SS_ERR_TRUNCATED || ra == SS_ERR_CHECKSUM))
		abort(); /* a record the decoder accepts was refused as damaged */
	if (ra)
		return 0;
	if (memcmp(a.ssm, b.ssm, ss_state_ssm_len(&a.dims) * 4) || memcmp(a.conv, b.conv, ss_state_conv_len(&a.dims) * 4))
		abort();
	ss_state_free(&a);
	ss_state_free(&b);
	/* the q8 or q4 record written reads back */
	if (ss_reader_open(&r, fuzz_path("out1.states"), 0, err) || ss_reader_next(r, &rec) != 1 ||
	    ss_record_state(rec, &a, err))
		abort();
	ss_state_free(&a);
	ss_reader_close(r);
	return 0;
}
