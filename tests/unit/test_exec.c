/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of agentd/exec.c on a real libuv loop and real processes:
 * arguments passed literally (E9), stdin bytes then EOF, no stdin, and
 * stdin written in chunks (E5), a 1 MiB burst read by a slow lossless
 * watcher, even through a 4 KiB journal (E2), replay from an offset and
 * bytes lost at the head (E3), timeouts, idle timeouts and kills that leave
 * no process of the tree behind (E1, E6, E7), exit statuses kept and dropped
 * (E8), spawn and cwd errors (E10), tags, List info, PTY size and resize,
 * signals to a setsid grandchild through the cgroup, the reaping of orphans,
 * the exit report following the last output byte, and the UTF-8 sanitizer
 * and output capture used for ExecuteCommands transcripts.
 *
 * The test process makes itself a child subreaper (prctl(2)), as agentd
 * does, so that the background children of a command become its children;
 * the table's SIGCHLD reaper reaps them.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "exec.h"

struct fixture {
	uv_loop_t loop;
	char root_path[64];
	struct resolve_root root;
	struct exec_table *table;
};

/* What one watcher of one process saw. */
struct result {
	uint8_t *out[EXEC_NSTREAMS];
	size_t len[EXEC_NSTREAMS];
	uint64_t next[EXEC_NSTREAMS]; /* offset the next event should have */
	size_t chunks;
	size_t max_chunk;             /* largest event asked for (0: 1 MiB) */
	bool contiguous;              /* every offset == bytes received before */
	uint64_t lost[EXEC_NSTREAMS]; /* bytes reported lost */
	uint64_t lost_at[EXEC_NSTREAMS];
	char order[64];               /* stream of the first events: "oeo..." */
	bool exited;
	struct exec_exit ex;
	struct exec_process *p;
	struct exec_watch *w;
	/* slow consumer: one event per timer tick */
	bool slow;
	uv_timer_t tick;
	bool tick_init;
	uv_loop_t *loop;              /* of tick */
	uint64_t exit_after_bytes;    /* bytes received when the exit came */
};

static void result_init(struct result *r)
{
	memset(r, 0, sizeof(*r));
	r->contiguous = true;
}

static void result_done(struct result *r)
{
	free(r->out[0]);
	free(r->out[1]);
	if (r->tick_init) {
		/* The handle lives in *r: let its close finish now. */
		uv_close((uv_handle_t *)&r->tick, NULL);
		uv_run(r->loop, UV_RUN_NOWAIT);
		r->tick_init = false;
	}
}

/* Take events; with @p one, at most one. False once NONE came. */
static bool drain(struct result *r, bool one)
{
	struct exec_event e;
	size_t n, s;

	do {
		switch (exec_watch_next(r->w, r->max_chunk ? r->max_chunk : 1024 * 1024, &e)) {
		case EXEC_EV_NONE:
			return false;
		case EXEC_EV_OUTPUT:
			s = e.stream;
			assert_true(e.len > 0);
			if (e.offset != r->next[s])
				r->contiguous = false;
			r->next[s] = e.offset + e.len;
			n = r->len[s] + e.len;
			r->out[s] = realloc(r->out[s], n + 1);
			assert_non_null(r->out[s]);
			memcpy(r->out[s] + r->len[s], e.data, e.len);
			r->len[s] = n;
			r->out[s][n] = 0;
			if (r->chunks < sizeof(r->order) - 1)
				r->order[r->chunks] = s ? 'e' : 'o';
			r->chunks++;
			break;
		case EXEC_EV_LOST:
			s = e.stream;
			assert_true(e.len > 0);
			if (e.offset != r->next[s])
				r->contiguous = false;
			r->lost[s] += e.len;
			r->lost_at[s] = e.offset;
			r->next[s] = e.offset + e.len;
			break;
		case EXEC_EV_EXITED:
			assert_false(r->exited);
			r->exited = true;
			r->ex = e.exit;
			r->exit_after_bytes = r->len[0] + r->len[1];
			exec_watch_free(r->w);
			r->w = NULL;
			return false;
		}
	} while (!one);
	return true;
}

static void on_tick(uv_timer_t *t)
{
	struct result *r = t->data;

	if (r->w && drain(r, true))
		uv_timer_start(&r->tick, on_tick, 1, 0);
}

static void on_ready(struct exec_watch *w, void *arg)
{
	struct result *r = arg;

	if (!r->slow)
		drain(r, false);
	else if (!uv_is_active((uv_handle_t *)&r->tick))
		uv_timer_start(&r->tick, on_tick, 1, 0);
}

static int watch(struct fixture *f, struct result *r, const uint64_t *from, unsigned flags)
{
	int err, s;

	for (s = 0; s < EXEC_NSTREAMS; s++)
		r->next[s] = from ? from[s] : 0;
	if (r->slow && !r->tick_init) {
		uv_timer_init(&f->loop, &r->tick);
		r->tick.data = r;
		r->tick_init = true;
		r->loop = &f->loop;
	}
	err = exec_watch_new(r->p, from, flags, on_ready, r, &r->w);
	if (err == 0 && !r->slow)
		drain(r, false);
	else if (err == 0)
		on_tick(&r->tick);
	return err;
}

static void run_until_exited(struct fixture *f, struct result *r)
{
	while (!r->exited)
		uv_run(&f->loop, UV_RUN_ONCE);
}

/* Spawn and watch from 0, losslessly. Returns what exec_spawn returned. */
static int spawn(struct fixture *f, const struct exec_spec *spec, struct result *r)
{
	int err = exec_spawn(f->table, spec, &r->p);

	if (err == 0)
		assert_int_equal(watch(f, r, NULL, EXEC_WATCH_LOSSLESS), 0);
	return err;
}

/* Spawn, run to the end, assert success of the spawn. */
static void run(struct fixture *f, const struct exec_spec *spec, struct result *r)
{
	result_init(r);
	assert_int_equal(spawn(f, spec, r), 0);
	assert_true(exec_pid(r->p) > 0);
	run_until_exited(f, r);
	assert_true(r->contiguous);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_nothing(uv_timer_t *t)
{
}

/* Run the loop for about @p ms milliseconds. */
static void run_ms(struct fixture *f, uint64_t ms)
{
	uv_timer_t t;
	uint64_t end = now_ms() + ms;

	uv_timer_init(&f->loop, &t);
	while (now_ms() < end) {
		uv_timer_start(&t, on_nothing, 5, 0);
		uv_run(&f->loop, UV_RUN_ONCE);
	}
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&f->loop, UV_RUN_NOWAIT);
}

static int setup_cfg(void **state, const struct exec_config *cfg)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	strcpy(f->root_path, "/tmp/test_exec.XXXXXX");
	assert_non_null(mkdtemp(f->root_path));
	assert_int_equal(resolve_root_open(f->root_path, &f->root), 0);
	assert_int_equal(exec_table_new(&f->loop, cfg, &f->table), 0);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_cfg(state, NULL);
}

