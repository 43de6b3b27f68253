/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Unit tests of agentd/exec.c on a real libuv loop and real processes:
 * arguments passed literally (E9), stdin bytes then EOF and no stdin (E5),
 * a 1 MiB burst read by a slow consumer (E2), timeouts and kills that leave
 * no process of the group behind (E1, E6), spawn and cwd errors (E10), the
 * exit report following the last output byte, and the UTF-8 sanitizer and
 * output capture used for ExecuteCommands transcripts.
 *
 * The test process makes itself a child subreaper (prctl(2)), so that the
 * background children of a killed command become its children and can be
 * reaped, and kill(pid, 0) then tells whether any survived.
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
#include <sys/prctl.h>
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

/* What one process produced. */
struct result {
	uint8_t *out[EXEC_NSTREAMS];
	size_t len[EXEC_NSTREAMS];
	size_t chunks;
	bool contiguous;        /* every offset == bytes received before */
	bool exited;
	struct exec_exit ex;
	struct exec_process *p;
	/* slow consumer: pause after every chunk, resume from a timer */
	uv_timer_t resume;
	uint64_t exit_after_bytes; /* bytes received when exited ran */
};

static void on_output(struct exec_process *p, enum exec_stream s, uint64_t off, const void *data,
		      size_t len, void *arg)
{
	struct result *r = arg;

	assert_true(len > 0 && len <= EXEC_READ_CHUNK);
	assert_false(r->exited);
	if (off != r->len[s])
		r->contiguous = false;
	r->out[s] = realloc(r->out[s], r->len[s] + len + 1);
	assert_non_null(r->out[s]);
	memcpy(r->out[s] + r->len[s], data, len);
	r->len[s] += len;
	r->out[s][r->len[s]] = 0;
	r->chunks++;
}

static void on_resume(uv_timer_t *t)
{
	struct result *r = t->data;

	if (!r->exited)
		exec_resume(r->p);
}

static void on_output_slow(struct exec_process *p, enum exec_stream s, uint64_t off,
			   const void *data, size_t len, void *arg)
{
	struct result *r = arg;

	on_output(p, s, off, data, len, arg);
	exec_pause(p);
	uv_timer_start(&r->resume, on_resume, 1, 0);
}

static void on_exited(struct exec_process *p, const struct exec_exit *ex, void *arg)
{
	struct result *r = arg;

	assert_false(r->exited);
	r->exited = true;
	r->ex = *ex;
	r->exit_after_bytes = r->len[0] + r->len[1];
	r->p = NULL;
}

static const struct exec_ops ops = { .output = on_output, .exited = on_exited };
static const struct exec_ops slow_ops = { .output = on_output_slow, .exited = on_exited };

static void result_init(struct result *r)
{
	memset(r, 0, sizeof(*r));
	r->contiguous = true;
}

static void result_done(struct result *r)
{
	free(r->out[0]);
	free(r->out[1]);
}

/* Run the loop until every process is gone (exited reported and freed). */
static void run_until_idle(struct fixture *f)
{
	while (exec_table_count(f->table) > 0)
		uv_run(&f->loop, UV_RUN_ONCE);
}

static int spawn(struct fixture *f, const struct exec_spec *spec, struct result *r)
{
	return exec_spawn(f->table, spec, &ops, r, &r->p);
}