/* A short exit-keep, at most 2 kept exits, a 4 KiB journal, cgroups on. */
static int setup_small(void **state)
{
	struct exec_config cfg = {
		.exit_keep_ms = 300,
		.max_kept = 2,
		.journal_bytes = 4096,
		.cgroups = true,
	};

	return setup_cfg(state, &cfg);
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	exec_table_free(f->table);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	close(f->root.fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root_path);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* Write @p n bytes of @p data to ROOT/@p name. */
static void put_file(struct fixture *f, const char *name, const void *data, size_t n)
{
	int fd = openat(f->root.fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
}

/* True while @p pid exists and is not a zombie. */
static bool alive(pid_t pid)
{
	char path[64], buf[512], *rp;
	FILE *fp;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fp = fopen(path, "re");
	if (!fp)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = 0;
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

/* Run the loop (so the reaper works) until @p pid is gone, up to 3 s. */
static void assert_gone(struct fixture *f, pid_t pid)
{
	uint64_t t0 = now_ms();

	while (now_ms() - t0 < 3000) {
		if (!alive(pid))
			return;
		run_ms(f, 10);
	}
	fail_msg("process %d survived", (int)pid);
}

static pid_t first_line_pid(const struct result *r)
{
	assert_non_null(r->out[0]);
	return (pid_t)atoi((const char *)r->out[0]);
}

/* ---- arguments, environment, stdin ---- */

static void test_argv_literal(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = { "printf", "%s|", "a b", "\"q\"", "$(echo hi)", ";", "x'y",
			       "`id`", "*", NULL };
	struct exec_spec spec = { .argv = argv, .cwd_fd = -1 };
	struct result r;

	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "a b|\"q\"|$(echo hi)|;|x'y|`id`|*|");
	assert_int_equal(r.len[1], 0);
	assert_int_equal(r.ex.code, 0);
	assert_int_equal(r.ex.signal, 0);
	assert_false(r.ex.timed_out);
	assert_int_equal(r.ex.killed_by, EXEC_NOT_KILLED);
	result_done(&r);
}

static void test_shell_positional(void **state)
{
	struct fixture *f = *state;
	const char *args[] = { "a b", "$(id)", ";rm -rf x", "'", NULL };
	struct exec_spec spec = {
		.shell = "printf '%s|' \"$@\"; echo \"$0 $#\"; exit 3",
		.args = args,
		.cwd_fd = -1,
	};
	struct result r;

	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "a b|$(id)|;rm -rf x|'|sh 4\n");
	assert_int_equal(r.ex.code, 3);
	result_done(&r);
}

static void test_env_override(void **state)
{
	struct fixture *f = *state;
	const char *env[] = { "WSB_T1=1", "WSB_T1=2", "HOME=/x y", "WSB_T2=a=b", NULL };
	struct exec_spec spec = {
		.shell = "echo \"$WSB_T1|$HOME|$WSB_T2|${PATH:+path}\"",
		.env = env,
		.cwd_fd = -1,
	};
	const char *bad[] = { "NOEQUALS", NULL };
	struct result r;

	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "2|/x y|a=b|path\n");
	result_done(&r);

	spec.env = bad;
	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), -EINVAL);
	assert_int_equal(exec_table_count(f->table), 1); /* the first, kept */
	assert_int_equal(exec_table_running(f->table), 0);
}

static void test_stdin_bytes_then_eof(void **state)
{
	struct fixture *f = *state;
	static const char in[] = "hello\0world\n";
	const char *argv[] = { "cat", NULL };
	struct exec_spec spec = {
		.argv = argv,
		.cwd_fd = -1,
		.stdin_data = in,
		.stdin_len = sizeof(in) - 1,
		.timeout_ms = 10000,
	};
	struct result r;

	run(f, &spec, &r);
	assert_int_equal(r.len[0], sizeof(in) - 1);
	assert_memory_equal(r.out[0], in, sizeof(in) - 1);
	assert_int_equal(r.ex.code, 0);
	assert_false(r.ex.timed_out);
	result_done(&r);
}

static void test_no_stdin_is_eof(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = { "cat", NULL };
	struct exec_spec spec = { .argv = argv, .cwd_fd = -1, .timeout_ms = 10000 };
	struct result r;
	uint64_t t0 = now_ms();

	run(f, &spec, &r);
	assert_int_equal(r.len[0], 0);
	assert_int_equal(r.ex.code, 0);
	assert_false(r.ex.timed_out);
	assert_true(now_ms() - t0 < 5000);
	result_done(&r);
	/* no stdin: nothing to write to */
	assert_int_equal(exec_write_stdin(r.p, "x", 1, false, NULL, NULL), -EPIPE);
}

static void test_stdin_not_read(void **state)
{
	struct fixture *f = *state;
	size_t n = 4 * 1024 * 1024;
	char *in = calloc(1, n);
	struct exec_spec spec = { .shell = "exit 7", .cwd_fd = -1, .stdin_data = in, .stdin_len = n };
	struct result r;

	assert_non_null(in);
	run(f, &spec, &r);
	assert_int_equal(r.ex.code, 7);
	free(in);
	result_done(&r);
}

struct written {
	int n, err[8];
};

static void on_written(int err, void *arg)
{
	struct written *w = arg;

	w->err[w->n++] = err;
}

static void test_stdin_chunks_then_eof(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "cat; echo end", .cwd_fd = -1, .stdin_data = "first ",
				  .stdin_len = 6, .stdin_open = true, .timeout_ms = 10000 };
	struct written w = { 0 };
	char *big = malloc(EXEC_STDIN_CHUNK_MAX + 1);
	struct result r;

	assert_non_null(big);
	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	assert_int_equal(exec_write_stdin(r.p, big, EXEC_STDIN_CHUNK_MAX + 1, false, NULL, NULL),
			 -E2BIG);
	assert_int_equal(exec_write_stdin(r.p, "second ", 7, false, on_written, &w), 0);
	assert_int_equal(exec_write_stdin(r.p, "third", 5, false, on_written, &w), 0);
	assert_int_equal(exec_write_stdin(r.p, NULL, 0, true, on_written, &w), 0);
	/* after EOF nothing more */
	assert_int_equal(exec_write_stdin(r.p, "x", 1, false, on_written, &w), -EPIPE);
	run_until_exited(f, &r);
	assert_string_equal((char *)r.out[0], "first second thirdend\n");
	assert_int_equal(w.n, 3);
	assert_int_equal(w.err[0], 0);
	assert_int_equal(w.err[1], 0);
	assert_int_equal(w.err[2], 0);
	free(big);
	result_done(&r);
}

static void test_stdin_closed_by_command(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "exec 0<&-; sleep 0.3", .cwd_fd = -1, .stdin_open = true };
	struct written w = { 0 };
	struct result r;
	int rc;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	run_ms(f, 100);
	/* -EPIPE now, or from the callback once the write failed */
	rc = exec_write_stdin(r.p, "x", 1, false, on_written, &w);
	if (rc == 0) {
		while (w.n == 0)
			uv_run(&f->loop, UV_RUN_ONCE);
		assert_int_equal(w.n, 1);
		assert_int_equal(w.err[0], -EPIPE);
	} else {
		assert_int_equal(rc, -EPIPE);
	}
	assert_int_equal(exec_write_stdin(r.p, "x", 1, false, on_written, &w), -EPIPE);
	run_until_exited(f, &r);
	result_done(&r);
}

/* ---- output ---- */

static void test_combined_output_in_order(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "echo out; echo err >&2; echo out2; echo err2 >&2",
		.cwd_fd = -1,
		.combine_output = true,
	};
	struct result r;

	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "out\nerr\nout2\nerr2\n");
	assert_int_equal(r.len[1], 0);
	result_done(&r);

	spec.combine_output = false;
	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "out\nout2\n");
	assert_string_equal((char *)r.out[1], "err\nerr2\n");
	result_done(&r);
}

/* Run the loop until @p p has exited (no watcher needed). */
static void wait_exited(struct fixture *f, struct exec_process *p)
{
	uint64_t t0 = now_ms();

	while (!exec_exited(p)) {
		assert_true(now_ms() - t0 < 20000);
		run_ms(f, 5);
	}
}

static void test_replay_keeps_arrival_order(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "echo o1; sleep 0.05; echo e1 >&2; sleep 0.05; echo o2; sleep 0.05; "
			 "echo e2 >&2; sleep 0.05; echo o3",
		.cwd_fd = -1,
	};
	struct result r;

	/* No watcher while it runs: the replay afterwards interleaves the two
	 * journals by arrival. */
	result_init(&r);
	assert_int_equal(exec_spawn(f->table, &spec, &r.p), 0);
	exec_ref(r.p);
	wait_exited(f, r.p);
	assert_int_equal(watch(f, &r, NULL, 0), 0);
	assert_true(r.exited);
	assert_string_equal(r.order, "oeoeo");
	assert_string_equal((char *)r.out[0], "o1\no2\no3\n");
	assert_string_equal((char *)r.out[1], "e1\ne2\n");
	exec_unref(r.p);
	result_done(&r);
}

static void burst(struct fixture *f, bool slow)
{
	size_t n = 1024 * 1024;
	uint8_t *data = malloc(n);
	struct exec_spec spec = { .shell = "cat burst.bin; cat burst.bin >&2" };
	struct result r;

	assert_non_null(data);
	srand(42);
	for (size_t i = 0; i < n; i++)
		data[i] = (uint8_t)rand();
	put_file(f, "burst.bin", data, n);
	spec.cwd_fd = exec_cwd_open(&f->root, "", 0);
	assert_true(spec.cwd_fd >= 0);

	result_init(&r);
	r.slow = slow;
	r.max_chunk = slow ? 8192 : 0;
	assert_int_equal(spawn(f, &spec, &r), 0);
	close(spec.cwd_fd);
	run_until_exited(f, &r);
	assert_true(r.contiguous);
	assert_int_equal(r.lost[0] + r.lost[1], 0);
	assert_int_equal(r.len[0], n);
	assert_int_equal(r.len[1], n);
	assert_memory_equal(r.out[0], data, n);
	assert_memory_equal(r.out[1], data, n);
	assert_int_equal(r.exit_after_bytes, 2 * n);
	assert_int_equal(r.ex.code, 0);
	if (slow)
		assert_true(r.chunks >= 2 * n / 8192);
	unlinkat(f->root.fd, "burst.bin", 0);
	free(data);
	result_done(&r);
}

static void test_burst_1mib(void **state)
{
	burst(*state, false);
}

static void test_burst_1mib_slow_consumer(void **state)
{
	burst(*state, true);
}

/* E2: a lossless watcher through a 4 KiB journal (setup_small) loses nothing. */
static void test_burst_1mib_slow_small_journal(void **state)
{
	burst(*state, true);
}

static void test_binary_output(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "printf '\\377\\000\\200abc'", .cwd_fd = -1 };
	struct result r;

	run(f, &spec, &r);
	assert_int_equal(r.len[0], 6);
	assert_memory_equal(r.out[0], "\377\000\200abc", 6);
	result_done(&r);
}

static void test_exit_waits_for_last_output(void **state)
{
	struct fixture *f = *state;
	/* The shell exits at once; a background child writes later. */
	struct exec_spec spec = { .shell = "(sleep 0.3; echo late) & echo early", .cwd_fd = -1 };
	struct result r;

	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "early\nlate\n");
	assert_int_equal(r.ex.code, 0);
	result_done(&r);
}

static void test_exit_status_and_signal(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "kill -USR1 $$", .cwd_fd = -1 };
	struct result r;

	run(f, &spec, &r);
	assert_int_equal(r.ex.signal, SIGUSR1);
	assert_int_equal(r.ex.code, 0);
	assert_false(r.ex.timed_out);
	assert_int_equal(r.ex.killed_by, EXEC_NOT_KILLED);
	result_done(&r);

	/* The child gets default signal dispositions although we ignore
	 * SIGPIPE: `yes | head` ends. */
	spec.shell = "yes | head -c 4";
	spec.timeout_ms = 10000;
	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "y\ny\n");
	assert_false(r.ex.timed_out);
	result_done(&r);
}

/* E3: replay from an offset; what fell out of the 4 KiB ring is reported. */
static void test_replay_from_offset_and_lost(void **state)
{
	struct fixture *f = *state;
	size_t n = 10000, i;
	uint8_t *data = malloc(n);
	struct exec_spec spec = { .shell = "cat data.bin" };
	uint64_t from[2] = { 9000, 0 }, past[2] = { 10001, 0 };
	struct exec_watch *w;
	struct result r1, r2;
	struct exec_process *p;

	assert_non_null(data);
	for (i = 0; i < n; i++)
		data[i] = (uint8_t)(i * 7 + i / 256);
	put_file(f, "data.bin", data, n);
	spec.cwd_fd = exec_cwd_open(&f->root, "", 0);
	assert_int_equal(exec_spawn(f->table, &spec, &p), 0);
	close(spec.cwd_fd);
	exec_ref(p); /* exit_keep is 300 ms here */
	wait_exited(f, p);

	result_init(&r1);
	r1.p = p;
	assert_int_equal(watch(f, &r1, NULL, 0), 0);
	assert_true(r1.exited);
	assert_true(r1.contiguous);
	assert_int_equal(r1.lost[0], n - 4096);
	assert_int_equal(r1.lost_at[0], 0);
	assert_int_equal(r1.len[0], 4096);
	assert_memory_equal(r1.out[0], data + n - 4096, 4096);

	result_init(&r2);
	r2.p = p;
	assert_int_equal(watch(f, &r2, from, 0), 0);
	assert_true(r2.exited);
	assert_true(r2.contiguous);
	assert_int_equal(r2.lost[0], 0);
	assert_int_equal(r2.len[0], n - 9000);
	assert_memory_equal(r2.out[0], data + 9000, n - 9000);

	assert_int_equal(exec_watch_new(p, past, 0, on_ready, &r2, &w), -ERANGE);
	exec_unref(p);
	unlinkat(f->root.fd, "data.bin", 0);
	free(data);
	result_done(&r1);
	result_done(&r2);
}

/* E2/E3: a second watcher attached mid-run from an offset gets exactly the
 * bytes from there, then the live tail, then the exit. */
static void test_attach_mid_run(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "i=0; while [ $i -lt 40 ]; do printf 'line %04d\\n' $i; i=$((i+1)); "
			 "sleep 0.01; done",
		.cwd_fd = -1,
	};
	char expect[512];
	uint64_t from[2] = { 25, 0 };
	struct result r1, r2;
	size_t i, n = 0;

	for (i = 0; i < 40; i++)
		n += (size_t)snprintf(expect + n, sizeof(expect) - n, "line %04zu\n", i);
	result_init(&r1);
	assert_int_equal(spawn(f, &spec, &r1), 0);
	while (r1.len[0] < 100)
		uv_run(&f->loop, UV_RUN_ONCE);
	assert_false(r1.exited);
	result_init(&r2);
	r2.p = r1.p;
	assert_int_equal(watch(f, &r2, from, 0), 0);
	run_until_exited(f, &r1);
	run_until_exited(f, &r2);
	assert_int_equal(r1.len[0], n);
	assert_memory_equal(r1.out[0], expect, n);
	assert_true(r2.contiguous);
	assert_int_equal(r2.lost[0], 0);
	assert_int_equal(r2.len[0], n - 25);
	assert_memory_equal(r2.out[0], expect + 25, n - 25);
	result_done(&r1);
	result_done(&r2);
}

/* ---- timeouts and kills ---- */