/* Spawn, run to the end, assert success of the spawn. */
static void run(struct fixture *f, const struct exec_spec *spec, struct result *r)
{
	result_init(r);
	assert_int_equal(spawn(f, spec, r), 0);
	assert_true(exec_pid(r->p) > 0);
	run_until_idle(f);
	assert_true(r->exited);
	assert_true(r->contiguous);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	strcpy(f->root_path, "/tmp/test_exec.XXXXXX");
	assert_non_null(mkdtemp(f->root_path));
	assert_int_equal(resolve_root_open(f->root_path, &f->root), 0);
	assert_int_equal(exec_table_new(&f->loop, 0, &f->table), 0);
	*state = f;
	return 0;
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
	assert_int_equal(exec_table_count(f->table), 0);
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

static void burst(struct fixture *f, bool slow)
{
	size_t n = 1024 * 1024;
	uint8_t *data = malloc(n);
	struct exec_spec spec = { .shell = "cat burst.bin; cat burst.bin >&2" };
	struct result r;
	int fd;

	assert_non_null(data);
	srand(42);
	for (size_t i = 0; i < n; i++)
		data[i] = (uint8_t)rand();
	fd = openat(f->root.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	{
		int wfd = openat(fd, "burst.bin", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		assert_true(wfd >= 0);
		assert_int_equal(write(wfd, data, n), (ssize_t)n);
		close(wfd);
	}
	spec.cwd_fd = exec_cwd_open(&f->root, "", 0);
	assert_true(spec.cwd_fd >= 0);

	result_init(&r);
	uv_timer_init(&f->loop, &r.resume);
	r.resume.data = &r;
	assert_int_equal(exec_spawn(f->table, &spec, slow ? &slow_ops : &ops, &r, &r.p), 0);
	close(spec.cwd_fd);
	run_until_idle(f);
	assert_true(r.exited);
	assert_true(r.contiguous);
	assert_int_equal(r.len[0], n);
	assert_int_equal(r.len[1], n);
	assert_memory_equal(r.out[0], data, n);
	assert_memory_equal(r.out[1], data, n);
	assert_int_equal(r.exit_after_bytes, 2 * n);
	assert_int_equal(r.ex.code, 0);
	if (slow)
		assert_true(r.chunks >= 2 * n / EXEC_READ_CHUNK);
	uv_close((uv_handle_t *)&r.resume, NULL);
	uv_run(&f->loop, UV_RUN_NOWAIT);
	unlinkat(fd, "burst.bin", 0);
	close(fd);
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
	assert_false(r.ex.killed);
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

/* ---- timeouts and kills ---- */

/* Wait (up to 3 s) until @p pid is gone: reaped by us (the subreaper) or
 * by libuv, then kill(pid, 0) must fail with ESRCH. */
static void assert_gone(pid_t pid)
{
	uint64_t t0 = now_ms();
	int st;

	while (now_ms() - t0 < 3000) {
		(void)waitpid(pid, &st, WNOHANG);
		if (kill(pid, 0) < 0 && errno == ESRCH)
			return;
		usleep(10000);
	}
	fail_msg("process %d survived", (int)pid);
}

/* Same for the whole group: kill(-pgid, 0) fails once no member is left
 * (zombies count; orphans are ours, and libuv owns no process any more, so
 * waitpid(-1) steals nothing). */
static void assert_group_gone(pid_t pgid)
{
	uint64_t t0 = now_ms();
	int st;

	while (now_ms() - t0 < 3000) {
		while (waitpid(-1, &st, WNOHANG) > 0)
			;
		if (kill(-pgid, 0) < 0 && errno == ESRCH)
			return;
		usleep(10000);
	}
	fail_msg("process group %d survived", (int)pgid);
}

static pid_t first_line_pid(const struct result *r)
{
	assert_non_null(r->out[0]);
	return (pid_t)atoi((const char *)r->out[0]);
}

static void test_timeout_term_ignored(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = {
		.shell = "trap '' TERM; sleep 300 & echo $!; sleep 100",
		.cwd_fd = -1,
		.timeout_ms = 300,
	};
	struct result r;
	uint64_t t0 = now_ms(), dt;
	pid_t bg, pgid;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	pgid = exec_pid(r.p);
	run_until_idle(f);
	dt = now_ms() - t0;
	assert_true(r.exited);
	assert_true(r.ex.timed_out);
	assert_int_equal(r.ex.signal, SIGKILL);
	/* timeout + grace, not the 100 s sleep */
	assert_true(dt >= 300 + EXEC_KILL_GRACE_MS - 50);
	assert_true(dt < 300 + 2 * EXEC_KILL_GRACE_MS + 1000);
	bg = first_line_pid(&r);
	assert_true(bg > 0);
	assert_gone(bg);
	assert_gone(pgid);
	assert_group_gone(pgid);
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
	pid_t pgid;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	pgid = exec_pid(r.p);
	run_until_idle(f);
	assert_true(r.ex.timed_out);
	assert_int_equal(r.ex.signal, SIGTERM);
	assert_true(now_ms() - t0 < 200 + EXEC_KILL_GRACE_MS);
	assert_gone(first_line_pid(&r));
	assert_group_gone(pgid);
	result_done(&r);
}

static void on_kill_timer(uv_timer_t *t)
{
	struct result *r = t->data;

	exec_kill(r->p);
	exec_kill(r->p); /* idempotent */
}

static void test_kill_while_paused(void **state)
{
	struct fixture *f = *state;
	struct exec_spec spec = { .shell = "echo $$; sleep 300 & yes", .cwd_fd = -1 };
	struct result r;
	uv_timer_t t;
	pid_t pgid;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), 0);
	pgid = exec_pid(r.p);
	exec_pause(r.p); /* `yes` fills the pipe and blocks */
	uv_timer_init(&f->loop, &t);
	t.data = &r;
	uv_timer_start(&t, on_kill_timer, 200, 0);
	run_until_idle(f);
	assert_true(r.exited);
	assert_true(r.ex.killed);
	assert_false(r.ex.timed_out);
	assert_int_equal(r.ex.signal, SIGKILL);
	assert_int_equal(r.len[0], 0); /* paused all along */
	assert_group_gone(pgid);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&f->loop, UV_RUN_NOWAIT);
	result_done(&r);
}

static void test_process_limit(void **state)
{
	struct fixture *f = *state;
	struct exec_table *small;
	const char *argv[] = { "sleep", "300", NULL };
	struct exec_spec spec = { .argv = argv, .cwd_fd = -1 };
	struct result r1, r2;

	assert_int_equal(exec_table_new(&f->loop, 1, &small), 0);
	assert_int_equal(exec_table_max(small), 1);
	result_init(&r1);
	result_init(&r2);
	assert_int_equal(exec_spawn(small, &spec, &ops, &r1, &r1.p), 0);
	assert_int_equal(exec_spawn(small, &spec, &ops, &r2, &r2.p), -EAGAIN);
	assert_int_equal(exec_table_count(small), 1);
	exec_table_free(small); /* kills r1; freed with it */
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_true(r1.exited);
	assert_true(r1.ex.killed);
	assert_false(r2.exited);
	result_done(&r1);
}

/* ---- spawn errors and working directory ---- */

static void test_spawn_errors(void **state)
{
	struct fixture *f = *state;
	const char *missing[] = { "wsb-no-such-program", NULL };
	const char *noexec[] = { "./noexec.sh", NULL };
	struct exec_spec spec = { .argv = missing, .cwd_fd = -1 };
	struct result r;
	int fd;

	result_init(&r);
	assert_int_equal(spawn(f, &spec, &r), -ENOENT);
	run_until_idle(f);
	assert_false(r.exited);

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
	run_until_idle(f);
	assert_false(r.exited);
	assert_int_equal(exec_table_count(f->table), 0);
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
		cmocka_unit_test_setup_teardown(test_combined_output_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_burst_1mib, setup, teardown),
		cmocka_unit_test_setup_teardown(test_burst_1mib_slow_consumer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_binary_output, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exit_waits_for_last_output, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exit_status_and_signal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_term_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_term_kills_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill_while_paused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_process_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_spawn_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cwd, setup, teardown),
		cmocka_unit_test(test_utf8_sanitize),
		cmocka_unit_test(test_capture),
	};

	/* agentd ignores SIGPIPE; so do we, to check the child does not. */
	signal(SIGPIPE, SIG_IGN);
	/* Orphaned background children become ours, so we can reap them. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