static void test_timeout_term_ignored(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "trap '' TERM; sleep 300 & echo $!; sleep 100",
		.cwd_fd = -1,
		.timeout_ms = 300,
		.grace_ms = 500,
	};
	struct result r;
	uint64_t t0 = now_ms(), dt;
	pid_t pid;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	pid = exec_pid(r.p);
	run_until_exited(f, &r);
	dt = now_ms() - t0;
	assert_true(r.ex.timed_out);
	assert_int_equal(r.ex.killed_by, EXEC_KILLED_TIMEOUT);
	assert_int_equal(r.ex.signal, SIGKILL);
	/* timeout + grace, not the 100 s sleep */
	assert_true(dt >= 300 + 500 - 50);
	assert_true(dt < 300 + 2 * 500 + 1000);
	assert_gone(f, first_line_pid(&r));
	assert_gone(f, pid);
	result_done(&r);
}

static void test_timeout_term_kills_group(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "sleep 300 & echo $!; sleep 300",
		.cwd_fd = -1,
		.timeout_ms = 200,
	};
	struct result r;
	uint64_t t0 = now_ms();

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	run_until_exited(f, &r);
	assert_true(r.ex.timed_out);
	assert_int_equal(r.ex.signal, SIGTERM);
	assert_true(now_ms() - t0 < 200 + EXEC_KILL_GRACE_MS);
	assert_gone(f, first_line_pid(&r));
	result_done(&r);
}

static void test_idle_timeout(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "echo a; sleep 0.2; echo b; sleep 100",
		.cwd_fd = -1,
		.idle_timeout_ms = 700,
	};
	struct result r;
	uint64_t t0 = now_ms(), dt;

	run(f, &spec, &r);
	dt = now_ms() - t0;
	assert_string_equal((char *)r.out[0], "a\nb\n");
	assert_true(r.ex.timed_out);
	assert_int_equal(r.ex.killed_by, EXEC_KILLED_IDLE);
	assert_int_equal(r.ex.signal, SIGTERM);
	assert_true(dt >= 900 - 50 && dt < 4000);
	result_done(&r);

	/* Output every 0.1 s keeps it alive past the idle time. */
	spec.shell = "for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.1; done";
	run(f, &spec, &r);
	assert_false(r.ex.timed_out);
	assert_int_equal(r.ex.code, 0);
	assert_int_equal(r.ex.killed_by, EXEC_NOT_KILLED);
	result_done(&r);
}

static void on_ready_stalled(struct exec_watch *w, void *arg)
{
}

/* A command blocked on a lossless reader that does not read is not idle. */
static void test_idle_not_while_paused(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "head -c 3000000 /dev/zero",
		.cwd_fd = -1,
		.idle_timeout_ms = 1000,
	};
	struct result r;

	result_init(&r);
	assert_int_equal(exec_spawn(f->table, &spec, &r.p), 0);
	assert_int_equal(exec_watch_new(r.p, NULL, EXEC_WATCH_LOSSLESS, on_ready_stalled, &r, &r.w),
			 0);
	run_ms(f, 2500); /* paused all along: far beyond the idle time */
	assert_false(exec_exited(r.p));
	/* now a reader that keeps up, from 0 (all of it still in the journal) */
	exec_watch_free(r.w);
	assert_int_equal(watch(f, &r, NULL, EXEC_WATCH_LOSSLESS), 0);
	run_until_exited(f, &r);
	assert_false(r.ex.timed_out);
	assert_int_equal(r.ex.code, 0);
	assert_int_equal(r.len[0], 3000000);
	result_done(&r);
}

static void on_kill_timer(uv_timer_t *t)
{
	struct result *r = t->data;

	exec_kill(r->p, EXEC_KILLED_DETACHED);
	exec_kill(r->p, EXEC_KILLED_SHUTDOWN); /* idempotent; the first reason stays */
}

static void test_kill_while_paused(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "echo $$; sleep 300 & yes", .cwd_fd = -1 };
	struct result r;
	uv_timer_t t;
	pid_t pid;

	result_init(&r);
	assert_int_equal(exec_spawn(f->table, &spec, &r.p), 0);
	pid = exec_pid(r.p);
	/* A lossless watcher that never reads: `yes` fills the journal up to
	 * the high-water mark, reading pauses, the pipe fills, yes blocks. */
	assert_int_equal(exec_watch_new(r.p, NULL, EXEC_WATCH_LOSSLESS, on_ready_stalled, &r, &r.w),
			 0);
	uv_timer_init(&f->loop, &t);
	t.data = &r;
	uv_timer_start(&t, on_kill_timer, 300, 0);
	wait_exited(f, r.p);
	drain(&r, false);
	assert_true(r.exited);
	assert_true(r.contiguous);
	assert_int_equal(r.ex.killed_by, EXEC_KILLED_DETACHED);
	assert_false(r.ex.timed_out);
	assert_int_equal(r.ex.signal, SIGKILL);
	/* paused at about 1 MiB of a 4 MiB journal */
	assert_true(r.len[0] >= 1024 * 1024 && r.len[0] <= 1024 * 1024 + EXEC_READ_CHUNK);
	assert_gone(f, pid);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&f->loop, UV_RUN_NOWAIT);
	result_done(&r);
}

static void test_process_limit(void **state)
{
	struct fixture *f = *state;
	struct exec_config cfg = { .max_running = 1 };
	struct exec_table *small;
	const char *argv[] = { "sleep", "300", NULL };
	struct exec_spec spec = { .argv = argv, .cwd_fd = -1 };
	struct exec_process *p1, *p2;
	struct result r;

	assert_int_equal(exec_table_new(&f->loop, &cfg, &small), 0);
	assert_int_equal(exec_table_max(small), 1);
	result_init(&r);
	assert_int_equal(exec_spawn(small, &spec, &p1), 0);
	assert_int_equal(exec_spawn(small, &spec, &p2), -EAGAIN);
	assert_int_equal(exec_table_running(small), 1);
	r.p = p1;
	assert_int_equal(watch(f, &r, NULL, 0), 0);
	exec_table_free(small); /* kills p1; freed with it */
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_true(r.exited);
	assert_int_equal(r.ex.killed_by, EXEC_KILLED_SHUTDOWN);
	assert_int_equal(r.ex.signal, SIGKILL);
	result_done(&r);
}

/* E1: a signal reaches the whole tree, a setsid grandchild through the
 * cgroup where this kernel lets us make one (setup_small enables cgroups). */
static void test_signal_tree(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "setsid sleep 300 & echo $!; sleep 300 & sleep 300",
		.cwd_fd = -1,
	};
	char path[64], buf[512] = "";
	struct result r;
	pid_t gc;
	FILE *fp;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	exec_ref(r.p);
	while (!r.out[0] || !strchr((char *)r.out[0], '\n'))
		uv_run(&f->loop, UV_RUN_ONCE);
	gc = first_line_pid(&r);
	run_ms(f, 100);
	assert_int_equal(exec_signal(r.p, 0), -EINVAL);
	assert_int_equal(exec_signal(r.p, _NSIG), -EINVAL);
	assert_int_equal(exec_signal(r.p, SIGTERM), 0);
	run_until_exited(f, &r);
	assert_int_equal(r.ex.signal, SIGTERM);
	assert_int_equal(r.ex.killed_by, EXEC_KILLED_SIGNAL_CALL);
	assert_int_equal(exec_signal(r.p, SIGTERM), -ESRCH);
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)gc);
	fp = fopen(path, "re");
	if (fp) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, fp);

		buf[n] = 0;
		fclose(fp);
	}
	if (alive(gc) && !strstr(buf, "wsbridge-agentd")) {
		/* No cgroup here: the setsid grandchild escaped the group. */
		kill(gc, SIGKILL);
		print_message("# no cgroup v2 for commands here: only the group was signalled\n");
	}
	assert_gone(f, gc);
	exec_unref(r.p);
	result_done(&r);
}

/*
 * A command that ended, leaving a job holding its output (`sleep 300 &`), is
 * released linger_ms after its exit: the watcher is woken, exec_output_held()
 * gives the shell's own status, and the job runs on past the command's
 * timeout. A Signal then still reaches it: it is in the leader's process
 * group, which a cgroup member of that group must not be skipped for once
 * the leader is gone (setup_small: cgroups on where the kernel allows).
 */
static void test_released_then_signalled(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "sleep 300 & echo $!; exit 3",
		.cwd_fd = -1,
		.timeout_ms = 600,
		.linger_ms = 100,
	};
	struct exec_exit ex = { 0 };
	struct result r;
	uint64_t t0;
	pid_t job;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	exec_ref(r.p);
	t0 = now_ms();
	while (!exec_output_held(r.p, &ex) && now_ms() - t0 < 3000)
		run_ms(f, 10);
	assert_true(exec_output_held(r.p, &ex));
	assert_int_equal(ex.code, 3);
	assert_int_equal(ex.signal, 0);
	assert_false(r.exited);
	job = first_line_pid(&r);
	run_ms(f, 900); /* past timeout_ms: released, not killed */
	assert_true(alive(job));
	assert_false(r.exited);
	assert_int_equal(exec_signal(r.p, SIGTERM), 0);
	t0 = now_ms();
	while (!r.exited && now_ms() - t0 < 3000)
		run_ms(f, 10);
	assert_true(r.exited);
	assert_gone(f, job);
	assert_int_equal(r.ex.code, 3);
	assert_false(exec_output_held(r.p, &ex));
	exec_unref(r.p);
	result_done(&r);
}

/* Without linger_ms the exit waits for the job's EOF, as ssh(1)'s does. */
static void test_no_linger_waits_for_output(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "sleep 0.4 & exit 0",
		.cwd_fd = -1,
	};
	struct result r;
	uint64_t t0 = now_ms();

	run(f, &spec, &r);
	assert_true(now_ms() - t0 >= 380);
	result_done(&r);
}

/*
 * Out of descriptors, a start fails (EMFILE) rather than run the command
 * without the cgroup its tree kill relies on: at every count of free
 * descriptors from 0 to 12 (the start needs about 9 with a cgroup), a
 * command that starts is in its own cgroup. Where this kernel gives
 * commands no cgroup, skipped.
 */
static void test_spawn_fd_pressure(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = { "cat", "/proc/self/cgroup", NULL };
	struct exec_spec spec = { .argv = argv, .cwd_fd = -1 };
	struct rlimit old, lim;
	int fill[256], nfill, k, i, r, lowest, failed = 0, started = 0;
	struct result res;
	bool in_cg;

	result_init(&res);
	assert_int_equal(spawn(f, &spec, &res), 0);
	run_until_exited(f, &res);
	in_cg = res.out[0] && memmem(res.out[0], res.len[0], "/cmd-", 5);
	result_done(&res);
	if (!in_cg) {
		print_message("# no cgroup v2 for commands here\n");
		skip();
	}
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	lowest = dup(0);
	assert_true(lowest >= 0);
	close(lowest);
	lim = old;
	lim.rlim_cur = (rlim_t)lowest + 128;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
	for (k = 0; k <= 12; k++) {
		for (nfill = 0; nfill < 256; nfill++) {
			fill[nfill] = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (fill[nfill] < 0)
				break;
		}
		assert_true(nfill < 256 && nfill >= k);
		for (i = 0; i < k; i++)
			close(fill[--nfill]);
		result_init(&res);
		r = spawn(f, &spec, &res);
		for (i = 0; i < nfill; i++)
			close(fill[i]);
		if (r < 0) {
			if (r != -EMFILE && r != -ENFILE)
				fail_msg("%d free descriptors: start failed with %d", k, r);
			failed++;
		} else {
			run_until_exited(f, &res);
			if (!res.out[0] || !memmem(res.out[0], res.len[0], "/cmd-", 5))
				fail_msg("%d free descriptors: the command ran outside its cgroup", k);
			started++;
		}
		result_done(&res);
	}
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_true(failed > 0 && started > 0);
}

/* One Signal is one delivery, although the group and the cgroup overlap. */
static void test_signal_delivered_once(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "trap 'echo usr1' USR1; echo ready; while :; do sleep 0.05; done",
		.cwd_fd = -1,
	};
	struct result r;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	while (!r.out[0] || !strstr((char *)r.out[0], "ready\n"))
		uv_run(&f->loop, UV_RUN_ONCE);
	assert_int_equal(exec_signal(r.p, SIGUSR1), 0);
	run_ms(f, 500);
	exec_kill(r.p, EXEC_KILLED_DETACHED);
	run_until_exited(f, &r);
	assert_string_equal((char *)r.out[0], "ready\nusr1\n");
	assert_int_equal(r.ex.killed_by, EXEC_KILLED_DETACHED);
	result_done(&r);
}

/*
 * Without a cgroup, a command whose shell was reaped while a setsid'd child
 * holds its output open is RUNNING; once its group has emptied, another
 * process given the shell's pid can make a group of that number (a command
 * started after). Signal of the first must not reach that group: it killed
 * it. @shell prints the setsid'd child's pid first, then, with @member, the
 * pid of a member of the group that outlives the shell a while. @other is
 * what gets the number, in a group of its own; it leaves that group
 * populated (a process of it) until killed. The pid is handed out with
 * /proc/sys/kernel/ns_last_pid (root); skipped where it cannot be.
 */
/* Complete lines of stdout so far. */
static unsigned lines(const struct result *r)
{
	unsigned n = 0;

	for (const char *s = (const char *)r->out[0]; s && (s = strchr(s, '\n')); s++)
		n++;
	return n;
}

static void signal_reused_group(struct fixture *f, const char *shell, bool member,
				char *const other_argv[])
{
	struct exec_spec spec = { .shell = shell, .cwd_fd = -1 };
	char path[64];
	struct result r;
	posix_spawnattr_t attr;
	pid_t leader, gc, other = -1;
	uint64_t t0;
	int tries, fd;

	/* its own group, of its pid's number */
	posix_spawnattr_init(&attr);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
	posix_spawnattr_setpgroup(&attr, 0);
	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	exec_ref(r.p);
	leader = exec_pid(r.p);
	while (lines(&r) < (member ? 2 : 1))
		uv_run(&f->loop, UV_RUN_ONCE);
	gc = first_line_pid(&r);
	snprintf(path, sizeof(path), "/proc/%d", (int)leader);
	if (member) /* the group empties once the member is reaped */
		snprintf(path, sizeof(path), "/proc/%d",
			 atoi(strchr((char *)r.out[0], '\n') + 1));
	t0 = now_ms();
	while ((access(path, F_OK) == 0 || kill(leader, 0) == 0) && now_ms() - t0 < 5000)
		run_ms(f, 10); /* until the reaper reaped the shell (and the member) */
	assert_int_not_equal(access(path, F_OK), 0);
	assert_false(r.exited); /* gc holds its stdout: RUNNING */
	for (tries = 0; tries < 50 && other != leader; tries++) {
		fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || dprintf(fd, "%d", (int)leader - 1) < 0) {
			if (fd >= 0)
				close(fd);
			break;
		}
		close(fd);
		assert_int_equal(posix_spawnp(&other, other_argv[0], NULL, &attr, other_argv, environ),
				 0);
		if (other != leader) {
			kill(other, SIGKILL);
			run_ms(f, 20); /* the reaper takes it */
		}
	}
	posix_spawnattr_destroy(&attr);
	if (other != leader) {
		kill(gc, SIGKILL);
		exec_kill(r.p, EXEC_KILLED_DETACHED);
		run_until_exited(f, &r);
		exec_unref(r.p);
		result_done(&r);
		print_message("# cannot hand out a pid here (ns_last_pid)\n");
		skip();
	}
	run_ms(f, 200); /* other may have exited and been reaped, its group living on */
	assert_int_equal(kill(-leader, 0), 0);
	assert_int_equal(exec_signal(r.p, SIGKILL), 0);
	run_ms(f, 100);
	assert_int_equal(kill(-leader, 0), 0); /* the other group was not signalled */
	kill(-leader, SIGKILL);
	kill(gc, SIGKILL);
	run_until_exited(f, &r);
	exec_unref(r.p);
	result_done(&r);
}

/* The group is empty when the shell is reaped; a plain process takes the
 * number. */
static void test_signal_not_a_reused_group(void **state)
{
	char a0[] = "sleep", a1[] = "300", *argv[] = { a0, a1, NULL };

	signal_reused_group(*state, "setsid sleep 300 & echo $!", false, argv);
}

/* The group outlives the shell (a member exits later, reaped as an orphan);
 * the number goes to a shell that leaves a child in its group and exits:
 * at the Signal nothing has the pid and the group is populated. */
static void test_signal_not_a_reused_group_later(void **state)
{
	char a0[] = "sh", a1[] = "-c", a2[] = "sleep 300 >/dev/null 2>&1 & exit 0";
	char *argv[] = { a0, a1, a2, NULL };

	signal_reused_group(*state,
			    "setsid sleep 300 & echo $!; sleep 0.3 >/dev/null 2>&1 & echo $!", true,
			    argv);
}

/* The reaper reaps an orphan re-parented to us (a subreaper, as agentd). */
static void test_reap_orphan(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "sh -c 'sleep 0.3 >/dev/null & echo $!'", .cwd_fd = -1 };
	struct result r;
	uint64_t t0;
	pid_t orphan;

	run(f, &spec, &r);
	orphan = first_line_pid(&r);
	assert_true(orphan > 0);
	t0 = now_ms();
	/* gone entirely (not even a zombie) once the reaper waited for it */
	while (kill(orphan, 0) == 0 && now_ms() - t0 < 3000)
		run_ms(f, 10);
	assert_int_equal(kill(orphan, 0), -1);
	assert_int_equal(errno, ESRCH);
	result_done(&r);
}

/* ---- the table: tags, info, keeping exits ---- */

static void test_tags_and_info(void **state)
{
	struct fixture *f = *state;
	const char *args[] = { "x y", NULL };
	struct exec_spec spec = { .shell = "echo \"$1\"; echo e >&2", .args = args, .tag = "build-1" };
	struct exec_spec dup = { .shell = "true", .tag = "build-1", .cwd_fd = -1 };
	char long_tag[EXEC_TAG_MAX + 2];
	struct exec_process *p, *q;
	struct exec_info in;
	struct result r;

	assert_int_equal(exec_tag_check("a"), 0);
	assert_int_equal(exec_tag_check("job.1_x-y"), 0);
	assert_int_equal(exec_tag_check(""), -EINVAL);
	assert_int_equal(exec_tag_check("123"), -EINVAL);
	assert_int_equal(exec_tag_check("a b"), -EINVAL);
	assert_int_equal(exec_tag_check("caf\xc3\xa9"), -EINVAL);
	memset(long_tag, 'a', sizeof(long_tag) - 1);
	long_tag[sizeof(long_tag) - 1] = 0;
	assert_int_equal(exec_tag_check(long_tag), -EINVAL);
	long_tag[EXEC_TAG_MAX] = 0;
	assert_int_equal(exec_tag_check(long_tag), 0);

	assert_int_equal(mkdirat(f->root.fd, "d", 0755), 0);
	spec.cwd_fd = exec_cwd_open(&f->root, "d", 1);
	spec.cwd_name = "d";
	spec.cwd_len = 1;
	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	close(spec.cwd_fd);
	p = r.p;
	exec_get_info(p, &in);
	assert_int_equal(in.state, EXEC_RUNNING);
	assert_true(in.id > 0);
	assert_int_equal(in.pid, exec_pid(p));
	assert_string_equal(in.tag, "build-1");
	assert_int_equal(in.argc, 5);
	assert_string_equal(in.argv[0], "/bin/sh");
	assert_string_equal(in.argv[1], "-c");
	assert_string_equal(in.argv[3], "sh");
	assert_string_equal(in.argv[4], "x y");
	assert_int_equal(in.cwd_len, 1);
	assert_memory_equal(in.cwd, "d", 1);
	assert_true(in.start_ns > 1000000000LL * 1600000000LL);
	assert_int_equal(in.end_ns, 0);
	assert_false(in.pty);

	assert_int_equal(exec_spawn(f->table, &dup, &q), -EEXIST);
	dup.tag = "12";
	assert_int_equal(exec_spawn(f->table, &dup, &q), -EINVAL);
	assert_ptr_equal(exec_find_tag(f->table, "build-1"), p);
	assert_ptr_equal(exec_find(f->table, exec_id(p)), p);
	assert_null(exec_find_tag(f->table, "nope"));
	assert_null(exec_find(f->table, 9999));

	run_until_exited(f, &r);
	exec_get_info(p, &in);
	assert_int_equal(in.state, EXEC_EXITED);
	assert_true(in.end_ns >= in.start_ns);
	assert_int_equal(in.bytes[0], 4);
	assert_int_equal(in.bytes[1], 2);
	/* still kept: the tag stays taken */
	dup.tag = "build-1";
	assert_int_equal(exec_spawn(f->table, &dup, &q), -EEXIST);
	dup.tag = "other";
	assert_int_equal(exec_spawn(f->table, &dup, &q), 0);
	/* id order */
	assert_ptr_equal(exec_table_next(f->table, NULL), p);
	assert_ptr_equal(exec_table_next(f->table, p), q);
	assert_null(exec_table_next(f->table, q));
	assert_true(exec_id(q) > exec_id(p));
	result_done(&r);
}

/*
 * A stale cmd-<id> killed through cgroup.kill (an earlier table of this
 * process leaves one when an unreaped zombie kept it busy) does not kill
 * the next command of that id: Linux SIGKILLs a child cloned into a killed
 * cgroup with CLONE_INTO_CGROUP. Skipped without cgroups.
 */
static void test_stale_killed_cgroup(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = { "cat", "/proc/self/cgroup", NULL };
	struct exec_spec cat = { .argv = argv, .cwd_fd = -1 };
	struct exec_spec seven = { .shell = "exit 7", .cwd_fd = -1 };
	char mnt[256] = "", dir[512], line[1024], *cg, *nl, *sep;
	struct result r;
	FILE *fp;
	int fd;

	run(f, &cat, &r); /* id 1: cmd-1 */
	cg = r.out[0] ? strstr((char *)r.out[0], "0::/") : NULL;
	nl = cg ? strstr(cg, "/cmd-1\n") : NULL;
	fp = fopen("/proc/self/mountinfo", "re");
	assert_non_null(fp);
	while (!mnt[0] && fgets(line, sizeof(line), fp)) {
		char root[256], point[256];

		sep = strstr(line, " - cgroup2 ");
		if (sep && sscanf(line, "%*s %*s %*s %255s %255s", root, point) == 2 &&
		    strcmp(root, "/") == 0)
			strcpy(mnt, point);
	}
	fclose(fp);
	if (!nl || !mnt[0]) {
		result_done(&r);
		print_message("# no cgroup v2 for commands here\n");
		skip();
	}
	/* cmd-2, as an earlier table left it: killed */
	snprintf(dir, sizeof(dir), "%s%.*s/cmd-2", mnt, (int)(nl - cg - 3), cg + 3);
	result_done(&r);
	assert_int_equal(mkdir(dir, 0755), 0);
	strcat(dir, "/cgroup.kill");
	fd = open(dir, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "1", 1), 1);
	close(fd);
	run(f, &seven, &r); /* id 2: cmd-2 */
	assert_int_equal(r.ex.signal, 0);
	assert_int_equal(r.ex.code, 7);
	result_done(&r);
}

/* E8: the exit status is kept for exit_keep_ms (300 ms in setup_small). */
static void test_exit_kept_then_dropped(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "exit 7", .cwd_fd = -1, .tag = "seven" };
	struct exec_info in;
	struct result r;
	uint64_t id;

	run(f, &spec, &r);
	id = exec_id(r.p);
	assert_int_equal(r.ex.code, 7);
	run_ms(f, 100);
	assert_non_null(exec_find(f->table, id));
	exec_get_info(exec_find(f->table, id), &in);
	assert_int_equal(in.state, EXEC_EXITED);
	assert_int_equal(in.exit.code, 7);
	run_ms(f, 400);
	assert_null(exec_find(f->table, id));
	assert_null(exec_find_tag(f->table, "seven"));
	assert_int_equal(exec_table_count(f->table), 0);
	result_done(&r);
}

/* At most max_kept (2 in setup_small) exits are kept: the oldest go. */
static void test_max_kept(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "true", .cwd_fd = -1 };
	uint64_t id[3];
	struct result r;
	int i;

	for (i = 0; i < 3; i++) {
		run(f, &spec, &r);
		id[i] = exec_id(r.p);
		result_done(&r);
	}
	assert_null(exec_find(f->table, id[0]));
	assert_non_null(exec_find(f->table, id[1]));
	assert_non_null(exec_find(f->table, id[2]));
	assert_int_equal(exec_table_count(f->table), 2);
}

/* ---- PTY ---- */

static void test_pty(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "stty size; [ -t 0 ] && [ -t 1 ] && echo tty; echo \"$TERM\"; "
			 "read x; echo \"got $x\"; stty size",
		.cwd_fd = -1,
		.pty = true,
		.rows = 30,
		.cols = 100,
		.stdin_open = true,
		.timeout_ms = 10000,
	};
	const char *argv[] = { "true", NULL };
	struct exec_spec plain = { .argv = argv, .cwd_fd = -1 };
	struct exec_process *q;
	struct written w = { 0 };
	struct exec_info in;
	struct result r;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	while (!r.out[0] || !strstr((char *)r.out[0], "xterm-256color\r\n"))
		uv_run(&f->loop, UV_RUN_ONCE);
	assert_string_equal((char *)r.out[0], "30 100\r\ntty\r\nxterm-256color\r\n");
	assert_int_equal(exec_resize(r.p, 0, 10), -EINVAL);
	assert_int_equal(exec_resize(r.p, 40, 120), 0);
	assert_int_equal(exec_write_stdin(r.p, "hi\n", 3, false, on_written, &w), 0);
	run_until_exited(f, &r);
	/* the terminal echoes the input; stdout and stderr are both the tty */
	assert_string_equal((char *)r.out[0],
			    "30 100\r\ntty\r\nxterm-256color\r\nhi\r\ngot hi\r\n40 120\r\n");
	assert_int_equal(r.len[1], 0);
	assert_int_equal(r.ex.code, 0);
	assert_int_equal(w.n, 1);
	assert_int_equal(w.err[0], 0);
	exec_get_info(r.p, &in);
	assert_true(in.pty);
	assert_int_equal(exec_resize(r.p, 10, 10), -ESRCH);
	result_done(&r);

	/* Without stdin_open the terminal reads EOF (VEOF) at once. */
	spec.shell = "cat; echo done";
	spec.stdin_open = false;
	spec.term = "vt100";
	run(f, &spec, &r);
	assert_string_equal((char *)r.out[0], "done\r\n");
	result_done(&r);

	assert_int_equal(exec_spawn(f->table, &plain, &q), 0);
	assert_int_equal(exec_resize(q, 10, 10), -ENOTTY);
}

/* ---- spawn errors and working directory ---- */

static void test_spawn_errors(void **state)
{
	struct fixture *f = *state;
	const char *missing[] = { "wsb-no-such-program", NULL };
	const char *noexec[] = { "./noexec.sh", NULL };
	static char longname[NAME_MAX + 2];
	const char *empty[] = { "", NULL }, *toolong[] = { longname, NULL };
	struct exec_spec spec = { .argv = missing, .cwd_fd = -1 };
	struct result r;
	int fd;

	memset(longname, 'x', NAME_MAX + 1);
	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), -ENOENT);
	/* "" is no program (execvp(3): ENOENT), not the first PATH
	 * directory (which execve(2) refuses with EACCES) */
	spec.argv = empty;
	assert_int_equal(spawn(f, &spec, &r), -ENOENT);
	/* a name longer than NAME_MAX: ENAMETOOLONG, as execvp(3) */
	spec.argv = toolong;
	assert_int_equal(spawn(f, &spec, &r), -ENAMETOOLONG);

	fd = openat(f->root.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	close(openat(fd, "noexec.sh", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	spec.argv = noexec;
	spec.cwd_fd = exec_cwd_open(&f->root, "/", 1);
	assert_true(spec.cwd_fd >= 0);
	assert_int_equal(spawn(f, &spec, &r), -EACCES);
	close(spec.cwd_fd);
	unlinkat(fd, "noexec.sh", 0);
	close(fd);

	/* neither or both of argv and shell */
	spec.argv = NULL;
	spec.cwd_fd = -1;
	assert_int_equal(spawn(f, &spec, &r), -EINVAL);
	spec.argv = missing;
	spec.shell = "true";
	assert_int_equal(spawn(f, &spec, &r), -EINVAL);
	/* a PTY too large */
	spec.argv = NULL;
	spec.pty = true;
	spec.rows = 70000;
	assert_int_equal(spawn(f, &spec, &r), -EINVAL);
	spec.pty = false;
	spec.rows = 0;
	spec.shell = NULL;
	/* what execve(2) cannot take fails before a child walks PATH with it
	 * (a PATH of 20 MB of ':' held the loop for 22 s): one string of
	 * MAX_ARG_STRLEN bytes with its NUL, 131071 passes ... */
	{
		size_t n = EXEC_ARG_STRLEN_MAX + 16, i;
		char *big = malloc(n), *many[24];
		const char *one[] = { big, NULL };

		assert_non_null(big);
		memcpy(big, "PATH=", 5);
		memset(big + 5, ':', n - 5);
		big[EXEC_ARG_STRLEN_MAX] = '\0';
		spec.env = one;
		spec.argv = missing;
		assert_int_equal(spawn(f, &spec, &r), -E2BIG);
		big[EXEC_ARG_STRLEN_MAX - 1] = '\0';
		assert_int_equal(spawn(f, &spec, &r), -ENOENT);
		/* ... and all of them within ARG_MAX (2 MiB here) */
		for (i = 0; i < 23; i++) {
			many[i] = malloc(100000);
			assert_non_null(many[i]);
			snprintf(many[i], 16, "X%zu=", i);
			memset(many[i] + strlen(many[i]), 'y', 100000 - 1 - strlen(many[i]));
			many[i][99999] = '\0';
		}
		many[23] = NULL;
		spec.env = (const char *const *)many;
		assert_int_equal(spawn(f, &spec, &r),
				 sysconf(_SC_ARG_MAX) < 2300000 ? -E2BIG : -ENOENT);
		spec.env = NULL;
		for (i = 0; i < 23; i++)
			free(many[i]);
		free(big);
	}
	run_ms(f, 50);
	assert_int_equal(exec_table_count(f->table), 0);
	assert_int_equal(exec_table_running(f->table), 0);
}

static void test_cwd(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = { "pwd", "-P", NULL };
	struct exec_spec spec = { .argv = argv };
	char expect[256];
	struct result r;

	assert_int_equal(mkdirat(f->root.fd, "sub dir", 0755), 0);
	assert_int_equal(symlinkat("/etc", f->root.fd, "out"), 0);
	assert_int_equal(exec_cwd_open(&f->root, "../", 3), -EXDEV);
	assert_int_equal(exec_cwd_open(&f->root, "sub dir/../..", 13), -EXDEV);
	assert_int_equal(exec_cwd_open(&f->root, "out", 3), -EXDEV);
	assert_int_equal(exec_cwd_open(&f->root, "missing", 7), -ENOENT);
	assert_int_equal(exec_cwd_open(&f->root, "a\0b", 3), -EINVAL);

	spec.cwd_fd = exec_cwd_open(&f->root, "/sub dir", 8);
	assert_true(spec.cwd_fd >= 0);
	run(f, &spec, &r);
	close(spec.cwd_fd);
	snprintf(expect, sizeof(expect), "%s/sub dir\n", f->root_path);
	assert_string_equal((char *)r.out[0], expect);
	result_done(&r);
	unlinkat(f->root.fd, "out", 0);
	unlinkat(f->root.fd, "sub dir", AT_REMOVEDIR);
}

/* ---- UTF-8 sanitizer ---- */

#define FFFD "\xEF\xBF\xBD"

static void check_utf8_nul(const char *in, size_t len, const char *expect, bool replace_nul);

static void check_utf8(const char *in, size_t len, const char *expect)
{
	check_utf8_nul(in, len, expect, false);
}

static void check_utf8_nul(const char *in, size_t len, const char *expect, bool replace_nul)
{
	char *out = malloc(3 * len + 1);
	size_t n;

	assert_non_null(out);
	n = exec_utf8_sanitize(in, len, out, replace_nul);
	out[n] = 0;
	assert_int_equal(n, strlen(expect));
	assert_memory_equal(out, expect, n);
	free(out);
}


static void test_utf8_sanitize(void **state)
{
	/* well-formed: unchanged, NUL included */
	check_utf8("", 0, "");
	check_utf8("abc", 3, "abc");
	{
		char out[9];

		assert_int_equal(exec_utf8_sanitize("a\0b", 3, out, false), 3);
		assert_memory_equal(out, "a\0b", 3);
	}
	check_utf8_nul("a\0b", 3, "a" FFFD "b", true);
	check_utf8_nul("\0\xC3\0", 3, FFFD FFFD FFFD, true);
	check_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9, "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
	check_utf8("\xEF\xBF\xBF\xF4\x8F\xBF\xBF", 7, "\xEF\xBF\xBF\xF4\x8F\xBF\xBF");
	/* a lone continuation byte, bytes that never occur */
	check_utf8("a\x80z", 3, "a" FFFD "z");
	check_utf8("\xFF\xFE", 2, FFFD FFFD);
	/* overlong forms: C0/C1 never start, E0 80.. and F0 80.. fail at byte 2 */
	check_utf8("\xC0\xAF", 2, FFFD FFFD);
	check_utf8("\xE0\x80\xAF", 3, FFFD FFFD FFFD);
	check_utf8("\xF0\x80\x80\xAF", 4, FFFD FFFD FFFD FFFD);
	/* surrogates (ED A0..BF) and above U+10FFFF (F4 90.., F5..) */
	check_utf8("\xED\xA0\x80", 3, FFFD FFFD FFFD);
	check_utf8("\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
	check_utf8("\xF5\x80", 2, FFFD FFFD);
	/* truncated sequences: one U+FFFD per maximal subpart */
	check_utf8("\xE2\x82", 2, FFFD);
	check_utf8("\xE2\x82z", 3, FFFD "z");
	check_utf8("\xF0\x9F\x98", 3, FFFD);
	check_utf8("\xF0\x9F\x98\xE2\x82\xAC", 6, FFFD "\xE2\x82\xAC");
	check_utf8("\xE2\x28\xA1", 3, FFFD "(" FFFD);
	check_utf8("\xC3", 1, FFFD);
}

/* ---- capture ---- */

static void check_capture(size_t max, const char *in, size_t step, const char *head,
			  const char *tail, uint64_t omitted)
{
	struct exec_capture c;
	size_t len = strlen(in), i, n, h;
	uint8_t out[256];

	assert_int_equal(exec_capture_init(&c, max), 0);
	for (i = 0; i < len; i += n) {
		n = len - i < step ? len - i : step;
		exec_capture_add(&c, in + i, n);
	}
	assert_int_equal(exec_capture_omitted(&c), omitted);
	assert_int_equal(exec_capture_kept(&c), strlen(head) + strlen(tail));
	h = exec_capture_copy(&c, out);
	assert_int_equal(h, strlen(head));
	assert_memory_equal(out, head, h);
	assert_memory_equal(out + h, tail, strlen(tail));
	exec_capture_done(&c);
	exec_capture_done(&c);
}

static void test_capture(void **state)
{
	const char *s = "0123456789abcdef";

	for (size_t step = 1; step <= 17; step++) {
		check_capture(8, s, step, "0123", "cdef", 8);
		check_capture(64, s, step, "0123456789abcdef", "", 0);
		check_capture(8, "0123456", step, "0123", "456", 0);
		check_capture(8, "012345678", step, "0123", "5678", 1);
		check_capture(20, s, step, "0123456789", "abcdef", 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_argv_literal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shell_positional, setup, teardown),
		cmocka_unit_test_setup_teardown(test_env_override, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stdin_bytes_then_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_stdin_is_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stdin_not_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stdin_chunks_then_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stdin_closed_by_command, setup, teardown),
		cmocka_unit_test_setup_teardown(test_combined_output_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_keeps_arrival_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_burst_1mib, setup, teardown),
		cmocka_unit_test_setup_teardown(test_burst_1mib_slow_consumer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_burst_1mib_slow_small_journal, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(test_binary_output, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exit_waits_for_last_output, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exit_status_and_signal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replay_from_offset_and_lost, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(test_attach_mid_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_term_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_term_kills_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_not_while_paused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill_while_paused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_process_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signal_tree, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_spawn_fd_pressure, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_released_then_signalled, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_released_then_signalled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_linger_waits_for_output, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signal_delivered_once, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_signal_not_a_reused_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signal_not_a_reused_group_later, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reap_orphan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tags_and_info, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_killed_cgroup, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_exit_kept_then_dropped, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_max_kept, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_pty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_spawn_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cwd, setup, teardown),
		cmocka_unit_test(test_utf8_sanitize),
		cmocka_unit_test(test_capture),
	};

	/* agentd ignores SIGPIPE; so do we, to check the child does not. */
	signal(SIGPIPE, SIG_IGN);
	/* Orphaned background children become ours, so the reaper reaps them. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
